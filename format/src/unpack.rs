//! Opening a pack straight into a destination (a directory, an archive, anything) without
//! holding every file in memory first: [`open_into`].
//!
//! The checks are [`crate::open`]'s: header, key, authenticated decryption of the whole
//! payload before a single byte is decompressed, bounded decompression, safe `tar` entries,
//! and every file against the index. What changes is when files leave: each is handed to
//! the [`Unpack`] as soon as its own size and SHA-256 match the index, from several threads
//! at once, while later frames are still being decompressed. Whether the pack as a whole
//! was good (no file missing, none extra, nothing after a bad frame) is only known when
//! [`open_into`] returns, so a destination must stay provisional until then — say, a
//! staging directory renamed into place on `Ok` and removed on `Err`.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::fs::File;
use std::hash::{BuildHasher, RandomState};
use std::io::{Read, Seek, SeekFrom};
use std::ops::Range;
use std::os::unix::fs::FileExt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock, mpsc};

use hashbrown::HashTable;
use hashbrown::hash_table::Entry;

use crate::decode::{
    DecodedFrame, FileDigest, FileHashes, FrameReader, FrameSource, Handed, PIPELINE_MIN_LEN,
    PlainFrames, decompress, frame_plan, with_chunk_reader, with_frame_reader,
};
use crate::digest::DigestRule;
use crate::pack::{
    FORMAT_V1, PackHeader, SealedSegments, head_len, read_header, read_pack_at, unseal, unseal_of,
};
use crate::payload::{
    EntryBytes, IndexEntry, TarSink, check_index_format, read_entries, read_tar, validate_path,
};
use crate::{ContentKeyRing, FormatError, Limits};

/// Where [`open_into`] puts a pack's files.
pub trait Unpack: Sync {
    /// Called once, before any file, with the index: every file's path, size and SHA-256.
    /// Every path is already checked (relative, no `..`, within the limits), so creating
    /// the directories they need is safe.
    fn index(&self, files: &[IndexEntry]) -> std::io::Result<()>;

    /// Called once per file, possibly from several threads at once, after the file's path
    /// was checked and its size and SHA-256 matched the index.
    fn file(&self, path: &str, bytes: &[u8]) -> std::io::Result<()>;
}

/// A pack that [`open_into`] unpacked.
#[derive(Debug, Clone)]
pub struct Unpacked {
    pub header: PackHeader,
    /// Every file's path, size and SHA-256, as checked.
    pub index: Vec<IndexEntry>,
}

/// Batches of files waiting between the `tar` reader and the threads that hash and hand
/// them out. Files go in batches of about [`BATCH_BYTES`] (or [`BATCH_FILES`]): one hand-over
/// per small template would cost more in thread wake-ups than the hashing.
const QUEUE: usize = 4;
const BATCH_BYTES: usize = 1024 * 1024;
const BATCH_FILES: usize = 256;

/// Files as (position in the index, bytes).
type Batch = Vec<(usize, Body)>;

/// Opens a sealed pack into `out`; see the module documentation for when files are handed
/// out. On `Err`, whatever `out` received must be thrown away. The sealed bytes are not
/// hashed here: a caller that needs the pack's SHA-256 runs [`sha256_hex`] on another
/// thread meanwhile (most do not, and it is a core's work for a large pack).
pub fn open_into(
    bytes: &[u8],
    keys: &ContentKeyRing,
    limits: &Limits,
    out: &impl Unpack,
) -> Result<Unpacked, FormatError> {
    read_header(bytes, limits)?;
    let unsealed = unseal(bytes, keys, limits)?;
    let index = if unsealed.header.format == FORMAT_V1 {
        let compressed = unsealed.decrypt_v1()?;
        unpack_with(limits, DigestRule::Bytes, out, |sink, threads| {
            decode_v1(&compressed, limits, threads, sink)
        })?
    } else {
        let segments = SealedSegments::new(&unsealed)?;
        unpack_with(
            limits,
            unsealed.header.digest_rule(),
            out,
            |sink, threads| {
                if threads > 1 && segments.count() > 1 && bytes.len() >= PIPELINE_MIN_LEN {
                    return read_frames(&segments, limits, threads, sink);
                }
                let tar = segments.decode_all()?;
                read_tar(tar.as_slice(), limits, tar.len() as u64, sink)
            },
        )?
    };
    Ok(Unpacked {
        header: unsealed.header,
        index,
    })
}

/// [`open_into`] of the pack in `file`, read as it is decoded: a large format-2 pack's
/// segments are read one at a time by the threads that decrypt them, into buffers each
/// thread keeps, so the sealed pack is never in memory as a whole (for 28 MB, 7,000 fresh
/// pages fewer to fault in, most of what reading it cost). Every segment is authenticated
/// as in memory; a file that changes while it is read fails as tampered, truncated or
/// changed, never as anything else. Smaller packs, format-1 packs and one-core machines are
/// read into memory and opened by [`open_into`].
pub fn open_file_into(
    file: &File,
    keys: &ContentKeyRing,
    limits: &Limits,
    out: &impl Unpack,
) -> Result<Unpacked, FormatError> {
    let total = file
        .metadata()
        .map_err(|e| FormatError::io("reading the sealed pack", e))?
        .len();
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let head = read_start(file, total.min(head_len(limits) as u64) as usize)?;
    let unsealed = unseal_of(&head, total, keys, limits)?;
    if threads < 2
        || unsealed.header.format == FORMAT_V1
        || unsealed.header.segments.len() < 2
        || total < PIPELINE_MIN_LEN as u64
    {
        let whole = unsealed.whole();
        drop(unsealed);
        let bytes = if whole {
            head
        } else {
            read_start(file, total as usize)?
        };
        ends_at(file, total)?;
        return open_into(&bytes, keys, limits, out);
    }
    let segments = SealedSegments::in_file(&unsealed, file)?;
    let rule = unsealed.header.digest_rule();
    let index = unpack_with(limits, rule, out, |sink, threads| {
        read_frames(&segments, limits, threads, sink)
    })?;
    ends_at(file, total)?;
    Ok(Unpacked {
        header: unsealed.header,
        index,
    })
}

/// The first `len` bytes of `file`.
fn read_start(file: &File, len: usize) -> Result<Vec<u8>, FormatError> {
    let mut bytes = vec![0; len];
    read_pack_at(file, &mut bytes, 0)?;
    Ok(bytes)
}

/// Checks that nothing was appended to `file` after its first `len` bytes were read.
fn ends_at(file: &File, len: u64) -> Result<(), FormatError> {
    match file.read_at(&mut [0], len) {
        Ok(0) => Ok(()),
        Ok(_) => Err(FormatError::io(
            "reading the sealed pack",
            std::io::Error::other("the file grew while being read; try again"),
        )),
        Err(e) => Err(FormatError::io("reading the sealed pack", e)),
    }
}

/// What the threads share: the index, the queue of files, and the first failure.
struct Shared<'o, U: ?Sized> {
    /// How the pack's index digests files: by the container's format.
    rule: DigestRule,
    listing: OnceLock<Listing>,
    queue: Mutex<mpsc::Receiver<Batch>>,
    failure: Mutex<Option<FormatError>>,
    stop: AtomicBool,
    out: &'o U,
}

/// The index as the `tar` reader checked it, and which of its files went out.
struct Listing {
    entries: Vec<IndexEntry>,
    positions: Positions,
    /// Each entry's SHA-256 as bytes (`None` unless it is 64 lowercase hex digits: then no
    /// file matches it).
    digests: Vec<Option<[u8; 32]>>,
    /// Set by whoever hands the file out (a decoding thread or a worker), before it does.
    written: Vec<AtomicBool>,
}

impl Listing {
    /// The position of the entry for `path`, if the index lists it.
    fn position(&self, path: &str) -> Option<usize> {
        self.positions.get(&self.entries, path)
    }

    /// Whether `digest` is the SHA-256 the index lists at `position`.
    fn lists(&self, position: usize, digest: &[u8; 32]) -> bool {
        self.digests[position].as_ref() == Some(digest)
    }

    /// Claims the file at `position` for the caller to hand out; false if someone has.
    fn claim(&self, position: usize) -> bool {
        !self.written[position].swap(true, Ordering::AcqRel)
    }
}

/// Index positions found by path. The table holds positions alone, each hashed and
/// compared by its entry's path, so no path is copied: a map keyed by the paths would copy
/// every one of them (8,905 on the `small-shallow` bench tree) into fresh memory while the
/// reader has not read a file yet. Hashed with the standard library's keyed hasher, since
/// the paths come from the pack.
struct Positions {
    table: HashTable<usize>,
    hasher: RandomState,
}

impl Positions {
    /// The positions of `entries`, or the position of the first path listed twice.
    fn new(entries: &[IndexEntry]) -> Result<Self, usize> {
        let hasher = RandomState::new();
        let hash = |at: &usize| hasher.hash_one(entries[*at].path.as_str());
        let mut table = HashTable::with_capacity(entries.len());
        for (position, entry) in entries.iter().enumerate() {
            let same = |at: &usize| entries[*at].path == entry.path;
            match table.entry(hash(&position), same, hash) {
                Entry::Occupied(_) => return Err(position),
                Entry::Vacant(free) => {
                    free.insert(position);
                }
            }
        }
        Ok(Positions { table, hasher })
    }

    /// The position of `path` among `entries`, the ones the table was made of.
    fn get(&self, entries: &[IndexEntry], path: &str) -> Option<usize> {
        let hash = self.hasher.hash_one(path);
        self.table
            .find(hash, |at| entries[*at].path == path)
            .copied()
    }
}

/// The 32 bytes that `text` spells in 64 lowercase hex digits; `None` for anything else
/// (an index entry whose digest is not lowercase fails behind the reader, which compares
/// the text, so no file may match it here).
fn lowercase_digest(text: &str) -> Option<[u8; 32]> {
    let lowercase = text
        .bytes()
        .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
    let mut digest = [0; 32];
    let decoded = hex::decode_to_slice(text, &mut digest).is_ok();
    (lowercase && decoded).then_some(digest)
}

impl<U: Unpack + ?Sized> Shared<'_, U> {
    /// Hands out, from the thread that decoded `frame`, each of its `files` whose path, size
    /// and SHA-256 are an index entry's, while the bytes are fresh in this core's caches and
    /// the frame's buffer can go back sooner. The `tar` reader still reads every entry in
    /// order and checks it; what it finds handed out already (the same bytes, by their
    /// digest) it does not queue. A frame decoded before the index was read, a file the
    /// walk of the frame got wrong (a long name, say), or one that does not match, is left
    /// to the reader as before. Whatever goes out here is exactly what the index lists for
    /// that path, at most once, and stays provisional like everything else until
    /// [`open_into`] returns `Ok`.
    fn hand_out_early(&self, frame: &[u8], files: &[FileDigest]) -> Vec<Handed> {
        let mut handed = Vec::new();
        let Some(listing) = self.listing.get() else {
            return handed;
        };
        for (at, file) in files.iter().enumerate() {
            if self.stop.load(Ordering::Relaxed) {
                return handed;
            }
            let path = file.header_path(frame);
            let Some(position) = std::str::from_utf8(&path)
                .ok()
                .and_then(|path| listing.position(path))
            else {
                continue;
            };
            let entry = &listing.entries[position];
            let bytes = &frame[file.range()];
            if entry.size != bytes.len() as u64
                || !listing.lists(position, file.sha256())
                || !listing.claim(position)
            {
                continue;
            }
            match self.out.file(&entry.path, bytes) {
                Ok(()) => handed.push(Handed { file: at, position }),
                Err(e) => self.fail(FormatError::io(format!("unpacking {}", entry.path), e)),
            }
        }
        handed
    }

    fn fail(&self, error: FormatError) {
        let mut failure = self.failure.lock().unwrap_or_else(|e| e.into_inner());
        failure.get_or_insert(error);
        self.stop.store(true, Ordering::Relaxed);
    }

    /// Hashes queued files, checks each against its index entry and hands it out, until
    /// the queue closes or something failed.
    fn work(&self) {
        let _drain = DrainOnPanic(self);
        loop {
            let next = match self.queue.lock() {
                Ok(queue) => queue.recv(),
                Err(_) => return,
            };
            let Ok(batch) = next else { return };
            for (position, bytes) in batch {
                // Once stopped, only drain, so the reader never blocks on a full queue.
                if !self.stop.load(Ordering::Relaxed) {
                    self.check_and_hand_out(position, &bytes);
                }
            }
        }
    }

    fn check_and_hand_out(&self, position: usize, body: &Body) {
        let Some(listing) = self.listing.get() else {
            return;
        };
        let Some(entry) = listing.entries.get(position) else {
            return;
        };
        let Some(bytes) = body.as_slice() else {
            // Never queued (`Cursor::body`); were it, the pack would fail, not lose a file.
            self.fail(FormatError::malformed(
                "payload",
                format!("{} left its frame before it was checked", entry.path),
            ));
            return;
        };
        let found = body
            .digest()
            .map_or_else(|| self.rule.hex(bytes), hex::encode);
        if found != entry.sha256 {
            self.fail(FormatError::HashMismatch {
                what: entry.path.clone(),
                expected: entry.sha256.clone(),
                found,
            });
        } else if !listing.claim(position) {
            // A decoding thread handed out these very bytes (they match the index too).
        } else if let Err(e) = self.out.file(&entry.path, bytes) {
            self.fail(FormatError::io(format!("unpacking {}", entry.path), e));
        }
    }
}

/// If a worker panics (in the destination's code, say), the reader must not block on a
/// full queue forever: stop everything and keep draining until the reader has stopped. The
/// panic then reaches the caller through the join.
struct DrainOnPanic<'s, 'o, U: ?Sized>(&'s Shared<'o, U>);

impl<U: ?Sized> Drop for DrainOnPanic<'_, '_, U> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.0.stop.store(true, Ordering::Relaxed);
            let queue = self.0.queue.lock().unwrap_or_else(|e| e.into_inner());
            while queue.recv().is_ok() {}
        }
    }
}

/// The `tar` reader's side: checks each file's place in the index and queues it.
struct Streaming<'s, 'o, U: ?Sized> {
    shared: &'s Shared<'o, U>,
    limits: &'s Limits,
    queue: mpsc::SyncSender<Batch>,
    batch: Batch,
    batch_bytes: usize,
    seen: Vec<bool>,
    files: usize,
}

/// Stands in for the real failure, which the caller takes from [`Shared`].
fn stopped() -> FormatError {
    FormatError::malformed("payload", "unpacking stopped")
}

impl<U: Unpack + ?Sized> TarSink for Streaming<'_, '_, U> {
    type Body = Body;

    fn index(&mut self, index: Vec<IndexEntry>, rule: DigestRule) -> Result<(), FormatError> {
        check_index_format(self.shared.rule, rule)?;
        for entry in &index {
            validate_path(&entry.path, self.limits)?;
        }
        let positions = Positions::new(&index).map_err(|twice| FormatError::IndexMismatch {
            reason: format!("index lists {:?} twice", index[twice].path),
        })?;
        self.shared
            .out
            .index(&index)
            .map_err(|e| FormatError::io("unpacking the index", e))?;
        self.seen = vec![false; index.len()];
        let written = index.iter().map(|_| AtomicBool::new(false)).collect();
        let digests = index
            .iter()
            .map(|entry| lowercase_digest(&entry.sha256))
            .collect();
        let _ = self.shared.listing.set(Listing {
            entries: index,
            positions,
            digests,
            written,
        });
        Ok(())
    }

    fn file(&mut self, path: String, bytes: Body) -> Result<(), FormatError> {
        if self.shared.stop.load(Ordering::Relaxed) {
            return Err(stopped());
        }
        let shared = self.shared;
        let listing = shared.listing.get();
        let Some((listing, position)) =
            listing.and_then(|listing| Some((listing, listing.position(&path)?)))
        else {
            return Err(FormatError::IndexMismatch {
                reason: format!("archive holds {path:?}, which the index does not list"),
            });
        };
        if std::mem::replace(&mut self.seen[position], true) {
            return Err(FormatError::UnsafeEntry {
                path,
                reason: "duplicate path",
            });
        }
        let entry = &listing.entries[position];
        let len = bytes.len();
        if len as u64 != entry.size {
            return Err(FormatError::SizeMismatch {
                what: path,
                expected: entry.size,
                found: len as u64,
            });
        }
        self.files += 1;
        // Handed out by the thread that decoded it, and these are the bytes it checked:
        // nothing left to do.
        if listing.written[position].load(Ordering::Acquire)
            && bytes
                .digest()
                .is_some_and(|digest| listing.lists(position, &digest))
        {
            return Ok(());
        }
        self.batch_bytes += len;
        self.batch.push((position, bytes));
        if self.batch_bytes >= BATCH_BYTES || self.batch.len() >= BATCH_FILES {
            self.flush()?;
        }
        Ok(())
    }
}

impl<U: ?Sized> Streaming<'_, '_, U> {
    /// Queues the files collected so far.
    fn flush(&mut self) -> Result<(), FormatError> {
        self.batch_bytes = 0;
        let batch = std::mem::take(&mut self.batch);
        if batch.is_empty() {
            return Ok(());
        }
        self.queue.send(batch).map_err(|_| stopped())
    }
}

/// Runs `decode` (which feeds the payload's `tar` to the sink it is given, using up to the
/// given number of threads) while the files it finds are hashed and handed to `out` on
/// every core; returns the index.
fn unpack_with<U: Unpack + ?Sized>(
    limits: &Limits,
    rule: DigestRule,
    out: &U,
    decode: impl FnOnce(&mut Streaming<'_, '_, U>, usize) -> Result<(), FormatError>,
) -> Result<Vec<IndexEntry>, FormatError> {
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let (queue_sender, queue) = mpsc::sync_channel(QUEUE);
    let shared = Shared {
        rule,
        listing: OnceLock::new(),
        queue: Mutex::new(queue),
        failure: Mutex::new(None),
        stop: AtomicBool::new(false),
        out,
    };
    let read = std::thread::scope(|scope| {
        let shared = &shared;
        let workers: Vec<_> = (0..threads)
            .map(|_| scope.spawn(move || shared.work()))
            .collect();
        let mut sink = Streaming {
            shared,
            limits,
            queue: queue_sender,
            batch: Vec::new(),
            batch_bytes: 0,
            seen: Vec::new(),
            files: 0,
        };
        let read = decode(&mut sink, threads).and_then(|()| sink.flush());
        let files = sink.files;
        drop(sink); // closes the queue: the workers finish what is in it and stop
        for worker in workers {
            crate::joined(worker);
        }
        read.map(|()| files)
    });
    let failure = shared
        .failure
        .into_inner()
        .unwrap_or_else(|e| e.into_inner());
    if let Some(failure) = failure {
        return Err(failure);
    }
    let files = read?;
    let index = shared
        .listing
        .into_inner()
        .map(|listing| listing.entries)
        .unwrap_or_default();
    if files != index.len() {
        return Err(FormatError::IndexMismatch {
            reason: format!("index lists {} files, archive holds {files}", index.len()),
        });
    }
    Ok(index)
}

/// Runs the `tar` reader over a decrypted format-1 payload: frame by frame on every core
/// when every frame declares its size within the budget, otherwise as one bounded stream.
fn decode_v1<U: Unpack + ?Sized>(
    compressed: &[u8],
    limits: &Limits,
    threads: usize,
    sink: &mut Streaming<'_, '_, U>,
) -> Result<(), FormatError> {
    if threads > 1
        && let Some(frames) = frame_plan(compressed, limits)
        && frames.len() > 1
    {
        let source = PlainFrames {
            compressed,
            frames: &frames,
        };
        return read_frames(&source, limits, threads, sink);
    }
    if compressed.len() < PIPELINE_MIN_LEN {
        let tar = decompress(compressed, limits)?;
        return read_tar(tar.as_slice(), limits, tar.len() as u64, sink);
    }
    let budget = limits.decompressed_budget(compressed.len() as u64);
    with_chunk_reader(compressed, limits, |reader| {
        read_tar(reader, limits, budget, sink)
    })
}

/// Decodes `source`'s frames on every core while the `tar` reader parses headers and takes
/// the files' bytes straight from the decoded frames. A frame that fails wins over whatever
/// the reader made of the bytes before it; files before it may have gone out already (the
/// caller throws them away).
fn read_frames<U: Unpack + ?Sized>(
    source: &impl FrameSource,
    limits: &Limits,
    threads: usize,
    sink: &mut Streaming<'_, '_, U>,
) -> Result<(), FormatError> {
    let shared = sink.shared;
    let early = |frame: &[u8], files: &[FileDigest]| shared.hand_out_early(frame, files);
    let hashes = FileHashes::Take(&early, shared.rule);
    let (read, decoded) = with_frame_reader(source, threads, hashes, |reader| {
        let cursor = Cursor::new(reader);
        let mut archive = tar::Archive::new(&cursor);
        let entries = archive
            .entries_with_seek()
            .map_err(|e| FormatError::malformed("payload tar", e))?;
        read_entries(entries, limits, sink, |entry, path, size| {
            // A file a decoding thread handed out as this very path needs no bytes.
            let is_it = |position: usize| {
                (shared.listing.get())
                    .and_then(|listing| listing.entries.get(position))
                    .is_some_and(|entry| entry.path == path)
            };
            cursor
                .body(entry.raw_file_position(), size, is_it)
                .map_err(|e| match e.downcast::<FormatError>() {
                    // A frame decoded again that failed (`Cursor::body`) fails as itself.
                    Ok(failed) => failed,
                    Err(e) => FormatError::io(format!("reading {path} from the payload"), e),
                })
        })
    });
    decoded?;
    read
}

/// A file's bytes: a range of a decoded frame when the file lies within one (no copy), or
/// its own buffer when it spans frames or came through the streaming path.
pub(crate) enum Body {
    Shared(Arc<DecodedFrame>, Range<usize>),
    Owned(Vec<u8>),
}

impl Body {
    fn len(&self) -> usize {
        match self {
            Body::Shared(_, range) => range.len(),
            Body::Owned(bytes) => bytes.len(),
        }
    }

    /// The bytes; `None` for a file a decoding thread handed out from a frame it then
    /// thinned, which the reader never queues ([`Cursor::body`]).
    fn as_slice(&self) -> Option<&[u8]> {
        match self {
            Body::Shared(frame, range) => frame.get(range.clone()),
            Body::Owned(bytes) => Some(bytes),
        }
    }

    /// The SHA-256 of exactly these bytes, when the thread that decoded their frame took it.
    fn digest(&self) -> Option<[u8; 32]> {
        match self {
            Body::Shared(frame, range) => frame.digest_of(range),
            Body::Owned(_) => None,
        }
    }
}

impl EntryBytes for Body {
    fn bytes(&self) -> Option<&[u8]> {
        self.as_slice()
    }
}

impl From<Vec<u8>> for Body {
    fn from(bytes: Vec<u8>) -> Self {
        Body::Owned(bytes)
    }
}

/// The decoded payload as one seekable stream over the frames, for the `tar` reader, which
/// reads headers through it and seeks over file data; [`Cursor::body`] takes the data
/// from the frames themselves. Seeks go forward only, as the `tar` reader's do.
struct Cursor<'r> {
    inner: RefCell<CursorState<'r>>,
}

struct CursorState<'r> {
    reader: FrameReader<'r>,
    /// Frames still in reach: (offset of its first byte, bytes). A frame behind the position
    /// leaves; its buffer goes back to the decoders once the last file inside it is done.
    frames: VecDeque<(u64, Arc<DecodedFrame>)>,
    /// Offset just past the last frame received.
    end: u64,
    pos: u64,
}

impl<'r> Cursor<'r> {
    fn new(reader: FrameReader<'r>) -> Self {
        Cursor {
            inner: RefCell::new(CursorState {
                reader,
                frames: VecDeque::new(),
                end: 0,
                pos: 0,
            }),
        }
    }

    /// The `len` bytes at `start`, which must not lie behind the current position. A file
    /// that a decoding thread handed out as an index position `is_it` accepts, and whose
    /// bytes its thinned frame dropped, comes as a body without bytes: [`Streaming::file`]
    /// finds it handed out already and asks for none. For anything else a frame dropped,
    /// the frame is decoded again.
    fn body(&self, start: u64, len: u64, is_it: impl Fn(usize) -> bool) -> std::io::Result<Body> {
        let mut state = self.inner.borrow_mut();
        let stop = start.checked_add(len).ok_or_else(past_end)?;
        if start < state.pos || !state.reach(stop) {
            return Err(past_end());
        }
        let mut out: Option<Vec<u8>> = None;
        for at in 0..state.frames.len() {
            let (first, frame) = &state.frames[at];
            let (first, last) = (*first, first + frame.len() as u64);
            if last <= start || first >= stop {
                continue;
            }
            let range = (start.max(first) - first) as usize..(stop.min(last) - first) as usize;
            let whole = first <= start && stop <= last;
            if whole && frame.went_out(&range, &is_it) {
                return Ok(Body::Shared(Arc::clone(frame), range));
            }
            if frame.get(range.clone()).is_none() {
                state.make_whole(at)?;
            }
            let frame = &state.frames[at].1;
            if whole {
                return Ok(Body::Shared(Arc::clone(frame), range));
            }
            let bytes = frame.get(range).ok_or_else(past_end)?;
            out.get_or_insert_with(|| Vec::with_capacity(len as usize))
                .extend_from_slice(bytes);
        }
        Ok(Body::Owned(out.unwrap_or_default()))
    }
}

fn past_end() -> std::io::Error {
    std::io::Error::new(
        std::io::ErrorKind::UnexpectedEof,
        "the payload ends inside an entry",
    )
}

impl CursorState<'_> {
    /// Receives frames until `upto` is covered; false if the stream ends first.
    fn reach(&mut self, upto: u64) -> bool {
        while self.end < upto {
            let Some(frame) = self.reader.next_frame() else {
                return false;
            };
            let len = frame.len() as u64;
            self.frames.push_back((self.end, Arc::new(frame)));
            self.end += len;
            self.recycle();
        }
        true
    }

    /// Puts the frame at `at` back whole, decoded again, in place of a thinned one.
    fn make_whole(&mut self, at: usize) -> std::io::Result<()> {
        let whole = (self.reader)
            .whole(&self.frames[at].1)
            .map_err(std::io::Error::other)?;
        self.frames[at].1 = Arc::new(whole);
        Ok(())
    }

    /// Lets go of the frames wholly behind the position.
    fn recycle(&mut self) {
        while let Some((first, frame)) = self.frames.front()
            && first + frame.len() as u64 <= self.pos
        {
            self.frames.pop_front();
        }
    }
}

impl Read for &Cursor<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let mut state = self.inner.borrow_mut();
        let pos = state.pos;
        if buf.is_empty() || !state.reach(pos + 1) {
            return Ok(0);
        }
        let Some(at) = (state.frames.iter())
            .position(|(first, frame)| *first <= pos && pos < first + frame.len() as u64)
        else {
            return Ok(0);
        };
        let from = (pos - state.frames[at].0) as usize;
        if state.frames[at].1.from(from).is_none() {
            state.make_whole(at)?;
        }
        let bytes = state.frames[at].1.from(from).ok_or_else(past_end)?;
        let n = buf.len().min(bytes.len());
        buf[..n].copy_from_slice(&bytes[..n]);
        state.pos += n as u64;
        Ok(n)
    }
}

impl Seek for &Cursor<'_> {
    fn seek(&mut self, to: SeekFrom) -> std::io::Result<u64> {
        let mut state = self.inner.borrow_mut();
        let target = match to {
            SeekFrom::Start(at) => Some(at),
            SeekFrom::Current(by) => state.pos.checked_add_signed(by),
            SeekFrom::End(_) => None,
        };
        match target {
            Some(at) if at >= state.pos => {
                state.pos = at;
                state.recycle();
                Ok(at)
            }
            _ => Err(std::io::Error::new(
                std::io::ErrorKind::Unsupported,
                "the payload is read forward only",
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicUsize;

    use super::*;
    use crate::{ContentKey, Payload, PayloadFile, SealInput};

    /// Counts the files handed out on the threads that decode frames and on any other.
    #[derive(Default)]
    struct ByThread {
        decoding: AtomicUsize,
        other: AtomicUsize,
    }

    impl Unpack for ByThread {
        fn index(&self, _files: &[IndexEntry]) -> std::io::Result<()> {
            Ok(())
        }

        fn file(&self, _path: &str, _bytes: &[u8]) -> std::io::Result<()> {
            let on = std::thread::current();
            let count = if on.name() == Some(crate::decode::DECODING_THREAD) {
                &self.decoding
            } else {
                &self.other
            };
            count.fetch_add(1, Ordering::Relaxed);
            Ok(())
        }
    }

    /// The early hand-out is what keeps a file's bytes in the cache of the core that
    /// decoded them; were it lost, every pack would still open, only slower, so this test
    /// is what notices.
    #[test]
    fn files_of_frames_decoded_after_the_index_go_out_from_the_threads_that_decoded_them() {
        if std::thread::available_parallelism().map_or(1, |n| n.get()) < 2 {
            use std::io::Write as _;
            let _ = std::io::stderr().write_all(
                b"\nSKIPPED: files_of_frames_decoded_after_the_index_go_out_from_the_threads_that_decoded_them (one core: frames are decoded where they are read)\n",
            );
            return;
        }
        // 300 files of 100 kB: 30 MB of file data, cut into an index frame and seven file
        // frames (2, 4, 8, 8, 4, 2 and 2 MiB). The decoders take at most four frames ahead
        // of the one the reader waits for, so the last frames are decoded after the reader
        // has read the index, and their files can go out where they were decoded.
        let words = [
            "the",
            "agent",
            "reads",
            "{{persona}}",
            "tool",
            "never",
            "file",
        ];
        let mut state = 7u64;
        let files: Vec<PayloadFile> = (0..300)
            .map(|i| {
                let mut bytes = Vec::with_capacity(100_010);
                while bytes.len() < 100_000 {
                    state = state
                        .wrapping_mul(6_364_136_223_846_793_005)
                        .wrapping_add(1_442_695_040_888_963_407);
                    bytes.extend_from_slice(words[(state >> 33) as usize % words.len()].as_bytes());
                    bytes.push(if state.is_multiple_of(11) {
                        b'\n'
                    } else {
                        b' '
                    });
                }
                PayloadFile {
                    path: format!("docs/part-{i:03}.md"),
                    bytes,
                }
            })
            .collect();
        let payload = Payload::new(files, &Limits::DEFAULT).unwrap();
        let version = semver::Version::new(1, 0, 0);
        let input = SealInput {
            format: crate::FORMAT_VERSION,
            name: "early",
            version: &version,
            schema: 1,
            payload: &payload,
            mtime: 0,
            zstd_level: 1,
        };
        let key = ContentKey::from_parts("early", [5; 32]).unwrap();
        let sealed = crate::pack::seal(&input, &[&key]).unwrap();
        let out = ByThread::default();
        let keys = ContentKeyRing::new([key]);
        open_into(&sealed, &keys, &Limits::DEFAULT, &out).unwrap();
        let decoding = out.decoding.load(Ordering::Relaxed);
        let other = out.other.load(Ordering::Relaxed);
        assert_eq!(decoding + other, 300);
        assert!(
            decoding > 0,
            "no file went out from a decoding thread ({other} from the others)"
        );
    }

    fn entry(path: &str) -> IndexEntry {
        IndexEntry {
            path: path.to_string(),
            size: 0,
            sha256: String::new(),
        }
    }

    #[test]
    fn each_listed_path_is_found_at_its_own_position_and_no_other_path_is() {
        let entries: Vec<IndexEntry> = ["a.md", "a.md.bak", "b/a.md", "b/b.md"]
            .into_iter()
            .map(entry)
            .collect();
        let positions = Positions::new(&entries).unwrap();
        for (position, listed) in entries.iter().enumerate() {
            assert_eq!(positions.get(&entries, &listed.path), Some(position));
        }
        for unlisted in ["", "a", "a.m", "b", "b/", "A.md", "a.md/"] {
            assert_eq!(positions.get(&entries, unlisted), None, "{unlisted:?}");
        }
    }

    #[test]
    fn a_path_listed_twice_is_refused_at_its_second_listing() {
        let entries: Vec<IndexEntry> = ["a.md", "b.md", "c.md", "b.md", "a.md"]
            .into_iter()
            .map(entry)
            .collect();
        assert_eq!(Positions::new(&entries).err(), Some(3));
    }

    #[test]
    fn only_64_lowercase_hex_digits_spell_a_digest() {
        let digest: [u8; 32] = std::array::from_fn(|at| (at * 37 + 11) as u8);
        let text = hex::encode(digest);
        assert_eq!(lowercase_digest(&text), Some(digest));
        assert_eq!(lowercase_digest(&"0".repeat(64)), Some([0; 32]));
        assert_eq!(lowercase_digest(&"f".repeat(64)), Some([0xff; 32]));
        for wrong in [
            text.to_uppercase(),
            text[..63].to_string(),
            format!("{text}0"),
            format!("g{}", &text[1..]),
            format!("{}/", &text[..63]),
            format!("{}:", &text[..63]),
            format!("{}`", &text[..63]),
            String::new(),
        ] {
            assert_eq!(lowercase_digest(&wrong), None, "{wrong:?}");
        }
    }
}
