//! The per-user data directory: config file, global AGENTS.md, custom agents, sessions and
//! the pack cache.

use std::path::{Path, PathBuf};

use crate::error::RuntimeError;

/// Overrides the platform location when set and non-empty.
pub const HOME_ENV: &str = "AGENT_HOME";
/// Directory name under the platform's per-user data location.
const APP_DIR: &str = "promptpack";

/// Writes `bytes` to `path` whole, the one way the workspace does (see
/// [`pack_format::atomic`]): a reader sees the old file or the new one, never half of
/// either, and two processes writing at once each rename a file of their own.
pub use pack_format::atomic::write as write_whole;

/// The data directory and the well-known paths inside it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DataDir {
    root: PathBuf,
}

impl DataDir {
    pub fn new(root: impl Into<PathBuf>) -> Self {
        DataDir { root: root.into() }
    }

    /// `AGENT_HOME`, else the platform convention: `%APPDATA%\promptpack` on Windows,
    /// `~/Library/Application Support/promptpack` on macOS, and
    /// `$XDG_DATA_HOME/promptpack` (default `~/.local/share/promptpack`) elsewhere.
    pub fn locate() -> Result<DataDir, RuntimeError> {
        let var = |name: &str| std::env::var_os(name).filter(|v| !v.is_empty());
        if let Some(home) = var(HOME_ENV) {
            return Ok(DataDir::new(home));
        }
        if cfg!(windows) {
            return var("APPDATA")
                .map(|base| DataDir::new(Path::new(&base).join(APP_DIR)))
                .ok_or(RuntimeError::NoDataDir);
        }
        let home = var("HOME").map(PathBuf::from);
        if cfg!(target_os = "macos") {
            return home
                .map(|h| DataDir::new(h.join("Library/Application Support").join(APP_DIR)))
                .ok_or(RuntimeError::NoDataDir);
        }
        // The XDG spec says a relative XDG_DATA_HOME is invalid and must be ignored.
        let base = var("XDG_DATA_HOME")
            .map(PathBuf::from)
            .filter(|p| p.is_absolute())
            .or_else(|| home.map(|h| h.join(".local/share")))
            .ok_or(RuntimeError::NoDataDir)?;
        Ok(DataDir::new(base.join(APP_DIR)))
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    pub fn config_file(&self) -> PathBuf {
        self.root.join("config.toml")
    }

    /// The user's global instruction file.
    pub fn global_instructions(&self) -> PathBuf {
        self.root.join("AGENTS.md")
    }

    /// `<data_dir>/agents/<name>/agent.md` defines a custom agent.
    pub fn agents_dir(&self) -> PathBuf {
        self.root.join("agents")
    }

    pub fn sessions_dir(&self) -> PathBuf {
        self.root.join("sessions")
    }

    pub fn pack_cache_dir(&self) -> PathBuf {
        self.root.join("packs")
    }
}
