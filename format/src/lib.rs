//! `pack-format`: the bytes a publisher ships and a client trusts.
//!
//! Bytes in, bytes out. Nothing here touches the network or reads the clock: callers pass
//! the current time in. Every untrusted size is checked against [`Limits`] before anything
//! is allocated for it.
//!
//! - [`pack`]: the sealed pack (header + AES-256-GCM ciphertext of a `tar.zst` payload).
//! - [`payload`]: the `tar.zst` payload with its index of every file's size and SHA-256.
//! - [`source`]: the one reader of a pack directory (the files, or every problem found).
//! - [`channel`]: the channel document and its minisign (prehashed Ed25519) signature.
//! - [`ramp`]: rollouts whose percentage grows on a signed schedule.
//! - [`guard`]: the guard key, which may only freeze or roll back a channel.
//! - [`keys`]: content keys, signing keys and the trusted-key set.

// `unwrap` and `expect` are for tests: shipped code says what failed (STYLE.md, "Weight").
#![deny(clippy::unwrap_used, clippy::expect_used)]
#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]

pub mod atomic;
pub mod channel;
mod decode;
pub mod error;
mod frames;
pub mod guard;
pub mod keys;
mod layout;
pub mod limits;
pub mod pack;
pub mod payload;
pub mod ramp;
pub mod source;
pub mod unpack;

pub use channel::{
    ChannelDocument, ChannelEntry, EntryTarget, PackRef, Rollout, VerifiedChannel, Watch,
    WatchAction, rollout_bucket,
};
pub use decode::decompress;
pub use error::FormatError;
pub use frames::compress;
pub use guard::{Guard, GuardAction, Restricts, Stop};
pub use keys::{ContentKey, ContentKeyRing, SigningKey, TrustedKeys};
pub use limits::Limits;
pub use pack::{
    KeySlot, OpenedPack, PackHeader, SealInput, SealedPack, Segment, open, read_header, seal,
};
pub use payload::{IndexEntry, Payload, PayloadFile};
pub use ramp::{Ramp, RampStep};
pub use source::{
    DirFile, DirProblem, FileCheck, FileProblem, PackDir, SealOptions, SealedDir, read_pack_dir,
};
pub use unpack::{Unpack, Unpacked, open_file_into, open_into};

/// Version of the sealed-pack container this crate writes, the only one. It reads this one
/// and [`pack::FORMAT_V1`].
pub const FORMAT_VERSION: u32 = 2;

/// Below this many bytes in all, data-parallel work (hashing, encrypting, checking) stays on
/// the calling thread: handing it to the pool costs more than it saves.
pub(crate) const PARALLEL_MIN_LEN: usize = 1024 * 1024;

/// Lowercase hex SHA-256 of `bytes`.
pub fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::Digest;
    hex::encode(sha2::Sha256::digest(bytes))
}

/// Parses a MAJOR.MINOR.PATCH version, saying which number is missing: semver's own message
/// for `1.2` blames the *minor* number when it is the patch that is missing.
pub fn parse_version(text: &str) -> Result<semver::Version, FormatError> {
    let text = text.trim();
    semver::Version::parse(text).map_err(|error| {
        let core = text.split(['-', '+']).next().unwrap_or_default();
        let problem = match core.split('.').count() {
            1 => "the minor and patch numbers are missing".to_string(),
            2 => "the patch number is missing".to_string(),
            _ => error.to_string(),
        };
        FormatError::malformed(
            "version",
            format!("expected MAJOR.MINOR.PATCH such as 1.2.0, found {text:?}: {problem}"),
        )
    })
}

/// Checks a pack or channel name: 1–64 characters of `a-z`, `0-9`, `-`, `_`, `.`, not
/// starting with `.`. Names end up in file names and URLs, so the alphabet is small.
pub fn validate_name(what: &'static str, name: &str) -> Result<(), FormatError> {
    let ok = !name.is_empty()
        && name.len() <= 64
        && !name.starts_with('.')
        && name.bytes().all(|b| {
            b.is_ascii_lowercase() || b.is_ascii_digit() || matches!(b, b'-' | b'_' | b'.')
        });
    if ok {
        Ok(())
    } else {
        Err(FormatError::InvalidName {
            what,
            found: name.chars().take(80).collect(),
        })
    }
}

/// What a scoped thread returned; its panic, if it panicked, goes on in this thread with its
/// own message.
pub(crate) fn joined<T>(thread: std::thread::ScopedJoinHandle<'_, T>) -> T {
    thread
        .join()
        .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
}
