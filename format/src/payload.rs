//! The payload inside a sealed pack: a standard `tar.zst` whose first entry is an index of
//! every file's path, size and SHA-256, followed by the files in path order.

use std::collections::BTreeMap;
use std::io::Read;

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
        self.files
            .iter()
            .map(|(path, bytes)| IndexEntry {
                path: path.clone(),
                size: bytes.len() as u64,
                sha256: sha256_hex(bytes),
            })
            .collect()
    }

    /// The uncompressed `tar`: index first, then files in path order, every header fixed
    /// (mode 0644, owner 0, `mtime`) so the same files and `mtime` give the same bytes.
    pub fn to_tar(&self, mtime: u64) -> Result<Vec<u8>, FormatError> {
        let index = Index {
            format: INDEX_FORMAT,
            files: self.index(),
        };
        let index_bytes = serde_json::to_vec_pretty(&index)
            .map_err(|e| FormatError::malformed("payload index", e))?;
        let capacity = self.total_size() as usize + (self.files.len() + 2) * 1024;
        let mut builder = tar::Builder::new(Vec::with_capacity(capacity));
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
    pub fn to_tar_zst(&self, mtime: u64, level: i32) -> Result<Vec<u8>, FormatError> {
        let tar = self.to_tar(mtime)?;
        compress(&tar, level)
    }

    /// Reads a decompressed `tar` payload: regular files only, safe paths, within the
    /// limits, index first and matching every file exactly.
    pub fn from_tar(tar_bytes: &[u8], limits: &Limits) -> Result<Self, FormatError> {
        let mut archive = tar::Archive::new(tar_bytes);
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
                let bytes = read_entry(&mut entry, &path, size, tar_bytes.len())?;
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
            let bytes = read_entry(&mut entry, &path, size, tar_bytes.len())?;
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
    pub fn from_tar_zst(compressed: &[u8], limits: &Limits) -> Result<Self, FormatError> {
        let tar = decompress(compressed, limits)?;
        Self::from_tar(&tar, limits)
    }
}

fn read_entry(
    entry: &mut impl Read,
    path: &str,
    size: u64,
    archive_len: usize,
) -> Result<Vec<u8>, FormatError> {
    // `size` is only what the tar header claims (already checked against the limits): an
    // entry cannot hold more bytes than the whole archive, so never reserve more than that.
    let mut bytes = Vec::with_capacity((size as usize).min(archive_len));
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
    for entry in index {
        let Some(bytes) = files.get(&entry.path) else {
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
        let found = sha256_hex(bytes);
        if found != entry.sha256 {
            return Err(FormatError::HashMismatch {
                what: entry.path.clone(),
                expected: entry.sha256.clone(),
                found,
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
    let workers = std::thread::available_parallelism().map_or(1, |n| n.get() as u32);
    let mut encoder = zstd::stream::Encoder::new(Vec::with_capacity(bytes.len() / 3 + 1024), level)
        .map_err(|e| FormatError::io("starting zstd", e))?;
    encoder
        .multithread(workers)
        .map_err(|e| FormatError::io("starting zstd workers", e))?;
    encoder
        .include_checksum(true)
        .map_err(|e| FormatError::io("configuring zstd", e))?;
    std::io::Write::write_all(&mut encoder, bytes)
        .map_err(|e| FormatError::io("compressing the payload", e))?;
    encoder
        .finish()
        .map_err(|e| FormatError::io("finishing zstd", e))
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
