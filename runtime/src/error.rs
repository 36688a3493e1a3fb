//! Errors of the runtime library.

use std::path::PathBuf;

pub use prompt_assembly::error::{AgentFileError, PromptError};

use crate::mode::PromptMode;

/// Errors that stop a run before any prompt is built.
#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    #[error("no data directory: set AGENT_HOME or HOME")]
    NoDataDir,
    #[error("config file {}: {reason}", path.display())]
    Config { path: PathBuf, reason: String },
    #[error(
        "task session {session} was started with prompt mode `{frozen}`; it cannot be resumed with --mode {requested}. Start a new session to use `{requested}`."
    )]
    ModeMismatch {
        session: String,
        frozen: PromptMode,
        requested: PromptMode,
    },
    #[error("task session file {}: {reason}", path.display())]
    Session { path: PathBuf, reason: String },
    #[error(transparent)]
    AgentFile(#[from] AgentFileError),
    #[error("prompt pack updates ({}): {reason}", path.display())]
    Updates { path: PathBuf, reason: String },
}
