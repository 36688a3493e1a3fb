//! The memory a zstd frame is decoded into.
//!
//! A frame of a large pack decodes to megabytes that are written once, read by the `tar`
//! reader and the threads that hash files, and then reused for a later frame. Touching that
//! memory for the first time costs a page fault per 4 KiB page: on a 100 MB pack of large
//! files, faulting in the first frames' buffers (four frames of up to 12 MB may be in flight
//! before the first buffer comes back) took about a tenth of `packer extract`'s CPU. So a
//! buffer is reused as it is, never grown by a copy (a frame waiting for the reader is most
//! often thinned, and its buffer back at once: see `decode::thinned`). On Linux a buffer of
//! [`MAPPED_FROM`] or more is a mapping of its own: the pages it never touches cost nothing,
//! the kernel hands over the ones it does zeroed (nothing here fills them first), and the
//! whole mapping goes back when the buffer is dropped. Smaller buffers, and every buffer on
//! other systems, are a `Vec`.
//!
//! The mappings are not advised to be backed by transparent huge pages, which would fault
//! in 2 MiB at a time. On a virtual machine whose balloon reports free memory to its host,
//! a fresh huge page is most often a block of 2 MiB the host took back and must back again
//! on its first touch, while 4 KiB pages come first from small free fragments, never
//! reported. Run after a pause, the way a user runs it, `packer extract` took 3-37% longer
//! with huge pages, by tree shape, on two machines of that kind out of three, with single
//! runs up to twice as long (on the third, small pages took 0-28% longer); back to back,
//! small pages took 1-11% longer (BENCHMARKS.md, "Frame buffers: huge pages or plain heap
//! memory").

use std::ops::Deref;

/// From this many bytes a buffer is a mapping of its own (Linux).
#[cfg_attr(not(target_os = "linux"), allow(dead_code))]
pub(crate) const MAPPED_FROM: usize = 2 * 1024 * 1024;

/// A frame's decoded bytes in a buffer that keeps its room when it is reused.
#[derive(Default)]
pub(crate) struct FrameBuffer {
    memory: Memory,
    /// How many bytes, from the start of `memory`, the buffer holds.
    len: usize,
}

enum Memory {
    /// Room is the `Vec`'s capacity; its length is how much of it was ever initialised,
    /// which stays when the buffer holds fewer bytes, so that growing again zeroes nothing.
    Heap(Vec<u8>),
    #[cfg(target_os = "linux")]
    Mapped(memmap2::MmapMut),
}

impl Default for Memory {
    fn default() -> Self {
        Memory::Heap(Vec::new())
    }
}

impl From<Vec<u8>> for FrameBuffer {
    fn from(bytes: Vec<u8>) -> Self {
        FrameBuffer {
            len: bytes.len(),
            memory: Memory::Heap(bytes),
        }
    }
}

impl Deref for FrameBuffer {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        match &self.memory {
            Memory::Heap(bytes) => &bytes[..self.len],
            #[cfg(target_os = "linux")]
            Memory::Mapped(map) => &map[..self.len],
        }
    }
}

impl FrameBuffer {
    /// An empty buffer with room for `room` bytes.
    pub(crate) fn with_room(room: usize) -> Self {
        #[cfg(target_os = "linux")]
        if room >= MAPPED_FROM
            && let Ok(map) = memmap2::MmapMut::map_anon(room)
        {
            return FrameBuffer {
                memory: Memory::Mapped(map),
                len: 0,
            };
        }
        FrameBuffer {
            memory: Memory::Heap(Vec::with_capacity(room)),
            len: 0,
        }
    }

    /// How many bytes the buffer holds without growing.
    pub(crate) fn room(&self) -> usize {
        match &self.memory {
            Memory::Heap(bytes) => bytes.capacity(),
            #[cfg(target_os = "linux")]
            Memory::Mapped(map) => map.len(),
        }
    }

    /// The buffer's first `len` bytes, for the caller to overwrite: the room grows (at least
    /// doubling) when it is short, and what the bytes hold before is unspecified (zeros or
    /// an earlier use's). The buffer then holds exactly those `len` bytes.
    pub(crate) fn first_mut(&mut self, len: usize) -> &mut [u8] {
        if self.room() < len {
            *self = FrameBuffer::with_room(len.max(self.room().saturating_mul(2)));
        }
        self.len = len;
        match &mut self.memory {
            Memory::Heap(bytes) => {
                if bytes.len() < len {
                    bytes.resize(len, 0);
                }
                &mut bytes[..len]
            }
            #[cfg(target_os = "linux")]
            Memory::Mapped(map) => &mut map[..len],
        }
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
        let n = match &mut self.memory {
            Memory::Heap(bytes) => {
                bytes.clear();
                context.decompress(bytes, compressed)?
            }
            #[cfg(target_os = "linux")]
            Memory::Mapped(map) => context.decompress(&mut map[..], compressed)?,
        };
        self.len = n;
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn compressed(bytes: &[u8]) -> Vec<u8> {
        zstd::bulk::compress(bytes, 1).unwrap()
    }

    #[test]
    fn a_buffer_holds_exactly_what_was_decompressed_into_it_last() {
        let mut context = zstd::zstd_safe::DCtx::create();
        for room in [1000, MAPPED_FROM + 1] {
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
        for len in [1000, 3 * MAPPED_FROM] {
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
        for len in [1000, 3 * MAPPED_FROM] {
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
        let room = MAPPED_FROM;
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

    #[cfg(target_os = "linux")]
    #[test]
    fn large_buffers_are_mappings_of_their_own_not_advised_huge() {
        let buffer = FrameBuffer::with_room(MAPPED_FROM + 1);
        let Memory::Mapped(map) = &buffer.memory else {
            panic!("a buffer of 2 MiB or more is a mapping of its own");
        };
        assert_eq!(buffer.room(), MAPPED_FROM + 1);
        assert!(matches!(
            FrameBuffer::with_room(MAPPED_FROM - 1).memory,
            Memory::Heap(_)
        ));
        // The area that holds the mapping: the kernel may have merged it with a neighbour
        // another test's thread mapped with the same flags, so it need not start there. Had
        // it been advised huge, the kernel would list `hg` among its flags.
        let at = map.as_ptr() as usize;
        let holds = |line: &str| {
            let range = line.split_whitespace().next().unwrap_or("");
            let Some((start, end)) = range.split_once('-') else {
                return false;
            };
            let bound = |hex| usize::from_str_radix(hex, 16).ok();
            matches!((bound(start), bound(end)), (Some(start), Some(end)) if start <= at && at < end)
        };
        let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap();
        let flags = smaps
            .lines()
            .skip_while(|line| !holds(line))
            .find_map(|line| line.strip_prefix("VmFlags:"))
            .expect("the mapping is in /proc/self/smaps");
        assert!(
            !flags.split_whitespace().any(|flag| flag == "hg"),
            "advised huge: {flags}"
        );
    }
}
