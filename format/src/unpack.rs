//! Opening a pack straight into a destination (a directory, an archive, anything) without
//! holding every file in memory first: [`open_into`].
//!
//! The checks are [`crate::open`]'s: header, key, authenticated decryption of each segment
//! before a byte of it is decompressed, bounded decompression, safe `tar` entries, and every
//! file against the index. What changes is when files leave: each is handed to the
//! [`Unpack`] as soon as its own size and SHA-256 match the index, from several threads at
//! once, while later frames are still being decompressed. Whether the pack as a whole
//! was good (no file missing, none extra, nothing after a bad frame) is only known when
//! [`open_into`] returns, so a destination must stay provisional until then — say, a
//! staging directory renamed into place on `Ok` and removed on `Err`.

use std::fs::File;
use std::hash::{BuildHasher, RandomState};
use std::os::unix::fs::FileExt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, OnceLock, mpsc};

use hashbrown::HashTable;
use hashbrown::hash_table::Entry;

use crate::decode::{read_frames, read_tar_zst};
use crate::pack::{
    FORMAT_V1, PackHeader, SealedSegments, head_len, read_pack_at, unseal, unseal_of,
};
use crate::payload::{IndexEntry, TarSink, read_tar, validate_path};
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
type Batch = Vec<(usize, Vec<u8>)>;

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
    let unsealed = unseal(bytes, keys, limits)?;
    let index = if unsealed.header.format == FORMAT_V1 {
        let compressed = unsealed.decrypt_v1()?;
        unpack_with(limits, out, |sink| {
            read_tar_zst(&compressed, limits, |reader, max_len| {
                read_tar(reader, limits, max_len, sink)
            })
        })?
    } else {
        let segments = SealedSegments::new(&unsealed)?;
        unpack_with(limits, out, |sink| {
            read_frames(&segments, limits, |reader, max_len| {
                read_tar(reader, limits, max_len, sink)
            })
        })?
    };
    Ok(Unpacked {
        header: unsealed.header,
        index,
    })
}

/// [`open_into`] of the pack in `file`, read as it is decoded: a format-2 pack's segments
/// are read one at a time by the threads that decrypt them, so the sealed pack is never in
/// memory as a whole. Every segment is authenticated as in memory; a file that changes while
/// it is read fails as tampered, truncated or changed, never as anything else. A format-1
/// pack is read into memory and opened by [`open_into`].
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
    let head = read_start(file, total.min(head_len(limits) as u64) as usize)?;
    let unsealed = unseal_of(&head, total, keys, limits)?;
    if unsealed.header.format == FORMAT_V1 {
        drop(unsealed);
        let bytes = read_start(file, total as usize)?;
        ends_at(file, total)?;
        return open_into(&bytes, keys, limits, out);
    }
    let segments = SealedSegments::in_file(&unsealed, file)?;
    let index = unpack_with(limits, out, |sink| {
        read_frames(&segments, limits, |reader, max_len| {
            read_tar(reader, limits, max_len, sink)
        })
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
    listing: OnceLock<Listing>,
    queue: Mutex<mpsc::Receiver<Batch>>,
    failure: Mutex<Option<FormatError>>,
    stop: AtomicBool,
    out: &'o U,
}

/// The index as the `tar` reader checked it.
struct Listing {
    entries: Vec<IndexEntry>,
    positions: Positions,
}

impl Listing {
    /// The position of the entry for `path`, if the index lists it.
    fn position(&self, path: &str) -> Option<usize> {
        self.positions.get(&self.entries, path)
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

impl<U: Unpack + ?Sized> Shared<'_, U> {
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

    fn check_and_hand_out(&self, position: usize, bytes: &[u8]) {
        let Some(entry) = (self.listing.get()).and_then(|listing| listing.entries.get(position))
        else {
            return;
        };
        let found = crate::sha256_hex(bytes);
        if found != entry.sha256 {
            self.fail(FormatError::HashMismatch {
                what: entry.path.clone(),
                expected: entry.sha256.clone(),
                found,
            });
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
    fn index(&mut self, index: Vec<IndexEntry>) -> Result<(), FormatError> {
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
        let _ = self.shared.listing.set(Listing {
            entries: index,
            positions,
        });
        Ok(())
    }

    fn file(&mut self, path: String, bytes: Vec<u8>) -> Result<(), FormatError> {
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

/// Runs `decode` (which feeds the payload's `tar` to the sink it is given) while the files
/// it finds are hashed and handed to `out` on every core; returns the index.
fn unpack_with<U: Unpack + ?Sized>(
    limits: &Limits,
    out: &U,
    decode: impl FnOnce(&mut Streaming<'_, '_, U>) -> Result<(), FormatError>,
) -> Result<Vec<IndexEntry>, FormatError> {
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let (queue_sender, queue) = mpsc::sync_channel(QUEUE);
    let shared = Shared {
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
        let read = decode(&mut sink).and_then(|()| sink.flush());
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

#[cfg(test)]
mod tests {
    use super::*;

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
}
