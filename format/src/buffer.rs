//! The memory a zstd frame is decoded into.
//!
//! A frame of a large pack decodes to megabytes that are written once, read by the `tar`
//! reader and the threads that hash files, and then reused for a later frame. A buffer is a
//! plain `Vec` whose capacity is its room: reused, it keeps the pages it has touched, and
//! the pages past what a frame decodes to are never touched.
//!
//! Large buffers used to be mappings of their own advised for transparent huge pages, which
//! fault in 2 MiB at a time. On a virtual machine that hands its free memory back to the
//! host, a fresh huge page is often far dearer than the 512 small pages it replaces (the
//! host backs it again on first touch), and an extract run now and then, as users run it,
//! meets that cost: `packer extract` of a 100 MB tree of large files took 0.24 s with them
//! and 0.10 s without, run after a pause; back to back, as a benchmark loop runs it, huge
//! pages were at most 4% faster (BENCHMARKS.md).

use std::ops::Deref;

/// A frame's decoded bytes in a buffer that keeps its room when it is reused.
#[derive(Default)]
pub(crate) struct FrameBuffer {
    /// Room is the `Vec`'s capacity; its length is how much of it was ever initialised,
    /// which stays when the buffer holds fewer bytes, so that growing again zeroes nothing.
    memory: Vec<u8>,
    /// How many bytes, from the start of `memory`, the buffer holds.
    len: usize,
}

impl From<Vec<u8>> for FrameBuffer {
    fn from(bytes: Vec<u8>) -> Self {
        FrameBuffer {
            len: bytes.len(),
            memory: bytes,
        }
    }
}

impl Deref for FrameBuffer {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        &self.memory[..self.len]
    }
}

impl FrameBuffer {
    /// An empty buffer with room for `room` bytes.
    pub(crate) fn with_room(room: usize) -> Self {
        FrameBuffer {
            memory: Vec::with_capacity(room),
            len: 0,
        }
    }

    /// How many bytes the buffer holds without growing.
    pub(crate) fn room(&self) -> usize {
        self.memory.capacity()
    }

    /// The buffer's first `len` bytes, for the caller to overwrite: the room grows (at least
    /// doubling) when it is short, and what the bytes hold before is unspecified (zeros or
    /// an earlier use's). The buffer then holds exactly those `len` bytes.
    pub(crate) fn first_mut(&mut self, len: usize) -> &mut [u8] {
        if self.room() < len {
            *self = FrameBuffer::with_room(len.max(self.room().saturating_mul(2)));
        }
        self.len = len;
        if self.memory.len() < len {
            self.memory.resize(len, 0);
        }
        &mut self.memory[..len]
    }

    /// Decompresses the whole zstd frames in `compressed` into the buffer, replacing what
    /// it held; zstd writes no further than the buffer's room. Returns how many bytes came
    /// out.
    pub(crate) fn decompress(
        &mut self,
        context: &mut zstd::zstd_safe::DCtx<'static>,
        compressed: &[u8],
    ) -> Result<usize, zstd::zstd_safe::ErrorCode> {
        self.len = 0;
        self.memory.clear();
        let n = context.decompress(&mut self.memory, compressed)?;
        self.len = n;
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The size of a frame's buffer in a large pack, or more.
    const LARGE: usize = 2 * 1024 * 1024;

    fn compressed(bytes: &[u8]) -> Vec<u8> {
        zstd::bulk::compress(bytes, 1).unwrap()
    }

    #[test]
    fn a_buffer_holds_exactly_what_was_decompressed_into_it_last() {
        let mut context = zstd::zstd_safe::DCtx::create();
        for room in [1000, LARGE + 1] {
            let mut buffer = FrameBuffer::with_room(room);
            assert!(buffer.room() >= room);
            let first: Vec<u8> = (0..room).map(|i| (i % 251) as u8).collect();
            assert_eq!(
                buffer.decompress(&mut context, &compressed(&first)),
                Ok(room)
            );
            assert_eq!(&buffer[..], &first[..]);
            // Reused for a shorter frame: only the new bytes show.
            assert_eq!(
                buffer.decompress(&mut context, &compressed(b"short")),
                Ok(5)
            );
            assert_eq!(&buffer[..], b"short");
            assert!(buffer.room() >= room, "a shorter frame keeps the room");
        }
    }

    #[test]
    fn first_mut_grows_the_room_and_then_holds_exactly_what_was_asked_for() {
        for len in [1000, 3 * LARGE] {
            let mut buffer = FrameBuffer::default();
            buffer.first_mut(len).fill(9);
            assert_eq!(buffer.len(), len);
            assert!(buffer.iter().all(|&b| b == 9));
            let room = buffer.room();
            buffer.first_mut(10).copy_from_slice(b"0123456789");
            assert_eq!(&buffer[..], b"0123456789");
            assert_eq!(buffer.room(), room, "a shorter use keeps the room");
        }
    }

    #[test]
    fn growing_again_within_the_room_zeroes_nothing() {
        for len in [1000, 3 * LARGE] {
            let mut buffer = FrameBuffer::default();
            buffer.first_mut(len).fill(9);
            buffer.first_mut(10);
            assert!(
                buffer.first_mut(len)[10..].iter().all(|&b| b == 9),
                "the bytes past a shorter use keep what they held"
            );
        }
    }

    #[test]
    fn zstd_cannot_write_past_the_room() {
        let mut context = zstd::zstd_safe::DCtx::create();
        let room = LARGE;
        let mut buffer = FrameBuffer::with_room(room);
        let room = buffer.room();
        let too_long = vec![7u8; room + 1];
        assert!(
            buffer
                .decompress(&mut context, &compressed(&too_long))
                .is_err()
        );
        assert_eq!(buffer.room(), room);
    }
}
