//! Errors of prompt assembly.

use std::path::PathBuf;

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
    Snapshot(#[from] pack_serving::SnapshotError),
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
