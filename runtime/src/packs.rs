//! Where the runtime's prompt snapshots come from: the pack client, configured by the
//! `[updates]` table of the data directory's config file, with its cache under
//! `<data_dir>/packs`.
//!
//! ```toml
//! [updates]
//! server = "https://packs.example.com"
//! channel = "stable"
//! trusted_keys = ["keys/signing.pub"]   # relative to the data directory
//! content_keys = ["keys/content.key"]
//! # pin = "1.2.0"                       # written by `agent packs pin` / `unpin`
//! ```
//!
//! With no server configured the runtime serves the built-in pack and never touches the
//! cache: an old cache left behind by a removed server must not keep steering prompts.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use pack_client::config::{ConfigFile, UpdatesSection};
use pack_client::{Client, ClientConfig, PromptStore};
use serde::Deserialize;

use crate::data_dir::DataDir;
use crate::error::RuntimeError;

/// The snapshot source of one run.
pub struct Packs {
    client: Option<Arc<Client>>,
    store: Arc<PromptStore>,
    config_file: PathBuf,
}

impl Packs {
    /// Opens the pack client described by `config_text` (the data directory's config file),
    /// loading whatever it has installed. Bad `[updates]` settings stop the run: silently
    /// ignoring a trusted key the user configured would be worse.
    pub fn open(data_dir: &DataDir, config_text: &str) -> Result<Packs, RuntimeError> {
        let config_file = data_dir.config_file();
        let config = client_config(data_dir, config_text)?;
        if config.server.is_none() {
            return Ok(Packs {
                client: None,
                store: Arc::new(PromptStore::new(pack_client::builtin::snapshot())),
                config_file,
            });
        }
        let client = Client::new(config).map_err(|e| RuntimeError::Updates {
            path: config_file.clone(),
            reason: e.to_string(),
        })?;
        Ok(Packs {
            store: client.store().clone(),
            client: Some(Arc::new(client)),
            config_file,
        })
    }

    /// Only the built-in pack, for callers that have no data directory to read.
    pub fn builtin() -> Packs {
        Packs {
            client: None,
            store: Arc::new(PromptStore::new(pack_client::builtin::snapshot())),
            config_file: PathBuf::new(),
        }
    }

    pub fn store(&self) -> &Arc<PromptStore> {
        &self.store
    }

    /// The client, when a server is configured.
    pub fn client(&self) -> Option<&Client> {
        self.client.as_deref()
    }

    /// Starts the six-hour refresh (and a start-up refresh when the last success is over
    /// six hours old) for a long-running session. `None` when no server is configured.
    /// Must be called inside a tokio runtime; the scheduler stops when dropped.
    pub async fn start_schedule(&self) -> Option<tokio_cron_scheduler::JobScheduler> {
        let client = self.client.clone()?;
        match pack_client::schedule::start(client).await {
            Ok(scheduler) => Some(scheduler),
            Err(e) => {
                tracing::warn!(
                    "pack refresh schedule did not start: {e}; packs refresh only on request"
                );
                None
            }
        }
    }

    /// For short-lived entry points (`exec`, `prompt`, `init`): when a refresh is due,
    /// starts one in a detached `agent packs refresh --background` process and returns at
    /// once, so this run is not delayed and the next run serves what it installs. One such
    /// process at a time per cache (it takes the cache's refresh lock, or leaves).
    pub fn refresh_in_background_if_due(&self) {
        let Some(client) = &self.client else {
            return;
        };
        if !client.refresh_due(time::OffsetDateTime::now_utc()) {
            return;
        }
        let exe = match std::env::current_exe() {
            Ok(exe) => exe,
            Err(e) => {
                tracing::warn!("no background pack refresh: cannot find this program: {e}");
                return;
            }
        };
        let mut command = std::process::Command::new(exe);
        command
            .args(["packs", "refresh", "--background"])
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null());
        // Its own process group: a Ctrl-C meant for this run does not stop the refresh.
        #[cfg(unix)]
        std::os::unix::process::CommandExt::process_group(&mut command, 0);
        if let Err(e) = command.spawn() {
            tracing::warn!("no background pack refresh: {e}");
        }
    }

    pub fn config_file(&self) -> &Path {
        &self.config_file
    }

    /// One line per fact, for `agent packs status` and `/packs`.
    pub fn describe(&self) -> String {
        let serving = self.store.capture();
        let meta = serving.meta();
        let mut out = format!(
            "serving: {} {} ({}) sha256 {}\n",
            meta.name, meta.version, meta.source, meta.sha256
        );
        let Some(client) = &self.client else {
            out.push_str(&format!(
                "updates: off (no [updates] server in {})\n",
                self.config_file.display()
            ));
            return out;
        };
        let status = client.status();
        let ts = |t: Option<time::OffsetDateTime>| {
            t.and_then(|t| {
                t.format(&time::format_description::well_known::Rfc3339)
                    .ok()
            })
            .unwrap_or_else(|| "never".to_string())
        };
        out.push_str(&format!(
            "server: {}\nchannel: {} (sequence {})\nauto-update: {}\npin: {}\nlast check: {}\nlast success: {}\n",
            status.server.as_deref().unwrap_or("-"),
            status.channel,
            status.sequence,
            if status.auto_update { "on" } else { "off" },
            status.pin.as_deref().unwrap_or("none"),
            ts(status.last_check),
            ts(status.last_success),
        ));
        // Why a pinned version is not served: the last refresh's reason when this process
        // made one, else what the state shows (a later refresh answers 304 and says no more).
        if let Some(pack_client::RefreshOutcome::Skipped { reason }) = &status.last_outcome {
            out.push_str(&format!("last refresh: skipped: {reason}\n"));
        } else if let Some(pin) = &status.pin
            && meta.version.to_string() != *pin
        {
            out.push_str(&format!(
                "pin {pin} is not installed; serving {} until the channel offers {pin}\n",
                meta.version
            ));
        }
        if let Some(error) = &status.last_error {
            out.push_str(&format!("last error: {error}\n"));
        }
        for bad in &status.bad_packs {
            out.push_str(&format!("refused pack: {} ({})\n", bad.sha256, bad.detail));
        }
        out
    }
}

#[derive(Deserialize, Default)]
struct UpdatesOnly {
    #[serde(default)]
    updates: Option<toml::Value>,
}

/// The pack client's settings from the `[updates]` table; everything else in the file
/// belongs to other parts of the runtime.
pub fn client_config(data_dir: &DataDir, config_text: &str) -> Result<ClientConfig, RuntimeError> {
    let path = data_dir.config_file();
    let fail = |reason: String| RuntimeError::Config {
        path: path.clone(),
        reason,
    };
    let file: UpdatesOnly = toml::from_str(config_text).map_err(|e| fail(e.to_string()))?;
    let updates = match file.updates {
        Some(value) => {
            UpdatesSection::deserialize(value).map_err(|e| fail(format!("[updates]: {e}")))?
        }
        None => UpdatesSection::default(),
    };
    let version = semver::Version::parse(env!("CARGO_PKG_VERSION"))
        .unwrap_or_else(|_| semver::Version::new(0, 0, 0));
    let mut config = ClientConfig::new(data_dir.pack_cache_dir(), version);
    ConfigFile { updates }
        .apply(data_dir.root(), &mut config)
        .map_err(|reason| fail(format!("[updates]: {reason}")))?;
    Ok(config)
}

/// Sets (`Some`) or removes (`None`) `pin` in the `[updates]` table of `text`, editing
/// only that line so the user's comments and layout survive.
pub fn set_pin(text: &str, pin: Option<&semver::Version>) -> String {
    let lines: Vec<&str> = text.lines().collect();
    let header = lines.iter().position(|l| l.trim() == "[updates]");
    let new_line = pin.map(|v| format!("pin = \"{v}\""));
    let Some(header) = header else {
        let Some(new_line) = new_line else {
            return text.to_string();
        };
        let mut out = text.to_string();
        if !out.is_empty() && !out.ends_with('\n') {
            out.push('\n');
        }
        if !out.is_empty() {
            out.push('\n');
        }
        out.push_str(&format!("[updates]\n{new_line}\n"));
        return out;
    };
    let end = lines[header + 1..]
        .iter()
        .position(|l| l.trim_start().starts_with('['))
        .map_or(lines.len(), |i| header + 1 + i);
    let existing = (header + 1..end).find(|&i| {
        let line = lines[i].trim_start();
        line.strip_prefix("pin")
            .is_some_and(|rest| rest.trim_start().starts_with('='))
    });
    let mut out: Vec<String> = lines.iter().map(|l| l.to_string()).collect();
    match (existing, new_line) {
        (Some(i), Some(line)) => out[i] = line,
        (Some(i), None) => {
            out.remove(i);
        }
        (None, Some(line)) => out.insert(header + 1, line),
        (None, None) => {}
    }
    let mut joined = out.join("\n");
    joined.push('\n');
    joined
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pin_edits_only_its_line() {
        let v = semver::Version::new(1, 2, 0);
        let text =
            "# mine\n[agents.default]\ntools = []\n\n[updates]\nserver = \"http://x\" # keep\n";
        let pinned = set_pin(text, Some(&v));
        assert_eq!(
            pinned,
            "# mine\n[agents.default]\ntools = []\n\n[updates]\npin = \"1.2.0\"\nserver = \"http://x\" # keep\n"
        );
        let repinned = set_pin(&pinned, Some(&semver::Version::new(1, 3, 0)));
        assert!(repinned.contains("pin = \"1.3.0\"") && !repinned.contains("1.2.0"));
        assert_eq!(set_pin(&pinned, None), text);
        assert_eq!(set_pin("", Some(&v)), "[updates]\npin = \"1.2.0\"\n");
        assert_eq!(set_pin("a = 1", None), "a = 1");
    }
}
