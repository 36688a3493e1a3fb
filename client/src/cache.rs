//! The on-disk cache: one state file plus content-addressed sealed packs.
//!
//! ```text
//! <cache_dir>/state.json        what is installed, the channel document that installed it,
//!                               the highest sequence seen, bad pack hashes, check times
//! <cache_dir>/packs/<sha>.pack  sealed packs, exactly as downloaded
//! <cache_dir>/install-id        random, stable per install (rollout bucket)
//! <cache_dir>/health.json       render failures in a row per pack, device-side bad marks
//! <cache_dir>/reports.json      failure reports waiting to be sent, and those sent today
//! <cache_dir>/outcomes.json     outcome counts per day × pack × release, until sent
//! ```
//!
//! Every write is temp file + fsync + rename + fsync of the directory, and the pack is
//! written before the state that points at it, so a crash at any point leaves either the
//! old state (pointing at the old pack, still on disk) or the new one.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Deserializer, Serialize};

use crate::ClientError;

const STATE_FILE: &str = "state.json";
const REFRESH_LOCK: &str = "refresh.lock";
const STATE_FORMAT: u32 = 1;
const MAX_STATE_LEN: u64 = 4 * 1024 * 1024;
/// `health.json` and `reports.json` hold a few small entries each.
const MAX_SIDE_FILE_LEN: u64 = 256 * 1024;

/// What is installed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Installed {
    pub name: String,
    pub version: semver::Version,
    pub schema: u32,
    pub sha256: String,
    /// The channel sequence that selected it.
    pub sequence: u64,
}

/// The one state file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct State {
    pub format: u32,
    pub channel: String,
    /// Highest channel sequence accepted: anything lower is a rollback attempt.
    pub sequence: u64,
    /// ETag of the accepted channel document, for `If-None-Match`.
    pub etag: Option<String>,
    /// The accepted channel document and signature, re-verified at start-up.
    pub document: Option<String>,
    pub signature: Option<String>,
    /// `None`: the built-in pack.
    pub installed: Option<Installed>,
    /// Packs whose signed hash matched but which failed to open or validate, by SHA-256:
    /// not downloaded again while their mark stands (see [`BadPack`]).
    #[serde(deserialize_with = "bad_marks")]
    pub bad: BTreeMap<String, BadPack>,
    /// Unix seconds.
    pub last_check: Option<i64>,
    pub last_success: Option<i64>,
}

impl State {
    pub fn new(channel: &str) -> Self {
        State {
            format: STATE_FORMAT,
            channel: channel.to_string(),
            sequence: 0,
            etag: None,
            document: None,
            signature: None,
            installed: None,
            bad: BTreeMap::new(),
            last_check: None,
            last_success: None,
        }
    }
}

/// Why a pack was marked bad, and under which content keys.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BadPack {
    pub reason: BadReason,
    /// The error, as reported when the pack was refused.
    pub detail: String,
    /// [`crate::config::key_set_fingerprint`] of the content keys held when it was marked.
    /// A mark for [`BadReason::ContentKey`] lifts when the key set changes.
    pub content_keys: String,
    /// Unix seconds.
    pub at: i64,
}

/// The kind of failure behind a [`BadPack`] mark.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BadReason {
    /// No held content key opens the pack: another key set may.
    ContentKey,
    /// The pack itself is broken (payload, index, templates): only new bytes help.
    Pack,
    /// Its templates failed to render at run time on this device several times in a row
    /// (kept in `health.json`, see [`crate::health`]).
    Render,
}

/// `bad` as written today (a map of marks) or by the first state format (a list of hashes,
/// with no reason). A mark of unknown reason is kept as a content-key mark under no key set,
/// so it lifts at the next start: the pack is tried once more and, if it still fails,
/// marked again with its reason.
fn bad_marks<'de, D: Deserializer<'de>>(de: D) -> Result<BTreeMap<String, BadPack>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Marks {
        Reasoned(BTreeMap<String, BadPack>),
        Bare(Vec<String>),
    }
    Ok(match Marks::deserialize(de)? {
        Marks::Reasoned(marks) => marks,
        Marks::Bare(hashes) => hashes
            .into_iter()
            .map(|sha| {
                let mark = BadPack {
                    reason: BadReason::ContentKey,
                    detail: "marked by an earlier version, reason not recorded".to_string(),
                    content_keys: String::new(),
                    at: 0,
                };
                (sha, mark)
            })
            .collect(),
    })
}

/// The cache directory.
#[derive(Debug, Clone)]
pub struct Cache {
    dir: PathBuf,
}

impl Cache {
    /// Opens (creating) the cache and removes temp files that a killed writer left behind.
    pub fn open(dir: &Path) -> Result<Self, ClientError> {
        std::fs::create_dir_all(dir.join("packs")).map_err(|e| cache_err(dir, e))?;
        let cache = Cache {
            dir: dir.to_path_buf(),
        };
        cache.sweep_temp_files();
        Ok(cache)
    }

    /// Removes `.NAME.tmp-PID-RAND` files (see [`write_atomic`]) whose writer is gone. Several
    /// processes may share a cache (the agent and `pack-client`), so a temp file is only
    /// removed when the process that named it no longer runs, or when it is older than any
    /// write takes (the pid may have been reused).
    fn sweep_temp_files(&self) {
        for dir in [self.dir.clone(), self.dir.join("packs")] {
            let Ok(entries) = std::fs::read_dir(&dir) else {
                continue;
            };
            for entry in entries.flatten() {
                let name = entry.file_name();
                let Some(pid) = pack_format::atomic::temp_file_writer(&name.to_string_lossy())
                else {
                    continue;
                };
                let stale = entry
                    .metadata()
                    .and_then(|m| m.modified())
                    .ok()
                    .and_then(|t| t.elapsed().ok())
                    .is_some_and(|age| age > STALE_TEMP_AGE);
                if (stale || !process_alive(pid))
                    && let Err(e) = std::fs::remove_file(entry.path())
                {
                    tracing::warn!(
                        "could not remove stale temp file {}: {e}",
                        entry.path().display()
                    );
                }
            }
        }
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn state_path(&self) -> PathBuf {
        self.dir.join(STATE_FILE)
    }

    pub fn pack_path(&self, sha256: &str) -> PathBuf {
        self.dir.join("packs").join(format!("{sha256}.pack"))
    }

    /// The state, `None` when there is none yet, an error when it is unreadable or corrupt.
    pub fn load_state(&self) -> Result<Option<State>, ClientError> {
        let path = self.state_path();
        let bytes = match read_capped(&path, MAX_STATE_LEN) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(cache_err(&path, e)),
        };
        let state: State = serde_json::from_slice(&bytes).map_err(|e| ClientError::Cache {
            path: path.display().to_string(),
            reason: format!("corrupt state file: {e}"),
        })?;
        if state.format != STATE_FORMAT {
            return Err(ClientError::Cache {
                path: path.display().to_string(),
                reason: format!("state format {} is not {STATE_FORMAT}", state.format),
            });
        }
        Ok(Some(state))
    }

    pub fn write_state(&self, state: &State) -> Result<(), ClientError> {
        let bytes = serde_json::to_vec_pretty(state).map_err(|e| ClientError::Cache {
            path: self.state_path().display().to_string(),
            reason: e.to_string(),
        })?;
        write_atomic(&self.state_path(), &bytes)
    }

    pub fn write_pack(&self, sha256: &str, bytes: &[u8]) -> Result<(), ClientError> {
        write_atomic(&self.pack_path(sha256), bytes)
    }

    pub fn read_pack(&self, sha256: &str, limit: u64) -> Result<Vec<u8>, ClientError> {
        let path = self.pack_path(sha256);
        read_capped(&path, limit).map_err(|e| cache_err(&path, e))
    }

    /// Removes packs other than `keep` and stray temp files. Runs after the new state is
    /// durable, so nothing the state points at is ever removed.
    pub fn collect_garbage(&self, keep: &[&str]) {
        let Ok(entries) = std::fs::read_dir(self.dir.join("packs")) else {
            return;
        };
        for entry in entries.flatten() {
            let name = entry.file_name();
            let name = name.to_string_lossy();
            // Another process's write in flight: the start-up sweep handles abandoned ones.
            if pack_format::atomic::temp_file_writer(&name).is_some() {
                continue;
            }
            let wanted = keep.iter().any(|sha| name == format!("{sha}.pack"));
            if !wanted && let Err(e) = std::fs::remove_file(entry.path()) {
                tracing::warn!("could not remove old pack {}: {e}", entry.path().display());
            }
        }
    }

    /// The cross-process refresh lock (`<cache>/refresh.lock`): every process sharing the
    /// cache refreshes under it, one at a time. `wait`: block until it is free; otherwise
    /// `None` when another process holds it. Released when the file is dropped (and by the
    /// kernel when the holder dies).
    pub fn lock_refresh(&self, wait: bool) -> Result<Option<std::fs::File>, ClientError> {
        let path = self.dir.join(REFRESH_LOCK);
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .map_err(|e| cache_err(&path, e))?;
        if wait {
            file.lock().map_err(|e| cache_err(&path, e))?;
            return Ok(Some(file));
        }
        match file.try_lock() {
            Ok(()) => Ok(Some(file)),
            Err(std::fs::TryLockError::WouldBlock) => Ok(None),
            Err(std::fs::TryLockError::Error(e)) => Err(cache_err(&path, e)),
        }
    }

    /// Reads the JSON file `name` (default when missing or unreadable), lets `change` edit
    /// it and writes it back crash-safely, all under the lock file `name.lock`, so processes
    /// sharing the cache never lose each other's changes. `change` returning `false` writes
    /// nothing; a value equal to the default removes the file (readers then need one
    /// `stat` to see there is nothing).
    pub fn update_json<T, R>(
        &self,
        name: &str,
        change: impl FnOnce(&mut T) -> (bool, R),
    ) -> Result<R, ClientError>
    where
        T: Default + PartialEq + Serialize + for<'de> Deserialize<'de>,
    {
        let path = self.dir.join(name);
        let lock_path = self.dir.join(format!("{name}.lock"));
        let lock = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&lock_path)
            .map_err(|e| cache_err(&lock_path, e))?;
        lock.lock().map_err(|e| cache_err(&lock_path, e))?;
        let mut value: T = self.read_json(name);
        let (write, result) = change(&mut value);
        if write {
            if value == T::default() {
                match std::fs::remove_file(&path) {
                    Ok(()) => {}
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                    Err(e) => return Err(cache_err(&path, e)),
                }
            } else {
                let bytes = serde_json::to_vec_pretty(&value).map_err(|e| ClientError::Cache {
                    path: path.display().to_string(),
                    reason: e.to_string(),
                })?;
                write_atomic(&path, &bytes)?;
            }
        }
        Ok(result)
    }

    /// The JSON file `name` under the cache, or the default when it is missing, too large
    /// or unreadable (logged): these files are bookkeeping, never a reason to stop.
    pub fn read_json<T: Default + for<'de> Deserialize<'de>>(&self, name: &str) -> T {
        let path = self.dir.join(name);
        match read_capped(&path, MAX_SIDE_FILE_LEN) {
            Ok(bytes) => serde_json::from_slice(&bytes).unwrap_or_else(|e| {
                tracing::warn!("ignoring unreadable {}: {e}", path.display());
                T::default()
            }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => T::default(),
            Err(e) => {
                tracing::warn!("ignoring unreadable {}: {e}", path.display());
                T::default()
            }
        }
    }

    /// A random id for this install, created once. It only decides rollout buckets.
    pub fn install_id(&self) -> Result<String, ClientError> {
        let path = self.dir.join("install-id");
        if let Ok(bytes) = read_capped(&path, 256) {
            let id = String::from_utf8_lossy(&bytes).trim().to_string();
            if !id.is_empty() {
                return Ok(id);
            }
        }
        let id = hex::encode(rand::random::<[u8; 16]>());
        write_atomic(&path, id.as_bytes())?;
        Ok(id)
    }
}

/// Runs `work` (a file lock, an fsync) without stalling an async worker: on a multi-threaded
/// tokio runtime the worker hands its other tasks to another worker first
/// (`block_in_place`); outside a runtime, on a blocking-pool thread, or on a current-thread
/// runtime (which has no other worker to hand them to), it simply runs here.
pub fn off_async<T>(work: impl FnOnce() -> T) -> T {
    match tokio::runtime::Handle::try_current() {
        Ok(handle) if handle.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread => {
            tokio::task::block_in_place(work)
        }
        Ok(_) | Err(_) => work(),
    }
}

/// Older than this, a temp file is stale whoever wrote it: a write takes well under a second.
const STALE_TEMP_AGE: Duration = Duration::from_secs(60 * 60);

/// Whether a process with this pid exists (Linux: `/proc/PID`). Where that cannot be told,
/// it is assumed alive and only the age rule removes its files.
fn process_alive(pid: u32) -> bool {
    if pid == std::process::id() {
        return true;
    }
    let proc = Path::new("/proc");
    !proc.join("self").exists() || proc.join(pid.to_string()).exists()
}

fn cache_err(path: &Path, e: std::io::Error) -> ClientError {
    ClientError::Cache {
        path: path.display().to_string(),
        reason: e.to_string(),
    }
}

fn read_capped(path: &Path, limit: u64) -> std::io::Result<Vec<u8>> {
    use std::io::Read;
    let file = std::fs::File::open(path)?;
    let mut bytes = Vec::new();
    file.take(limit + 1).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > limit {
        return Err(std::io::Error::other(format!("larger than {limit} bytes")));
    }
    Ok(bytes)
}

/// Writes a cache file whole (see [`pack_format::atomic`]: temp file in the same directory,
/// fsync, rename, fsync of the directory). The temp file is named `.NAME.tmp-PID-RAND`, so
/// that [`Cache::open`] can tell whose it is.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), ClientError> {
    pack_format::atomic::write(path, bytes).map_err(|e| cache_err(path, e))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A killed writer leaves `.state.json.tmp-*` behind; the next open removes it, and
    /// leaves alone the temp file of a writer that is still running.
    #[test]
    fn open_sweeps_temp_files_of_dead_writers_only() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("packs")).unwrap();
        // A pid above the kernel's pid_max cannot be running.
        let dead = [
            dir.path().join(".state.json.tmp-99999999-0a1b2c3d"),
            dir.path().join("packs/.ab.pack.tmp-99999999-0a1b2c3d"),
        ];
        let alive = dir
            .path()
            .join(format!(".state.json.tmp-{}-0a1b2c3d", std::process::id()));
        for path in dead.iter().chain([&alive]) {
            std::fs::write(path, b"half").unwrap();
        }
        let kept = dir.path().join("state.json");
        std::fs::write(&kept, b"{}").unwrap();
        Cache::open(dir.path()).unwrap();
        for path in &dead {
            assert!(!path.exists(), "{} left behind", path.display());
        }
        assert!(alive.exists(), "a running writer's temp file was removed");
        assert!(kept.exists());
    }

    /// Garbage collection drops old packs but never another process's write in flight.
    #[test]
    fn garbage_collection_keeps_writes_in_flight() {
        let dir = tempfile::tempdir().unwrap();
        let cache = Cache::open(dir.path()).unwrap();
        cache.write_pack("aa", b"old").unwrap();
        cache.write_pack("bb", b"new").unwrap();
        let in_flight = dir.path().join(format!(
            "packs/.cc.pack.tmp-{}-0a1b2c3d",
            std::process::id()
        ));
        std::fs::write(&in_flight, b"half").unwrap();
        cache.collect_garbage(&["bb"]);
        assert!(!cache.pack_path("aa").exists());
        assert!(cache.pack_path("bb").exists());
        assert!(in_flight.exists());
    }

    /// The first state format kept bad packs as a bare list; it still loads, as marks of
    /// unknown reason that lift when the client starts.
    #[test]
    fn bare_bad_lists_of_the_first_format_still_load() {
        let dir = tempfile::tempdir().unwrap();
        let cache = Cache::open(dir.path()).unwrap();
        let mut state = serde_json::to_value(State::new("stable")).unwrap();
        state["sequence"] = 7.into();
        state["bad"] = serde_json::json!(["ab".repeat(32)]);
        std::fs::write(cache.state_path(), state.to_string()).unwrap();
        let loaded = cache.load_state().unwrap().unwrap();
        assert_eq!(loaded.sequence, 7);
        let mark = &loaded.bad[&"ab".repeat(32)];
        assert_eq!(mark.reason, BadReason::ContentKey);
        assert_eq!(mark.content_keys, "");
        // And the map form written now reads back the same.
        cache.write_state(&loaded).unwrap();
        assert_eq!(cache.load_state().unwrap().unwrap(), loaded);
    }
}
