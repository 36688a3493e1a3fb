//! Files written so that a crash or an error never leaves a half-written output: every
//! output goes to a temporary file in the destination's own directory (same file system,
//! so the rename is atomic), is flushed to disk, then moved into place: over the
//! destination, or, for outputs that must never replace anything, only where nothing is.

use std::fs::File;
use std::io::Read;
use std::path::Path;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use indicatif::{ProgressBar, ProgressStyle};

use crate::shown;

pub use pack_format::atomic::{Placed, parent_dir};

/// A fully written and synced temporary file, waiting to be moved into place (the one
/// atomic write, [`pack_format::atomic`], with the error naming packer's output).
pub struct Staged(pack_format::atomic::Staged);

/// Writes `bytes` to a temporary file next to `dest` with permissions `mode`, synced.
pub fn stage(dest: &Path, bytes: &[u8], mode: u32) -> Result<Staged> {
    let dir = parent_dir(dest);
    std::fs::create_dir_all(&dir).with_context(|| format!("creating directory {}", shown(&dir)))?;
    pack_format::atomic::stage(dest, bytes, Some(mode))
        .map(Staged)
        .with_context(|| {
            format!(
                "writing {} (through a temporary file beside it)",
                shown(dest)
            )
        })
}

impl Staged {
    /// Renames the temporary file over the destination and syncs the directory.
    pub fn commit(self) -> Result<()> {
        let dest = self.0.dest().to_path_buf();
        self.0
            .commit()
            .with_context(|| format!("moving the new {} into place", shown(&dest)))
    }

    /// Moves the temporary file into place only if nothing is at the destination, in one
    /// step that cannot replace a file another process put there after any check of ours,
    /// and syncs the directory. [`Placed::Taken`]: something was there, and is left as it was.
    pub fn commit_new(self) -> Result<Placed> {
        let dest = self.0.dest().to_path_buf();
        self.0
            .commit_new()
            .with_context(|| format!("moving the new {} into place", shown(&dest)))
    }
}

/// Renames the directory `from` to `to` only if nothing is at `to`: an error of kind
/// `AlreadyExists` when something is, and then nothing moved. A plain `rename` would
/// replace an empty directory at `to`.
pub fn rename_dir_new(from: &Path, to: &Path) -> std::io::Result<()> {
    #[cfg(any(target_os = "linux", target_os = "android", target_vendor = "apple"))]
    {
        use rustix::fs::{CWD, RenameFlags, renameat_with};
        match renameat_with(CWD, from, CWD, to, RenameFlags::NOREPLACE) {
            Ok(()) => return Ok(()),
            // A file system (or kernel) without the flag: claim the name as below.
            Err(rustix::io::Errno::INVAL | rustix::io::Errno::NOSYS) => {}
            Err(e) => return Err(e.into()),
        }
    }
    // Claim the name with `mkdir`, which fails if anything is there, then rename over the
    // empty directory just made (rename replaces an empty directory). Between the two
    // calls the name is an empty directory.
    std::fs::create_dir(to)?;
    std::fs::rename(from, to).inspect_err(|_| {
        let _ = std::fs::remove_dir(to);
    })
}

/// Tests only (debug builds): with `PACKER_TEST_PAUSE_BEFORE_PLACING=FILE` a command that
/// must not replace its output creates FILE once the output is staged and waits until
/// FILE is removed before moving it into place, so that a test can make another writer
/// take the output name first, at exactly that moment.
#[cfg(debug_assertions)]
pub fn pause_before_placing() {
    let Some(signal) = std::env::var_os("PACKER_TEST_PAUSE_BEFORE_PLACING") else {
        return;
    };
    let signal = std::path::PathBuf::from(signal);
    if std::fs::write(&signal, b"").is_err() {
        return;
    }
    while signal.exists() {
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[cfg(not(debug_assertions))]
pub fn pause_before_placing() {}

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

/// Makes a rename of a directory tree durable (see [`pack_format::atomic::sync_dir`]). Best
/// effort: the rename itself has already happened atomically, and the output is complete.
pub fn sync_dir(dir: &Path) {
    let _ = pack_format::atomic::sync_dir(dir);
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
