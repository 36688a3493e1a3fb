//! The one way promptpack writes a file whole: the client's cache, packer's outputs, the
//! agent's data directory and packd's ready file all go through [`write`] or [`stage`].
//!
//! One durability rule: the bytes go to a temporary file in the destination's own directory
//! (same file system, so the rename is atomic), the file is synced, renamed into place, and
//! the directory is synced, so that after a crash the name holds the old file or the new
//! one, never half of either, and a write that returned survives a power cut. A file system
//! that cannot sync a directory at all (it answers `EINVAL` or `ENOTSUP`) is accepted: the
//! rename has happened atomically, and there is nothing more it can make durable.
//!
//! The temporary file is named `.NAME.tmp-PID-RAND` ([`temp_file_writer`] reads the PID
//! back), so that a reader of the directory can tell a killed writer's leftover from a
//! write in progress. It is removed on every failure.

use std::fs::{File, OpenOptions};
use std::hash::{BuildHasher as _, Hasher as _};
use std::io::{ErrorKind, Write as _};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// Characters of randomness after the PID in a temporary file's name.
pub const TEMP_RAND_LEN: usize = 8;

/// Writes `bytes` to `path` whole, replacing what is there. The file gets the mode a plain
/// create gives (0666 less the umask), not a temporary file's private 0600: rewriting a
/// file must not change who may read it.
pub fn write(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    stage(path, bytes, None)?.commit()
}

/// Writes `bytes` to a synced temporary file beside `dest`, to be moved into place by
/// [`Staged::commit`] or [`Staged::commit_new`]: a command that writes several outputs
/// stages them all before it places any. `mode` sets the file's permissions exactly (Unix);
/// `None` gives what a plain create gives.
pub fn stage(dest: &Path, bytes: &[u8], mode: Option<u32>) -> std::io::Result<Staged> {
    let dir = parent_dir(dest);
    let name = dest
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let (file, temp) = create_temp(&dir, &name)?;
    let staged = Staged {
        temp,
        dest: dest.to_path_buf(),
        placed: false,
    };
    fill(file, bytes, mode, &staged.temp)?;
    Ok(staged)
}

/// A written and synced temporary file, waiting to be moved into place. Dropped without
/// being placed, it is removed.
#[derive(Debug)]
pub struct Staged {
    temp: PathBuf,
    dest: PathBuf,
    placed: bool,
}

/// Whether [`Staged::commit_new`] moved the file into place.
#[must_use]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Placed {
    Yes,
    /// Something was at the destination: it was left as it was, and the temporary file
    /// removed.
    Taken,
}

impl Staged {
    /// Where the file will go.
    pub fn dest(&self) -> &Path {
        &self.dest
    }

    /// Renames the temporary file over the destination, then syncs the directory.
    pub fn commit(mut self) -> std::io::Result<()> {
        std::fs::rename(&self.temp, &self.dest)?;
        self.placed = true;
        sync_dir(&parent_dir(&self.dest))
    }

    /// Moves the temporary file into place only if nothing is at the destination, in one
    /// step that cannot replace what another process put there after any check (a hard
    /// link, which fails on an existing name, then the temporary name is removed), then
    /// syncs the directory.
    pub fn commit_new(mut self) -> std::io::Result<Placed> {
        match std::fs::hard_link(&self.temp, &self.dest) {
            Ok(()) => {}
            Err(e) if e.kind() == ErrorKind::AlreadyExists => return Ok(Placed::Taken),
            Err(e) => return Err(e),
        }
        self.placed = true;
        std::fs::remove_file(&self.temp)?;
        sync_dir(&parent_dir(&self.dest))?;
        Ok(Placed::Yes)
    }
}

impl Drop for Staged {
    fn drop(&mut self) {
        if !self.placed {
            let _ = std::fs::remove_file(&self.temp);
        }
    }
}

/// The PID of the writer of a temporary file named `.NAME.tmp-PID-RAND`, `None` for any
/// other name.
pub fn temp_file_writer(name: &str) -> Option<u32> {
    let rest = name.strip_prefix('.')?;
    let (_, tail) = rest.rsplit_once(".tmp-")?;
    let (pid, random) = tail.split_once('-')?;
    if random.len() != TEMP_RAND_LEN || !random.bytes().all(|b| b.is_ascii_alphanumeric()) {
        return None;
    }
    pid.parse().ok()
}

/// The directory a path lives in (`.` for a bare file name).
pub fn parent_dir(path: &Path) -> PathBuf {
    match path.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent.to_path_buf(),
        _ => PathBuf::from("."),
    }
}

/// Syncs a directory, so that a rename in it survives a power cut. A file system that
/// cannot sync a directory answers `EINVAL` or `ENOTSUP`: that is not an error.
pub fn sync_dir(dir: &Path) -> std::io::Result<()> {
    match File::open(dir).and_then(|d| d.sync_all()) {
        Ok(()) => Ok(()),
        Err(e) if matches!(e.kind(), ErrorKind::InvalidInput | ErrorKind::Unsupported) => Ok(()),
        Err(e) => Err(e),
    }
}

/// Creates `.NAME.tmp-PID-RAND` in `dir`, a new name each try.
fn create_temp(dir: &Path, name: &str) -> std::io::Result<(File, PathBuf)> {
    let pid = std::process::id();
    let mut tries = 0;
    loop {
        let path = dir.join(format!(".{name}.tmp-{pid}-{}", random_suffix()));
        let mut options = OpenOptions::new();
        options.write(true).create_new(true);
        #[cfg(unix)]
        {
            use std::os::unix::fs::OpenOptionsExt as _;
            options.mode(0o666);
        }
        match options.open(&path) {
            Ok(file) => return Ok((file, path)),
            Err(e) if e.kind() == ErrorKind::AlreadyExists && tries < 16 => tries += 1,
            Err(e) => return Err(e),
        }
    }
}

/// Writes, sets the mode and syncs the temporary file; on failure the caller's [`Staged`]
/// removes it.
fn fill(mut file: File, bytes: &[u8], mode: Option<u32>, temp: &Path) -> std::io::Result<()> {
    #[cfg(unix)]
    if let Some(mode) = mode {
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::set_permissions(temp, std::fs::Permissions::from_mode(mode))?;
    }
    #[cfg(not(unix))]
    let _ = (mode, temp);
    file.write_all(bytes)?;
    file.sync_all()
}

/// [`TEMP_RAND_LEN`] letters and digits, different on every call in this process and, with
/// the PID in the name, from every other writer's.
fn random_suffix() -> String {
    static CALLS: AtomicU64 = AtomicU64::new(0);
    const ALPHABET: &[u8; 36] = b"0123456789abcdefghijklmnopqrstuvwxyz";
    // The standard library's hasher keys are random per process.
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u64(CALLS.fetch_add(1, Ordering::Relaxed));
    let mut bits = hasher.finish();
    (0..TEMP_RAND_LEN)
        .map(|_| {
            let c = ALPHABET[(bits % 36) as usize];
            bits /= 36;
            char::from(c)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_write_replaces_the_file_whole_and_leaves_no_temporary_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.json");
        write(&path, b"old").unwrap();
        write(&path, b"new").unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"new");
        let names: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, ["state.json"]);
    }

    #[test]
    fn a_staged_file_carries_its_writer_and_is_removed_when_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let dest = dir.path().join("a.pack");
        let staged = stage(&dest, b"bytes", None).unwrap();
        let temp = staged.temp.clone();
        let name = temp.file_name().unwrap().to_string_lossy().into_owned();
        assert_eq!(temp_file_writer(&name), Some(std::process::id()));
        drop(staged);
        assert!(!temp.exists() && !dest.exists());
    }

    #[test]
    fn commit_new_never_replaces_what_is_there() {
        let dir = tempfile::tempdir().unwrap();
        let dest = dir.path().join("key");
        std::fs::write(&dest, b"theirs").unwrap();
        let placed = stage(&dest, b"ours", None).unwrap().commit_new().unwrap();
        assert_eq!(placed, Placed::Taken);
        assert_eq!(std::fs::read(&dest).unwrap(), b"theirs");
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
        std::fs::remove_file(&dest).unwrap();
        let placed = stage(&dest, b"ours", None).unwrap().commit_new().unwrap();
        assert_eq!(placed, Placed::Yes);
        assert_eq!(std::fs::read(&dest).unwrap(), b"ours");
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
    }

    #[cfg(unix)]
    #[test]
    fn a_given_mode_is_set_exactly() {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = tempfile::tempdir().unwrap();
        let dest = dir.path().join("secret");
        stage(&dest, b"s", Some(0o600)).unwrap().commit().unwrap();
        let mode = std::fs::metadata(&dest).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
    }

    #[test]
    fn temp_file_names_give_their_writer() {
        assert_eq!(
            temp_file_writer(".state.json.tmp-4242-0a1b2c3d"),
            Some(4242)
        );
        assert_eq!(temp_file_writer(".abc.pack.tmp-7-Xy3kQ9zA"), Some(7));
        assert_eq!(temp_file_writer("state.json"), None);
        assert_eq!(temp_file_writer(".state.json.tmp-x-0a1b2c3d"), None);
        assert_eq!(temp_file_writer(".state.json.tmp-1-short"), None);
        assert_eq!(temp_file_writer("abc.pack"), None);
    }
}
