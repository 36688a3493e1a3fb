//! `agent-runtime`: turns a captured prompt-pack snapshot into the system prompt of one
//! turn.
//!
//! - [`agents`]: the built-in roster and custom agent files; [`roster`]: the agents on
//!   disk for a session (the user's, a trusted workspace's, the user's model for each
//!   built-in agent).
//! - [`capabilities`]: tools and features, narrowed in layers (config defaults, the agent's
//!   ceiling, the occasion, the host profile).
//! - [`instructions`]: the global and project instruction files, read as data under byte
//!   budgets.
//! - [`assemble`]: the per-turn assembly, in a fixed order, from one snapshot, with
//!   wholesale fallback to the built-in pack.
//! - [`preview`]: every built-in agent × prompt mode rendered from a fixed sample context
//!   (what `packer diff` compares).
//! - [`session`]: task sessions freeze their agent definition and prompt mode.
//! - [`provider`]: OpenAI- and Anthropic-compatible streaming model calls.
//! - [`tools`]: read, write, edit, bash, grep, glob, web_fetch and todowrite.
//! - [`permissions`]: permission modes, approval policies and allow/deny rules every
//!   tool call passes; [`sandbox`]: the Landlock sandbox `bash` runs in.
//! - [`mcp`]: tools of configured MCP servers, as `mcp__<server>__<tool>`.
//! - [`agent_loop`]: prompt → model → tools, repeated; [`transcript`]: the JSONL session
//!   files it writes and `--resume` reads.
//!
//! The library logs with `tracing` and never prints; the `agent` binary (`src/bin/agent/`:
//! the command line, `exec`, the interactive session, `init` and the host that wires them)
//! owns stdout and uses only this library's public API.

pub mod agent_loop;
pub mod agents;
pub mod assemble;
pub mod capabilities;
pub mod compaction;
pub mod config;
pub mod context;
pub mod data_dir;
pub mod delegation;
pub mod environment;
pub mod error;
pub mod instructions;
pub mod live;
pub mod mcp;
pub mod metadata;
pub mod mode;
pub mod packs;
pub mod permissions;
pub mod plan;
pub mod preview;
pub mod provider;
pub mod reminders;
pub mod roster;
pub mod sandbox;
pub mod session;
pub mod skills;
pub mod tools;
pub mod transcript;

pub use assemble::{AssembledPrompt, TurnRequest, assemble, assemble_turn};
pub use capabilities::{Capabilities, Ceiling, Feature, Features, Occasion, Profile, ToolId};
pub use error::{AgentFileError, PromptError, RuntimeError};
pub use metadata::PromptMetadata;
pub use mode::PromptMode;
