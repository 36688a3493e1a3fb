//! The on-disk cache: one state file plus content-addressed sealed packs.
//!
//! ```text
//! <cache_dir>/state.json        what is installed, the channel document that installed it,
//!                               the highest sequence seen, bad pack hashes, check times
//! <cache_dir>/packs/<sha>.pack  sealed packs, exactly as downloaded
//! <cache_dir>/install-id        random, stable per install (rollout bucket)
//! ```
//!
//! Every write is temp file + fsync + rename + fsync of the directory, and the pack is
//! written before the state that points at it, so a crash at any point leaves either the
//! old state (pointing at the old pack, still on disk) or the new one.

use std::collections::BTreeSet;
use std::io::Write;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::ClientError;

const STATE_FILE: &str = "state.json";
const STATE_FORMAT: u32 = 1;
const MAX_STATE_LEN: u64 = 4 * 1024 * 1024;

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
    /// Packs whose signed hash matched but which failed to open or validate: never retried.
    pub bad: BTreeSet<String>,
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
            bad: BTreeSet::new(),
            last_check: None,
            last_success: None,
        }
    }
}

/// The cache directory.
#[derive(Debug, Clone)]
pub struct Cache {
    dir: PathBuf,
}

impl Cache {
    pub fn open(dir: &Path) -> Result<Self, ClientError> {
        std::fs::create_dir_all(dir.join("packs")).map_err(|e| cache_err(dir, e))?;
        Ok(Cache {
            dir: dir.to_path_buf(),
        })
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
            let wanted = keep.iter().any(|sha| name == format!("{sha}.pack"));
            if !wanted && let Err(e) = std::fs::remove_file(entry.path()) {
                tracing::warn!("could not remove old pack {}: {e}", entry.path().display());
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

/// temp file in the same directory → write → fsync → rename → fsync the directory.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), ClientError> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = dir.join(format!(
        ".{name}.tmp-{}-{:08x}",
        std::process::id(),
        rand::random::<u32>()
    ));
    let result = (|| -> std::io::Result<()> {
        let mut file = std::fs::File::create(&tmp)?;
        file.write_all(bytes)?;
        file.sync_all()?;
        drop(file);
        std::fs::rename(&tmp, path)?;
        std::fs::File::open(dir)?.sync_all()
    })();
    if let Err(e) = result {
        let _ = std::fs::remove_file(&tmp);
        return Err(cache_err(path, e));
    }
    Ok(())
}
