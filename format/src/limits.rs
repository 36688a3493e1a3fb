//! Explicit limits for every untrusted size.

/// Upper bounds applied to anything read from the network or disk. Every check happens
/// before memory is allocated for the thing being checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Bytes of the sealed-pack header (magic, length, JSON).
    pub max_header_len: usize,
    /// Bytes of a whole sealed pack.
    pub max_sealed_len: u64,
    /// Bytes of the decompressed `tar` payload.
    pub max_decompressed_len: u64,
    /// Decompressed bytes allowed per compressed byte.
    pub max_compression_ratio: u64,
    /// Decompressed bytes always allowed, whatever the ratio (up to `max_decompressed_len`):
    /// a pack of many small files compresses far beyond any sensible ratio, since every
    /// `tar` header is 512 mostly-zero bytes.
    pub min_decompressed_budget: u64,
    /// Files in one payload.
    pub max_file_count: usize,
    /// Bytes of one path inside the payload.
    pub max_path_len: usize,
    /// Bytes of one file inside the payload.
    pub max_file_len: u64,
    /// Bytes of a channel document.
    pub max_channel_len: usize,
    /// Bytes of a minisign signature file.
    pub max_signature_len: usize,
}

impl Limits {
    /// The defaults: generous for prompt packs (text), tight against bombs.
    pub const DEFAULT: Limits = Limits {
        max_header_len: 64 * 1024,
        max_sealed_len: 64 * 1024 * 1024,
        max_decompressed_len: 256 * 1024 * 1024,
        max_compression_ratio: 250,
        // 10,000 files (the file-count limit) of a few bytes make a ~10 MiB `tar`.
        min_decompressed_budget: 16 * 1024 * 1024,
        max_file_count: 10_000,
        max_path_len: 255,
        max_file_len: 16 * 1024 * 1024,
        max_channel_len: 1024 * 1024,
        max_signature_len: 4 * 1024,
    };

    /// The decompression budget for `compressed_len` input bytes: the ratio cap, but never
    /// less than the floor, and never more than the absolute cap.
    pub fn decompressed_budget(&self, compressed_len: u64) -> u64 {
        self.max_decompressed_len.min(
            compressed_len
                .saturating_mul(self.max_compression_ratio)
                .max(self.min_decompressed_budget),
        )
    }
}

impl Default for Limits {
    fn default() -> Self {
        Self::DEFAULT
    }
}
