//! Checks of a pack's files by their bytes, which the payload writer runs on every core as
//! it goes (`packer build` validates templates this way).

/// What a check of one file's bytes found wrong with it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileProblem {
    /// 1-based line, when the problem has one.
    pub line: Option<usize>,
    pub message: String,
    /// What the author can do about it, when there is something to say.
    pub hint: Option<String>,
}

impl FileProblem {
    pub fn new(message: impl Into<String>) -> Self {
        FileProblem {
            line: None,
            message: message.into(),
            hint: None,
        }
    }
}

/// A check of each file's bytes: its path in the pack and its bytes in, its problems out.
/// It runs on several threads at once.
pub type FileCheck = dyn Fn(&str, &[u8]) -> Vec<FileProblem> + Sync;
