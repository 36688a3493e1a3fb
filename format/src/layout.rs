//! The frame and segment layout every part of the format shares: how much `tar` a zstd
//! frame holds, where the index is, what a format-2 segment is and how the compressed
//! frames are laid out for sealing. Plain constants and types only: this module uses no
//! other module of the crate, so the writers and readers of frames, payloads and packs can
//! all depend on it without depending on each other.

use serde::{Deserialize, Serialize};

/// Bytes of `tar` per zstd frame of a payload (the last frame may hold fewer). Frames are
/// compressed, and decompressed, independently and in parallel.
pub const FRAME_LEN: usize = 8 * 1024 * 1024;

/// The shortest frame limit the frame writer gives (`frames::frame_limit`): below a few MiB
/// a frame compresses noticeably worse.
pub(crate) const MIN_FRAME_LEN: usize = FRAME_LEN / 4;

/// Path of the index entry, always first in the archive. Reserved: no template may use it.
pub const INDEX_PATH: &str = "PACK-INDEX.json";

/// Bytes of the AES-256-GCM tag after each format-2 segment (and after a format-1 payload).
pub(crate) const TAG_LEN: usize = 16;

/// One format-2 segment: an encrypted piece of the compressed payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Segment {
    /// Bytes of compressed payload in the segment (its ciphertext, without the tag).
    pub len: u64,
    /// Bytes of `tar` the segment's zstd frames decode to.
    pub tar_len: u64,
}

/// Where the frame writer puts the compressed frames in its output.
#[derive(Clone, Copy)]
pub(crate) struct Layout {
    /// Bytes to leave free in front of the first frame (for the header).
    pub room: usize,
    /// Leave [`TAG_LEN`] bytes after each frame (for its tag).
    pub tags: bool,
}

/// The compressed payload laid out for sealing: `room` bytes to fill with the header, then
/// every segment followed by [`TAG_LEN`] bytes for its tag.
pub(crate) struct PlacedFrames {
    pub out: Vec<u8>,
    pub room: usize,
}
