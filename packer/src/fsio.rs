//! Files written so that a crash or an error never leaves a half-written output: every
//! output goes to a temporary file in the destination's own directory (same file system,
//! so the rename is atomic), is flushed to disk, then renamed over the destination.

use std::fs::File;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result, bail};
use indicatif::{ProgressBar, ProgressStyle};
use tempfile::NamedTempFile;

use crate::shown;

/// The directory a path lives in (`.` for a bare file name).
pub fn parent_dir(path: &Path) -> PathBuf {
    match path.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent.to_path_buf(),
        _ => PathBuf::from("."),
    }
}

/// A fully written and synced temporary file, waiting to be renamed into place.
pub struct Staged {
    file: NamedTempFile,
    dest: PathBuf,
}

/// Writes `bytes` to a temporary file next to `dest` with permissions `mode`, synced.
pub fn stage(dest: &Path, bytes: &[u8], mode: u32) -> Result<Staged> {
    let dir = parent_dir(dest);
    std::fs::create_dir_all(&dir).with_context(|| format!("creating directory {}", shown(&dir)))?;
    let mut file = tempfile::Builder::new()
        .prefix(".packer-")
        .suffix(".tmp")
        .tempfile_in(&dir)
        .with_context(|| {
            format!(
                "creating a temporary file in {} for {}",
                shown(&dir),
                shown(dest)
            )
        })?;
    set_mode(file.path(), mode)?;
    file.write_all(bytes)
        .and_then(|()| file.as_file().sync_all())
        .with_context(|| format!("writing {}", shown(dest)))?;
    Ok(Staged {
        file,
        dest: dest.to_path_buf(),
    })
}

impl Staged {
    /// Renames the temporary file over the destination and syncs the directory.
    pub fn commit(self) -> Result<()> {
        let Staged { file, dest } = self;
        file.persist(&dest)
            .map_err(|e| e.error)
            .with_context(|| format!("moving the new {} into place", shown(&dest)))?;
        sync_dir(&parent_dir(&dest));
        Ok(())
    }
}

#[cfg(unix)]
pub fn set_mode(path: &Path, mode: u32) -> Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
        .with_context(|| format!("setting permissions on {}", shown(path)))
}

#[cfg(not(unix))]
pub fn set_mode(_path: &Path, _mode: u32) -> Result<()> {
    Ok(())
}

/// Makes a rename durable. Best effort: some file systems refuse to sync a directory, and
/// the rename itself has already happened atomically.
pub fn sync_dir(dir: &Path) {
    if let Ok(handle) = File::open(dir) {
        let _ = handle.sync_all();
    }
}

/// Reads a whole file, refusing one over `limit` bytes before reading it (and if it grows
/// or shrinks while being read). A large regular file is read in parts on every core at
/// once: copying tens of MB out of the page cache into fresh memory is mostly page faults,
/// and nothing else can start before it ends.
pub fn read_limited(path: &Path, limit: u64, what: &str) -> Result<Vec<u8>> {
    let file = File::open(path).with_context(|| format!("opening {what} {}", shown(path)))?;
    let meta = file
        .metadata()
        .with_context(|| format!("reading {what} {}", shown(path)))?;
    let len = meta.len();
    if len > limit {
        bail!(
            "{what} {} is {len} bytes, over the limit of {limit} bytes",
            shown(path)
        );
    }
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    #[cfg(unix)]
    if meta.is_file() && threads > 1 && len >= PARALLEL_READ_MIN {
        return read_in_parts(&file, len, threads)
            .with_context(|| format!("reading {what} {}", shown(path)));
    }
    let mut bytes = Vec::with_capacity(len as usize);
    file.take(limit + 1)
        .read_to_end(&mut bytes)
        .with_context(|| format!("reading {what} {}", shown(path)))?;
    if bytes.len() as u64 > limit {
        bail!(
            "{what} {} grew past the limit of {limit} bytes while being read",
            shown(path)
        );
    }
    Ok(bytes)
}

/// Files from this size on are read on several threads.
const PARALLEL_READ_MIN: u64 = 4 << 20;

/// Reads exactly `len` bytes of `file` in `threads` parts side by side, then checks that
/// nothing follows them.
#[cfg(unix)]
fn read_in_parts(file: &File, len: u64, threads: usize) -> std::io::Result<Vec<u8>> {
    use std::os::unix::fs::FileExt;
    let changed = || std::io::Error::other("the file changed while being read; try again");
    let mut bytes = vec![0; len as usize];
    let part = bytes.len().div_ceil(threads).max(1);
    std::thread::scope(|scope| {
        let reads: Vec<_> = bytes
            .chunks_mut(part)
            .enumerate()
            .map(|(i, chunk)| scope.spawn(move || file.read_exact_at(chunk, (i * part) as u64)))
            .collect();
        reads.into_iter().try_for_each(|read| {
            joined(read).map_err(|e| match e.kind() {
                std::io::ErrorKind::UnexpectedEof => changed(),
                _ => e,
            })
        })
    })?;
    if file.read_at(&mut [0], len)? != 0 {
        return Err(changed());
    }
    Ok(bytes)
}

/// A progress bar on stderr (hidden when stderr is not a terminal).
pub fn bar(len: u64, message: &'static str) -> ProgressBar {
    let bar = ProgressBar::new(len);
    if let Ok(style) = ProgressStyle::with_template("{msg} [{bar:30}] {pos}/{len}") {
        bar.set_style(style.progress_chars("=> "));
    }
    bar.set_message(message);
    bar
}

/// A spinner on stderr for one step of unknown length (hidden when stderr is not a terminal).
pub fn spinner(message: &'static str) -> ProgressBar {
    let spinner = ProgressBar::new_spinner();
    spinner.set_message(message);
    spinner.enable_steady_tick(Duration::from_millis(100));
    spinner
}

/// What a scoped thread returned; its panic, if it panicked, goes on in this thread.
pub fn joined<T>(thread: std::thread::ScopedJoinHandle<'_, T>) -> T {
    thread
        .join()
        .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_large_file_read_in_parts_is_every_byte_in_order() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("big.pack");
        // Not a multiple of the part size, and no two 4 KiB pages alike.
        let bytes: Vec<u8> = (0..(PARALLEL_READ_MIN as usize * 2 + 12_345))
            .map(|i| (i % 251) as u8 ^ (i / 4096) as u8)
            .collect();
        std::fs::write(&path, &bytes).unwrap();
        let read = read_limited(&path, 64 << 20, "pack").unwrap();
        assert!(read == bytes, "the bytes read differ from the file's");
        let refused = read_limited(&path, bytes.len() as u64 - 1, "pack").unwrap_err();
        assert!(
            refused.to_string().contains("over the limit"),
            "{refused:#}"
        );
    }
}
