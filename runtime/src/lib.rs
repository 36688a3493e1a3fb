//! `agent-runtime`: turns a captured prompt-pack snapshot into the system prompt of one
//! turn, and runs the agent on it.
//!
//! The prompt-assembly modules ([`agents`], [`capabilities`], [`config`], [`context`],
//! [`instructions`], [`mod@assemble`], [`preview`], [`metadata`], [`mode`], [`skills`],
//! [`environment`]) come from the `prompt-assembly` crate and are re-exported here.
//!
//! - [`agents`]: the built-in roster and custom agent files; [`roster`]: the agents on
//!   disk for a session (the user's, a trusted workspace's, the user's model for each
//!   built-in agent).
//! - [`capabilities`]: tools and features, narrowed in layers (config defaults, the agent's
//!   ceiling, the occasion, the host profile).
//! - [`instructions`]: the global and project instruction files, read as data under byte
//!   budgets; [`instruction_urls`]: the URLs among the configured ones, fetched once a
//!   session.
//! - [`mod@assemble`]: the per-turn assembly, in a fixed order, from one snapshot, with
//!   wholesale fallback to the built-in pack.
//! - [`preview`]: every built-in agent × prompt mode rendered from a fixed sample context
//!   (what `packer diff` compares).
//! - [`session`]: task sessions freeze their agent definition and prompt mode.
//! - [`provider`]: OpenAI- and Anthropic-compatible streaming model calls.
//! - [`tools`]: the toolbox: the built-in tools (read, write, edit, bash, grep, glob,
//!   web_fetch, todowrite, …) and the MCP servers' tools as handlers of one registry, with
//!   one permission check for every call.
//! - [`permissions`]: permission modes, approval policies and allow/deny rules every
//!   tool call passes; [`sandbox`]: the Landlock sandbox `bash` runs in.
//! - [`mcp`]: connections to configured MCP servers, whose tools are offered as
//!   `mcp__<server>__<tool>`.
//! - [`agent_loop`]: prompt → model → tools, repeated; [`transcript`]: the JSONL session
//!   files it writes and `--resume` reads; [`outcomes`]: how its turns went, counted per
//!   pack version (counts only, when usage data is shared).
//!
//! The library logs with `tracing` and never prints; the `agent` binary (`src/bin/agent/`:
//! the command line, `exec`, the interactive session, `init` and the host that wires them)
//! owns stdout and uses only this library's public API.

// `unwrap` and `expect` are for tests: shipped code says what failed (STYLE.md, "Weight").
#![deny(clippy::unwrap_used, clippy::expect_used)]
#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]

pub mod agent_loop;
pub mod compaction;
pub mod data_dir;
pub mod delegation;
pub mod error;
pub mod instruction_urls;
pub mod live;
pub mod mcp;
pub mod outcomes;
pub mod output;
pub mod packs;
pub mod permissions;
pub mod plan;
pub mod provider;
pub mod reminders;
pub mod roster;
pub mod sandbox;
pub mod session;
pub mod todo_list;
pub mod tools;
pub mod transcript;

// Prompt assembly lives in its own crate, which `packer diff` uses without linking the
// agent loop; its modules are re-exported here at the paths they have always had.
pub use prompt_assembly::{
    agents, assemble, capabilities, config, context, environment, instructions, metadata, mode,
    preview, skills,
};

pub use assemble::{AssembledPrompt, TurnRequest, assemble_turn};
pub use capabilities::{Capabilities, Ceiling, Feature, Features, Occasion, Profile, ToolId};
pub use error::{AgentFileError, PromptError, RuntimeError};
pub use metadata::PromptMetadata;
pub use mode::PromptMode;
