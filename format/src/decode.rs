//! Reading a payload's zstd frames back into its `tar`: frame by frame on every core when
//! every frame declares its size ([`with_frame_reader`] over a [`FrameSource`]), else as
//! one stream on a second thread ([`with_chunk_reader`]), and always within the limits'
//! budget. The `tar` reader of `payload` reads what comes out; a format-2 pack's segments
//! (`pack::SealedSegments`) are one more [`FrameSource`].

use std::collections::BTreeMap;
use std::io::Read;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, mpsc};

use crate::buffer::FrameBuffer;
use crate::cores::Cores;
use crate::digest::DigestRule;
use crate::layout::{FRAME_LEN, INDEX_PATH, MIN_FRAME_LEN};
use crate::payload::Payload;
use crate::{FormatError, Limits};

impl Payload {
    /// Decompresses under the limits' budget, then reads the `tar`.
    ///
    /// Large payloads are decompressed on a second thread that hands the `tar` reader
    /// chunks as they come, so decompression overlaps with copying and hashing the files.
    /// The result, errors included, is the same as decompressing everything first: a
    /// decompression error wins over whatever the `tar` reader made of the bytes before it.
    ///
    /// A payload of several zstd frames (as [`Payload::to_tar_zst`] writes) is decompressed
    /// on every core, a frame per thread at a time, when every frame declares its size and
    /// the sizes add up to no more than the budget; each frame is then decoded into a buffer
    /// of exactly its declared size, which zstd cannot overrun. Anything else (one frame, a
    /// frame without a size, sizes over the budget, a frame that fails) takes the streaming
    /// path, which gives the same result, errors included.
    pub fn from_tar_zst(compressed: &[u8], limits: &Limits) -> Result<Self, FormatError> {
        Self::from_tar_zst_as(compressed, limits, None)
    }

    /// [`Payload::from_tar_zst`] whose index must digest by `expect` when given (the
    /// container's rule).
    pub(crate) fn from_tar_zst_as(
        compressed: &[u8],
        limits: &Limits,
        expect: Option<DigestRule>,
    ) -> Result<Self, FormatError> {
        if compressed.len() < PIPELINE_MIN_LEN {
            return Self::from_tar_zst_serial(compressed, limits, expect);
        }
        let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
        if threads > 1
            && let Some(frames) = frame_plan(compressed, limits)
            && frames.len() > 1
            && let Some(result) =
                Self::from_frames_parallel(compressed, &frames, limits, threads, expect)
        {
            return result;
        }
        Self::from_tar_zst_pipelined(compressed, limits, expect)
    }

    /// Decodes `frames` on up to `threads` threads while the `tar` reader reads them in
    /// order. `None` when a frame failed to decode: the caller then takes the streaming
    /// path for the exact error.
    fn from_frames_parallel(
        compressed: &[u8],
        frames: &[Frame],
        limits: &Limits,
        threads: usize,
        expect: Option<DigestRule>,
    ) -> Option<Result<Self, FormatError>> {
        let total: u64 = frames.iter().map(|f| f.content_len).sum();
        let source = PlainFrames { compressed, frames };
        let (parsed, decoded) = with_frame_reader(&source, threads, FileHashes::Skip, |reader| {
            Self::read_tar(reader, limits, total, expect)
        });
        decoded.is_ok().then_some(parsed)
    }

    fn from_tar_zst_serial(
        compressed: &[u8],
        limits: &Limits,
        expect: Option<DigestRule>,
    ) -> Result<Self, FormatError> {
        let tar = decompress(compressed, limits)?;
        Self::read_tar(tar.as_slice(), limits, tar.len() as u64, expect)
    }

    fn from_tar_zst_pipelined(
        compressed: &[u8],
        limits: &Limits,
        expect: Option<DigestRule>,
    ) -> Result<Self, FormatError> {
        let budget = limits.decompressed_budget(compressed.len() as u64);
        with_chunk_reader(compressed, limits, |reader| {
            Self::read_tar(reader, limits, budget, expect)
        })
    }
}

/// Frames to decode in parallel, each into a buffer of a size known in advance: a format-1
/// payload's zstd frames ([`PlainFrames`]) or a format-2 pack's segments
/// ([`SealedSegments`]).
pub(crate) trait FrameSource: Sync {
    /// What each decoding thread keeps between frames.
    type Scratch: Default;
    /// Whether every frame is authenticated (a format-2 segment's GCM tag) before a byte of
    /// it is decoded. zstd's own checksum of each frame is then left unchecked
    /// ([`frame_context`]).
    const AUTHENTICATED: bool;
    fn count(&self) -> usize;
    /// The size frame `number` decodes to.
    fn len(&self, number: usize) -> u64;
    /// Decodes frame `number` into `out` (emptied first) at exactly the size known for it;
    /// anything else is an error.
    fn decode(
        &self,
        number: usize,
        scratch: &mut Self::Scratch,
        context: &mut zstd::zstd_safe::DCtx<'static>,
        out: &mut FrameBuffer,
    ) -> Result<(), FormatError>;
}

/// A decrypted format-1 payload's frames, as [`frame_plan`] found them.
pub(crate) struct PlainFrames<'a> {
    pub compressed: &'a [u8],
    pub frames: &'a [Frame],
}

impl FrameSource for PlainFrames<'_> {
    type Scratch = ();
    const AUTHENTICATED: bool = false;

    fn count(&self) -> usize {
        self.frames.len()
    }

    fn len(&self, number: usize) -> u64 {
        self.frames[number].content_len
    }

    fn decode(
        &self,
        number: usize,
        _scratch: &mut (),
        context: &mut zstd::zstd_safe::DCtx<'static>,
        out: &mut FrameBuffer,
    ) -> Result<(), FormatError> {
        let frame = &self.frames[number];
        decode_exact(
            context,
            &self.compressed[frame.start..frame.end],
            frame.content_len,
            out,
        )
    }
}

/// A zstd decompression context for frames that were `authenticated` or not.
///
/// An authenticated frame's checksum (XXH64 of what it decodes to, when the frame has one)
/// is not checked: the segment's GCM tag already authenticated every byte the frame is
/// decoded from, and every file it holds is still checked against its SHA-256 in the index.
/// Hashing every decoded byte a second time was 2-3% of an extract's CPU samples
/// (BENCHMARKS.md). Frames that nothing authenticated (a bare `tar.zst`, a format-1
/// payload) keep the check.
pub(crate) fn frame_context(authenticated: bool) -> zstd::zstd_safe::DCtx<'static> {
    let mut context = zstd::zstd_safe::DCtx::create();
    if authenticated {
        // The vendored zstd (1.5.7) knows the parameter; were it refused, the frames would
        // only be checked as before.
        let _ = context.set_parameter(zstd::zstd_safe::DParameter::ForceIgnoreChecksum(true));
    }
    context
}

/// Decodes one or more whole zstd frames into `out` (its contents replaced), which must
/// come to exactly `len` bytes; zstd cannot write past the buffer's room.
pub(crate) fn decode_exact(
    context: &mut zstd::zstd_safe::DCtx<'static>,
    compressed: &[u8],
    len: u64,
    out: &mut FrameBuffer,
) -> Result<(), FormatError> {
    let len_bytes = len as usize;
    if out.room() < len_bytes {
        // A fresh buffer rather than a larger copy of this one. A frame of a large pack gets
        // room for the frames of up to FRAME_LEN that follow it, so that the buffer is reused
        // for them as it is: pages past what a frame decodes to are never touched and cost no
        // memory (`buffer`), while growing it would hold the old buffer and the new one at
        // once.
        let room = if len_bytes >= MIN_FRAME_LEN {
            len_bytes.max(FRAME_LEN)
        } else {
            len_bytes
        };
        *out = FrameBuffer::with_room(room);
    }
    match out.decompress(context, compressed) {
        Ok(n) if n as u64 == len => Ok(()),
        Ok(n) => Err(FormatError::malformed(
            "zstd payload",
            format!("a frame decodes to {n} bytes, not the {len} it declares"),
        )),
        Err(code) => Err(FormatError::malformed(
            "zstd payload",
            zstd::zstd_safe::get_error_name(code),
        )),
    }
}

/// What a decoding thread may do with a frame and its files before the reader gets it: it
/// says which files it handed out (by their place in the slice it got), each with the
/// index position it handed the file out as.
pub(crate) type HandOut<'h> = dyn Fn(&[u8], &[FileDigest]) -> Vec<Handed> + Sync + 'h;

/// A file of a frame a decoding thread handed out: `file` is its place among the frame's
/// [`FileDigest`]s, `position` the index entry whose path, size and SHA-256 it matched.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Handed {
    pub(crate) file: usize,
    pub(crate) position: usize,
}

/// Whether the decoding threads take the SHA-256 of the files in each frame they decode
/// ([`file_digests`]): only for a reader that checks files straight from the frames
/// ([`DecodedFrame::digest_of`]); one that copies the bytes out hashes them itself.
#[derive(Clone, Copy)]
pub(crate) enum FileHashes<'h> {
    /// Take them, and give each frame with its files to the function first, on the thread
    /// that decoded it, before the reader gets the frame.
    Take(&'h HandOut<'h>, DigestRule),
    Skip,
}

/// The name of every thread [`with_frame_reader`] starts, as a panic message or a profiler
/// shows it.
pub(crate) const DECODING_THREAD: &str = "pack-decode";

/// Decodes the frames of `source` on up to `threads` threads and runs `read` over them in
/// order. No thread takes a frame more than [`AHEAD_PER_THREAD`] frames per thread ahead of
/// the one the reader waits for; within that reach a thread takes the frame the reader waits
/// for if no thread has, else the largest frame not yet taken ([`DecodedState::pick`]), so
/// that a thread that drew a large frame does not hold the others back and the threads
/// finish together; and every frame is decoded into a buffer of exactly its size. Also
/// returns the first failure, by frame order; after a failed frame the reader saw the stream
/// end early.
pub(crate) fn with_frame_reader<S: FrameSource, T>(
    source: &S,
    threads: usize,
    hashes: FileHashes<'_>,
    read: impl FnOnce(FrameReader<'_>) -> T,
) -> (T, Result<(), FormatError>) {
    let count = source.count();
    let workers = threads.clamp(1, count.max(1));
    let lens = (0..count).map(|number| source.len(number)).collect();
    let decoded = Arc::new(Decoded::new(lens, workers * AHEAD_PER_THREAD));
    // Each decoding thread on a core of its own until the frames left are fewer than the
    // threads (`cores`: left to the scheduler, two threads often shared the free core of a
    // machine whose other core was busy).
    let cores = Cores::for_threads(workers).ok();
    std::thread::scope(|scope| {
        let handles: Vec<_> = (0..workers)
            .map(|worker| {
                let (decoded, cores) = (&decoded, &cores);
                let thread = std::thread::Builder::new().name(DECODING_THREAD.to_string());
                let spawned = thread.spawn_scoped(scope, move || {
                    let mut held = Cores::hold(cores.as_ref(), worker);
                    let mut context = frame_context(S::AUTHENTICATED);
                    let mut scratch = S::Scratch::default();
                    let mut failed = None;
                    while let Some((number, left)) = decoded.take() {
                        if left < workers {
                            // The last frames: each may move to a core another thread
                            // leaves idle.
                            held.release();
                        }
                        let _taken = Taken { decoded, number };
                        let mut out = decoded.buffer_for(source.len(number));
                        match source.decode(number, &mut scratch, &mut context, &mut out) {
                            Ok(()) => {
                                let parts = match hashes {
                                    FileHashes::Take(hand_out, rule) => {
                                        let digests = file_digests(&out, rule);
                                        let handed = hand_out(&out, &digests);
                                        let (parts, spent) =
                                            FrameParts::after_hand_out(out, digests, &handed);
                                        if let Some(spent) = spent {
                                            decoded.give_back(spent);
                                        }
                                        parts
                                    }
                                    FileHashes::Skip => FrameParts::whole(out, Vec::new()),
                                };
                                decoded.put(number, parts);
                            }
                            Err(e) => {
                                decoded.fail(number);
                                failed = Some((number, e));
                            }
                        }
                    }
                    failed
                });
                // As `scope.spawn` would: the reader cannot go on without its decoders.
                spawned.unwrap_or_else(|e| panic!("cannot start a thread to decode frames: {e}"))
            })
            .collect();
        // A frame whose stretches went with the files handed out is decoded again, on the
        // reader's thread, should the reader need them after all (`FrameReader::whole`).
        let again = |number: usize| {
            let mut context = frame_context(S::AUTHENTICATED);
            let mut out = FrameBuffer::default();
            source.decode(number, &mut S::Scratch::default(), &mut context, &mut out)?;
            Ok(out)
        };
        // `read` drops the reader when it returns, which unblocks the decoders.
        let result = read(FrameReader::new(Arc::clone(&decoded), &again));
        let mut failed: Option<(usize, FormatError)> = None;
        for handle in handles {
            if let Some((number, e)) = crate::joined(handle)
                && failed.as_ref().is_none_or(|(first, _)| number < *first)
            {
                failed = Some((number, e));
            }
        }
        (result, failed.map_or(Ok(()), |(_, e)| Err(e)))
    })
}

/// A frame a decoding thread took: should the thread panic before it is decoded, the frame
/// counts as failed, so the reader stops there instead of waiting for it, and the panic
/// reaches the caller through the join.
struct Taken<'a> {
    decoded: &'a Decoded,
    number: usize,
}

impl Drop for Taken<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.decoded.fail(self.number);
        }
    }
}

/// How many frames per decoding thread may be decoded ahead of the reader: one being decoded
/// and one waiting, per thread, as many as when each thread had its fixed share of frames.
const AHEAD_PER_THREAD: usize = 2;

/// What the decoding threads and the reader share: which frame goes next, the decoded frames
/// the reader has not taken yet, and the buffers it is done with.
struct Decoded {
    state: Mutex<DecodedState>,
    changed: Condvar,
    count: usize,
    ahead: usize,
}

struct DecodedState {
    /// Each frame's decoded length, as its source declares it.
    lens: Vec<u64>,
    /// Which frames a decoding thread took.
    taken: Vec<bool>,
    /// How many frames no thread has taken yet.
    untaken: usize,
    /// The frame the reader wants next.
    wanted: usize,
    /// Decoded frames the reader has not taken, by number.
    ready: BTreeMap<usize, FrameParts>,
    /// Buffers of frames read and dropped, for the next frames.
    spent: Vec<FrameBuffer>,
    /// The first frame that failed: no frame after it is taken, and the stream ends there.
    failed: Option<usize>,
    /// The reader is gone: the remaining frames are decoded and dropped, since a bad frame
    /// after the end of the `tar` still fails the payload, as on the streaming path.
    closed: bool,
}

impl DecodedState {
    /// Which frame before `reach` a thread takes: the one the reader waits for if no thread
    /// has taken it, else the largest not taken (the first of equals). Taking the reader's
    /// frame first keeps it from waiting behind frames it reads later; taking the largest
    /// next leaves the short frames of each stretch, and of the pack, for last, when the
    /// threads would otherwise finish one after the other (one 12 MB frame decoded, hashed
    /// and written alone at the end while the other thread has nothing left). The frames
    /// before `wanted` were all taken, so the search starts there.
    fn pick(&self, reach: usize) -> Option<usize> {
        let from = self.wanted.min(reach);
        if from < reach && !self.taken[from] {
            return Some(from);
        }
        (from..reach)
            .filter(|&number| !self.taken[number])
            .max_by_key(|&number| (self.lens[number], std::cmp::Reverse(number)))
    }
}

impl Decoded {
    fn new(lens: Vec<u64>, ahead: usize) -> Self {
        let count = lens.len();
        Decoded {
            state: Mutex::new(DecodedState {
                lens,
                taken: vec![false; count],
                untaken: count,
                wanted: 0,
                ready: BTreeMap::new(),
                spent: Vec::new(),
                failed: None,
                closed: false,
            }),
            changed: Condvar::new(),
            count,
            ahead,
        }
    }

    fn lock(&self) -> MutexGuard<'_, DecodedState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn wait<'a>(&self, state: MutexGuard<'a, DecodedState>) -> MutexGuard<'a, DecodedState> {
        self.changed.wait(state).unwrap_or_else(|e| e.into_inner())
    }

    /// The next frame to decode, once one is within reach of the reader, and how many are
    /// left for the threads to take after it; `None` when no frame is left to decode.
    fn take(&self) -> Option<(usize, usize)> {
        let mut state = self.lock();
        loop {
            // No frame from the first that failed on is taken; the frames before it still
            // are (a larger frame after them may have been taken, and failed, first): the
            // reader reads up to the failed frame, and an earlier failure wins.
            let end = state.failed.unwrap_or(self.count);
            let reach = if state.closed {
                end
            } else {
                end.min(state.wanted + self.ahead)
            };
            if let Some(number) = state.pick(reach) {
                state.taken[number] = true;
                state.untaken -= 1;
                return Some((number, state.untaken));
            }
            if state.untaken == 0 || (state.wanted..end).all(|number| state.taken[number]) {
                return None;
            }
            state = self.wait(state);
        }
    }

    /// A buffer for a frame of `len` bytes: the smallest spent one it fits in, whose pages
    /// are faulted in already (a fresh buffer costs a page fault per page), else an empty
    /// one for [`decode_exact`] to allocate.
    fn buffer_for(&self, len: u64) -> FrameBuffer {
        let mut state = self.lock();
        let fits = state
            .spent
            .iter()
            .enumerate()
            .filter(|(_, buffer)| buffer.room() as u64 >= len)
            .min_by_key(|(_, buffer)| buffer.room())
            .map(|(at, _)| at);
        fits.map(|at| state.spent.swap_remove(at))
            .unwrap_or_default()
    }

    /// Keeps `buffer` for the frames still to decode; at most as many as may be decoded at
    /// once are kept, the largest.
    fn give_back(&self, buffer: FrameBuffer) {
        if buffer.room() == 0 {
            return;
        }
        let mut state = self.lock();
        if state.untaken == 0 {
            return;
        }
        state.spent.push(buffer);
        if state.spent.len() > self.ahead
            && let Some(smallest) = (0..state.spent.len()).min_by_key(|&at| state.spent[at].room())
        {
            state.spent.swap_remove(smallest);
        }
    }

    fn put(&self, number: usize, parts: FrameParts) {
        let mut state = self.lock();
        if state.closed {
            drop(state);
            self.give_back(parts.into_buffer());
        } else {
            state.ready.insert(number, parts);
            self.changed.notify_all();
        }
    }

    fn fail(&self, number: usize) {
        let mut state = self.lock();
        if state.failed.is_none_or(|first| number < first) {
            state.failed = Some(number);
        }
        self.changed.notify_all();
    }
}

/// Decompresses `compressed` as one stream on a second thread, under the limits' budget,
/// and runs `read` over the chunks as they come. A decompression error wins over whatever
/// `read` made of the bytes before it.
pub(crate) fn with_chunk_reader<T>(
    compressed: &[u8],
    limits: &Limits,
    read: impl FnOnce(ChunkReader) -> Result<T, FormatError>,
) -> Result<T, FormatError> {
    std::thread::scope(|scope| {
        let (sender, receiver) = mpsc::sync_channel::<Vec<u8>>(PIPELINE_DEPTH);
        let producer = scope.spawn(move || {
            decompress_chunks(compressed, limits, |chunk| sender.send(chunk).is_ok())
        });
        // `read` drops the receiver when it returns, which unblocks the producer.
        let parsed = read(ChunkReader::new(receiver));
        let produced = crate::joined(producer);
        produced?;
        parsed
    })
}

/// Decompresses, refusing to produce more than the limits' budget for this input.
pub fn decompress(compressed: &[u8], limits: &Limits) -> Result<Vec<u8>, FormatError> {
    let budget = limits.decompressed_budget(compressed.len() as u64);
    let decoder = zstd::stream::Decoder::with_buffer(compressed)
        .map_err(|e| FormatError::malformed("zstd payload", e))?;
    // Start small: the frame's claimed size is not trusted.
    let mut out = Vec::with_capacity((compressed.len() * 4).min(budget as usize));
    let read = decoder
        .take(budget + 1)
        .read_to_end(&mut out)
        .map_err(|e| FormatError::malformed("zstd payload", e))?;
    if read as u64 > budget {
        return Err(FormatError::DecompressionBomb { limit: budget });
    }
    Ok(out)
}

/// Compressed payloads from this size up are decompressed on a second thread (see
/// [`Payload::from_tar_zst`]); below it a thread costs more than it saves.
pub(crate) const PIPELINE_MIN_LEN: usize = 256 * 1024;
/// Chunks the decompressing thread hands over at a time, and how many may wait.
const PIPELINE_CHUNK: u64 = 1024 * 1024;
const PIPELINE_DEPTH: usize = 8;

/// [`decompress`] in chunks: each chunk goes to `sink` as soon as it is ready. When `sink`
/// returns false (the reader stopped), decompression still runs to the end, so that the
/// result is exactly [`decompress`]'s.
fn decompress_chunks(
    compressed: &[u8],
    limits: &Limits,
    mut sink: impl FnMut(Vec<u8>) -> bool,
) -> Result<(), FormatError> {
    let budget = limits.decompressed_budget(compressed.len() as u64);
    let decoder = zstd::stream::Decoder::with_buffer(compressed)
        .map_err(|e| FormatError::malformed("zstd payload", e))?;
    let mut limited = decoder.take(budget + 1);
    let mut total: u64 = 0;
    let mut listening = true;
    loop {
        let mut chunk = Vec::with_capacity(PIPELINE_CHUNK as usize);
        let read = (&mut limited)
            .take(PIPELINE_CHUNK)
            .read_to_end(&mut chunk)
            .map_err(|e| FormatError::malformed("zstd payload", e))?;
        if read == 0 {
            return Ok(());
        }
        total += read as u64;
        if total > budget {
            return Err(FormatError::DecompressionBomb { limit: budget });
        }
        if listening {
            listening = sink(chunk);
        }
    }
}

/// One zstd frame of a payload: where it lies in the compressed bytes and the size its
/// header declares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Frame {
    start: usize,
    end: usize,
    pub(crate) content_len: u64,
}

/// Frames beyond this many take the streaming path (8 GiB of `tar` at [`FRAME_LEN`]).
const MAX_PARALLEL_FRAMES: usize = 1024;
/// zstd's default limit on the window of a streamed frame (`ZSTD_WINDOWLOG_LIMIT_DEFAULT`):
/// the streaming path refuses frames with a larger window, so the parallel path must too.
const MAX_WINDOW_LOG: u32 = 27;
const ZSTD_MAGIC: [u8; 4] = [0x28, 0xb5, 0x2f, 0xfd];

/// The frames of `compressed` when it can be decoded frame by frame in parallel: only
/// standard zstd frames, without a dictionary, each declaring its content size and a
/// window the streaming decoder accepts, the sizes adding up to no more than the budget,
/// and nothing after the last frame. `None` otherwise.
pub(crate) fn frame_plan(compressed: &[u8], limits: &Limits) -> Option<Vec<Frame>> {
    frames_within(
        compressed,
        limits.decompressed_budget(compressed.len() as u64),
    )
}

/// [`frame_plan`] with the declared sizes adding up to at most `budget`.
pub(crate) fn frames_within(compressed: &[u8], budget: u64) -> Option<Vec<Frame>> {
    let mut frames = Vec::new();
    let mut start = 0;
    let mut total: u64 = 0;
    while start < compressed.len() {
        if frames.len() == MAX_PARALLEL_FRAMES {
            return None;
        }
        let rest = &compressed[start..];
        if rest.len() < 6 || rest[..4] != ZSTD_MAGIC {
            return None;
        }
        let descriptor = rest[4];
        let single_segment = descriptor & 0x20 != 0;
        if descriptor & 0x03 != 0 || descriptor & 0x08 != 0 {
            return None; // a dictionary id, or the reserved bit
        }
        let len = zstd::zstd_safe::find_frame_compressed_size(rest).ok()?;
        let content_len = zstd::zstd_safe::get_frame_content_size(&rest[..len]).ok()??;
        let window = if single_segment {
            content_len
        } else {
            let window = u32::from(rest[5]);
            let log = 10 + (window >> 3);
            (1u64 << log) + ((1u64 << log) / 8) * u64::from(window & 7)
        };
        if window > 1 << MAX_WINDOW_LOG {
            return None;
        }
        total = total.checked_add(content_len)?;
        if total > budget {
            return None;
        }
        frames.push(Frame {
            start,
            end: start + len,
            content_len,
        });
        start += len;
    }
    Some(frames)
}

/// A decoded frame as its decoding thread leaves it for the reader.
#[derive(Default)]
pub(crate) struct FrameParts {
    /// The frame's bytes; for a thinned frame, only the stretches in `kept`, back to back.
    bytes: FrameBuffer,
    /// The frame's length in the `tar`.
    len: usize,
    /// For a thinned frame, the stretches of it that `bytes` holds, in order.
    kept: Option<Vec<Kept>>,
    /// For a thinned frame, the files handed out whose stretches it dropped, in order.
    gone: Vec<Gone>,
    /// What [`file_digests`] found in it, by offset.
    digests: Vec<FileDigest>,
}

/// A stretch a thinned frame keeps: `len` bytes at `at` in the frame, at `from` in its bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Kept {
    at: usize,
    from: usize,
    len: usize,
}

/// A file handed out from a frame that was then thinned: where its data lay, and the index
/// position it went out as.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Gone {
    data: std::ops::Range<usize>,
    position: usize,
}

impl FrameParts {
    fn whole(bytes: FrameBuffer, digests: Vec<FileDigest>) -> Self {
        FrameParts {
            len: bytes.len(),
            bytes,
            kept: None,
            gone: Vec::new(),
            digests,
        }
    }

    /// The frame as the reader gets it once the `handed` files went out: thinned when that
    /// pays ([`thinned`]), with the frame's buffer to give back at once; else whole.
    fn after_hand_out(
        frame: FrameBuffer,
        digests: Vec<FileDigest>,
        handed: &[Handed],
    ) -> (Self, Option<FrameBuffer>) {
        match thinned(&frame, &digests, handed) {
            Some((bytes, kept, gone)) => {
                let thin = FrameParts {
                    bytes,
                    len: frame.len(),
                    kept: Some(kept),
                    gone,
                    digests,
                };
                (thin, Some(frame))
            }
            None => (FrameParts::whole(frame, digests), None),
        }
    }

    /// The frame's buffer, for a later frame; none from a thinned frame, whose bytes are a
    /// small buffer of their own.
    fn into_buffer(self) -> FrameBuffer {
        match self.kept {
            None => self.bytes,
            Some(_) => FrameBuffer::default(),
        }
    }
}

/// The `tar` block: a file's data is padded to a whole number of them.
const BLOCK: usize = 512;

/// What is left of `frame` once the `handed` files went out: every byte but each such
/// file's data and its padding, copied into a buffer of its own, so that the frame's buffer
/// can go back to the decoding threads at once instead of waiting, whole, for the reader.
///
/// In the usual frame every file goes out on its decoding thread, and the reader only reads
/// the headers and finds each file handed out already ([`DecodedFrame::went_out`]): a frame
/// of many small files keeps a header block per file, one of a few large files a few blocks.
/// A frame waiting for the reader then holds kilobytes instead of megabytes, so fewer
/// buffers are ever touched: on a virtual machine a fresh page is zeroed, and often backed
/// by its host, at the first touch, which on the bench's trees was a tenth of the extract's
/// CPU (BENCHMARKS.md). Nothing is thinned when less than half the frame went out.
fn thinned(
    frame: &[u8],
    digests: &[FileDigest],
    handed: &[Handed],
) -> Option<(FrameBuffer, Vec<Kept>, Vec<Gone>)> {
    let mut gone: Vec<Gone> = handed
        .iter()
        .filter_map(|h| digests.get(h.file).map(|digest| (digest, h.position)))
        .filter(|(digest, _)| digest.len > 0)
        .map(|(digest, position)| Gone {
            data: digest.range(),
            position,
        })
        .collect();
    gone.sort_by_key(|g| g.data.start);
    // Each dropped stretch is a file's data and its padding, within the frame; a file whose
    // stretch would overlap the one before (only in a frame a crafted header led astray) is
    // kept.
    let mut dropped: Vec<std::ops::Range<usize>> = Vec::with_capacity(gone.len());
    gone.retain(|g| {
        let stretch =
            g.data.start..(g.data.start + g.data.len().div_ceil(BLOCK) * BLOCK).min(frame.len());
        let keep = g.data.end <= frame.len()
            && dropped.last().is_none_or(|last| last.end <= stretch.start);
        if keep {
            dropped.push(stretch);
        }
        keep
    });
    let dropped_len: usize = dropped.iter().map(|r| r.len()).sum();
    if dropped_len == 0 || dropped_len * 2 < frame.len() {
        return None;
    }
    let mut bytes = Vec::with_capacity(frame.len() - dropped_len);
    let mut kept = Vec::with_capacity(dropped.len() + 1);
    let mut at = 0;
    for stretch in dropped
        .iter()
        .chain(std::iter::once(&(frame.len()..frame.len())))
    {
        if stretch.start > at {
            kept.push(Kept {
                at,
                from: bytes.len(),
                len: stretch.start - at,
            });
            bytes.extend_from_slice(&frame[at..stretch.start]);
        }
        at = stretch.end;
    }
    Some((FrameBuffer::from(bytes), kept, gone))
}

/// A decoded frame, whole or thinned ([`thinned`]); a whole frame's buffer goes back to the
/// decoding threads when it is dropped, by the reader or by whoever held on to a file inside
/// it.
pub(crate) struct DecodedFrame {
    parts: FrameParts,
    number: usize,
    decoded: Arc<Decoded>,
}

impl DecodedFrame {
    /// The frame's length in the `tar`.
    pub(crate) fn len(&self) -> usize {
        self.parts.len
    }

    /// The bytes `range` of the frame; `None` when it runs past the end, or some of them
    /// went with a file handed out from a thinned frame.
    pub(crate) fn get(&self, range: std::ops::Range<usize>) -> Option<&[u8]> {
        if range.start > range.end || range.end > self.parts.len {
            return None;
        }
        let Some(kept) = &self.parts.kept else {
            return self.parts.bytes.get(range);
        };
        if range.is_empty() {
            return Some(&[]);
        }
        let stretch = kept.get(kept.partition_point(|k| k.at + k.len <= range.start))?;
        let end = stretch.at + stretch.len;
        (stretch.at <= range.start && range.end <= end).then(|| {
            let from = stretch.from + (range.start - stretch.at);
            &self.parts.bytes[from..from + range.len()]
        })
    }

    /// The bytes from `at` to the end of the frame, or of the stretch a thinned frame kept
    /// around `at`; `None` when `at` is in a stretch that went out, or past the end.
    pub(crate) fn from(&self, at: usize) -> Option<&[u8]> {
        let Some(kept) = &self.parts.kept else {
            return self.parts.bytes.get(at..);
        };
        let stretch = kept.get(kept.partition_point(|k| k.at + k.len <= at))?;
        (stretch.at <= at).then(|| {
            &self.parts.bytes[stretch.from + (at - stretch.at)..stretch.from + stretch.len]
        })
    }

    /// Whether `range` is exactly the data of a file this frame's decoding thread handed
    /// out, as an index position `is_it` accepts. Such a file's bytes may be gone from the
    /// frame; they are the bytes the index lists for that position.
    pub(crate) fn went_out(
        &self,
        range: &std::ops::Range<usize>,
        is_it: impl Fn(usize) -> bool,
    ) -> bool {
        let gone = &self.parts.gone;
        gone.binary_search_by_key(&range.start, |g| g.data.start)
            .is_ok_and(|at| gone[at].data.end == range.end && is_it(gone[at].position))
    }

    /// The SHA-256 of exactly the bytes `range` of this frame, when the decoding thread took
    /// it already; `None` otherwise (the caller hashes them).
    pub(crate) fn digest_of(&self, range: &std::ops::Range<usize>) -> Option<[u8; 32]> {
        digest_of(&self.parts.digests, range)
    }
}

/// The digest in `digests` (in order of offset) of exactly the bytes `range`.
fn digest_of(digests: &[FileDigest], range: &std::ops::Range<usize>) -> Option<[u8; 32]> {
    let at = digests
        .binary_search_by_key(&range.start, |d| d.start)
        .ok()?;
    let digest = &digests[at];
    (digest.start + digest.len == range.end).then_some(digest.sha256)
}

/// The SHA-256 of one regular file's data in a decoded frame: `len` bytes at `start`, after
/// its header block at `header`.
pub(crate) struct FileDigest {
    header: usize,
    start: usize,
    len: usize,
    sha256: [u8; 32],
}

impl FileDigest {
    /// The path the file's header block in `frame` gives (the `ustar` prefix and the name);
    /// a long name that an entry before it gives is not seen.
    pub(crate) fn header_path<'f>(&self, frame: &'f [u8]) -> std::borrow::Cow<'f, [u8]> {
        tar::Header::from_byte_slice(&frame[self.header..self.start]).path_bytes()
    }

    /// Where the file's data lies in its frame.
    pub(crate) fn range(&self) -> std::ops::Range<usize> {
        self.start..self.start + self.len
    }

    pub(crate) fn sha256(&self) -> &[u8; 32] {
        &self.sha256
    }
}

/// The SHA-256 of every regular file whose data lies wholly in `frame`, but the index (the
/// reader parses it and checks nothing against it), found by walking the `tar` headers from
/// the frame's first byte (`packer` cuts frames at entry boundaries) until a block is not a
/// header with a good checksum, or an entry runs past the frame.
///
/// Only a shortcut: the thread that checks a file then makes no second pass over it (on a
/// pack of large files, from level to 10% off an extract's wall time depending on the
/// run, BENCHMARKS.md), and `unpack` hands out right away the files whose path, size and
/// digest match the index. Whoever checks a file behind the `tar` reader uses a digest only
/// when it covers exactly that file's bytes in the same frame
/// ([`DecodedFrame::digest_of`]); a walk that went astray on a crafted frame costs time,
/// never a check.
fn file_digests(frame: &[u8], rule: DigestRule) -> Vec<FileDigest> {
    let mut files = Vec::new();
    let mut at = 0;
    while let Some(block) = frame.get(at..at + BLOCK) {
        let header = tar::Header::from_byte_slice(block);
        let Some(len) = checked_entry_len(header) else {
            break;
        };
        let start = at + BLOCK;
        let Some(end) = start.checked_add(len).filter(|&end| end <= frame.len()) else {
            break;
        };
        // Regular files but the index, which no one checks against itself; long names and
        // the rest are skipped.
        if header.entry_type().is_file() && *header.path_bytes() != *INDEX_PATH.as_bytes() {
            files.push((at, start..end));
        }
        at = start + len.div_ceil(BLOCK) * BLOCK;
    }
    // All at once: many files hash side by side (crate::digest).
    let bytes: Vec<&[u8]> = files
        .iter()
        .map(|(_, range)| &frame[range.clone()])
        .collect();
    let digests = rule.each(&bytes);
    files
        .into_iter()
        .zip(digests)
        .map(|((header, range), sha256)| FileDigest {
            header,
            start: range.start,
            len: range.len(),
            sha256,
        })
        .collect()
}

/// The data length `header` declares, read as the `tar` reader reads it, if the checksum it
/// stores is the one its bytes add up to.
fn checked_entry_len(header: &tar::Header) -> Option<usize> {
    let mut summed = header.clone();
    summed.set_cksum();
    if header.cksum().ok()? != summed.cksum().ok()? {
        return None;
    }
    usize::try_from(header.entry_size().ok()?).ok()
}

impl Drop for DecodedFrame {
    fn drop(&mut self) {
        self.decoded
            .give_back(std::mem::take(&mut self.parts).into_buffer());
    }
}

/// Reads the frames the decoding threads decode, in order, as one stream.
pub(crate) struct FrameReader<'r> {
    decoded: Arc<Decoded>,
    /// Decodes a frame again, whole.
    again: &'r dyn Fn(usize) -> Result<FrameBuffer, FormatError>,
    current: Option<DecodedFrame>,
    offset: usize,
}

impl<'r> FrameReader<'r> {
    fn new(
        decoded: Arc<Decoded>,
        again: &'r dyn Fn(usize) -> Result<FrameBuffer, FormatError>,
    ) -> Self {
        FrameReader {
            decoded,
            again,
            current: None,
            offset: 0,
        }
    }

    /// The next frame in order, or `None` at the end (or when a frame failed, which the
    /// caller of [`with_frame_reader`] learns from its result).
    pub(crate) fn next_frame(&mut self) -> Option<DecodedFrame> {
        let decoded = &*self.decoded;
        let mut state = decoded.lock();
        loop {
            let wanted = state.wanted;
            if let Some(parts) = state.ready.remove(&wanted) {
                state.wanted += 1;
                decoded.changed.notify_all();
                return Some(DecodedFrame {
                    parts,
                    number: wanted,
                    decoded: Arc::clone(&self.decoded),
                });
            }
            if wanted >= decoded.count || state.failed.is_some_and(|first| first <= wanted) {
                return None;
            }
            state = decoded.wait(state);
        }
    }

    /// `frame` with every byte: decoded again, on this thread, from the same authenticated
    /// source, for a reader that needs a stretch a thinned frame dropped. That happens only
    /// when the reader's walk of the `tar` and the decoding thread's parted ways (a crafted
    /// pack); the frame it gives carries no digests, so every file in it is hashed again.
    pub(crate) fn whole(&self, frame: &DecodedFrame) -> Result<DecodedFrame, FormatError> {
        let bytes = (self.again)(frame.number)?;
        if bytes.len() != frame.len() {
            return Err(FormatError::malformed(
                "zstd payload",
                format!(
                    "frame {} decodes to another length the second time",
                    frame.number
                ),
            ));
        }
        Ok(DecodedFrame {
            parts: FrameParts::whole(bytes, Vec::new()),
            number: frame.number,
            decoded: Arc::clone(&self.decoded),
        })
    }
}

impl Drop for FrameReader<'_> {
    fn drop(&mut self) {
        let ready = {
            let mut state = self.decoded.lock();
            state.closed = true;
            self.decoded.changed.notify_all();
            std::mem::take(&mut state.ready)
        };
        // Frames decoded for nobody become buffers for the frames still to decode.
        for (_, parts) in ready {
            self.decoded.give_back(parts.into_buffer());
        }
    }
}

impl Read for FrameReader<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        loop {
            if let Some(frame) = &self.current
                && self.offset < frame.len()
            {
                let Some(bytes) = frame.from(self.offset) else {
                    let whole = self.whole(frame).map_err(std::io::Error::other)?;
                    self.current = Some(whole);
                    continue;
                };
                let n = buf.len().min(bytes.len());
                buf[..n].copy_from_slice(&bytes[..n]);
                self.offset += n;
                return Ok(n);
            }
            // The frame read to its end goes back before the next is waited for.
            self.current = None;
            let Some(frame) = self.next_frame() else {
                return Ok(0);
            };
            self.current = Some(frame);
            self.offset = 0;
        }
    }
}

/// Reads the chunks a decompressing thread sends, in order, as one stream.
pub(crate) struct ChunkReader {
    chunks: mpsc::Receiver<Vec<u8>>,
    current: Vec<u8>,
    offset: usize,
}

impl ChunkReader {
    fn new(chunks: mpsc::Receiver<Vec<u8>>) -> Self {
        ChunkReader {
            chunks,
            current: Vec::new(),
            offset: 0,
        }
    }
}

impl Read for ChunkReader {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        while self.offset == self.current.len() {
            match self.chunks.recv() {
                Ok(chunk) => {
                    self.current = chunk;
                    self.offset = 0;
                }
                // The sender is gone: the stream ended (or failed, which the caller
                // learns from the decompressing thread).
                Err(mpsc::RecvError) => return Ok(0),
            }
        }
        let n = buf.len().min(self.current.len() - self.offset);
        buf[..n].copy_from_slice(&self.current[self.offset..self.offset + n]);
        self.offset += n;
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::PayloadFile;
    use crate::frames::compress;
    use crate::payload::index_json;
    use crate::payload::tests::text;
    use sha2::Digest;

    fn big_payload() -> Payload {
        let files = (0..300).map(|i| PayloadFile {
            path: format!("dir{}/sub{}/file{i}.md", i % 7, i % 3),
            bytes: text(i, 2_000 + (i as usize * 7_919) % 60_000),
        });
        Payload::new(files, &Limits::DEFAULT).unwrap()
    }

    /// [`big_payload`] compressed as `packer` cuts it (level 3), and its frames.
    fn big_payload_in_frames() -> (Payload, Vec<u8>, Vec<Frame>) {
        let payload = big_payload();
        let compressed = payload.to_tar_zst(7, 3).unwrap();
        let frames = frame_plan(&compressed, &Limits::DEFAULT).unwrap();
        (payload, compressed, frames)
    }

    /// The same outcome, errors compared by their message.
    fn outcome(result: Result<Payload, FormatError>) -> Result<Payload, String> {
        result.map_err(|e| e.to_string())
    }

    fn assert_same(compressed: &[u8], limits: &Limits) {
        assert_eq!(
            outcome(Payload::from_tar_zst_pipelined(compressed, limits, None)),
            outcome(Payload::from_tar_zst_serial(compressed, limits, None)),
        );
    }

    /// The frames of `compressed` and what each decodes to.
    fn frames_of(compressed: &[u8]) -> Vec<Vec<u8>> {
        frame_plan(compressed, &Limits::DEFAULT)
            .unwrap()
            .iter()
            .map(|f| {
                zstd::bulk::decompress(&compressed[f.start..f.end], f.content_len as usize).unwrap()
            })
            .collect()
    }

    #[test]
    fn file_frames_follow_the_frame_limits() {
        // Replays docs/FORMAT.md's rule on the entries: a frame takes entries while they fit
        // in its limit, the first two limits are 2 and 4 MiB, the last half of what remains.
        let payload = big_payload();
        let planned = payload.total_size();
        assert!(planned > FRAME_LEN as u64, "{planned}");
        let (mut expected, mut chunk, mut added) = (Vec::new(), 0usize, 0u64);
        let mut limit = crate::frames::frame_limit(0, planned);
        for bytes in payload.files().values() {
            let entry = 512 + bytes.len().next_multiple_of(512);
            if chunk > 0 && chunk + entry > limit {
                expected.push(chunk);
                limit = crate::frames::frame_limit(expected.len(), planned - added);
                chunk = 0;
            }
            chunk += entry;
            added += bytes.len() as u64;
        }
        expected.push(chunk + 1024);
        let frames = frames_of(&payload.to_tar_zst(7, 3).unwrap());
        let lens: Vec<usize> = frames[1..].iter().map(Vec::len).collect();
        assert_eq!(lens, expected);
        // Short at both ends.
        assert!(
            lens[0] <= FRAME_LEN / 4 && lens[1] <= FRAME_LEN / 2,
            "{lens:?}"
        );
        assert!(*lens.last().unwrap() <= FRAME_LEN / 4 + 1024, "{lens:?}");
    }

    /// Each regular file's place in `frame` as the `tar` crate reads it, (start, length),
    /// and its path.
    fn files_in(frame: &[u8]) -> Vec<((usize, usize), String)> {
        let mut archive = tar::Archive::new(frame);
        archive
            .entries()
            .unwrap()
            .map(Result::unwrap)
            .filter(|entry| entry.header().entry_type().is_file())
            .map(|entry| {
                let place = (entry.raw_file_position() as usize, entry.size() as usize);
                (place, entry.path().unwrap().to_string_lossy().into_owned())
            })
            .collect()
    }

    #[test]
    fn the_decoding_threads_hash_every_file_of_a_frame_where_the_tar_reader_finds_it() {
        let payload = big_payload();
        let compressed = payload.to_tar_zst(7, 3).unwrap();
        let frames = frames_of(&compressed);
        assert!(frames.len() > 2, "several frames: {}", frames.len());
        let mut hashed = 0;
        for frame in &frames {
            let digests = file_digests(frame, DigestRule::Bytes);
            let found: Vec<_> = digests.iter().map(|d| (d.start, d.len)).collect();
            let files: Vec<_> = files_in(frame)
                .into_iter()
                .filter(|(_, path)| path != INDEX_PATH)
                .map(|(place, _)| place)
                .collect();
            assert_eq!(found, files);
            for digest in &digests {
                let range = digest.start..digest.start + digest.len;
                let expected: [u8; 32] = sha2::Sha256::digest(&frame[range.clone()]).into();
                assert_eq!(digest.sha256, expected);
                assert_eq!(digest_of(&digests, &range), Some(expected));
            }
            hashed += digests.len();
        }
        // Every file, and not the index entry.
        assert_eq!(hashed, payload.index().len());
    }

    #[test]
    fn only_a_reader_that_checks_files_in_the_frames_has_them_hashed_by_the_decoders() {
        let (payload, compressed, frames) = big_payload_in_frames();
        let source = PlainFrames {
            compressed: &compressed,
            frames: &frames,
        };
        let digests_taken = |hashes| {
            let (taken, decoded) = with_frame_reader(&source, 2, hashes, |mut reader| {
                std::iter::from_fn(|| reader.next_frame())
                    .map(|frame| frame.parts.digests.len())
                    .sum::<usize>()
            });
            decoded.unwrap();
            taken
        };
        // The hand-out sees every file of every frame, on the decoding threads.
        let handed = std::sync::atomic::AtomicUsize::new(0);
        let count = |_: &[u8], files: &[FileDigest]| {
            handed.fetch_add(files.len(), std::sync::atomic::Ordering::Relaxed);
            Vec::new()
        };
        assert_eq!(
            digests_taken(FileHashes::Take(&count, DigestRule::Bytes)),
            payload.index().len()
        );
        assert_eq!(
            handed.load(std::sync::atomic::Ordering::Relaxed),
            payload.index().len()
        );
        assert_eq!(digests_taken(FileHashes::Skip), 0);
    }

    /// A frame whose files all went out on its decoding thread reaches the reader as its
    /// header blocks alone: the reader still reads every header, each file's data is gone
    /// from it (as the file handed out, under the position it went out as), and decoded again
    /// the frame is whole. Were thinning lost, every pack would open as before, with more
    /// memory touched: this test is what notices.
    #[test]
    fn a_frame_whose_files_went_out_reaches_the_reader_as_its_headers_alone() {
        let (payload, compressed, frames) = big_payload_in_frames();
        let source = PlainFrames {
            compressed: &compressed,
            frames: &frames,
        };
        // Every file goes out, as the index position of its place in the frame plus 1000.
        let all = |_: &[u8], files: &[FileDigest]| {
            (0..files.len())
                .map(|file| Handed {
                    file,
                    position: file + 1000,
                })
                .collect()
        };
        let hashes = FileHashes::Take(&all, DigestRule::Bytes);
        let (checked, decoded) = with_frame_reader(&source, 2, hashes, |mut reader| {
            let mut checked = 0;
            while let Some(frame) = reader.next_frame() {
                let whole = reader.whole(&frame).unwrap();
                let bytes = whole.get(0..whole.len()).unwrap();
                let files = file_digests(bytes, DigestRule::Bytes);
                if files.is_empty() {
                    // The index's frame: nothing went out, nothing was dropped.
                    assert_eq!(frame.get(0..frame.len()), Some(bytes));
                    continue;
                }
                assert!(frame.parts.bytes.len() <= files.len() * BLOCK + 2 * BLOCK);
                for (at, file) in files.iter().enumerate() {
                    let header = file.header..file.start;
                    assert_eq!(frame.get(header.clone()), Some(&bytes[header.clone()]));
                    assert_eq!(frame.from(file.header), Some(&bytes[header]));
                    assert_eq!(frame.get(file.range()), None);
                    assert_eq!(frame.from(file.start), None);
                    assert!(frame.went_out(&file.range(), |p| p == at + 1000));
                    assert!(!frame.went_out(&file.range(), |p| p == at));
                    let short = file.start..file.start + file.len - 1;
                    assert!(!frame.went_out(&short, |_| true));
                    assert_eq!(whole.get(file.range()), Some(&bytes[file.range()]));
                    checked += 1;
                }
            }
            checked
        });
        decoded.unwrap();
        assert_eq!(checked, payload.index().len());
    }

    #[test]
    fn a_frame_is_thinned_only_when_at_least_half_of_it_went_out() {
        let payload = big_payload();
        let tar = payload.to_tar(0).unwrap();
        let files = file_digests(&tar, DigestRule::Bytes);
        let handed = |count: usize| -> Vec<Handed> {
            (0..count)
                .map(|file| Handed {
                    file,
                    position: file,
                })
                .collect()
        };
        let gone = |count: usize| -> usize {
            files[..count]
                .iter()
                .map(|f| f.len.div_ceil(BLOCK) * BLOCK)
                .sum()
        };
        let half = (1..files.len())
            .find(|&count| gone(count) * 2 >= tar.len())
            .unwrap();
        assert!(thinned(&tar, &files, &handed(half - 1)).is_none());
        let (bytes, kept, dropped) = thinned(&tar, &files, &handed(half)).unwrap();
        assert_eq!(bytes.len(), tar.len() - gone(half));
        assert_eq!(dropped.len(), half);
        // What is kept is the frame without the files' data and padding, in order.
        let mut rebuilt = Vec::new();
        for stretch in &kept {
            assert_eq!(
                &bytes[stretch.from..stretch.from + stretch.len],
                &tar[stretch.at..stretch.at + stretch.len]
            );
            rebuilt.extend_from_slice(&tar[stretch.at..stretch.at + stretch.len]);
        }
        assert_eq!(rebuilt, *bytes);
    }

    #[test]
    fn a_digest_serves_only_exactly_the_bytes_it_was_taken_of() {
        let compressed = big_payload().to_tar_zst(7, 3).unwrap();
        let frame = &frames_of(&compressed)[1];
        let digests = file_digests(frame, DigestRule::Bytes);
        let first = &digests[0];
        let (start, end) = (first.start, first.start + first.len);
        assert!(digest_of(&digests, &(start..end)).is_some());
        assert_eq!(digest_of(&digests, &(start..end - 1)), None);
        assert_eq!(digest_of(&digests, &(start + 1..end)), None);
        assert_eq!(digest_of(&digests, &(start..end + 1)), None);
        assert_eq!(digest_of(&[], &(start..end)), None);
    }

    #[test]
    fn a_frame_that_does_not_start_with_a_good_header_gives_no_digests() {
        let compressed = big_payload().to_tar_zst(7, 3).unwrap();
        let frame = frames_of(&compressed)[1].clone();
        assert!(!file_digests(&frame, DigestRule::Bytes).is_empty());
        // Cut anywhere but at an entry.
        assert!(file_digests(&frame[100..], DigestRule::Bytes).is_empty());
        // A header whose checksum does not add up.
        let mut bad = frame.clone();
        bad[0] ^= 1;
        assert!(file_digests(&bad, DigestRule::Bytes).is_empty());
        // A file that runs past the end of the frame.
        let ((start, len), _) = files_in(&frame)[0];
        assert!(file_digests(&frame[..start + len - 1], DigestRule::Bytes).is_empty());
        // Nothing, or only zeros.
        assert!(file_digests(&[], DigestRule::Bytes).is_empty());
        assert!(file_digests(&[0; 1024], DigestRule::Bytes).is_empty());
    }

    #[test]
    fn a_header_is_taken_only_with_its_checksum_and_a_size_that_reads() {
        let compressed = big_payload().to_tar_zst(7, 3).unwrap();
        let frame = &frames_of(&compressed)[1];
        let header = tar::Header::from_byte_slice(&frame[..512]);
        let ((_, len), _) = files_in(frame)[0];
        assert_eq!(checked_entry_len(header), Some(len));
        // The size changed, the checksum not: refused.
        let mut resized = header.clone();
        resized.set_size(len as u64 + 1);
        assert_eq!(checked_entry_len(&resized), None);
        // With the checksum made right again, the new size counts.
        resized.set_cksum();
        assert_eq!(checked_entry_len(&resized), Some(len + 1));
        // A size that is not a number, checksum right: refused.
        let mut block = frame[..512].to_vec();
        block[124..136].copy_from_slice(b"0000000008x\0");
        let mut garbled = tar::Header::from_byte_slice(&block).clone();
        garbled.set_cksum();
        assert_eq!(checked_entry_len(&garbled), None);
    }

    #[test]
    fn the_tar_is_cut_into_frames_at_entry_boundaries() {
        let payload = big_payload();
        let tar = payload.to_tar(7).unwrap();
        assert!(tar.len() > FRAME_LEN, "several frames: {}", tar.len());
        let compressed = payload.to_tar_zst(7, 3).unwrap();
        // Plain zstd: one stream to any decoder, and the canonical tar.
        assert_eq!(decompress(&compressed, &Limits::DEFAULT).unwrap(), tar);
        let frames = frames_of(&compressed);
        assert_eq!(frames.concat(), tar);
        // The index entry alone first, then file entries up to FRAME_LEN a frame, each frame
        // starting with a tar header, the end of the archive in the last one.
        let index_json = index_json(&payload.index(), DigestRule::Bytes).unwrap();
        assert_eq!(
            frames[0].len(),
            512 + index_json.len().next_multiple_of(512)
        );
        assert_eq!(&frames[0][..INDEX_PATH.len()], INDEX_PATH.as_bytes());
        for frame in &frames[1..] {
            assert_eq!(&frame[257..263], b"ustar ", "a frame starts with an entry");
            assert!(frame.len() <= FRAME_LEN + 1024);
        }
        let last = frames.last().unwrap();
        assert!(last[last.len() - 1024..].iter().all(|b| *b == 0));
        // Every frame depends on its own bytes only.
        let again: Vec<u8> = frames
            .iter()
            .flat_map(|frame| compress(frame, 3).unwrap())
            .collect();
        assert_eq!(again, compressed);

        // A tar of up to FRAME_LEN bytes is one frame.
        let small = Payload::new(
            [PayloadFile {
                path: "a.md".into(),
                bytes: b"hi".to_vec(),
            }],
            &Limits::DEFAULT,
        )
        .unwrap();
        assert_eq!(
            small.to_tar_zst(0, 3).unwrap(),
            compress(&small.to_tar(0).unwrap(), 3).unwrap()
        );
        // Many frames: chunk buffers come back and are filled again.
        let files = big_payload()
            .into_files()
            .into_iter()
            .flat_map(|(path, bytes)| {
                (0..4).map(move |copy| PayloadFile {
                    path: format!("copy{copy}/{path}"),
                    bytes: bytes.clone(),
                })
            });
        let large = Payload::new(files, &Limits::DEFAULT).unwrap();
        let tar = large.to_tar(0).unwrap();
        assert!(tar.len() > 4 * FRAME_LEN, "{}", tar.len());
        assert_eq!(frames_of(&large.to_tar_zst(0, 3).unwrap()).concat(), tar);
    }

    #[test]
    fn pipelined_decompression_matches_decompressing_first() {
        let payload = big_payload();
        let tar = payload.to_tar(0).unwrap();
        let compressed = compress(&tar, 3).unwrap();
        assert!(compressed.len() >= PIPELINE_MIN_LEN);
        assert_eq!(
            Payload::from_tar_zst_pipelined(&compressed, &Limits::DEFAULT, None).unwrap(),
            payload
        );
        assert_same(&compressed, &Limits::DEFAULT);

        // A budget too small for the payload: a bomb, found mid-stream.
        let tight = Limits {
            max_decompressed_len: tar.len() as u64 / 2,
            ..Limits::DEFAULT
        };
        assert_same(&compressed, &tight);

        // Truncated and corrupted zstd, at the start, middle and end.
        for cut in [compressed.len() / 3, compressed.len() - 3] {
            assert_same(&compressed[..cut], &Limits::DEFAULT);
        }
        for at in [20, compressed.len() / 2, compressed.len() - 2] {
            let mut bad = compressed.clone();
            bad[at] ^= 0x55;
            assert_same(&bad, &Limits::DEFAULT);
        }

        // A broken tar early in the stream and broken zstd later: zstd's error wins, as
        // it does when decompressing first.
        let mut broken_tar = tar.clone();
        broken_tar[600..1100].fill(b'x');
        let mut both = compress(&broken_tar, 3).unwrap();
        let last = both.len() - 2;
        both[last] ^= 0x55;
        assert_same(&both, &Limits::DEFAULT);
        assert_same(&compress(&broken_tar, 3).unwrap(), &Limits::DEFAULT);

        // A file that does not match the index, and garbage after the end of the archive.
        let mut wrong_file = tar.clone();
        let at = tar.len() / 2;
        wrong_file[at] ^= 0x01;
        assert_same(&compress(&wrong_file, 3).unwrap(), &Limits::DEFAULT);
        let mut trailing = tar;
        trailing.extend(text(99, 3 * 1024 * 1024));
        assert_same(&compress(&trailing, 3).unwrap(), &Limits::DEFAULT);
    }

    #[test]
    fn compress_cuts_any_bytes_into_independent_frames() {
        let tar = big_payload().to_tar(0).unwrap();
        let compressed = compress(&tar, 3).unwrap();
        // One frame per FRAME_LEN bytes of input, each decoding to its chunk alone.
        let frames = frames_of(&compressed);
        assert_eq!(frames.len(), tar.len().div_ceil(FRAME_LEN));
        for (frame, chunk) in frames.iter().zip(tar.chunks(FRAME_LEN)) {
            assert_eq!(frame, chunk);
        }
        let one_by_one: Vec<u8> = tar
            .chunks(FRAME_LEN)
            .flat_map(|chunk| compress(chunk, 3).unwrap())
            .collect();
        assert_eq!(one_by_one, compressed);
        // The streaming decoder reads the concatenated frames as one stream.
        assert_eq!(decompress(&compressed, &Limits::DEFAULT).unwrap(), tar);
        // Small inputs stay one frame.
        let small = compress(&tar[..1000], 3).unwrap();
        assert_eq!(frame_plan(&small, &Limits::DEFAULT).unwrap().len(), 1);
        assert_eq!(
            frame_plan(&compress(&[], 3).unwrap(), &Limits::DEFAULT)
                .unwrap()
                .len(),
            1
        );
    }

    #[test]
    fn parallel_frames_match_the_streaming_path() {
        let payload = big_payload();
        let tar = payload.to_tar(0).unwrap();
        let compressed = compress(&tar, 3).unwrap();
        let limits = Limits::DEFAULT;
        let frames = frame_plan(&compressed, &limits).unwrap();
        assert!(frames.len() > 1);
        let parallel = |bytes: &[u8], limits: &Limits| {
            let frames = frame_plan(bytes, limits).unwrap();
            Payload::from_frames_parallel(bytes, &frames, limits, 2, None).map(outcome)
        };
        assert_eq!(parallel(&compressed, &limits), Some(Ok(payload.clone())));
        assert_eq!(
            Payload::from_frames_parallel(&compressed, &frames, &limits, 7, None).map(outcome),
            Some(Ok(payload.clone()))
        );
        assert_eq!(
            Payload::from_tar_zst(&compressed, &limits).unwrap(),
            payload
        );

        // Sizes over the budget: no plan, the streaming path finds the bomb.
        let tight = Limits {
            max_decompressed_len: tar.len() as u64 - 1,
            ..Limits::DEFAULT
        };
        assert_eq!(frame_plan(&compressed, &tight), None);
        assert!(matches!(
            Payload::from_tar_zst(&compressed, &tight),
            Err(FormatError::DecompressionBomb { .. })
        ));

        // Trailing bytes, or a truncated last frame: no plan.
        let mut trailing = compressed.clone();
        trailing.extend_from_slice(b"junk");
        assert_eq!(frame_plan(&trailing, &limits), None);
        assert_eq!(
            frame_plan(&compressed[..compressed.len() - 1], &limits),
            None
        );

        // A corrupted frame: the parallel path gives up, `from_tar_zst` gives the streaming
        // path's error.
        for at in [
            frames[0].end - 3,
            frames[1].start + 100,
            compressed.len() - 2,
        ] {
            let mut bad = compressed.clone();
            bad[at] ^= 0x55;
            if let Some(plan) = frame_plan(&bad, &limits) {
                assert_eq!(
                    Payload::from_frames_parallel(&bad, &plan, &limits, 2, None).map(outcome),
                    None
                );
            }
            assert_eq!(
                outcome(Payload::from_tar_zst(&bad, &limits)),
                outcome(Payload::from_tar_zst_serial(&bad, &limits, None)),
            );
            assert!(Payload::from_tar_zst(&bad, &limits).is_err());
        }

        // A broken tar in the first frame, valid zstd: the same tar error both ways.
        let mut broken_tar = tar.clone();
        broken_tar[600..1100].fill(b'x');
        let broken = compress(&broken_tar, 3).unwrap();
        let got = parallel(&broken, &limits).unwrap();
        assert!(got.is_err());
        assert_eq!(
            got,
            outcome(Payload::from_tar_zst_serial(&broken, &limits, None))
        );

        // A frame that lies about its size, one byte either way: zstd refuses it, and the
        // streaming path gives the error.
        for delta in [-1i64, 1] {
            let mut lying = compressed.clone();
            let descriptor = lying[4];
            assert_eq!(descriptor >> 6, 2, "a 4-byte content size");
            let at = 5 + usize::from(descriptor & 0x20 == 0);
            let claimed = u32::from_le_bytes(lying[at..at + 4].try_into().unwrap());
            let claimed = (i64::from(claimed) + delta) as u32;
            lying[at..at + 4].copy_from_slice(&claimed.to_le_bytes());
            let plan = frame_plan(&lying, &limits).unwrap();
            assert_eq!(plan[0].content_len, claimed as u64);
            assert_eq!(
                Payload::from_frames_parallel(&lying, &plan, &limits, 2, None).map(outcome),
                None
            );
            let got = outcome(Payload::from_tar_zst(&lying, &limits));
            assert!(got.is_err());
            assert_eq!(
                got,
                outcome(Payload::from_tar_zst_serial(&lying, &limits, None))
            );
        }
    }

    /// Frames of `lens` bytes, each filled with its own number; frame `slow` is decoded only
    /// once frame `until` has been (it fails after `patience`), and frames in `bad` fail.
    struct Scripted {
        lens: Vec<usize>,
        slow: usize,
        until: usize,
        patience: std::time::Duration,
        bad: Vec<usize>,
        panics: Option<usize>,
        done: Mutex<Vec<usize>>,
        changed: Condvar,
    }

    impl Scripted {
        fn new(lens: Vec<usize>, slow: usize, until: usize, bad: Vec<usize>) -> Self {
            Scripted {
                lens,
                slow,
                until,
                patience: std::time::Duration::from_secs(10),
                bad,
                panics: None,
                done: Mutex::new(Vec::new()),
                changed: Condvar::new(),
            }
        }
    }

    impl FrameSource for Scripted {
        type Scratch = ();
        const AUTHENTICATED: bool = false;

        fn count(&self) -> usize {
            self.lens.len()
        }

        fn len(&self, number: usize) -> u64 {
            self.lens[number] as u64
        }

        fn decode(
            &self,
            number: usize,
            _: &mut (),
            _: &mut zstd::zstd_safe::DCtx<'static>,
            out: &mut FrameBuffer,
        ) -> Result<(), FormatError> {
            if number == self.slow {
                let done = self.done.lock().unwrap();
                let (done, waited) = self
                    .changed
                    .wait_timeout_while(done, self.patience, |done| !done.contains(&self.until))
                    .unwrap();
                drop(done);
                if waited.timed_out() {
                    return Err(FormatError::malformed("test", "held back"));
                }
            }
            assert_ne!(self.panics, Some(number), "frame {number} panics");
            *out = vec![number as u8; self.lens[number]].into();
            self.done.lock().unwrap().push(number);
            self.changed.notify_all();
            if self.bad.contains(&number) {
                return Err(FormatError::malformed("test", format!("frame {number}")));
            }
            Ok(())
        }
    }

    fn read_all(source: &Scripted, threads: usize) -> (Vec<u8>, Result<(), String>) {
        let (read, decoded) = with_frame_reader(source, threads, FileHashes::Skip, |mut reader| {
            let mut all = Vec::new();
            reader.read_to_end(&mut all).map(|_| all).unwrap()
        });
        (read, decoded.map_err(|e| e.to_string()))
    }

    #[test]
    fn a_slow_frame_does_not_hold_back_the_frames_after_it() {
        // Frame 0 is done only after frame 2. With a fixed share of frames per thread, frame 2
        // would wait behind frame 0 on the same thread; each thread takes the next frame
        // instead, so the other thread decodes 1 and then 2.
        let source = Scripted::new(vec![3, 5, 7, 2, 4, 1], 0, 2, vec![]);
        let (read, decoded) = read_all(&source, 2);
        assert_eq!(decoded, Ok(()));
        let expected: Vec<u8> = (0..6u8)
            .flat_map(|n| std::iter::repeat_n(n, source.lens[n as usize]))
            .collect();
        assert_eq!(read, expected, "every frame, in order");
        // No frame is decoded further ahead than the reader allows: 0 waits for 2 here,
        // which is within two frames a thread.
        let mut late = Scripted::new(vec![1; 8], 0, 7, vec![]);
        late.patience = std::time::Duration::from_millis(300);
        let (_, decoded) = read_all(&late, 2);
        assert_eq!(decoded.unwrap_err(), "malformed test: held back");
    }

    #[test]
    fn a_thread_takes_the_frame_the_reader_waits_for_and_then_the_largest_within_reach() {
        let decoded = Decoded::new(vec![1, 2, 3, 9, 1, 9, 8, 2], 4);
        let mut state = decoded.lock();
        let take = |state: &mut DecodedState, reach: usize| {
            let number = state.pick(reach)?;
            state.taken[number] = true;
            Some(number)
        };
        // The reader waits for frame 0: that first, then the largest of 1-3, not the next.
        assert_eq!(take(&mut state, 4), Some(0));
        assert_eq!(take(&mut state, 4), Some(3));
        assert_eq!(take(&mut state, 4), Some(2));
        assert_eq!(take(&mut state, 4), Some(1));
        assert_eq!(take(&mut state, 4), None, "nothing else within reach");
        // The reader has frames 0 and 1 and waits for 2, taken already: the largest within
        // reach (5, 9 bytes, before 6's 8), then the next largest; of equals the first.
        state.wanted = 2;
        assert_eq!(take(&mut state, 6), Some(5));
        assert_eq!(take(&mut state, 8), Some(6));
        state.lens[4] = 2;
        assert_eq!(take(&mut state, 8), Some(4));
        assert_eq!(take(&mut state, 8), Some(7));
        assert_eq!(take(&mut state, 8), None);
        // The reader waits for a frame no thread took: that one, however small.
        state.taken[7] = false;
        state.wanted = 7;
        assert_eq!(take(&mut state, 8), Some(7));
    }

    #[test]
    fn each_frame_taken_says_how_many_are_left_to_take() {
        // What a pinned decoding thread leaves its core by: fewer left than threads.
        let decoded = Decoded::new(vec![4, 1, 9], 8);
        let taken: Vec<_> = std::iter::from_fn(|| decoded.take()).collect();
        assert_eq!(taken, [(0, 2), (2, 1), (1, 0)]);
    }

    #[test]
    fn the_first_failed_frame_wins_and_ends_the_stream_there() {
        // Frames 2 and 4 fail; 4 may be decoded first, 2's error is the one reported, and the
        // reader saw frames 0 and 1 only.
        let source = Scripted::new(vec![2; 6], 2, 4, vec![2, 4]);
        let (read, decoded) = read_all(&source, 3);
        assert_eq!(decoded.unwrap_err(), "malformed test: frame 2");
        assert_eq!(read, vec![0, 0, 1, 1]);
    }

    #[test]
    fn a_large_frame_that_fails_first_does_not_leave_the_frames_before_it_undecoded() {
        // Frame 3, the largest, is taken before 1 and 2 and fails while 0 waits for it; 1
        // and 2 are still decoded, the reader reads 0-2, and frame 3's error is the one. On a
        // thread of its own, so that a reader left waiting fails the test instead of hanging.
        let (done_to, done) = mpsc::channel();
        std::thread::spawn(move || {
            let source = Scripted::new(vec![1, 1, 1, 9, 1], 0, 3, vec![3]);
            let _ = done_to.send(read_all(&source, 2));
        });
        let (read, decoded) = done
            .recv_timeout(std::time::Duration::from_secs(30))
            .expect("the reader was left waiting for a frame before the failed one");
        assert_eq!(decoded.unwrap_err(), "malformed test: frame 3");
        assert_eq!(read, vec![0, 1, 2]);
    }

    #[test]
    fn a_decoding_thread_that_panics_does_not_leave_the_reader_waiting() {
        // Frame 3 panics; frames 0-2 may be read, then the reader sees the end instead of
        // waiting for frame 3 forever, and the panic reaches the caller. On a thread of its
        // own, so that a reader left waiting fails the test instead of hanging it.
        let (done_to, done) = mpsc::channel();
        std::thread::spawn(move || {
            let mut source = Scripted::new(vec![2; 8], 9, 9, vec![]);
            source.panics = Some(3);
            let mut read = Vec::new();
            let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                with_frame_reader(&source, 2, FileHashes::Skip, |mut reader| {
                    let _ = reader.read_to_end(&mut read);
                })
            }));
            let message = outcome
                .err()
                .and_then(|panic| panic.downcast_ref::<String>().cloned());
            let _ = done_to.send((message, read));
        });
        let (message, read) = done
            .recv_timeout(std::time::Duration::from_secs(30))
            .expect("the reader was left waiting for the frame that panicked");
        let message = message.expect("the panic reaches the caller");
        assert!(message.contains("frame 3 panics"), "{message}");
        assert_eq!(read, vec![0, 0, 1, 1, 2, 2]);
    }
}
