//! The payload inside a sealed pack: a standard `tar.zst` whose first entry is an index of
//! every file's path, size and SHA-256, followed by the files in path order.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::sync::mpsc;

use serde::{Deserialize, Serialize};

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

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Index {
    format: u32,
    files: Vec<IndexEntry>,
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
        let index = Index {
            format: INDEX_FORMAT,
            files: self.index(),
        };
        let index_bytes = serde_json::to_vec_pretty(&index)
            .map_err(|e| FormatError::malformed("payload index", e))?;
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

    /// The compressed payload. Compression runs on a zstd worker thread pool; zstd's
    /// multi-threaded output does not depend on the number of workers, so the result is
    /// the same on every machine.
    ///
    /// The `tar` is written straight into the compressor rather than built first: no
    /// second copy of the payload, and the compression workers start on the first files
    /// while the rest are still being added. The bytes are the same as
    /// `compress(&self.to_tar(mtime)?, level)`.
    pub fn to_tar_zst(&self, mtime: u64, level: i32) -> Result<Vec<u8>, FormatError> {
        let encoder = self.write_tar(encoder(self.total_size() as usize, level)?, mtime)?;
        encoder
            .finish()
            .map_err(|e| FormatError::io("finishing zstd", e))
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
        let mut archive = tar::Archive::new(reader);
        let entries = archive
            .entries()
            .map_err(|e| FormatError::malformed("payload tar", e))?;
        let mut index: Option<Vec<IndexEntry>> = None;
        let mut files = BTreeMap::new();
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
            if index.is_none() {
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
                index = Some(parsed.files);
                continue;
            }
            validate_path(&path, limits)?;
            check_file_len(&path, size, limits)?;
            if files.len() >= limits.max_file_count {
                return Err(FormatError::TooManyFiles {
                    found: files.len() + 1,
                    limit: limits.max_file_count,
                });
            }
            let bytes = read_entry(&mut entry, &path, size, max_len)?;
            if files.insert(path.clone(), bytes).is_some() {
                return Err(FormatError::UnsafeEntry {
                    path,
                    reason: "duplicate path",
                });
            }
        }
        let Some(index) = index else {
            return Err(FormatError::IndexMismatch {
                reason: format!("the payload has no {INDEX_PATH}"),
            });
        };
        check_index(&index, &files)?;
        Ok(Payload { files })
    }

    /// Decompresses under the limits' budget, then reads the `tar`.
    ///
    /// Large payloads are decompressed on a second thread that hands the `tar` reader
    /// chunks as they come, so decompression overlaps with copying and hashing the files.
    /// The result, errors included, is the same as decompressing everything first: a
    /// decompression error wins over whatever the `tar` reader made of the bytes before it.
    pub fn from_tar_zst(compressed: &[u8], limits: &Limits) -> Result<Self, FormatError> {
        if compressed.len() < PIPELINE_MIN_LEN {
            return Self::from_tar_zst_serial(compressed, limits);
        }
        Self::from_tar_zst_pipelined(compressed, limits)
    }

    fn from_tar_zst_serial(compressed: &[u8], limits: &Limits) -> Result<Self, FormatError> {
        let tar = decompress(compressed, limits)?;
        Self::from_tar(&tar, limits)
    }

    fn from_tar_zst_pipelined(compressed: &[u8], limits: &Limits) -> Result<Self, FormatError> {
        let budget = limits.decompressed_budget(compressed.len() as u64);
        std::thread::scope(|scope| {
            let (sender, receiver) = mpsc::sync_channel::<Vec<u8>>(PIPELINE_DEPTH);
            let producer = scope.spawn(move || {
                decompress_chunks(compressed, limits, |chunk| sender.send(chunk).is_ok())
            });
            // `read_tar` drops the receiver when it returns, which unblocks the producer.
            let parsed = Self::read_tar(ChunkReader::new(receiver), limits, budget);
            let produced = producer
                .join()
                .unwrap_or_else(|panic| std::panic::resume_unwind(panic));
            produced?;
            parsed
        })
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

/// Compresses with zstd at `level`, using every core.
pub fn compress(bytes: &[u8], level: i32) -> Result<Vec<u8>, FormatError> {
    let mut encoder = encoder(bytes.len(), level)?;
    encoder
        .write_all(bytes)
        .map_err(|e| FormatError::io("compressing the payload", e))?;
    encoder
        .finish()
        .map_err(|e| FormatError::io("finishing zstd", e))
}

/// A zstd encoder at `level` on every core, with a checksum, sized for `input_len` bytes.
fn encoder(
    input_len: usize,
    level: i32,
) -> Result<zstd::stream::Encoder<'static, Vec<u8>>, FormatError> {
    let workers = std::thread::available_parallelism().map_or(1, |n| n.get() as u32);
    let mut encoder = zstd::stream::Encoder::new(Vec::with_capacity(input_len / 3 + 1024), level)
        .map_err(|e| FormatError::io("starting zstd", e))?;
    encoder
        .multithread(workers)
        .map_err(|e| FormatError::io("starting zstd workers", e))?;
    encoder
        .include_checksum(true)
        .map_err(|e| FormatError::io("configuring zstd", e))?;
    Ok(encoder)
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
const PIPELINE_MIN_LEN: usize = 256 * 1024;
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

/// Reads the chunks a decompressing thread sends, in order, as one stream.
struct ChunkReader {
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
        handles
            .into_iter()
            .flat_map(|h| {
                h.join()
                    .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
            })
            .collect()
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

    #[test]
    fn streamed_compression_gives_the_same_bytes() {
        let payload = big_payload();
        let tar = payload.to_tar(7).unwrap();
        assert!(
            tar.len() > 8 * 1024 * 1024,
            "several zstd jobs: {}",
            tar.len()
        );
        assert_eq!(
            payload.to_tar_zst(7, 3).unwrap(),
            compress(&tar, 3).unwrap()
        );
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
