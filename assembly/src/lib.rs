//! `prompt-assembly`: turns a captured prompt-pack snapshot into the system prompt of one
//! turn. Pure assembly: it reads the snapshot and the data it is handed (config, instruction
//! files, the environment) and links no model provider, tool, sandbox or MCP client, so
//! `packer diff` renders prompts with the same code the agent runs without linking the agent.
//!
//! - [`agents`]: the built-in roster and custom agent files.
//! - [`capabilities`]: tools and features, narrowed in layers (config defaults, the agent's
//!   ceiling, the occasion, the host profile).
//! - [`config`]: the runtime's part of the config file.
//! - [`instructions`]: the global and project instruction files, read as data under byte
//!   budgets.
//! - [`mod@assemble`]: the per-turn assembly, in a fixed order, from one snapshot, with
//!   wholesale fallback to the built-in pack; [`context`]: the template variables.
//! - [`wildcard`]: the one wildcard grammar of tool patterns, shared by the MCP tools of
//!   `tools` lists and the runtime's permission rules.
//! - [`preview`]: every built-in agent × prompt mode rendered from a fixed sample context
//!   (what `packer diff` compares).
//!
//! The library logs with `tracing` and never prints.

// `unwrap` and `expect` are for tests: shipped code says what failed (STYLE.md, "Weight").
#![deny(clippy::unwrap_used, clippy::expect_used)]
#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]

pub mod agents;
pub mod assemble;
pub mod capabilities;
pub mod config;
pub mod context;
pub mod environment;
pub mod error;
pub mod instructions;
pub mod metadata;
pub mod mode;
pub mod paths;
pub mod permission_mode;
pub mod preview;
pub mod session;
pub mod skills;
pub mod wildcard;

pub use assemble::{AssembledPrompt, TurnRequest, assemble, assemble_turn};
pub use capabilities::{Capabilities, Ceiling, Feature, Features, Occasion, Profile, ToolId};
pub use error::{AgentFileError, PromptError};
pub use metadata::PromptMetadata;
pub use mode::PromptMode;
