//! Shared pieces of the `pack-format` fuzz targets: tight limits, fixed keys (so seed packs
//! and signed documents open and verify), and an allocation guard that turns "allocated
//! far more than this input could justify" into a crash libFuzzer reports.

use std::path::Path;
use std::sync::LazyLock;

use pack_format::{ContentKey, ContentKeyRing, Limits, SigningKey, TrustedKeys};

/// Limits small enough that the fuzzer reaches every "over the limit" branch with inputs
/// of a few kilobytes, and that any allocation near them stands out.
pub const LIMITS: Limits = Limits {
    max_header_len: 4 * 1024,
    max_sealed_len: 1024 * 1024,
    max_decompressed_len: 4 * 1024 * 1024,
    max_compression_ratio: 250,
    min_decompressed_budget: 64 * 1024,
    max_file_count: 64,
    max_path_len: 255,
    max_file_len: 1024 * 1024,
    max_channel_len: 64 * 1024,
    max_signature_len: 4 * 1024,
};

/// Id of the fixed content key the `open` target and the seed packs use.
pub const CONTENT_KEY_ID: &str = "fuzz-content-key";

/// The fixed content key: a constant, so seed packs stay valid across runs.
pub fn content_key() -> ContentKey {
    ContentKey::from_parts(CONTENT_KEY_ID, [0x5a; 32]).expect("valid content key id")
}

pub fn content_keys() -> &'static ContentKeyRing {
    static KEYS: LazyLock<ContentKeyRing> = LazyLock::new(|| ContentKeyRing::new([content_key()]));
    &KEYS
}

/// A minisign secret key made for fuzzing only (unencrypted, with its checksum), never used
/// anywhere else. Fixed so the seed documents signed with it verify in every run.
const FUZZ_SIGNING_KEY: &str = "untrusted comment: promptpack fuzzing key (not secret)
RWQAAEIyAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAf3XzDgJZdjGIjpVu+o4/1rTUWIbpjT/boxpQCuDKlBHOKueFIT6q3tY/Gy8GTQk1MFC4NJGEoX2qTbMBXp4b7ywHqjBTbT0PI66ZRCBp5UMNnXozu0Iy26EhzFYR2UCs4fnWjzzFOyE=
";

/// Parsed once: key parsing is not what the targets are about, and it is slow.
pub fn signing_key() -> &'static SigningKey {
    static KEY: LazyLock<SigningKey> = LazyLock::new(|| {
        SigningKey::from_file_text(Path::new("fuzz-signing.key"), FUZZ_SIGNING_KEY, None)
            .expect("the fixed fuzzing key parses")
    });
    &KEY
}

/// The raw minisign secret key, for signing arbitrary bytes with an arbitrary trusted
/// comment (which [`SigningKey`] deliberately does not allow).
pub fn minisign_keys() -> &'static (minisign::SecretKey, minisign::PublicKey) {
    static KEYS: LazyLock<(minisign::SecretKey, minisign::PublicKey)> = LazyLock::new(|| {
        let boxed = minisign::SecretKeyBox::from_string(FUZZ_SIGNING_KEY).expect("key box parses");
        let secret = minisign::SecretKey::from_unencrypted_box(boxed).expect("key is unencrypted");
        let public = minisign::PublicKey::from_secret_key(&secret).expect("public half");
        (secret, public)
    });
    &KEYS
}

pub fn trusted_keys() -> &'static TrustedKeys {
    static TRUSTED: LazyLock<TrustedKeys> = LazyLock::new(|| {
        let mut trusted = TrustedKeys::new();
        trusted.add_signing_key(signing_key());
        trusted
    });
    &TRUSTED
}

/// Unix time the `channel` target verifies at; seed documents are valid then.
pub const NOW_UNIX: i64 = 1_800_000_000;

/// Splits `data` at the first NUL: the two halves of a two-part input.
pub fn split_nul(data: &[u8]) -> (&[u8], &[u8]) {
    match data.iter().position(|&b| b == 0) {
        Some(i) => (&data[..i], &data[i + 1..]),
        None => (data, &[]),
    }
}

/// Joins two parts the way [`split_nul`] splits them.
pub fn join_nul(first: &[u8], second: &[u8]) -> Vec<u8> {
    [first, b"\0", second].concat()
}

/// The system allocator, remembering the largest single request since the last
/// [`AllocGuard::start`] (one allocator for the format's tests and these targets).
#[path = "../../tests/shared/largest_alloc.rs"]
mod largest_alloc;

#[global_allocator]
static GLOBAL: largest_alloc::LargestAlloc = largest_alloc::LargestAlloc;

/// Allocations below this never count as excessive: buffers, tables, small vectors.
const ALLOC_SLACK: usize = 256 * 1024;

/// Checks one parse: no single allocation may exceed a small multiple of the bytes the
/// input can legitimately produce. Sizes *claimed* by the input (tar headers, zstd frame
/// headers, JSON lengths) must not drive allocations on their own.
pub struct AllocGuard {
    what: &'static str,
}

impl AllocGuard {
    pub fn start(what: &'static str) -> Self {
        largest_alloc::reset();
        AllocGuard { what }
    }

    /// `legit_len`: the most bytes the input could honestly expand to (its own length, or
    /// the decompression budget for compressed input).
    pub fn check(self, legit_len: usize) {
        let largest = largest_alloc::largest();
        let bound = ALLOC_SLACK + legit_len.saturating_mul(4);
        assert!(
            largest <= bound,
            "{}: allocated {largest} bytes at once for input that can only justify {legit_len} (bound {bound})",
            self.what
        );
    }
}

/// The most bytes a compressed input of `len` bytes may decompress to under [`LIMITS`].
pub fn decompressed_budget(len: usize) -> usize {
    LIMITS.decompressed_budget(len as u64) as usize
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fixed_keys_load() {
        let key = signing_key();
        assert_eq!(key.key_id(), "317659020EF3757F");
        assert_eq!(trusted_keys().ids(), vec!["317659020EF3757F"]);
        minisign_keys();
        content_keys();
    }
}
