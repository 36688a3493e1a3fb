//! The file view: the pack that serves, as plain read-only files, for agents that read their
//! prompts from files (an agent spec's system prompt path, an instruction file).
//!
//! ```text
//! <cache>/files/current -> builtin-1.2.0-3f2a9c1e     the link (name from the config)
//! <cache>/files/builtin-1.2.0-3f2a9c1e/               one directory per pack version:
//!     .promptpack.json                                name, version, source, sha256, schema,
//!                                                     and each file's SHA-256
//!     agents/mavis/agent.md …                         the pack's files, as in the pack
//! <cache>/files/builtin-0.0.0-8d0e51b4/               the built-in pack, the same way
//! <cache>/files/.lock                                 held while a process changes the view
//! ```
//!
//! A version directory is written whole into a hidden staging directory, every file and
//! directory synced, files made 0444 and directories 0555, then renamed into place; the link
//! is swapped by making the new link beside it and renaming it over the old one. A reader
//! that resolves the link once (`realpath`) and reads every file of a request under the
//! resolved path reads one pack version, whatever swaps happen meanwhile.
//!
//! A directory the link stops naming stays for the grace period (its modification time is
//! set when it stops serving), then goes at the next sweep. Every change happens under
//! `.lock`, so a sweep never races a publish of another process sharing the cache, and
//! anything hidden found under the lock (a staging directory, a half-made link) belongs to a
//! process that died mid-write.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write as _;
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use serde::Serialize;

use crate::config::FilesConfig;
use crate::snapshot::{Snapshot, SnapshotMeta, Source};

/// The view's directory under the cache.
pub const FILES_DIR: &str = "files";
/// The manifest every version directory holds beside the pack's files.
pub const MANIFEST: &str = ".promptpack.json";
const LOCK: &str = ".lock";
/// How long a publish or sweep waits for another process's hold on `.lock`.
const LOCK_WAIT: Duration = Duration::from_secs(10);
const FILE_MODE: u32 = 0o444;
const DIR_MODE: u32 = 0o555;

/// Why the view was not brought up to date. The link still names what it named before.
#[derive(Debug, thiserror::Error)]
pub enum FileViewError {
    #[error("file view {path}: {action}: {source}")]
    Io {
        path: String,
        action: &'static str,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "file view: pack {pack} has a file named {MANIFEST}, the name the view keeps for its manifest; the view still shows the previous version"
    )]
    Reserved { pack: String },
    #[error(
        "file view: another process held {path} for {seconds}s (suspended?); the view was not changed"
    )]
    Busy { path: String, seconds: u64 },
}

/// The manifest of one version directory (`.promptpack.json`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Manifest {
    pub name: String,
    pub version: String,
    pub source: Source,
    /// SHA-256 of the sealed pack (remote) or of the built-in pack's canonical tar.
    pub sha256: String,
    pub schema: u32,
    /// Every file of the pack with its SHA-256, by path.
    pub files: BTreeMap<String, String>,
}

impl Manifest {
    fn of(snapshot: &Snapshot) -> Self {
        let meta = snapshot.meta();
        Manifest {
            name: meta.name.clone(),
            version: meta.version.to_string(),
            source: meta.source,
            sha256: meta.sha256.clone(),
            schema: meta.schema,
            files: snapshot
                .keys()
                .into_iter()
                .map(|key| {
                    let bytes = snapshot.get(key).unwrap_or_default();
                    (key.to_string(), pack_format::sha256_hex(bytes))
                })
                .collect(),
        }
    }

    fn bytes(&self) -> Vec<u8> {
        let mut text = serde_json::to_vec_pretty(self).unwrap_or_default();
        text.push(b'\n');
        text
    }
}

/// The directory name of a pack version: `<name>-<version>-<first 8 of sha256>`.
pub fn dir_name(meta: &SnapshotMeta) -> String {
    let short: String = meta.sha256.chars().take(8).collect();
    format!("{}-{}-{short}", meta.name, meta.version)
}

/// What a publish did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Published {
    /// The link names this version directory (it may have named it before).
    Current { dir: String, moved: bool },
    /// Another process wrote a newer state meanwhile; it publishes what that state serves.
    Superseded,
}

/// The file view of one cache, for one link name.
#[derive(Debug, Clone)]
pub struct FileView {
    dir: PathBuf,
    link: String,
    grace: Duration,
}

impl FileView {
    pub fn new(cache_dir: &Path, config: &FilesConfig) -> Self {
        FileView {
            dir: cache_dir.join(FILES_DIR),
            link: config.link.clone(),
            grace: config.grace,
        }
    }

    /// `<cache>/files`.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The link readers resolve: `<cache>/files/<link>`.
    pub fn link_path(&self) -> PathBuf {
        self.dir.join(&self.link)
    }

    pub fn grace(&self) -> Duration {
        self.grace
    }

    /// The version directory the link names now, resolved (what a reader reads under).
    pub fn resolve(&self) -> Option<PathBuf> {
        std::fs::canonicalize(self.link_path()).ok()
    }

    /// Makes the link name a verified directory of `snapshot`, unless `still_current` says
    /// (under the view's lock) that another process has since written a newer state. Then
    /// sweeps directories out of their grace period (`now`). On error the link is untouched.
    pub fn publish(
        &self,
        snapshot: &Snapshot,
        now: SystemTime,
        still_current: impl FnOnce() -> bool,
    ) -> Result<Published, FileViewError> {
        if snapshot.get(MANIFEST).is_some() {
            return Err(FileViewError::Reserved {
                pack: format!("{} {}", snapshot.name(), snapshot.version()),
            });
        }
        std::fs::create_dir_all(&self.dir).map_err(|e| self.io(&self.dir, "creating", e))?;
        let _lock = self.lock()?;
        self.remove_abandoned();
        if !still_current() {
            return Ok(Published::Superseded);
        }
        let name = dir_name(snapshot.meta());
        let manifest = Manifest::of(snapshot);
        let target = self.dir.join(&name);
        if !verify(&target, snapshot, &manifest) {
            self.write_version(&target, snapshot, &manifest)?;
        }
        let before = std::fs::read_link(self.link_path()).ok();
        let moved = before.as_deref() != Some(Path::new(&name));
        if moved {
            // Retired before the swap, so a crash between the two never leaves a directory
            // that stopped serving with an old time a sweep would take at once.
            if let Some(old) = &before {
                retire(&self.dir.join(old), now);
            }
            self.swap_link(&name)?;
        }
        self.sweep_locked(now);
        Ok(Published::Current { dir: name, moved })
    }

    /// Removes the version directories that no link names and that stopped serving more
    /// than the grace period before `now`. Returns their names.
    pub fn sweep(&self, now: SystemTime) -> Result<Vec<String>, FileViewError> {
        if !self.dir.exists() {
            return Ok(Vec::new());
        }
        let _lock = self.lock()?;
        self.remove_abandoned();
        Ok(self.sweep_locked(now))
    }

    fn sweep_locked(&self, now: SystemTime) -> Vec<String> {
        let Ok(entries) = std::fs::read_dir(&self.dir) else {
            return Vec::new();
        };
        let mut linked = BTreeSet::new();
        let mut versions = Vec::new();
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            let Ok(kind) = entry.file_type() else {
                continue;
            };
            if kind.is_symlink() {
                // Every link counts, not only this config's: another release sharing the
                // cache may keep its own.
                if let Ok(target) = std::fs::read_link(entry.path()) {
                    linked.insert(target.to_string_lossy().into_owned());
                }
            } else if kind.is_dir() && !name.starts_with('.') {
                versions.push(entry);
            }
        }
        let mut removed = Vec::new();
        for entry in versions {
            let name = entry.file_name().to_string_lossy().into_owned();
            if linked.contains(&name) {
                continue;
            }
            let retired = entry.metadata().and_then(|m| m.modified());
            let due = retired.is_ok_and(|at| at + self.grace <= now);
            if !due {
                continue;
            }
            match self.remove_dir(&entry.path()) {
                Ok(()) => removed.push(name),
                Err(e) => tracing::warn!("{e}"),
            }
        }
        removed
    }

    /// Hidden entries other than the lock: with the lock held, nobody is writing them.
    fn remove_abandoned(&self) {
        let Ok(entries) = std::fs::read_dir(&self.dir) else {
            return;
        };
        for entry in entries.flatten() {
            let name = entry.file_name();
            let name = name.to_string_lossy();
            if !name.starts_with('.') || name == LOCK {
                continue;
            }
            let result = match entry.file_type() {
                Ok(kind) if kind.is_dir() => self.remove_dir(&entry.path()),
                Ok(_) | Err(_) => std::fs::remove_file(entry.path())
                    .map_err(|e| self.io(&entry.path(), "removing", e)),
            };
            if let Err(e) = result {
                tracing::warn!("{e}");
            }
        }
    }

    /// Writes `snapshot` into a staging directory and renames it to `target`, replacing a
    /// damaged directory of that name if there is one.
    fn write_version(
        &self,
        target: &Path,
        snapshot: &Snapshot,
        manifest: &Manifest,
    ) -> Result<(), FileViewError> {
        let staging = self.dir.join(hidden_name("staging"));
        let written = self.write_tree(&staging, snapshot, manifest);
        if let Err(e) = written {
            let _ = self.remove_dir(&staging);
            return Err(e);
        }
        if std::fs::symlink_metadata(target).is_ok() {
            tracing::warn!(
                "file view {}: not what the pack holds; writing it again",
                target.display()
            );
            let trash = self.dir.join(hidden_name("trash"));
            if let Err(e) = std::fs::rename(target, &trash) {
                let _ = self.remove_dir(&staging);
                return Err(self.io(target, "moving aside", e));
            }
            let _ = self.remove_dir(&trash);
        }
        if let Err(e) = std::fs::rename(&staging, target) {
            let _ = self.remove_dir(&staging);
            return Err(self.io(target, "renaming into place", e));
        }
        sync_dir(&self.dir).map_err(|e| self.io(&self.dir, "syncing", e))
    }

    fn write_tree(
        &self,
        root: &Path,
        snapshot: &Snapshot,
        manifest: &Manifest,
    ) -> Result<(), FileViewError> {
        use std::os::unix::fs::OpenOptionsExt as _;
        std::fs::create_dir(root).map_err(|e| self.io(root, "creating", e))?;
        let mut dirs = BTreeSet::from([root.to_path_buf()]);
        let mut written = Vec::new();
        let files = snapshot
            .keys()
            .into_iter()
            .map(|key| {
                (
                    key.to_string(),
                    snapshot.get(key).unwrap_or_default().to_vec(),
                )
            })
            .chain([(MANIFEST.to_string(), manifest.bytes())]);
        for (key, bytes) in files {
            // Keys passed the format's path check: relative, `/`-separated, no `.` or `..`.
            let path = root.join(&key);
            let mut parent = path.parent();
            while let Some(dir) = parent.filter(|d| d.starts_with(root) && *d != root) {
                dirs.insert(dir.to_path_buf());
                parent = dir.parent();
            }
            if let Some(dir) = path.parent() {
                std::fs::create_dir_all(dir).map_err(|e| self.io(dir, "creating", e))?;
            }
            // Made read-only from the start: the handle opened for writing still writes.
            let mut file = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(FILE_MODE)
                .open(&path)
                .map_err(|e| self.io(&path, "creating", e))?;
            file.write_all(&bytes)
                .map_err(|e| self.io(&path, "writing", e))?;
            written.push(path);
        }
        for dir in &dirs {
            std::fs::set_permissions(dir, std::fs::Permissions::from_mode(DIR_MODE))
                .map_err(|e| self.io(dir, "making read-only", e))?;
        }
        // Synced together at the end rather than each right after its write: on ext4 syncs
        // that wait at the same moment share one journal commit, where syncing each file
        // right after its write made a first `pack-client status` many times slower.
        let syncs: Vec<&Path> = written
            .iter()
            .map(PathBuf::as_path)
            .chain(dirs.iter().map(PathBuf::as_path))
            .collect();
        sync_all_at_once(&syncs).map_err(|(path, e)| self.io(path, "syncing", e))
    }

    /// The new link beside the old, renamed over it: a reader sees the old or the new.
    fn swap_link(&self, target: &str) -> Result<(), FileViewError> {
        let tmp = self.dir.join(hidden_name(&self.link));
        std::os::unix::fs::symlink(target, &tmp).map_err(|e| self.io(&tmp, "linking", e))?;
        let link = self.link_path();
        if let Err(e) = std::fs::rename(&tmp, &link) {
            let _ = std::fs::remove_file(&tmp);
            return Err(self.io(&link, "swapping", e));
        }
        sync_dir(&self.dir).map_err(|e| self.io(&self.dir, "syncing", e))
    }

    /// Removes a version directory: out of the way first (one rename), then made writable
    /// and deleted.
    fn remove_dir(&self, dir: &Path) -> Result<(), FileViewError> {
        let hidden = dir
            .file_name()
            .is_some_and(|n| n.to_string_lossy().starts_with('.'));
        let doomed = if hidden {
            dir.to_path_buf()
        } else {
            let trash = self.dir.join(hidden_name("trash"));
            std::fs::rename(dir, &trash).map_err(|e| self.io(dir, "removing", e))?;
            trash
        };
        make_writable(&doomed);
        std::fs::remove_dir_all(&doomed).map_err(|e| self.io(&doomed, "removing", e))
    }

    fn lock(&self) -> Result<std::fs::File, FileViewError> {
        let path = self.dir.join(LOCK);
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .map_err(|e| self.io(&path, "opening", e))?;
        let until = std::time::Instant::now() + LOCK_WAIT;
        let mut pause = Duration::from_millis(5);
        loop {
            match file.try_lock() {
                Ok(()) => return Ok(file),
                Err(std::fs::TryLockError::WouldBlock) if std::time::Instant::now() < until => {
                    std::thread::sleep(pause);
                    pause = (pause * 2).min(Duration::from_millis(200));
                }
                Err(std::fs::TryLockError::WouldBlock) => {
                    return Err(FileViewError::Busy {
                        path: path.display().to_string(),
                        seconds: LOCK_WAIT.as_secs(),
                    });
                }
                Err(std::fs::TryLockError::Error(e)) => return Err(self.io(&path, "locking", e)),
            }
        }
    }

    fn io(&self, path: &Path, action: &'static str, source: std::io::Error) -> FileViewError {
        FileViewError::Io {
            path: path.display().to_string(),
            action,
            source,
        }
    }
}

/// Whether `dir` holds exactly the snapshot's files and manifest, with the view's modes.
fn verify(dir: &Path, snapshot: &Snapshot, manifest: &Manifest) -> bool {
    let Ok(meta) = std::fs::symlink_metadata(dir) else {
        return false;
    };
    if !meta.is_dir() || meta.permissions().mode() & 0o7777 != DIR_MODE {
        return false;
    }
    let mut found = BTreeMap::new();
    if !walk(dir, dir, &mut found) {
        return false;
    }
    let manifest_bytes = manifest.bytes();
    let expected = snapshot.keys().len() + 1;
    found.len() == expected
        && found.iter().all(|(key, path)| {
            let want = if key == MANIFEST {
                Some(&manifest_bytes[..])
            } else {
                snapshot.get(key)
            };
            want.is_some_and(|want| std::fs::read(path).is_ok_and(|have| have == want))
        })
}

/// Collects every file under `dir` by its `/`-separated key; `false` on anything but
/// regular files of mode 0444 and directories of mode 0555.
fn walk(root: &Path, dir: &Path, found: &mut BTreeMap<String, PathBuf>) -> bool {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return false;
    };
    for entry in entries {
        let Ok(entry) = entry else {
            return false;
        };
        let Ok(meta) = entry.path().symlink_metadata() else {
            return false;
        };
        let mode = meta.permissions().mode() & 0o7777;
        if meta.is_dir() {
            if mode != DIR_MODE || !walk(root, &entry.path(), found) {
                return false;
            }
        } else if meta.is_file() && mode == FILE_MODE {
            let Ok(rel) = entry.path().strip_prefix(root).map(Path::to_path_buf) else {
                return false;
            };
            let key = rel
                .components()
                .map(|c| c.as_os_str().to_string_lossy().into_owned())
                .collect::<Vec<_>>()
                .join("/");
            found.insert(key, entry.path());
        } else {
            return false;
        }
    }
    true
}

/// Marks a version directory as no longer serving: its modification time is when it
/// stopped (nothing is ever written into it, so nothing else moves that time).
fn retire(dir: &Path, now: SystemTime) {
    let result = std::fs::File::open(dir).and_then(|d| d.set_modified(now));
    if let Err(e) = result {
        tracing::warn!(
            "file view {}: could not mark it retired: {e}",
            dir.display()
        );
    }
}

fn make_writable(dir: &Path) {
    let _ = std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755));
    if let Ok(entries) = std::fs::read_dir(dir) {
        for entry in entries.flatten() {
            if entry.file_type().is_ok_and(|k| k.is_dir()) {
                make_writable(&entry.path());
            }
        }
    }
}

/// How many syncs wait at once (see [`FileView::write_tree`]); a pack has tens to a few
/// hundred files.
const SYNC_THREADS: usize = 32;

/// Syncs every path (files and directories) on up to [`SYNC_THREADS`] threads that share
/// one queue; the first failure stops the rest.
fn sync_all_at_once<'a>(paths: &[&'a Path]) -> Result<(), (&'a Path, std::io::Error)> {
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    let next = AtomicUsize::new(0);
    let failed = AtomicBool::new(false);
    let worker = || -> Result<(), (&'a Path, std::io::Error)> {
        while !failed.load(Ordering::Relaxed) {
            let Some(path) = paths.get(next.fetch_add(1, Ordering::Relaxed)) else {
                return Ok(());
            };
            std::fs::File::open(path)
                .and_then(|f| f.sync_all())
                .map_err(|e| {
                    failed.store(true, Ordering::Relaxed);
                    (*path, e)
                })?;
        }
        Ok(())
    };
    std::thread::scope(|scope| {
        let mut threads = Vec::new();
        for _ in 1..SYNC_THREADS.min(paths.len()) {
            let thread = std::thread::Builder::new().stack_size(64 << 10);
            // Fewer threads if the system refuses more: they share one queue.
            match thread.spawn_scoped(scope, worker) {
                Ok(thread) => threads.push(thread),
                Err(_) => break,
            }
        }
        let here = worker();
        for thread in threads {
            match thread.join() {
                Ok(result) => result?,
                Err(panic) => std::panic::resume_unwind(panic),
            }
        }
        here
    })
}

fn sync_dir(dir: &Path) -> std::io::Result<()> {
    std::fs::File::open(dir)?.sync_all()
}

/// `.NAME.tmp-PID-RAND`, the cache's temp-file naming.
fn hidden_name(name: &str) -> String {
    format!(
        ".{name}.tmp-{}-{:08x}",
        std::process::id(),
        rand::random::<u32>()
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};

    /// Link swaps the reader races in the consistency test.
    const SWAPS: usize = 200;

    const GRACE: Duration = Duration::from_secs(600);

    /// A pack of `version` whose every file says which version it is.
    fn pack(version: &str) -> Snapshot {
        pack_with(version, &[])
    }

    fn pack_with(version: &str, extra: &[(&str, &str)]) -> Snapshot {
        let files = [
            ("system.md", format!("system prompt of {version}\n")),
            ("agents/kimi/agent.md", format!("agent spec of {version}\n")),
            (
                "agents/kimi/tools/notes.md",
                format!("tool notes of {version}\n"),
            ),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.into_bytes()))
        .chain(
            extra
                .iter()
                .map(|(k, v)| (k.to_string(), v.as_bytes().to_vec())),
        );
        let meta = SnapshotMeta {
            name: "demo".to_string(),
            version: version.parse().unwrap(),
            sequence: 1,
            source: Source::Remote,
            sha256: pack_format::sha256_hex(version.as_bytes()),
            schema: 1,
        };
        Snapshot::new(meta, files).unwrap()
    }

    fn view(cache: &Path) -> FileView {
        FileView::new(
            cache,
            &FilesConfig {
                link: "current".to_string(),
                grace: GRACE,
            },
        )
    }

    fn t(secs: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000 + secs)
    }

    fn publish(view: &FileView, snapshot: &Snapshot, now: SystemTime) -> String {
        match view.publish(snapshot, now, || true).unwrap() {
            Published::Current { dir, .. } => dir,
            Published::Superseded => panic!("superseded"),
        }
    }

    /// The version directories on disk, by name.
    fn versions(view: &FileView) -> BTreeSet<String> {
        std::fs::read_dir(view.dir())
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| !n.starts_with('.') && n != "current")
            .collect()
    }

    #[test]
    fn a_publish_makes_the_link_name_a_read_only_copy_of_the_pack() {
        let cache = tempfile::tempdir().unwrap();
        let view = view(cache.path());
        let one = pack("1.0.0");
        let dir = publish(&view, &one, t(0));
        assert_eq!(dir, format!("demo-1.0.0-{}", &one.sha256()[..8]));
        assert_eq!(
            std::fs::read_link(view.link_path()).unwrap(),
            Path::new(&dir),
            "the link is relative, so the cache can move"
        );
        let resolved = view.resolve().unwrap();
        assert_eq!(resolved, view.dir().canonicalize().unwrap().join(&dir));
        for key in one.keys() {
            let path = resolved.join(key);
            assert_eq!(std::fs::read(&path).unwrap(), one.get(key).unwrap());
            let mode = path.metadata().unwrap().permissions().mode() & 0o777;
            assert_eq!(mode, 0o444, "{key}");
        }
        for dir in [
            &resolved,
            &resolved.join("agents"),
            &resolved.join("agents/kimi/tools"),
        ] {
            let mode = dir.metadata().unwrap().permissions().mode() & 0o777;
            assert_eq!(mode, 0o555, "{}", dir.display());
        }
        let manifest: serde_json::Value =
            serde_json::from_slice(&std::fs::read(resolved.join(MANIFEST)).unwrap()).unwrap();
        assert_eq!(manifest["version"], "1.0.0");
        assert_eq!(manifest["sha256"], one.sha256());
        assert_eq!(
            manifest["files"]["system.md"],
            pack_format::sha256_hex(b"system prompt of 1.0.0\n")
        );
        // Nothing hidden is left behind but the lock.
        let hidden: Vec<String> = std::fs::read_dir(view.dir())
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with('.'))
            .collect();
        assert_eq!(hidden, [".lock"]);
    }

    #[test]
    fn a_version_that_stops_serving_stays_for_the_grace_period_then_goes() {
        let cache = tempfile::tempdir().unwrap();
        let view = view(cache.path());
        let one = publish(&view, &pack("1.0.0"), t(0));
        // 1.0.0 serves for a day, then 2.0.0 replaces it.
        let two = publish(&view, &pack("2.0.0"), t(86_400));
        assert_eq!(view.resolve().unwrap().file_name().unwrap(), &*two);
        assert_eq!(versions(&view), BTreeSet::from([one.clone(), two.clone()]));
        // Its grace counts from when it stopped serving, not from when it was written.
        assert_eq!(
            view.sweep(t(86_400) + GRACE - Duration::from_secs(1))
                .unwrap(),
            Vec::<String>::new()
        );
        assert!(view.dir().join(&one).join("system.md").exists());
        assert_eq!(
            view.sweep(t(86_400) + GRACE).unwrap(),
            std::slice::from_ref(&one)
        );
        assert_eq!(versions(&view), BTreeSet::from([two.clone()]));
        // What serves is never swept, however old.
        assert!(view.sweep(t(10 * 86_400)).unwrap().is_empty());
        assert_eq!(versions(&view), BTreeSet::from([two]));
    }

    #[test]
    fn a_rollback_within_the_grace_period_reuses_the_directory_it_left() {
        let cache = tempfile::tempdir().unwrap();
        let view = view(cache.path());
        let one = publish(&view, &pack("1.0.0"), t(0));
        let inode = |dir: &str| {
            use std::os::unix::fs::MetadataExt as _;
            view.dir().join(dir).metadata().unwrap().ino()
        };
        let before = inode(&one);
        let two = publish(&view, &pack("2.0.0"), t(10));
        assert_eq!(publish(&view, &pack("1.0.0"), t(20)), one);
        assert_eq!(view.resolve().unwrap().file_name().unwrap(), &*one);
        assert_eq!(
            inode(&one),
            before,
            "verified and linked again, not rewritten"
        );
        // 2.0.0 stopped serving at t(20): its grace runs from then.
        assert!(view.sweep(t(19) + GRACE).unwrap().is_empty());
        assert_eq!(view.sweep(t(20) + GRACE).unwrap(), [two]);
    }

    #[test]
    fn a_reader_that_resolved_the_link_reads_one_version_while_it_swaps() {
        let cache = tempfile::tempdir().unwrap();
        let view = Arc::new(view(cache.path()));
        let packs = Arc::new([pack("1.0.0"), pack("2.0.0")]);
        publish(&view, &packs[0], SystemTime::now());
        let done = Arc::new(AtomicBool::new(false));
        let swapper = {
            let (view, packs, done) = (view.clone(), packs.clone(), done.clone());
            std::thread::spawn(move || {
                for swap in 1..=SWAPS {
                    publish(&view, &packs[swap % 2], SystemTime::now());
                }
                done.store(true, Ordering::SeqCst);
            })
        };
        let mut seen = BTreeSet::new();
        let mut requests = 0u64;
        while !done.load(Ordering::SeqCst) {
            // One request: resolve once, then read every file under the resolved path.
            let dir = view.resolve().expect("the link always names a directory");
            let texts: Vec<String> = [
                "system.md",
                "agents/kimi/agent.md",
                "agents/kimi/tools/notes.md",
            ]
            .iter()
            .map(|key| std::fs::read_to_string(dir.join(key)).unwrap())
            .collect();
            let version = texts[0].rsplit(' ').next().unwrap().trim().to_string();
            for text in &texts {
                assert!(text.ends_with(&format!("of {version}\n")), "{texts:?}");
            }
            seen.insert(version);
            requests += 1;
        }
        swapper.join().unwrap();
        assert!(
            requests > SWAPS as u64,
            "only {requests} requests ran during the swaps"
        );
        assert_eq!(
            seen,
            BTreeSet::from(["1.0.0".to_string(), "2.0.0".to_string()])
        );
    }

    #[test]
    fn a_failed_write_leaves_the_link_and_nothing_half_written() {
        let cache = tempfile::tempdir().unwrap();
        let view = view(cache.path());
        let one = publish(&view, &pack("1.0.0"), t(0));
        // `notes` is a file and a directory at once: the second write fails half-way.
        let broken = pack_with(
            "2.0.0",
            &[("notes", "a file"), ("notes/today.md", "under it")],
        );
        let error = view.publish(&broken, t(10), || true).unwrap_err();
        assert!(
            matches!(
                error,
                FileViewError::Io {
                    action: "creating",
                    ..
                }
            ),
            "{error}"
        );
        assert_eq!(view.resolve().unwrap().file_name().unwrap(), &*one);
        assert_eq!(versions(&view), BTreeSet::from([one.clone()]));
        assert!(
            std::fs::read_dir(view.dir())
                .unwrap()
                .flatten()
                .all(|e| !e.file_name().to_string_lossy().contains(".tmp-")),
            "a staging directory was left behind"
        );
        // A pack holding the manifest's name is refused before anything is written.
        let reserved = pack_with("3.0.0", &[(MANIFEST, "{}")]);
        let error = view.publish(&reserved, t(20), || true).unwrap_err();
        assert!(error.to_string().contains(".promptpack.json"), "{error}");
        assert_eq!(view.resolve().unwrap().file_name().unwrap(), &*one);
        // And a later good pack publishes as usual.
        publish(&view, &pack("4.0.0"), t(30));
        assert_eq!(
            std::fs::read_to_string(view.resolve().unwrap().join("system.md")).unwrap(),
            "system prompt of 4.0.0\n"
        );
    }

    #[test]
    fn a_damaged_directory_is_written_again_and_a_newer_state_is_not_undone() {
        let cache = tempfile::tempdir().unwrap();
        let view = view(cache.path());
        let one = pack("1.0.0");
        let dir = view.dir().join(publish(&view, &one, t(0)));
        let file = dir.join("system.md");
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
        std::fs::write(&file, "edited by hand\n").unwrap();
        publish(&view, &one, t(10));
        assert_eq!(
            std::fs::read_to_string(&file).unwrap(),
            "system prompt of 1.0.0\n"
        );
        assert_eq!(file.metadata().unwrap().permissions().mode() & 0o777, 0o444);

        // A process whose state is older than the one on disk leaves the link alone.
        let outcome = view.publish(&pack("0.9.0"), t(20), || false).unwrap();
        assert_eq!(outcome, Published::Superseded);
        assert_eq!(view.resolve().unwrap(), dir.canonicalize().unwrap());
    }

    #[test]
    fn what_a_killed_writer_left_is_removed_and_other_links_keep_their_versions() {
        let cache = tempfile::tempdir().unwrap();
        let view = view(cache.path());
        let one = publish(&view, &pack("1.0.0"), t(0));
        // Another release sharing the cache keeps its own link to 1.0.0.
        std::os::unix::fs::symlink(&one, view.dir().join("current-2")).unwrap();
        let staging = view.dir().join(".staging.tmp-99999999-0a1b2c3d");
        std::fs::create_dir_all(staging.join("agents")).unwrap();
        std::fs::set_permissions(&staging, std::fs::Permissions::from_mode(0o555)).unwrap();
        let half_link = view.dir().join(".current.tmp-99999999-0a1b2c3d");
        std::os::unix::fs::symlink("nowhere", &half_link).unwrap();
        publish(&view, &pack("2.0.0"), t(10));
        assert!(!staging.exists() && half_link.symlink_metadata().is_err());
        // Long after its grace, 1.0.0 stays: a link still names it.
        assert!(view.sweep(t(10) + GRACE * 10).unwrap().is_empty());
        assert!(view.dir().join(&one).join("system.md").exists());
    }
}
