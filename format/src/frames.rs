//! Writing a payload: its `tar` built entry by entry and compressed into zstd frames on
//! every core while the rest is still being added, without the whole `tar` (or all the
//! files) ever in memory at once.
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
//! The file threads also hash every file for the index and run the caller's check on it
//! (`packer build` validates templates there), so all of that is spread over the cores too.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::ops::Range;
use std::sync::{Mutex, mpsc};

use crate::pack::{PlacedFrames, Segment, TAG_LEN};
use crate::payload::{FRAME_LEN, INDEX_PATH, IndexEntry, index_json};
use crate::source::{FileCheck, FileProblem};
use crate::{FormatError, sha256_hex};

/// What [`frame_payload`] made: the frames laid out for sealing, one segment per frame,
/// and what the check found.
pub(crate) struct Framed {
    pub placed: PlacedFrames,
    pub segments: Vec<Segment>,
    /// Every problem the check reported, with the file's path in the pack, in file order.
    pub problems: Vec<(String, FileProblem)>,
    pub index: Vec<IndexEntry>,
}

/// Layout of the output.
#[derive(Clone, Copy)]
pub(crate) struct Layout {
    /// Bytes to leave free in front of the first frame (for the header).
    pub room: usize,
    /// Leave [`TAG_LEN`] bytes after each frame (for its tag).
    pub tags: bool,
}

/// Builds and compresses a payload: `add` hands over the files in path order through the
/// [`TarFeed`], `planned` bytes of them in all; `check` runs on every file's bytes on the
/// compression threads.
pub(crate) fn frame_payload(
    mtime: u64,
    level: i32,
    planned: u64,
    layout: Layout,
    check: Option<&FileCheck<'_>>,
    add: impl FnOnce(&mut TarFeed<'_, '_>) -> Result<(), FormatError>,
) -> Result<Framed, FormatError> {
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let pool = Pool::new(level, check);
    // A rendezvous queue: a chunk waits in `send` until a thread takes it, so at most one
    // chunk more than there are threads is in memory (8 MiB each). A queue as deep as the
    // threads held two more, 16 MiB of first-touched pages, for no gain in time.
    let (jobs_sender, jobs) = mpsc::sync_channel::<Job<'static>>(0);
    let jobs = Mutex::new(jobs);
    let (done_sender, done) = mpsc::channel::<Done>();
    let (spare_sender, spare) = mpsc::channel::<Vec<u8>>();
    let mut collected = Collected::new(layout, &pool.free);
    let fed = std::thread::scope(|scope| {
        let workers = pool.start(scope, threads, &jobs, done_sender, spare_sender);
        let mut feed = TarFeed {
            mtime,
            planned,
            added: 0,
            limit: if planned <= FRAME_LEN as u64 {
                FRAME_LEN
            } else {
                frame_limit(0, planned)
            },
            headers: tar::Builder::new(Vec::new()),
            chunk: Vec::new(),
            files: Vec::new(),
            sent: 0,
            jobs: Some(jobs_sender),
            spare: &spare,
            done: &done,
            collected: &mut collected,
        };
        let fed = add(&mut feed).and_then(|()| feed.end());
        // Closing the queue lets the threads finish what is in it and stop.
        let TarFeed {
            jobs: sender,
            chunk,
            files,
            sent,
            ..
        } = feed;
        drop(sender);
        for finished in done.iter() {
            collected.take(finished);
        }
        workers.join();
        fed.map(|()| (chunk, files, sent))
    });
    let (chunk, files, sent) = fed?;
    if let Some(error) = collected.failed.take() {
        return Err(error);
    }
    if sent == 0 {
        // Every file fitted in the first chunk: this thread finishes the only chunk.
        return collected.finish_small(&pool, chunk, files, mtime);
    }
    collected.finish(&pool, mtime)
}

/// Hands files to [`frame_payload`], in path order.
pub(crate) struct TarFeed<'s, 'c> {
    mtime: u64,
    /// Bytes of files the caller said it would add, and bytes added so far.
    planned: u64,
    added: u64,
    /// Bytes of `tar` the chunk being filled may hold.
    limit: usize,
    /// Formats tar headers (with GNU long-name entries) exactly as the `tar` crate writes
    /// them; the bytes are taken out after each header.
    headers: tar::Builder<Vec<u8>>,
    chunk: Vec<u8>,
    files: Vec<(String, Range<usize>)>,
    /// Chunks sent to the threads.
    sent: usize,
    jobs: Option<mpsc::SyncSender<Job<'static>>>,
    spare: &'s mpsc::Receiver<Vec<u8>>,
    done: &'s mpsc::Receiver<Done>,
    collected: &'c mut Collected<'s>,
}

impl TarFeed<'_, '_> {
    /// Adds a file of `len` bytes: `write` appends exactly its bytes to the vector it is
    /// given. When `write` fails, or gives another number of bytes, nothing of the file
    /// stays in the payload and the error comes back (the caller decides whether that ends
    /// the payload).
    pub(crate) fn add(
        &mut self,
        path: &str,
        len: u64,
        write: impl FnOnce(&mut Vec<u8>) -> std::io::Result<()>,
    ) -> Result<(), FormatError> {
        let header = entry_header(&mut self.headers, path, len, self.mtime)?;
        let entry_len = header.len() as u64 + len.next_multiple_of(512);
        if !self.chunk.is_empty() && self.chunk.len() as u64 + entry_len > self.limit as u64 {
            self.send()?;
            self.limit = frame_limit(self.sent, self.planned.saturating_sub(self.added));
        }
        let start = self.chunk.len();
        self.chunk.reserve(entry_len as usize);
        self.chunk.extend_from_slice(&header);
        let data = self.chunk.len();
        let written = write(&mut self.chunk).and_then(|()| {
            let found = (self.chunk.len() - data) as u64;
            if found == len {
                Ok(())
            } else {
                Err(std::io::Error::other(format!(
                    "expected {len} bytes, found {found} (did the file change while being read?)"
                )))
            }
        });
        if let Err(e) = written {
            self.chunk.truncate(start);
            return Err(FormatError::io(format!("reading {path}"), e));
        }
        let end = self.chunk.len();
        self.chunk
            .resize(data + len.next_multiple_of(512) as usize, 0);
        self.files.push((path.to_string(), data..end));
        self.added += len;
        Ok(())
    }

    /// Sends the chunk so far to the threads and starts a new one.
    fn send(&mut self) -> Result<(), FormatError> {
        let fresh = self
            .spare
            .try_recv()
            .unwrap_or_else(|_| Vec::with_capacity(FRAME_LEN));
        let chunk = std::mem::replace(&mut self.chunk, fresh);
        let files = std::mem::take(&mut self.files);
        self.sent += 1;
        let job = Job {
            number: self.sent,
            chunk: Cow::Owned(chunk),
            files,
        };
        let sent = self
            .jobs
            .as_ref()
            .is_some_and(|jobs| jobs.send(job).is_ok());
        // Place whatever is ready while the rest is still being added.
        while let Ok(finished) = self.done.try_recv() {
            self.collected.take(finished);
        }
        if sent {
            Ok(())
        } else {
            Err(FormatError::malformed(
                "payload",
                "the compression threads stopped",
            ))
        }
    }

    /// After the last file: when chunks went out already, the end of the archive goes on
    /// the last one, which goes out too. Otherwise the only chunk stays for
    /// [`Collected::finish_small`].
    fn end(&mut self) -> Result<(), FormatError> {
        if self.sent == 0 {
            return Ok(());
        }
        self.chunk.extend_from_slice(&[0; 1024]);
        self.send()
    }
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

/// The shortest limit [`frame_limit`] gives: below a few MiB a frame compresses noticeably
/// worse.
pub(crate) const MIN_FRAME_LEN: usize = FRAME_LEN / 4;

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

/// One chunk of `tar` for a thread: hash and check its files, then compress it.
struct Job<'a> {
    /// Frame number (the index is frame 0).
    number: usize,
    chunk: Cow<'a, [u8]>,
    /// The files in the chunk: path and where its bytes are.
    files: Vec<(String, Range<usize>)>,
}

struct Done {
    number: usize,
    frame: Result<Vec<u8>, FormatError>,
    tar_len: usize,
    index: Vec<IndexEntry>,
    problems: Vec<(String, FileProblem)>,
}

struct DrainOnPanic<'j, 'a>(&'j Mutex<mpsc::Receiver<Job<'a>>>);

impl Drop for DrainOnPanic<'_, '_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            let jobs = self.0.lock().unwrap_or_else(|e| e.into_inner());
            while jobs.recv().is_ok() {}
        }
    }
}

struct Pool<'c> {
    level: i32,
    check: Option<&'c FileCheck<'c>>,
    /// Frame buffers placed already, to compress into again: a fresh buffer per frame costs
    /// a page fault per 4 KiB.
    free: FreeFrames,
}

type FreeFrames = Mutex<Vec<Vec<u8>>>;

/// The compression threads of one payload.
struct Workers<'scope>(Vec<std::thread::ScopedJoinHandle<'scope, ()>>);

impl Workers<'_> {
    /// Waits for every thread; a thread's panic goes on in the caller, with its own message.
    fn join(self) {
        for handle in self.0 {
            crate::joined(handle);
        }
    }
}

impl<'c> Pool<'c> {
    fn new(level: i32, check: Option<&'c FileCheck<'c>>) -> Self {
        Pool {
            level,
            check,
            free: Mutex::new(Vec::new()),
        }
    }

    /// Starts `threads` workers on the `jobs` queue in `scope`. They hold the only senders of
    /// `done` and `spare`, so those queues end once every worker has.
    fn start<'scope, 'env, 'a: 'env>(
        &'env self,
        scope: &'scope std::thread::Scope<'scope, 'env>,
        threads: usize,
        jobs: &'env Mutex<mpsc::Receiver<Job<'a>>>,
        done: mpsc::Sender<Done>,
        spare: mpsc::Sender<Vec<u8>>,
    ) -> Workers<'scope> {
        Workers(
            (0..threads)
                .map(|_| {
                    let (done, spare) = (done.clone(), spare.clone());
                    scope.spawn(move || self.work(jobs, &done, &spare))
                })
                .collect(),
        )
    }

    fn work(
        &self,
        jobs: &Mutex<mpsc::Receiver<Job<'_>>>,
        done: &mpsc::Sender<Done>,
        spare: &mpsc::Sender<Vec<u8>>,
    ) {
        // If the check panics, the feeding thread must not wait on a full queue forever:
        // drain it, and the panic reaches the caller through the join.
        let _drain = DrainOnPanic(jobs);
        let mut compressor = compressor(self.level);
        loop {
            let job = jobs.lock().unwrap_or_else(|e| e.into_inner()).recv();
            let Ok(job) = job else { return };
            let finished = match &mut compressor {
                Ok(compressor) => self.run(compressor, job, spare),
                Err(_) => Done {
                    number: job.number,
                    frame: Err(FormatError::malformed("payload", "zstd did not start")),
                    tar_len: 0,
                    index: Vec::new(),
                    problems: Vec::new(),
                },
            };
            if done.send(finished).is_err() {
                return;
            }
        }
    }

    fn run(
        &self,
        compressor: &mut zstd::bulk::Compressor<'static>,
        job: Job<'_>,
        spare: &mpsc::Sender<Vec<u8>>,
    ) -> Done {
        let (index, problems) = self.hash_and_check(&job.chunk, job.files);
        let mut frame = self
            .free
            .lock()
            .ok()
            .and_then(|mut free| free.pop())
            .unwrap_or_default();
        frame.clear();
        frame.reserve(zstd::zstd_safe::compress_bound(job.chunk.len()));
        let frame = compressor
            .compress_to_buffer(&job.chunk, &mut frame)
            .map(|_| frame)
            .map_err(|e| FormatError::io("compressing the payload", e));
        let tar_len = job.chunk.len();
        if let Cow::Owned(mut buffer) = job.chunk {
            buffer.clear();
            let _ = spare.send(buffer);
        }
        Done {
            number: job.number,
            frame,
            tar_len,
            index,
            problems,
        }
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
                    sha256: sha256_hex(bytes),
                    path,
                }
            })
            .collect();
        (index, problems)
    }
}

/// A single-threaded zstd compressor at `level` that writes the content size and a checksum
/// into every frame.
pub(crate) fn compressor(level: i32) -> Result<zstd::bulk::Compressor<'static>, FormatError> {
    let mut compressor =
        zstd::bulk::Compressor::new(level).map_err(|e| FormatError::io("starting zstd", e))?;
    compressor
        .include_checksum(true)
        .map_err(|e| FormatError::io("configuring zstd", e))?;
    Ok(compressor)
}

/// The frames as they come back, placed in order.
struct Collected<'p> {
    free: &'p FreeFrames,
    layout: Layout,
    out: Vec<u8>,
    segments: Vec<Segment>,
    /// Frames that finished before an earlier one, and the number of the next to place.
    waiting: BTreeMap<usize, Done>,
    next: usize,
    index: Vec<IndexEntry>,
    problems: Vec<(String, FileProblem)>,
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
            index: Vec::new(),
            problems: Vec::new(),
            failed: None,
        }
    }

    fn take(&mut self, done: Done) {
        self.waiting.insert(done.number, done);
        while let Some(done) = self.waiting.remove(&self.next) {
            self.next += 1;
            self.index.extend(done.index);
            self.problems.extend(done.problems);
            match done.frame {
                Ok(frame) if self.failed.is_none() => {
                    self.place(&frame, done.tar_len);
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
    fn finish(mut self, pool: &Pool<'_>, mtime: u64) -> Result<Framed, FormatError> {
        let index_entry = index_entry(&self.index, mtime)?;
        let frame = compressor(pool.level)?
            .compress(&index_entry)
            .map_err(|e| FormatError::io("compressing the payload index", e))?;
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
            tar_len: index_entry.len() as u64,
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
        })
    }

    /// Only one chunk, never sent: hash and check its files here, then one frame of the
    /// whole `tar` if it fits in [`FRAME_LEN`], else the index frame and the chunk's.
    fn finish_small(
        mut self,
        pool: &Pool<'_>,
        mut chunk: Vec<u8>,
        files: Vec<(String, Range<usize>)>,
        mtime: u64,
    ) -> Result<Framed, FormatError> {
        let (index, problems) = pool.hash_and_check(&chunk, files);
        self.problems = problems;
        let index_entry = index_entry(&index, mtime)?;
        chunk.extend_from_slice(&[0; 1024]);
        let mut compressor = compressor(pool.level)?;
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
        })
    }
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
    let threads = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(bytes.len().div_ceil(FRAME_LEN))
        .max(1);
    let pool = Pool::new(level, None);
    let (jobs_sender, jobs) = mpsc::sync_channel::<Job<'_>>(threads);
    let jobs = Mutex::new(jobs);
    let (done_sender, done) = mpsc::channel::<Done>();
    let (spare_sender, _spare) = mpsc::channel::<Vec<u8>>();
    let mut collected = Collected::new(
        Layout {
            room: 0,
            tags: false,
        },
        &pool.free,
    );
    std::thread::scope(|scope| {
        let workers = pool.start(scope, threads, &jobs, done_sender, spare_sender);
        for (i, chunk) in bytes.chunks(FRAME_LEN).enumerate() {
            let job = Job {
                number: i + 1,
                chunk: Cow::Borrowed(chunk),
                files: Vec::new(),
            };
            if jobs_sender.send(job).is_err() {
                break;
            }
            while let Ok(finished) = done.try_recv() {
                collected.take(finished);
            }
        }
        drop(jobs_sender);
        for finished in done.iter() {
            collected.take(finished);
        }
        workers.join();
    });
    match collected.failed {
        Some(e) => Err(e),
        None => Ok(collected.out),
    }
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
}
