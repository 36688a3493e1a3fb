//! The one error type of `pack-format`. Every variant says what was expected and what
//! was found.

use std::path::PathBuf;

/// Everything that can go wrong reading, writing, sealing, opening, signing or verifying.
#[derive(Debug, thiserror::Error)]
pub enum FormatError {
    #[error("{what} is {found} bytes, over the limit of {limit} bytes")]
    TooLarge {
        what: &'static str,
        found: u64,
        limit: u64,
    },
    #[error("{what} is truncated: expected {expected} bytes, found {found}")]
    Truncated {
        what: &'static str,
        expected: u64,
        found: u64,
    },
    #[error("not a sealed pack: expected magic {expected:?}, found {found:?}")]
    BadMagic { expected: String, found: String },
    #[error("unsupported {what} version: expected {expected}, found {found}")]
    UnsupportedVersion {
        what: &'static str,
        expected: u32,
        found: u32,
    },
    #[error("malformed {what}: {reason}")]
    Malformed { what: &'static str, reason: String },
    #[error("invalid {what} name {found:?}: expected 1-64 of a-z 0-9 - _ . (not starting with .)")]
    InvalidName { what: &'static str, found: String },
    #[error(
        "no content key for this pack: it is sealed for key ids [{available}], we hold [{held}]"
    )]
    UnknownContentKey { available: String, held: String },
    #[error("content key {key_id:?} does not open this pack (wrong key or tampered key slot)")]
    WrongContentKey { key_id: String },
    #[error("pack ciphertext failed authentication: the pack or its header was modified")]
    Tampered,
    #[error("sha256 mismatch for {what}: expected {expected}, found {found}")]
    HashMismatch {
        what: String,
        expected: String,
        found: String,
    },
    #[error("size mismatch for {what}: expected {expected} bytes, found {found}")]
    SizeMismatch {
        what: String,
        expected: u64,
        found: u64,
    },
    #[error("unsafe payload entry {path:?}: {reason}")]
    UnsafeEntry { path: String, reason: &'static str },
    #[error("payload has {found} files, over the limit of {limit}")]
    TooManyFiles { found: usize, limit: usize },
    #[error("payload index does not match the files: {reason}")]
    IndexMismatch { reason: String },
    #[error("decompressed payload passed its budget of {limit} bytes (zstd bomb or limit too low)")]
    DecompressionBomb { limit: u64 },
    #[error("signature from key {key_id} is not trusted: trusted keys are [{trusted}]")]
    UntrustedKey { key_id: String, trusted: String },
    #[error("legacy (non-prehashed) minisign signature refused: expected algorithm ED, found Ed")]
    LegacySignature,
    #[error(
        "signature does not verify against trusted key {key_id}: the document or signature was modified"
    )]
    BadSignature { key_id: String },
    #[error("trusted comment does not match the document: expected {expected:?}, found {found:?}")]
    CommentMismatch { expected: String, found: String },
    #[error(
        "channel sequence {found} is over the limit of {limit} (2^53 - 1): larger integers are \
         not exact in every JSON reader, so readers could disagree on which document is newer"
    )]
    SequenceOutOfRange { found: u64, limit: u64 },
    #[error(
        "guard key {key_id} signed this document, but the document it restricts (sequence {sequence}) delegates to {delegated}"
    )]
    GuardNotDelegated {
        key_id: String,
        sequence: u64,
        delegated: String,
    },
    #[error("guard document refused: {reason}; a guard may only freeze or roll back")]
    GuardOverreach { reason: String },
    #[error("channel document expired at {expires_at}; now is {now}")]
    Expired { expires_at: String, now: String },
    #[error("key file {path}: {reason}")]
    KeyFile { path: PathBuf, reason: String },
    #[error("signing failed: {0}")]
    Signing(String),
    #[error("{} problem(s) in {}: {}", problems.len(), dir.display(), first_problem(problems))]
    PackDirectory {
        dir: PathBuf,
        /// Every problem found, in path order.
        problems: Vec<crate::DirProblem>,
    },
    #[error("i/o error while {context}: {source}")]
    Io {
        context: String,
        #[source]
        source: std::io::Error,
    },
}

fn first_problem(problems: &[crate::DirProblem]) -> String {
    match problems {
        [] => String::new(),
        [only] => only.to_string(),
        [first, ..] => format!("{first} (and more)"),
    }
}

impl FormatError {
    pub(crate) fn malformed(what: &'static str, reason: impl std::fmt::Display) -> Self {
        FormatError::Malformed {
            what,
            reason: reason.to_string(),
        }
    }

    pub(crate) fn io(context: impl Into<String>, source: std::io::Error) -> Self {
        FormatError::Io {
            context: context.into(),
            source,
        }
    }
}
