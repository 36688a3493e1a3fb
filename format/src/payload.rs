//! The payload inside a sealed pack: a standard `tar.zst` whose first entry is an index of
//! every file's path, size and SHA-256, followed by the files in path order.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{Read, Write};
use std::os::unix::fs::FileExt;
use std::sync::mpsc;

use serde::{Deserialize, Serialize};

use crate::frames::{
    Framed, Layout, MIN_FRAME_LEN, PayloadEntry, compress_chunks, compressor, frame_payload,
};
use crate::pack::{SegmentOpener, TAG_LEN, Unsealed};
use crate::{FormatError, Limits, sha256_hex};

/// Path of the index entry, always first in the archive. Reserved: no template may use it.
pub const INDEX_PATH: &str = "PACK-INDEX.json";

const INDEX_FORMAT: u32 = 1;

/// One file as listed in the index.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IndexEntry {
    pub path: String,
    pub size: u64,
    pub sha256: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Index {
    format: u32,
    files: Vec<IndexEntry>,
}

#[derive(Serialize)]
struct IndexOut<'a> {
    format: u32,
    files: &'a [IndexEntry],
}

/// The index file's bytes: pretty JSON (two-space indentation, no final newline).
pub(crate) fn index_json(files: &[IndexEntry]) -> Result<Vec<u8>, FormatError> {
    serde_json::to_vec_pretty(&IndexOut {
        format: INDEX_FORMAT,
        files,
    })
    .map_err(|e| FormatError::malformed("payload index", e))
}

/// One file of a payload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PayloadFile {
    pub path: String,
    pub bytes: Vec<u8>,
}

/// A validated set of files: safe relative paths, within the limits, sorted by path.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Payload {
    files: BTreeMap<String, Vec<u8>>,
}

impl Payload {
    /// Builds a payload, checking every path and size against `limits`.
    pub fn new(
        files: impl IntoIterator<Item = PayloadFile>,
        limits: &Limits,
    ) -> Result<Self, FormatError> {
        let mut map = BTreeMap::new();
        let mut total: u64 = 0;
        for file in files {
            validate_path(&file.path, limits)?;
            check_file_len(&file.path, file.bytes.len() as u64, limits)?;
            total += file.bytes.len() as u64;
            if total > limits.max_decompressed_len {
                return Err(FormatError::TooLarge {
                    what: "payload",
                    found: total,
                    limit: limits.max_decompressed_len,
                });
            }
            if map.insert(file.path.clone(), file.bytes).is_some() {
                return Err(FormatError::UnsafeEntry {
                    path: file.path,
                    reason: "duplicate path",
                });
            }
            if map.len() > limits.max_file_count {
                return Err(FormatError::TooManyFiles {
                    found: map.len(),
                    limit: limits.max_file_count,
                });
            }
        }
        Ok(Payload { files: map })
    }

    pub fn files(&self) -> &BTreeMap<String, Vec<u8>> {
        &self.files
    }

    pub fn into_files(self) -> BTreeMap<String, Vec<u8>> {
        self.files
    }

    pub fn get(&self, path: &str) -> Option<&[u8]> {
        self.files.get(path).map(Vec::as_slice)
    }

    pub fn len(&self) -> usize {
        self.files.len()
    }

    pub fn is_empty(&self) -> bool {
        self.files.is_empty()
    }

    /// Total bytes of all files.
    pub fn total_size(&self) -> u64 {
        self.files.values().map(|b| b.len() as u64).sum()
    }

    /// The index: every file's path, size and SHA-256, in path order.
    pub fn index(&self) -> Vec<IndexEntry> {
        let hashes = sha256_all(self.files.values());
        self.files
            .iter()
            .zip(hashes)
            .map(|((path, bytes), sha256)| IndexEntry {
                path: path.clone(),
                size: bytes.len() as u64,
                sha256,
            })
            .collect()
    }

    /// The uncompressed `tar`: index first, then files in path order, every header fixed
    /// (mode 0644, owner 0, `mtime`) so the same files and `mtime` give the same bytes.
    pub fn to_tar(&self, mtime: u64) -> Result<Vec<u8>, FormatError> {
        let capacity = self.total_size() as usize + (self.files.len() + 2) * 1024;
        self.write_tar(Vec::with_capacity(capacity), mtime)
    }

    /// Writes the `tar` of [`Payload::to_tar`] into `out` and returns `out`.
    fn write_tar<W: Write>(&self, out: W, mtime: u64) -> Result<W, FormatError> {
        let index_bytes = index_json(&self.index())?;
        let mut builder = tar::Builder::new(out);
        let mut append = |path: &str, bytes: &[u8]| -> Result<(), FormatError> {
            let mut header = tar::Header::new_gnu();
            header.set_entry_type(tar::EntryType::Regular);
            header.set_mode(0o644);
            header.set_uid(0);
            header.set_gid(0);
            header.set_mtime(mtime);
            header.set_size(bytes.len() as u64);
            builder
                .append_data(&mut header, path, bytes)
                .map_err(|e| FormatError::io(format!("writing {path} into the payload"), e))
        };
        append(INDEX_PATH, &index_bytes)?;
        for (path, bytes) in &self.files {
            append(path, bytes)?;
        }
        builder
            .into_inner()
            .map_err(|e| FormatError::io("finishing the payload tar", e))
    }

    /// The compressed payload: the `tar` of [`Payload::to_tar`] as zstd frames (each with
    /// its content size and a checksum), cut as docs/FORMAT.md says — one frame for a `tar`
    /// of up to [`FRAME_LEN`] bytes, else the index entry, then file entries while they fit
    /// in each frame's limit ("Compression: zstd frames") — compressed on every core. Every frame depends only on its entries,
    /// so the result is the same on every machine, whatever the number of threads. Format-2
    /// packs seal these frames one segment each.
    pub fn to_tar_zst(&self, mtime: u64, level: i32) -> Result<Vec<u8>, FormatError> {
        let layout = Layout {
            room: 0,
            tags: false,
        };
        Ok(self.framed(mtime, level, layout)?.placed.out)
    }

    /// The payload's frames, laid out as `layout` says.
    pub(crate) fn framed(
        &self,
        mtime: u64,
        level: i32,
        layout: Layout,
    ) -> Result<Framed, FormatError> {
        let files: Vec<(&String, &Vec<u8>)> = self.files.iter().collect();
        let entries: Vec<PayloadEntry<'_>> = files
            .iter()
            .map(|(path, bytes)| PayloadEntry {
                path,
                len: bytes.len() as u64,
            })
            .collect();
        let read = |i: usize, out: &mut Vec<u8>| {
            out.extend_from_slice(files[i].1);
            Ok(())
        };
        frame_payload(mtime, level, &entries, layout, None, &read)
    }

    /// Reads a decompressed `tar` payload: regular files only, safe paths, within the
    /// limits, index first and matching every file exactly.
    pub fn from_tar(tar_bytes: &[u8], limits: &Limits) -> Result<Self, FormatError> {
        Self::read_tar(tar_bytes, limits, tar_bytes.len() as u64)
    }

    /// [`Payload::from_tar`] over any reader; `max_len` bounds how many bytes the reader
    /// can produce, so that no entry reserves more memory than that, whatever its header
    /// claims.
    fn read_tar(reader: impl Read, limits: &Limits, max_len: u64) -> Result<Self, FormatError> {
        let mut collected = Collect::default();
        read_tar(reader, limits, max_len, &mut collected)?;
        check_index(&collected.index, &collected.files)?;
        Ok(Payload {
            files: collected.files,
        })
    }

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
        if compressed.len() < PIPELINE_MIN_LEN {
            return Self::from_tar_zst_serial(compressed, limits);
        }
        let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
        if threads > 1
            && let Some(frames) = frame_plan(compressed, limits)
            && frames.len() > 1
            && let Some(result) = Self::from_frames_parallel(compressed, &frames, limits, threads)
        {
            return result;
        }
        Self::from_tar_zst_pipelined(compressed, limits)
    }

    /// Decodes `frames` on up to `threads` threads while the `tar` reader reads them in
    /// order. `None` when a frame failed to decode: the caller then takes the streaming
    /// path for the exact error.
    fn from_frames_parallel(
        compressed: &[u8],
        frames: &[Frame],
        limits: &Limits,
        threads: usize,
    ) -> Option<Result<Self, FormatError>> {
        let total: u64 = frames.iter().map(|f| f.content_len).sum();
        let source = PlainFrames { compressed, frames };
        let (parsed, decoded) = with_frame_reader(&source, threads, |reader| {
            Self::read_tar(reader, limits, total)
        });
        decoded.is_ok().then_some(parsed)
    }

    /// Decrypts and decodes a format-2 pack's segments (on every core for a large pack)
    /// while the `tar` reader reads them in order. A segment that fails wins over whatever
    /// the reader made of the bytes before it.
    pub(crate) fn from_segments(
        unsealed: &Unsealed<'_>,
        limits: &Limits,
    ) -> Result<Self, FormatError> {
        let source = SealedSegments::new(unsealed)?;
        let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
        if threads < 2 || source.count() < 2 || unsealed.bytes.len() < PIPELINE_MIN_LEN {
            let tar = source.decode_all()?;
            return Self::from_tar(&tar, limits);
        }
        let total = unsealed.header.tar_len().unwrap_or(0);
        let (parsed, decoded) = with_frame_reader(&source, threads, |reader| {
            Self::read_tar(reader, limits, total)
        });
        decoded?;
        parsed
    }

    fn from_tar_zst_serial(compressed: &[u8], limits: &Limits) -> Result<Self, FormatError> {
        let tar = decompress(compressed, limits)?;
        Self::from_tar(&tar, limits)
    }

    fn from_tar_zst_pipelined(compressed: &[u8], limits: &Limits) -> Result<Self, FormatError> {
        let budget = limits.decompressed_budget(compressed.len() as u64);
        with_chunk_reader(compressed, limits, |reader| {
            Self::read_tar(reader, limits, budget)
        })
    }
}

/// Frames to decode in parallel, each into a buffer of a size known in advance: a format-1
/// payload's zstd frames ([`PlainFrames`]) or a format-2 pack's segments
/// ([`SealedSegments`]).
pub(crate) trait FrameSource: Sync {
    /// What each decoding thread keeps between frames.
    type Scratch: Default;
    fn count(&self) -> usize;
    /// Decodes frame `number` into `out` (emptied first) at exactly the size known for it;
    /// anything else is an error.
    fn decode(
        &self,
        number: usize,
        scratch: &mut Self::Scratch,
        context: &mut zstd::zstd_safe::DCtx<'static>,
        out: &mut Vec<u8>,
    ) -> Result<(), FormatError>;
}

/// A decrypted format-1 payload's frames, as [`frame_plan`] found them.
pub(crate) struct PlainFrames<'a> {
    pub compressed: &'a [u8],
    pub frames: &'a [Frame],
}

impl FrameSource for PlainFrames<'_> {
    type Scratch = ();

    fn count(&self) -> usize {
        self.frames.len()
    }

    fn decode(
        &self,
        number: usize,
        _scratch: &mut (),
        context: &mut zstd::zstd_safe::DCtx<'static>,
        out: &mut Vec<u8>,
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

/// Reads the `len` bytes at `start` of a pack's file into `buffer` (grown as needed, never
/// shrunk, so that its pages are touched once per thread, not once per segment).
fn read_segment<'b>(
    file: &File,
    start: u64,
    len: usize,
    buffer: &'b mut Vec<u8>,
) -> Result<&'b [u8], FormatError> {
    if buffer.len() < len {
        buffer.resize(len, 0);
    }
    let part = &mut buffer[..len];
    read_pack_at(file, part, start)?;
    Ok(part)
}

/// Fills `buffer` from a pack's file at `start`; a file that got shorter since its length
/// was taken says so.
pub(crate) fn read_pack_at(file: &File, buffer: &mut [u8], start: u64) -> Result<(), FormatError> {
    file.read_exact_at(buffer, start).map_err(|e| {
        let e = if e.kind() == std::io::ErrorKind::UnexpectedEof {
            std::io::Error::other("the file got shorter while being read; try again")
        } else {
            e
        };
        FormatError::io("reading the sealed pack", e)
    })
}

/// Decodes one or more whole zstd frames into `out` (empty, with room for `len` bytes),
/// which must come to exactly `len` bytes; zstd cannot write past the room.
fn decode_exact(
    context: &mut zstd::zstd_safe::DCtx<'static>,
    compressed: &[u8],
    len: u64,
    out: &mut Vec<u8>,
) -> Result<(), FormatError> {
    out.clear();
    let len_bytes = len as usize;
    if out.capacity() < len_bytes {
        // A fresh buffer rather than a larger copy of this one. A frame of a large pack gets
        // room for the frames of up to FRAME_LEN that follow it, so that the buffer is reused
        // for them as it is: pages past what a frame decodes to are never touched and cost no
        // memory, while growing it would hold the old buffer and the new one at once.
        let room = if len_bytes >= MIN_FRAME_LEN {
            len_bytes.max(FRAME_LEN)
        } else {
            len_bytes
        };
        *out = Vec::with_capacity(room);
    }
    match context.decompress(out, compressed) {
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

/// A format-2 pack's segments: each is read (from memory, or from the pack's file),
/// authenticated and decrypted, its frames checked against what the header says, and
/// decoded, all on the thread that decodes it.
pub(crate) struct SealedSegments<'a> {
    unsealed: &'a Unsealed<'a>,
    opener: SegmentOpener<'a>,
    starts: Vec<usize>,
    /// Where the segments are read from when `unsealed` holds only the pack's first bytes.
    file: Option<&'a File>,
}

impl<'a> SealedSegments<'a> {
    /// The segments of a pack wholly in memory.
    pub(crate) fn new(unsealed: &'a Unsealed<'a>) -> Result<Self, FormatError> {
        if !unsealed.whole() {
            return Err(FormatError::malformed(
                "sealed pack",
                "only the pack's first bytes are in memory",
            ));
        }
        Self::with_file(unsealed, None)
    }

    /// The segments of the pack in `file`, of which `unsealed` holds the first bytes: each
    /// is read when it is decoded, into a buffer its thread keeps.
    pub(crate) fn in_file(unsealed: &'a Unsealed<'a>, file: &'a File) -> Result<Self, FormatError> {
        Self::with_file(unsealed, Some(file))
    }

    fn with_file(unsealed: &'a Unsealed<'a>, file: Option<&'a File>) -> Result<Self, FormatError> {
        Ok(SealedSegments {
            opener: unsealed.segment_opener()?,
            starts: unsealed.segment_starts(),
            unsealed,
            file,
        })
    }

    /// The whole `tar`, one segment after the other on this thread (for small packs).
    pub(crate) fn decode_all(&self) -> Result<Vec<u8>, FormatError> {
        let total = self.unsealed.header.tar_len().unwrap_or(0);
        let mut tar = Vec::with_capacity(total as usize);
        let mut scratch = SegmentScratch::default();
        let mut out = Vec::new();
        let mut context = zstd::zstd_safe::DCtx::create();
        for number in 0..self.count() {
            self.decode(number, &mut scratch, &mut context, &mut out)?;
            tar.extend_from_slice(&out);
        }
        Ok(tar)
    }
}

/// What a thread decoding segments keeps between them.
#[derive(Default)]
pub(crate) struct SegmentScratch {
    /// The segment as read from the pack's file (unused for a pack in memory).
    sealed: Vec<u8>,
    /// The decrypted segment.
    plain: Vec<u8>,
}

impl FrameSource for SealedSegments<'_> {
    type Scratch = SegmentScratch;

    fn count(&self) -> usize {
        self.unsealed.header.segments.len()
    }

    fn decode(
        &self,
        number: usize,
        scratch: &mut SegmentScratch,
        context: &mut zstd::zstd_safe::DCtx<'static>,
        out: &mut Vec<u8>,
    ) -> Result<(), FormatError> {
        let segment = self.unsealed.header.segments[number];
        let start = self.starts[number];
        let len = segment.len as usize + TAG_LEN;
        let sealed = match self.file {
            None => &self.unsealed.bytes[start..start + len],
            Some(file) => read_segment(file, start as u64, len, &mut scratch.sealed)?,
        };
        let plain = &mut scratch.plain;
        self.opener.open(number, sealed, plain)?;
        // The frames must declare sizes that add up to what the header says, within the
        // windows the streaming decoder accepts — the rules of the parallel path of
        // format 1.
        let declared: Option<u64> = frames_within(plain, segment.tar_len)
            .map(|frames| frames.iter().map(|f| f.content_len).sum());
        if declared != Some(segment.tar_len) {
            return Err(FormatError::malformed(
                "zstd payload",
                format!(
                    "segment {number} does not hold zstd frames that declare the {} bytes of \
                     tar its header entry says",
                    segment.tar_len
                ),
            ));
        }
        decode_exact(context, plain, segment.tar_len, out)
    }
}

/// Decodes the frames of `source` on up to `threads` threads (frame `i` on thread
/// `i % threads`, each thread a frame or two ahead of the reader at most, every frame into a
/// buffer of exactly its size) and runs `read` over them in order. Also returns the first
/// failure, by frame order; after a failed frame the reader saw the stream end early.
pub(crate) fn with_frame_reader<S: FrameSource, T>(
    source: &S,
    threads: usize,
    read: impl FnOnce(FrameReader) -> T,
) -> (T, Result<(), FormatError>) {
    let count = source.count();
    let workers = threads.clamp(1, count.max(1));
    std::thread::scope(|scope| {
        let mut receivers = Vec::with_capacity(workers);
        let mut spent = Vec::with_capacity(workers);
        let mut handles = Vec::with_capacity(workers);
        for first in 0..workers {
            let (sender, receiver) = mpsc::sync_channel::<Vec<u8>>(1);
            let (spent_sender, spent_buffers) = mpsc::channel::<Vec<u8>>();
            receivers.push(receiver);
            spent.push(spent_sender);
            handles.push(scope.spawn(move || {
                let mut context = zstd::zstd_safe::DCtx::create();
                let mut scratch = S::Scratch::default();
                let mut listening = true;
                for number in (first..count).step_by(workers) {
                    // At most the frame's size, itself within the budget; a buffer the
                    // reader is done with saves faulting in fresh pages.
                    let mut out = spent_buffers.try_recv().unwrap_or_default();
                    if let Err(e) = source.decode(number, &mut scratch, &mut context, &mut out) {
                        return Err((number, e));
                    }
                    // Once the reader stops, keep decoding: a bad frame after the end of
                    // the `tar` still fails the payload, as on the streaming path.
                    if listening {
                        listening = sender.send(out).is_ok();
                    }
                }
                Ok(())
            }));
        }
        // `read` drops the reader when it returns, which unblocks the decoders.
        let result = read(FrameReader::new(receivers, spent));
        let mut failed: Option<(usize, FormatError)> = None;
        for handle in handles {
            let outcome = crate::joined(handle);
            if let Err((number, e)) = outcome
                && failed.as_ref().is_none_or(|(first, _)| number < *first)
            {
                failed = Some((number, e));
            }
        }
        (result, failed.map_or(Ok(()), |(_, e)| Err(e)))
    })
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

/// Receives what a payload's `tar` holds, in archive order, as [`read_tar`] checks it.
pub(crate) trait TarSink {
    /// A file's bytes, as the sink takes them.
    type Body;
    /// The index, the archive's first entry.
    fn index(&mut self, index: Vec<IndexEntry>) -> Result<(), FormatError>;
    /// One regular file with a safe path, within the limits, after the index.
    fn file(&mut self, path: String, body: Self::Body) -> Result<(), FormatError>;
}

/// Reads a payload `tar` from `reader` into `sink`: regular files only, safe paths, within
/// the limits, the index first. `max_len` bounds how many bytes the reader can produce, so
/// that no entry reserves more memory than that, whatever its header claims. Checking the
/// files against the index is the sink's job.
pub(crate) fn read_tar<S: TarSink>(
    reader: impl Read,
    limits: &Limits,
    max_len: u64,
    sink: &mut S,
) -> Result<(), FormatError>
where
    S::Body: From<Vec<u8>>,
{
    let mut archive = tar::Archive::new(reader);
    let entries = archive
        .entries()
        .map_err(|e| FormatError::malformed("payload tar", e))?;
    read_entries(entries, limits, max_len, sink, |entry, path, size| {
        read_entry(entry, path, size, max_len).map(S::Body::from)
    })
}

/// [`read_tar`]'s checks over any entries, with `body` taking each file's bytes (the
/// index is always read through the entry).
pub(crate) fn read_entries<'a, R: Read + 'a, S: TarSink>(
    entries: tar::Entries<'a, R>,
    limits: &Limits,
    max_len: u64,
    sink: &mut S,
    mut body: impl FnMut(&mut tar::Entry<'a, R>, &str, u64) -> Result<S::Body, FormatError>,
) -> Result<(), FormatError> {
    let mut seen_index = false;
    let mut files = 0usize;
    for entry in entries {
        let mut entry = entry.map_err(|e| FormatError::malformed("payload tar", e))?;
        let path_bytes = entry.path_bytes().into_owned();
        let path = String::from_utf8(path_bytes).map_err(|e| FormatError::UnsafeEntry {
            path: String::from_utf8_lossy(e.as_bytes()).into_owned(),
            reason: "path is not UTF-8",
        })?;
        let kind = entry.header().entry_type();
        if !matches!(kind, tar::EntryType::Regular) {
            return Err(FormatError::UnsafeEntry {
                path,
                reason: entry_kind_reason(kind),
            });
        }
        let size = entry
            .header()
            .size()
            .map_err(|e| FormatError::malformed("payload tar header", e))?;
        if !seen_index {
            if path != INDEX_PATH {
                return Err(FormatError::IndexMismatch {
                    reason: format!("expected {INDEX_PATH} as the first entry, found {path:?}"),
                });
            }
            check_file_len(&path, size, limits)?;
            let bytes = read_entry(&mut entry, &path, size, max_len)?;
            let parsed: Index = serde_json::from_slice(&bytes)
                .map_err(|e| FormatError::malformed("payload index", e))?;
            if parsed.format != INDEX_FORMAT {
                return Err(FormatError::UnsupportedVersion {
                    what: "payload index",
                    expected: INDEX_FORMAT,
                    found: parsed.format,
                });
            }
            if parsed.files.len() > limits.max_file_count {
                return Err(FormatError::TooManyFiles {
                    found: parsed.files.len(),
                    limit: limits.max_file_count,
                });
            }
            seen_index = true;
            sink.index(parsed.files)?;
            continue;
        }
        validate_path(&path, limits)?;
        check_file_len(&path, size, limits)?;
        if files >= limits.max_file_count {
            return Err(FormatError::TooManyFiles {
                found: files + 1,
                limit: limits.max_file_count,
            });
        }
        files += 1;
        let bytes = body(&mut entry, &path, size)?;
        sink.file(path, bytes)?;
    }
    if !seen_index {
        return Err(FormatError::IndexMismatch {
            reason: format!("the payload has no {INDEX_PATH}"),
        });
    }
    Ok(())
}

/// Keeps every file in memory, for [`check_index`] once the archive is read.
#[derive(Default)]
struct Collect {
    index: Vec<IndexEntry>,
    files: BTreeMap<String, Vec<u8>>,
}

impl TarSink for Collect {
    type Body = Vec<u8>;

    fn index(&mut self, index: Vec<IndexEntry>) -> Result<(), FormatError> {
        self.index = index;
        Ok(())
    }

    fn file(&mut self, path: String, bytes: Vec<u8>) -> Result<(), FormatError> {
        match self.files.entry(path) {
            std::collections::btree_map::Entry::Occupied(taken) => Err(FormatError::UnsafeEntry {
                path: taken.key().clone(),
                reason: "duplicate path",
            }),
            std::collections::btree_map::Entry::Vacant(free) => {
                free.insert(bytes);
                Ok(())
            }
        }
    }
}

fn read_entry(
    entry: &mut impl Read,
    path: &str,
    size: u64,
    max_len: u64,
) -> Result<Vec<u8>, FormatError> {
    // `size` is only what the tar header claims (already checked against the limits): an
    // entry cannot hold more bytes than the whole archive, so never reserve more than that.
    let mut bytes = Vec::with_capacity(size.min(max_len) as usize);
    entry
        .read_to_end(&mut bytes)
        .map_err(|e| FormatError::io(format!("reading {path} from the payload"), e))?;
    if bytes.len() as u64 != size {
        return Err(FormatError::Truncated {
            what: "payload entry",
            expected: size,
            found: bytes.len() as u64,
        });
    }
    Ok(bytes)
}

fn entry_kind_reason(kind: tar::EntryType) -> &'static str {
    match kind {
        tar::EntryType::Symlink => "symbolic links are not allowed",
        tar::EntryType::Link => "hard links are not allowed",
        tar::EntryType::Char | tar::EntryType::Block => "device files are not allowed",
        tar::EntryType::Fifo => "FIFOs are not allowed",
        tar::EntryType::Directory => "directory entries are not allowed (files only)",
        _ => "only regular files are allowed",
    }
}

fn check_index(index: &[IndexEntry], files: &BTreeMap<String, Vec<u8>>) -> Result<(), FormatError> {
    // An index naming one file twice could leave another unchecked with the counts equal.
    let mut listed = std::collections::HashSet::with_capacity(index.len());
    if let Some(twice) = index
        .iter()
        .find(|entry| !listed.insert(entry.path.as_str()))
    {
        return Err(FormatError::IndexMismatch {
            reason: format!("index lists {:?} twice", twice.path),
        });
    }
    if index.len() != files.len() {
        return Err(FormatError::IndexMismatch {
            reason: format!(
                "index lists {} files, archive holds {}",
                index.len(),
                files.len()
            ),
        });
    }
    // Hash every file up front (on every core), then check in index order as before.
    let hashes: BTreeMap<&str, String> = files
        .keys()
        .map(String::as_str)
        .zip(sha256_all(files.values()))
        .collect();
    for entry in index {
        let (Some(bytes), Some(found)) = (files.get(&entry.path), hashes.get(entry.path.as_str()))
        else {
            return Err(FormatError::IndexMismatch {
                reason: format!("index lists {:?}, which is not in the archive", entry.path),
            });
        };
        if bytes.len() as u64 != entry.size {
            return Err(FormatError::SizeMismatch {
                what: entry.path.clone(),
                expected: entry.size,
                found: bytes.len() as u64,
            });
        }
        if *found != entry.sha256 {
            return Err(FormatError::HashMismatch {
                what: entry.path.clone(),
                expected: entry.sha256.clone(),
                found: found.clone(),
            });
        }
    }
    Ok(())
}

fn check_file_len(path: &str, len: u64, limits: &Limits) -> Result<(), FormatError> {
    if len > limits.max_file_len {
        return Err(FormatError::TooLarge {
            what: if path == INDEX_PATH {
                "payload index"
            } else {
                "payload file"
            },
            found: len,
            limit: limits.max_file_len,
        });
    }
    Ok(())
}

/// A payload path must be relative, `/`-separated, without empty, `.` or `..` components,
/// without backslashes or control characters, and within the path-length limit.
pub fn validate_path(path: &str, limits: &Limits) -> Result<(), FormatError> {
    let unsafe_entry = |reason| FormatError::UnsafeEntry {
        path: path.chars().take(300).collect(),
        reason,
    };
    if path.is_empty() {
        return Err(unsafe_entry("empty path"));
    }
    if path.len() > limits.max_path_len {
        return Err(unsafe_entry("path longer than the limit"));
    }
    if path.starts_with('/') {
        return Err(unsafe_entry("absolute path"));
    }
    if path.contains('\\') || path.chars().any(char::is_control) {
        return Err(unsafe_entry("backslash or control character in path"));
    }
    if path == INDEX_PATH {
        return Err(unsafe_entry("reserved for the payload index"));
    }
    for component in path.split('/') {
        match component {
            "" => return Err(unsafe_entry("empty path component")),
            "." | ".." => return Err(unsafe_entry("`.` or `..` path component")),
            _ => {}
        }
    }
    Ok(())
}

/// Bytes of `tar` per zstd frame of a payload (the last frame may hold fewer). Frames are
/// compressed, and decompressed, independently and in parallel.
pub const FRAME_LEN: usize = 8 * 1024 * 1024;

/// Compresses with zstd at `level`: one frame per [`FRAME_LEN`] bytes of input (at least
/// one frame), each with its content size and a checksum, compressed on every core. The
/// output does not depend on the number of cores.
pub fn compress(bytes: &[u8], level: i32) -> Result<Vec<u8>, FormatError> {
    if bytes.len() <= FRAME_LEN {
        return compressor(level)?
            .compress(bytes)
            .map_err(|e| FormatError::io("compressing the payload", e));
    }
    compress_chunks(bytes, level)
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
fn frames_within(compressed: &[u8], budget: u64) -> Option<Vec<Frame>> {
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

/// Reads the frames the decoding threads send — frame `i` from thread `i % threads` — in
/// order, as one stream, and hands each frame's buffer back to its thread once read.
pub(crate) struct FrameReader {
    receivers: Vec<mpsc::Receiver<Vec<u8>>>,
    spent: Vec<mpsc::Sender<Vec<u8>>>,
    next: usize,
    current: Vec<u8>,
    offset: usize,
}

impl FrameReader {
    fn new(receivers: Vec<mpsc::Receiver<Vec<u8>>>, spent: Vec<mpsc::Sender<Vec<u8>>>) -> Self {
        FrameReader {
            receivers,
            spent,
            next: 0,
            current: Vec::new(),
            offset: 0,
        }
    }

    /// The next frame in order, or `None` at the end (or when a decoding thread stopped,
    /// which the caller of [`with_frame_reader`] learns from its result).
    pub(crate) fn next_frame(&mut self) -> Option<Vec<u8>> {
        let threads = self.receivers.len();
        let frame = self.receivers[self.next % threads].recv().ok()?;
        self.next += 1;
        Some(frame)
    }

    /// Hands frame `index`'s buffer back to the thread that decodes the frames after it.
    /// The thread may have finished; then the buffer is simply dropped.
    pub(crate) fn give_back(&self, index: usize, buffer: Vec<u8>) {
        let _ = self.spent[index % self.spent.len()].send(buffer);
    }
}

impl Read for FrameReader {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        while self.offset == self.current.len() {
            let Some(frame) = self.next_frame() else {
                return Ok(0);
            };
            let done = std::mem::replace(&mut self.current, frame);
            if self.next > 1 {
                self.give_back(self.next - 2, done);
            }
            self.offset = 0;
        }
        let n = buf.len().min(self.current.len() - self.offset);
        buf[..n].copy_from_slice(&self.current[self.offset..self.offset + n]);
        self.offset += n;
        Ok(n)
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

/// Below this many bytes in all, hashing stays on the calling thread.
const PARALLEL_HASH_MIN_LEN: u64 = 1024 * 1024;

/// The SHA-256 of every blob, in order, spread over the available cores for large sets.
fn sha256_all<'a>(blobs: impl Iterator<Item = &'a Vec<u8>>) -> Vec<String> {
    let blobs: Vec<&[u8]> = blobs.map(Vec::as_slice).collect();
    let total: u64 = blobs.iter().map(|b| b.len() as u64).sum();
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    if threads < 2 || total < PARALLEL_HASH_MIN_LEN {
        return blobs.iter().map(|b| sha256_hex(b)).collect();
    }
    // Contiguous runs of about equal bytes, one per thread, joined back in order.
    let share = total.div_ceil(threads as u64);
    let mut runs: Vec<&[&[u8]]> = Vec::with_capacity(threads);
    let (mut start, mut bytes) = (0, 0);
    for (i, blob) in blobs.iter().enumerate() {
        bytes += blob.len() as u64;
        if bytes >= share {
            runs.push(&blobs[start..=i]);
            (start, bytes) = (i + 1, 0);
        }
    }
    runs.push(&blobs[start..]);
    std::thread::scope(|scope| {
        let handles: Vec<_> = runs
            .iter()
            .map(|run| scope.spawn(move || run.iter().map(|b| sha256_hex(b)).collect::<Vec<_>>()))
            .collect();
        handles.into_iter().flat_map(crate::joined).collect()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Text that compresses about 3x, from a fixed seed.
    fn text(seed: u64, len: usize) -> Vec<u8> {
        const WORDS: &[&str] = &[
            "the", "agent", "{{user}}", "must", "never", "tool", "file", "ask", "run",
        ];
        let mut state = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let mut out = Vec::with_capacity(len + 16);
        while out.len() < len {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let word = WORDS[(state >> 33) as usize % WORDS.len()];
            out.extend_from_slice(word.as_bytes());
            out.push(if (state >> 20).is_multiple_of(11) {
                b'\n'
            } else {
                b' '
            });
            if (state >> 40).is_multiple_of(7) {
                out.extend_from_slice(format!("{:x} ", state >> 48).as_bytes());
            }
        }
        out.truncate(len);
        out
    }

    fn big_payload() -> Payload {
        let files = (0..300).map(|i| PayloadFile {
            path: format!("dir{}/sub{}/file{i}.md", i % 7, i % 3),
            bytes: text(i, 2_000 + (i as usize * 7_919) % 60_000),
        });
        Payload::new(files, &Limits::DEFAULT).unwrap()
    }

    /// The same outcome, errors compared by their message.
    fn outcome(result: Result<Payload, FormatError>) -> Result<Payload, String> {
        result.map_err(|e| e.to_string())
    }

    fn assert_same(compressed: &[u8], limits: &Limits) {
        assert_eq!(
            outcome(Payload::from_tar_zst_pipelined(compressed, limits)),
            outcome(Payload::from_tar_zst_serial(compressed, limits)),
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
        let index_json = index_json(&payload.index()).unwrap();
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
            Payload::from_tar_zst_pipelined(&compressed, &Limits::DEFAULT).unwrap(),
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
            Payload::from_frames_parallel(bytes, &frames, limits, 2).map(outcome)
        };
        assert_eq!(parallel(&compressed, &limits), Some(Ok(payload.clone())));
        assert_eq!(
            Payload::from_frames_parallel(&compressed, &frames, &limits, 7).map(outcome),
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
                    Payload::from_frames_parallel(&bad, &plan, &limits, 2).map(outcome),
                    None
                );
            }
            assert_eq!(
                outcome(Payload::from_tar_zst(&bad, &limits)),
                outcome(Payload::from_tar_zst_serial(&bad, &limits)),
            );
            assert!(Payload::from_tar_zst(&bad, &limits).is_err());
        }

        // A broken tar in the first frame, valid zstd: the same tar error both ways.
        let mut broken_tar = tar.clone();
        broken_tar[600..1100].fill(b'x');
        let broken = compress(&broken_tar, 3).unwrap();
        let got = parallel(&broken, &limits).unwrap();
        assert!(got.is_err());
        assert_eq!(got, outcome(Payload::from_tar_zst_serial(&broken, &limits)));

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
                Payload::from_frames_parallel(&lying, &plan, &limits, 2).map(outcome),
                None
            );
            let got = outcome(Payload::from_tar_zst(&lying, &limits));
            assert!(got.is_err());
            assert_eq!(got, outcome(Payload::from_tar_zst_serial(&lying, &limits)));
        }
    }

    #[test]
    fn parallel_hashes_are_in_order() {
        let blobs: Vec<Vec<u8>> = (0..50)
            .map(|i| text(i, 1_000 + i as usize * 50_000))
            .collect();
        let serial: Vec<String> = blobs.iter().map(|b| sha256_hex(b)).collect();
        assert_eq!(sha256_all(blobs.iter()), serial);
        assert_eq!(sha256_all(blobs[..1].iter()), serial[..1]);
        assert!(sha256_all(std::iter::empty()).is_empty());
    }
}
