//! What one tool call touches, as far as permissions care.

use std::path::PathBuf;

/// What one tool call touches, as far as permissions care.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Access {
    /// The session's own bookkeeping (task list, notes, skills, helpers, background tasks).
    Own,
    /// Reads, a named path if the call has one.
    Read(Option<PathBuf>),
    /// Creates or changes this file.
    Write(PathBuf),
    /// Runs a shell command; `outside_sandbox` when the model asked to leave the sandbox.
    Command {
        command: String,
        outside_sandbox: bool,
        /// Why the model says it needs to leave the sandbox, shown to the user.
        reason: Option<String>,
    },
    /// Fetches a URL.
    Fetch(String),
    /// A tool the runtime cannot look inside (a tool served by another program): outside
    /// `read-only` and `workspace` unless a rule allows it.
    External,
}

impl Access {
    /// The text a rule's pattern is matched against.
    pub(super) fn subject(&self) -> Option<String> {
        match self {
            Access::Own | Access::External | Access::Read(None) => None,
            Access::Read(Some(path)) | Access::Write(path) => Some(path.display().to_string()),
            Access::Command { command, .. } => Some(command.clone()),
            Access::Fetch(url) => Some(url.clone()),
        }
    }
}
