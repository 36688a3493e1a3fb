//! The payload inside a sealed pack: a standard `tar` whose first entry is an index of
//! every file's path, size and SHA-256, followed by the files in path order. This module
//! is the `tar` and the index; their zstd frames are written by `frames` and read by
//! `decode`, and a format-2 pack's segments are decrypted by `pack`.

use std::collections::BTreeMap;
use std::io::{Read, Write};

use rayon::prelude::*;
use serde::{Deserialize, Serialize};

use crate::{FormatError, Limits};

pub use crate::layout::{FRAME_LEN, INDEX_PATH};

/// One file as listed in the index.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IndexEntry {
    pub path: String,
    pub size: u64,
    pub sha256: String,
}

/// The `format` of the index, the only one: each file listed with the SHA-256 of its bytes.
pub const INDEX_FORMAT: u32 = 1;

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

/// The index file's bytes: pretty JSON (two-space indentation, no final newline), its
/// `format` [`INDEX_FORMAT`].
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
        let hashes = digest_all(self.files.values());
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

    /// Reads a decompressed `tar` payload: regular files only, safe paths, within the
    /// limits, index first and matching every file exactly.
    pub fn from_tar(tar_bytes: &[u8], limits: &Limits) -> Result<Self, FormatError> {
        Self::read_tar(tar_bytes, limits, tar_bytes.len() as u64)
    }

    /// [`Payload::from_tar`] over any reader; `max_len` bounds how many bytes the reader
    /// can produce, so that no entry reserves more memory than that, whatever its header
    /// claims.
    pub(crate) fn read_tar(
        reader: impl Read,
        limits: &Limits,
        max_len: u64,
    ) -> Result<Self, FormatError> {
        let mut collected = Collect::default();
        read_tar(reader, limits, max_len, &mut collected)?;
        check_index(&collected.index, &collected.files)?;
        Ok(Payload {
            files: collected.files,
        })
    }
}

/// Receives what a payload's `tar` holds, in archive order, as [`read_tar`] checks it.
pub(crate) trait TarSink {
    /// The index, the archive's first entry.
    fn index(&mut self, index: Vec<IndexEntry>) -> Result<(), FormatError>;
    /// One regular file with a safe path, within the limits, after the index.
    fn file(&mut self, path: String, bytes: Vec<u8>) -> Result<(), FormatError>;
}

/// Reads a payload `tar` from `reader` into `sink`: regular files only, safe paths, within
/// the limits, the index first. `max_len` bounds how many bytes the reader can produce, so
/// that no entry reserves more memory than that, whatever its header claims. Checking the
/// files against the index is the sink's job.
pub(crate) fn read_tar(
    reader: impl Read,
    limits: &Limits,
    max_len: u64,
    sink: &mut impl TarSink,
) -> Result<(), FormatError> {
    let mut archive = tar::Archive::new(reader);
    let entries = archive
        .entries()
        .map_err(|e| FormatError::malformed("payload tar", e))?;
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
        let bytes = read_entry(&mut entry, &path, size, max_len)?;
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
        .zip(digest_all(files.values()))
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

/// The SHA-256 of every blob in lowercase hex, in order, spread over the cores for large
/// sets.
fn digest_all<'a>(blobs: impl Iterator<Item = &'a Vec<u8>>) -> Vec<String> {
    let blobs: Vec<&Vec<u8>> = blobs.collect();
    let total: usize = blobs.iter().map(|b| b.len()).sum();
    if total < crate::PARALLEL_MIN_LEN {
        return blobs.iter().map(|b| crate::sha256_hex(b)).collect();
    }
    blobs.par_iter().map(|b| crate::sha256_hex(b)).collect()
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// Text that compresses about 3x, from a fixed seed.
    pub(crate) fn text(seed: u64, len: usize) -> Vec<u8> {
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

    #[test]
    fn parallel_hashes_are_in_order() {
        let blobs: Vec<Vec<u8>> = (0..50)
            .map(|i| text(i, 1_000 + i as usize * 50_000))
            .collect();
        let serial: Vec<String> = blobs.iter().map(|b| crate::sha256_hex(b)).collect();
        assert_eq!(digest_all(blobs.iter()), serial);
        assert_eq!(digest_all(blobs[..1].iter()), serial[..1]);
        assert!(digest_all(std::iter::empty()).is_empty());
    }
}
