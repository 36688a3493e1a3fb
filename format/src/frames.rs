//! Writing a payload: its `tar` built frame by frame and compressed into zstd frames on
//! every core, without the whole `tar` (or all the files) ever in memory at once.
//!
//! The frames (docs/FORMAT.md, "Compression: zstd frames"): a `tar` of at most
//! [`FRAME_LEN`] bytes is one frame. A longer one is cut at entry boundaries: the index
//! entry alone first — it lists every file's SHA-256, so it is only known once every file
//! went by — then the file entries in order, each frame taking entries while they fit in
//! its limit ([`frame_limit`]: at most [`FRAME_LEN`] bytes, less for the first frames and
//! the last; a frame takes at least one entry, so a file over it makes a frame of its own),
//! the two zero blocks that end the archive in the last frame. Every frame depends only on
//! its own entries and the limit on the files' total, so the bytes are the same whatever
//! the number of threads.
//!
//! The files' lengths are known before any is read, so where the `tar` is cut is worked out
//! first ([`plan`]), and each thread then takes the next frame and does all of it: reads its
//! files into a buffer of its own, hashes them for the index, runs the caller's check on them
//! (`packer build` validates templates there) and compresses the frame. No thread waits for
//! another to read: with one reading thread feeding the others, the compressing threads sat
//! idle whenever both finished while a frame was still being read.
//!
//! The caller's check of each file ([`FileCheck`], [`FileProblem`]) is defined here, where it
//! runs; [`Payload::to_tar_zst`] and [`compress`] are this writer over a payload in memory
//! and over any bytes.

use std::collections::BTreeMap;
use std::ops::Range;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Mutex, mpsc};

use crate::FormatError;
use crate::layout::{FRAME_LEN, INDEX_PATH, Layout, MIN_FRAME_LEN, PlacedFrames, Segment, TAG_LEN};
use crate::payload::{IndexEntry, Payload, index_json};

/// What [`frame_payload`] made: the frames laid out for sealing, one segment per frame,
/// and what the check found.
pub(crate) struct Framed {
    pub placed: PlacedFrames,
    pub segments: Vec<Segment>,
    /// Every problem the check reported, with the file's path in the pack, in file order.
    pub problems: Vec<(String, FileProblem)>,
    pub index: Vec<IndexEntry>,
    /// The files that could not be read (or gave another number of bytes than listed): their
    /// place in the list and why, in file order. They are left out of the payload, which is
    /// then no use but to report.
    pub unread: Vec<(usize, std::io::Error)>,
}

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
pub type FileCheck<'a> = dyn Fn(&str, &[u8]) -> Vec<FileProblem> + Sync + 'a;

/// One file of a payload, in path order: its path in the pack and its length.
pub(crate) struct PayloadEntry<'a> {
    pub path: &'a str,
    pub len: u64,
}

/// Appends the bytes of file `i` of the list to the vector: exactly its listed length.
pub(crate) type ReadFile<'r> = dyn Fn(usize, &mut Vec<u8>) -> std::io::Result<()> + Sync + 'r;

/// Builds and compresses the payload of `files` (in path order), each file's bytes read by
/// `read` on the thread that compresses its frame; `check` runs on every file's bytes there.
pub(crate) fn frame_payload(
    mtime: u64,
    level: i32,
    files: &[PayloadEntry<'_>],
    layout: Layout,
    check: Option<&FileCheck<'_>>,
    read: &ReadFile<'_>,
) -> Result<Framed, FormatError> {
    let frames = plan(files, mtime)?;
    let pool = Pool {
        level,
        check,
        mtime,
        files,
        read,
        free: Mutex::new(Vec::new()),
    };
    let mut collected = Collected::new(layout, &pool.free);
    if let [only] = frames.as_slice() {
        // One chunk: this thread builds it and finishes it, no other thread started.
        let mut scratch = Scratch::new(level)?;
        let built = pool.build(&mut scratch, only, false)?;
        let (index, problems) = pool.hash_and_check(&scratch.chunk, built.files);
        collected.unread = built.unread;
        return collected.finish_small(&pool, scratch, index, problems);
    }
    let last = frames.len() - 1;
    collected.index_after = Some(frames.len());
    pool.run(frames.len(), &mut collected, |number, scratch, report| {
        let frame = &frames[number];
        let built = match pool.build(scratch, frame, number == last) {
            Ok(built) => built,
            Err(e) => {
                let _ = report.send(Report::failed(number, e));
                return;
            }
        };
        let (index, problems) = pool.hash_and_check(&scratch.chunk, built.files);
        let files = FrameFiles {
            index,
            problems,
            unread: built.unread,
        };
        // The index frame is made as soon as every frame's files are hashed, while the
        // last frames are still being compressed.
        let _ = report.send(Report::Hashed {
            number: number + 1,
            files,
        });
        let _ = report.send(Report::Frame {
            number: number + 1,
            frame: pool.compress(scratch, number),
            tar_len: scratch.chunk.len(),
        });
    });
    if let Some(error) = collected.failed.take() {
        return Err(error);
    }
    collected.finish(&pool)
}

/// One frame's files, as planned: which of the list, and the length of their `tar`.
struct PlannedFrame {
    files: Range<usize>,
    tar_len: usize,
}

/// Where the `tar` of `files` is cut: the file entries of each frame after the index, in
/// order (one frame, the whole `tar`, when no cut is needed). The rule is docs/FORMAT.md's,
/// and `frames-v2.json` of the test vectors pins it.
fn plan(files: &[PayloadEntry<'_>], mtime: u64) -> Result<Vec<PlannedFrame>, FormatError> {
    // The file data only (no headers, no padding), as the limits count it.
    let planned: u64 = files.iter().map(|f| f.len).sum();
    // At most FRAME_LEN of file data: a `tar` of up to FRAME_LEN is one frame, and one over
    // it (many small files: their headers and padding) takes up to FRAME_LEN in its first
    // file frame too.
    let mut limit = if planned <= FRAME_LEN as u64 {
        FRAME_LEN
    } else {
        frame_limit(0, planned)
    };
    let mut headers = tar::Builder::new(Vec::new());
    let mut frames = Vec::new();
    let (mut start, mut tar_len, mut added) = (0, 0u64, 0u64);
    for (i, file) in files.iter().enumerate() {
        let header = entry_header(&mut headers, file.path, file.len, mtime)?;
        let entry_len = header.len() as u64 + file.len.next_multiple_of(512);
        if tar_len > 0 && tar_len + entry_len > limit as u64 {
            frames.push(PlannedFrame {
                files: start..i,
                tar_len: tar_len as usize,
            });
            (start, tar_len) = (i, 0);
            limit = frame_limit(frames.len(), planned - added);
        }
        tar_len += entry_len;
        added += file.len;
    }
    frames.push(PlannedFrame {
        files: start..files.len(),
        tar_len: tar_len as usize,
    });
    Ok(frames)
}

/// The most bytes of `tar` the file frame after `sent` others takes, when `remaining` bytes
/// of files are still to come, in a `tar` of more than [`FRAME_LEN`] bytes: [`FRAME_LEN`],
/// except that the first two frames take a quarter and a half of it, so that compression
/// starts on every core soon after the first files are read, and the frames holding the last
/// files take half of what remains (at least [`MIN_FRAME_LEN`]), so that the cores finish at
/// about the same time instead of one compressing a whole frame alone at the end.
pub(crate) fn frame_limit(sent: usize, remaining: u64) -> usize {
    let ramp = FRAME_LEN >> 2usize.saturating_sub(sent);
    let tail = usize::try_from(remaining / 2).map_or(FRAME_LEN, |tail| tail.max(MIN_FRAME_LEN));
    ramp.min(tail)
}

/// The header blocks of one regular-file entry (a GNU long-name entry first when the path
/// needs one), as `tar::Builder::append_data` writes them.
fn entry_header(
    headers: &mut tar::Builder<Vec<u8>>,
    path: &str,
    len: u64,
    mtime: u64,
) -> Result<Vec<u8>, FormatError> {
    let mut header = tar::Header::new_gnu();
    header.set_entry_type(tar::EntryType::Regular);
    header.set_mode(0o644);
    header.set_uid(0);
    header.set_gid(0);
    header.set_mtime(mtime);
    header.set_size(len);
    // No data is given: `append_data` writes the header blocks and nothing after them.
    headers
        .append_data(&mut header, path, std::io::empty())
        .map_err(|e| FormatError::io(format!("writing {path} into the payload"), e))?;
    Ok(std::mem::take(headers.get_mut()))
}

/// A frame's `tar` as built: where each file's bytes are, and the files left out.
struct Built {
    files: Vec<(String, Range<usize>)>,
    unread: Vec<(usize, std::io::Error)>,
}

/// What a thread keeps from one frame to the next.
struct Scratch {
    compressor: zstd::bulk::Compressor<'static>,
    /// Formats tar headers (with GNU long-name entries) exactly as the `tar` crate writes
    /// them; the bytes are taken out after each header.
    headers: tar::Builder<Vec<u8>>,
    /// The frame's `tar`: one buffer per thread, filled again for each frame (a fresh buffer
    /// per frame costs a page fault per 4 KiB).
    chunk: Vec<u8>,
}

impl Scratch {
    fn new(level: i32) -> Result<Scratch, FormatError> {
        Ok(Scratch {
            compressor: compressor(level)?,
            headers: tar::Builder::new(Vec::new()),
            chunk: Vec::new(),
        })
    }
}

/// What a thread reports of a frame, numbered as in the payload (the index is 0): first
/// its files, hashed and checked, then the frame itself, to be placed in order.
enum Report {
    Hashed {
        number: usize,
        files: FrameFiles,
    },
    Frame {
        number: usize,
        frame: Result<Vec<u8>, FormatError>,
        tar_len: usize,
    },
}

impl Report {
    fn failed(number: usize, error: FormatError) -> Report {
        Report::Frame {
            number: number + 1,
            frame: Err(error),
            tar_len: 0,
        }
    }
}

/// A frame's files: their index entries, what the check found, and the files left out.
struct FrameFiles {
    index: Vec<IndexEntry>,
    problems: Vec<(String, FileProblem)>,
    unread: Vec<(usize, std::io::Error)>,
}

struct Pool<'c, 'f> {
    level: i32,
    check: Option<&'c FileCheck<'c>>,
    mtime: u64,
    files: &'f [PayloadEntry<'f>],
    read: &'f ReadFile<'f>,
    /// Frame buffers placed already, to compress into again: a fresh buffer per frame costs
    /// a page fault per 4 KiB.
    free: FreeFrames,
}

type FreeFrames = Mutex<Vec<Vec<u8>>>;

impl Pool<'_, '_> {
    /// Makes frames `0..count` with `make` on every core, each thread taking the next frame
    /// number when it is done with one and reporting on it, and hands the reports to
    /// `collected` on this thread meanwhile. After a failure no thread starts another frame.
    fn run(
        &self,
        count: usize,
        collected: &mut Collected<'_>,
        make: impl Fn(usize, &mut Scratch, &mpsc::Sender<Report>) + Sync,
    ) {
        let threads = std::thread::available_parallelism()
            .map_or(1, |n| n.get())
            .min(count)
            .max(1);
        let next = AtomicUsize::new(0);
        let stop = AtomicBool::new(false);
        let (done_sender, done) = mpsc::channel::<Report>();
        std::thread::scope(|scope| {
            let workers: Vec<_> = (0..threads)
                .map(|_| {
                    let done = done_sender.clone();
                    let (next, stop, make) = (&next, &stop, &make);
                    scope.spawn(move || {
                        let mut scratch = match Scratch::new(self.level) {
                            Ok(scratch) => scratch,
                            Err(e) => {
                                let _ = done
                                    .send(Report::failed(next.fetch_add(1, Ordering::Relaxed), e));
                                return;
                            }
                        };
                        while !stop.load(Ordering::Relaxed) {
                            let number = next.fetch_add(1, Ordering::Relaxed);
                            if number >= count {
                                return;
                            }
                            make(number, &mut scratch, &done);
                        }
                    })
                })
                .collect();
            // The threads hold the only senders left: the queue ends when the last one does
            // (a thread that panics drops its sender too, and the panic goes on at the join).
            drop(done_sender);
            for finished in done.iter() {
                collected.take(finished, self);
                if collected.failed.is_some() {
                    stop.store(true, Ordering::Relaxed);
                }
            }
            for worker in workers {
                crate::joined(worker);
            }
        });
    }

    /// Fills `scratch.chunk` with the `tar` of `frame`'s files, read with the pool's reader
    /// (and the two zero blocks that end the archive when it is the `last`). A file that
    /// cannot be read, or gives another number of bytes than listed, is left out and
    /// reported.
    fn build(
        &self,
        scratch: &mut Scratch,
        frame: &PlannedFrame,
        last: bool,
    ) -> Result<Built, FormatError> {
        let chunk = &mut scratch.chunk;
        chunk.clear();
        // One byte over: each file is read into room for one byte more than its length.
        chunk.reserve(frame.tar_len + 1 + if last { 1024 } else { 0 });
        let mut built = Built {
            files: Vec::with_capacity(frame.files.len()),
            unread: Vec::new(),
        };
        for i in frame.files.clone() {
            let PayloadEntry { path, len } = self.files[i];
            let header = entry_header(&mut scratch.headers, path, len, self.mtime)?;
            let start = chunk.len();
            chunk.extend_from_slice(&header);
            let data = chunk.len();
            let read = (self.read)(i, chunk).and_then(|()| {
                let found = (chunk.len() - data) as u64;
                if found == len {
                    Ok(())
                } else {
                    Err(std::io::Error::other(format!(
                        "expected {len} bytes, found {found} (did the file change while being read?)"
                    )))
                }
            });
            if let Err(e) = read {
                chunk.truncate(start);
                built.unread.push((i, e));
                continue;
            }
            let end = chunk.len();
            chunk.resize(data + len.next_multiple_of(512) as usize, 0);
            built.files.push((path.to_string(), data..end));
        }
        if last {
            chunk.extend_from_slice(&[0; 1024]);
        }
        Ok(built)
    }

    /// `scratch.chunk` compressed into a frame buffer placed already, or a fresh one.
    fn compress(&self, scratch: &mut Scratch, number: usize) -> Result<Vec<u8>, FormatError> {
        let chunk = &scratch.chunk;
        let mut frame = self
            .free
            .lock()
            .ok()
            .and_then(|mut free| free.pop())
            .unwrap_or_default();
        frame.clear();
        frame.reserve(zstd::zstd_safe::compress_bound(chunk.len()));
        scratch
            .compressor
            .compress_to_buffer(chunk.as_slice(), &mut frame)
            .map(|_| frame)
            .map_err(|e| {
                FormatError::io(
                    format!("compressing frame {} of the payload", number + 1),
                    e,
                )
            })
    }

    fn hash_and_check(
        &self,
        chunk: &[u8],
        files: Vec<(String, Range<usize>)>,
    ) -> (Vec<IndexEntry>, Vec<(String, FileProblem)>) {
        let mut problems = Vec::new();
        let index = files
            .into_iter()
            .map(|(path, range)| {
                let bytes = &chunk[range];
                if let Some(check) = self.check {
                    problems.extend(check(&path, bytes).into_iter().map(|p| (path.clone(), p)));
                }
                IndexEntry {
                    size: bytes.len() as u64,
                    sha256: crate::sha256_hex(bytes),
                    path,
                }
            })
            .collect();
        (index, problems)
    }
}

/// A single-threaded zstd compressor at `level` that writes the content size and a checksum
/// into every frame, in blocks of at most [`BLOCK_LEN`] bytes.
pub(crate) fn compressor(level: i32) -> Result<zstd::bulk::Compressor<'static>, FormatError> {
    let mut compressor =
        zstd::bulk::Compressor::new(level).map_err(|e| FormatError::io("starting zstd", e))?;
    compressor
        .include_checksum(true)
        .and_then(|()| {
            compressor.set_parameter(zstd::zstd_safe::CParameter::MaxBlockSize(BLOCK_LEN as u32))
        })
        .map_err(|e| FormatError::io("configuring zstd", e))?;
    Ok(compressor)
}

/// The longest block a frame is cut into: one byte short of zstd's 128 KiB. zstd 1.5.7
/// looks for a better place to end each full 128 KiB block (its "pre-splitter", which samples
/// the block's bytes before compressing them); in blocks one byte shorter it does not look.
/// The search costs compressor time and, on prompt-like text, gains no size. The setting
/// that turns it off by name is not in the zstd crate's safe interface.
const BLOCK_LEN: usize = 128 * 1024 - 1;

/// The frames as they come back, placed in order.
struct Collected<'p> {
    free: &'p FreeFrames,
    layout: Layout,
    out: Vec<u8>,
    segments: Vec<Segment>,
    /// Frames that finished before an earlier one, and the number of the next to place.
    waiting: BTreeMap<usize, (Result<Vec<u8>, FormatError>, usize)>,
    next: usize,
    /// The files of the frames hashed so far, until all of them are.
    hashed: BTreeMap<usize, FrameFiles>,
    /// How many frames' files make the index; `None` when there is no index to make.
    index_after: Option<usize>,
    /// The index frame and the length of its `tar`, once every file is hashed.
    index_frame: Option<Result<(Vec<u8>, usize), FormatError>>,
    index: Vec<IndexEntry>,
    problems: Vec<(String, FileProblem)>,
    unread: Vec<(usize, std::io::Error)>,
    failed: Option<FormatError>,
}

impl<'p> Collected<'p> {
    fn new(layout: Layout, free: &'p FreeFrames) -> Self {
        Collected {
            free,
            layout,
            out: vec![0; layout.room],
            segments: Vec::new(),
            waiting: BTreeMap::new(),
            next: 1,
            hashed: BTreeMap::new(),
            index_after: None,
            index_frame: None,
            index: Vec::new(),
            problems: Vec::new(),
            unread: Vec::new(),
            failed: None,
        }
    }

    fn take(&mut self, report: Report, pool: &Pool<'_, '_>) {
        match report {
            Report::Hashed { number, files } => {
                self.hashed.insert(number, files);
                if self.index_after == Some(self.hashed.len()) {
                    for files in std::mem::take(&mut self.hashed).into_values() {
                        self.index.extend(files.index);
                        self.problems.extend(files.problems);
                        self.unread.extend(files.unread);
                    }
                    self.index_frame = Some(compress_index(&self.index, pool));
                }
            }
            Report::Frame {
                number,
                frame,
                tar_len,
            } => {
                self.waiting.insert(number, (frame, tar_len));
                while let Some((frame, tar_len)) = self.waiting.remove(&self.next) {
                    self.next += 1;
                    match frame {
                        Ok(frame) if self.failed.is_none() => {
                            self.place(&frame, tar_len);
                            if let Ok(mut free) = self.free.lock() {
                                free.push(frame);
                            }
                        }
                        Ok(_) => {}
                        Err(e) => {
                            self.failed.get_or_insert(e);
                        }
                    }
                }
            }
        }
    }

    fn place(&mut self, frame: &[u8], tar_len: usize) {
        self.out.extend_from_slice(frame);
        if self.layout.tags {
            self.out.extend_from_slice(&[0; TAG_LEN]);
        }
        self.segments.push(Segment {
            len: frame.len() as u64,
            tar_len: tar_len as u64,
        });
    }

    /// Every file chunk is placed: the index frame goes in front of them.
    fn finish(mut self, pool: &Pool<'_, '_>) -> Result<Framed, FormatError> {
        let (frame, index_len) = match self.index_frame.take() {
            Some(made) => made?,
            None => compress_index(&self.index, pool)?,
        };
        let tag = if self.layout.tags { TAG_LEN } else { 0 };
        let need = frame.len() + tag;
        let free = self.layout.room;
        // The room was for the header; the index frame takes the end of it, or more room is
        // made (one move of the payload).
        let at = if need <= free {
            free - need
        } else {
            self.out.splice(free..free, std::iter::repeat_n(0, need));
            free
        };
        self.out[at..at + frame.len()].copy_from_slice(&frame);
        let room = at;
        let mut segments = Vec::with_capacity(self.segments.len() + 1);
        segments.push(Segment {
            len: frame.len() as u64,
            tar_len: index_len as u64,
        });
        segments.append(&mut self.segments);
        Ok(Framed {
            placed: PlacedFrames {
                out: self.out,
                room,
            },
            segments,
            problems: self.problems,
            index: self.index,
            unread: self.unread,
        })
    }

    /// Only one chunk, built on this thread with its files hashed and checked (`index`,
    /// `problems`): one frame of the whole `tar` if it fits in [`FRAME_LEN`], else the index
    /// frame and the chunk's.
    fn finish_small(
        mut self,
        pool: &Pool<'_, '_>,
        scratch: Scratch,
        index: Vec<IndexEntry>,
        problems: Vec<(String, FileProblem)>,
    ) -> Result<Framed, FormatError> {
        let Scratch {
            mut compressor,
            mut chunk,
            ..
        } = scratch;
        self.problems = problems;
        let index_entry = index_entry(&index, pool.mtime)?;
        chunk.extend_from_slice(&[0; 1024]);
        let mut compress = |bytes: &[u8]| {
            compressor
                .compress(bytes)
                .map_err(|e| FormatError::io("compressing the payload", e))
        };
        if index_entry.len() + chunk.len() <= FRAME_LEN {
            let mut tar = index_entry;
            tar.extend_from_slice(&chunk);
            let frame = compress(&tar)?;
            self.place(&frame, tar.len());
        } else {
            let frame = compress(&index_entry)?;
            self.place(&frame, index_entry.len());
            let frame = compress(&chunk)?;
            self.place(&frame, chunk.len());
        }
        Ok(Framed {
            placed: PlacedFrames {
                out: self.out,
                room: self.layout.room,
            },
            segments: self.segments,
            problems: self.problems,
            index,
            unread: self.unread,
        })
    }
}

/// The index frame of the payload whose files are `index`, and the length of its `tar`.
fn compress_index(
    index: &[IndexEntry],
    pool: &Pool<'_, '_>,
) -> Result<(Vec<u8>, usize), FormatError> {
    let entry = index_entry(index, pool.mtime)?;
    let frame = compressor(pool.level)?
        .compress(&entry)
        .map_err(|e| FormatError::io("compressing the payload index", e))?;
    Ok((frame, entry.len()))
}

/// The index's `tar` entry: header blocks, the JSON, padding.
fn index_entry(index: &[IndexEntry], mtime: u64) -> Result<Vec<u8>, FormatError> {
    let json = index_json(index)?;
    let mut headers = tar::Builder::new(Vec::new());
    let mut entry = entry_header(&mut headers, INDEX_PATH, json.len() as u64, mtime)?;
    entry.extend_from_slice(&json);
    entry.resize(entry.len().next_multiple_of(512), 0);
    Ok(entry)
}

/// Compresses arbitrary bytes as [`FRAME_LEN`]-byte chunks, each its own frame, on every
/// core (no index, no files): the frames concatenated.
pub(crate) fn compress_chunks(bytes: &[u8], level: i32) -> Result<Vec<u8>, FormatError> {
    let chunks: Vec<&[u8]> = bytes.chunks(FRAME_LEN).collect();
    let pool = Pool {
        level,
        check: None,
        mtime: 0,
        files: &[],
        read: &|_, _| Ok(()),
        free: Mutex::new(Vec::new()),
    };
    let layout = Layout {
        room: 0,
        tags: false,
    };
    let mut collected = Collected::new(layout, &pool.free);
    pool.run(chunks.len(), &mut collected, |number, scratch, report| {
        let frame = scratch
            .compressor
            .compress(chunks[number])
            .map_err(|e| FormatError::io("compressing the payload", e));
        let _ = report.send(Report::Frame {
            number: number + 1,
            frame,
            tar_len: chunks[number].len(),
        });
    });
    match collected.failed {
        Some(e) => Err(e),
        None => Ok(collected.out),
    }
}

impl Payload {
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
        let files: Vec<(&String, &Vec<u8>)> = self.files().iter().collect();
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
}

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_are_shorter_at_the_start_and_at_the_end() {
        const MIB: u64 = 1024 * 1024;
        // The first two frames: 2 and 4 MiB; then 8 MiB while plenty remains.
        assert_eq!(frame_limit(0, 100 * MIB), FRAME_LEN / 4);
        assert_eq!(frame_limit(1, 98 * MIB), FRAME_LEN / 2);
        assert_eq!(frame_limit(2, 94 * MIB), FRAME_LEN);
        assert_eq!(frame_limit(9, 17 * MIB), FRAME_LEN);
        // Then half of what remains, down to 2 MiB.
        assert_eq!(frame_limit(10, 12 * MIB), 6 * MIB as usize);
        assert_eq!(frame_limit(11, 5 * MIB), 5 * MIB as usize / 2);
        assert_eq!(frame_limit(12, 3 * MIB), MIN_FRAME_LEN);
        assert_eq!(frame_limit(13, 0), MIN_FRAME_LEN);
        // A pack of just over 8 MiB: the first frame is still 2 MiB, the next half the rest.
        assert_eq!(frame_limit(0, 9 * MIB), FRAME_LEN / 4);
        assert_eq!(frame_limit(1, 7 * MIB), 7 * MIB as usize / 2);
    }

    /// The blocks of a frame of bytes zstd cannot compress, which it stores raw: a raw
    /// block's header gives the length of the bytes it holds.
    fn raw_block_lens(frame: &[u8]) -> Vec<usize> {
        // Magic number, descriptor, window byte unless single-segment, dictionary id, size.
        let descriptor = frame[4];
        let single_segment = descriptor & 0x20 != 0;
        let size_len = match descriptor >> 6 {
            0 => usize::from(single_segment),
            1 => 2,
            2 => 4,
            _ => 8,
        };
        let id_len = [0, 1, 2, 4][usize::from(descriptor & 3)];
        let header_len = 5 + usize::from(!single_segment) + id_len + size_len;
        let (mut at, mut lens) = (header_len, Vec::new());
        loop {
            let header = u32::from_le_bytes([frame[at], frame[at + 1], frame[at + 2], 0]);
            let (last, kind, len) = (header & 1, (header >> 1) & 3, (header >> 3) as usize);
            assert_eq!(kind, 0, "a raw block");
            lens.push(len);
            at += 3 + len;
            if last == 1 {
                return lens;
            }
        }
    }

    #[test]
    fn frames_are_cut_into_blocks_one_byte_short_of_128_kib() {
        // Random bytes: stored raw, so each block's header says how much of the frame it
        // holds. Blocks of 128 KiB would have zstd 1.5.7 search each for a better end.
        let mut bytes = vec![0u8; 3 * 128 * 1024 + 10];
        rand::fill(&mut bytes[..]);
        let frame = compressor(3).unwrap().compress(&bytes).unwrap();
        let lens = raw_block_lens(&frame);
        assert_eq!(lens.iter().sum::<usize>(), bytes.len());
        assert!(lens.iter().all(|&len| len <= BLOCK_LEN), "{lens:?}");
        assert_eq!(lens[..3], [BLOCK_LEN; 3], "{lens:?}");
        assert_eq!(zstd::bulk::decompress(&frame, bytes.len()).unwrap(), bytes);
    }
}
