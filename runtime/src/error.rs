//! Errors of the runtime library.

use std::path::PathBuf;

use crate::mode::PromptMode;

/// A custom agent file that could not be loaded. Names the file and, when one is to blame,
/// the frontmatter field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}: {}{reason}", path.display(), field.as_ref().map(|f| format!("field `{f}`: ")).unwrap_or_default())]
pub struct AgentFileError {
    pub path: PathBuf,
    pub field: Option<String>,
    pub reason: String,
}

/// Building the prompt from one snapshot failed. A failure from a remote snapshot makes the
/// runtime redo the whole prompt from the built-in pack.
#[derive(Debug, thiserror::Error)]
pub enum PromptError {
    #[error(transparent)]
    Snapshot(#[from] pack_client::SnapshotError),
    #[error("pack file {key} is not UTF-8")]
    NotUtf8 { key: String },
    #[error("pack file {key}: {reason}")]
    BadPackFile { key: String, reason: String },
    #[error("unknown agent {name:?}; available: {available}")]
    UnknownAgent { name: String, available: String },
    #[error("the prompt context does not satisfy template schema {schema}: {path} {problem}")]
    Context {
        schema: u32,
        path: String,
        problem: String,
    },
    #[error("template schema {schema} is not known to this build")]
    UnknownSchema { schema: u32 },
    #[error(
        "the template {key} frozen from pack {pack} when the task session started does not render with this pack's schema: {reason}. Start a new session to use the current pack."
    )]
    FrozenTemplate {
        key: String,
        pack: String,
        reason: String,
    },
}

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
