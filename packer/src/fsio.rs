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
/// while being read).
pub fn read_limited(path: &Path, limit: u64, what: &str) -> Result<Vec<u8>> {
    let file = File::open(path).with_context(|| format!("opening {what} {}", shown(path)))?;
    let len = file
        .metadata()
        .with_context(|| format!("reading {what} {}", shown(path)))?
        .len();
    if len > limit {
        bail!(
            "{what} {} is {len} bytes, over the limit of {limit} bytes",
            shown(path)
        );
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
