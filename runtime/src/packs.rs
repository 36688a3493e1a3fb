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
use pack_client::outcomes::OutcomeLog;
use pack_client::{Client, ClientConfig, PromptStore};
use serde::Deserialize;

use crate::data_dir::DataDir;
use crate::error::RuntimeError;
use crate::outcomes::OutcomeRecorder;

/// The snapshot source of one run.
pub struct Packs {
    client: Option<Arc<Client>>,
    store: Arc<PromptStore>,
    config_file: PathBuf,
    outcomes: Option<Arc<OutcomeRecorder>>,
    /// The outcome counts kept on disk (sent or not), for the status.
    outcome_log: Option<OutcomeLog>,
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
                outcomes: None,
                outcome_log: None,
            });
        }
        let client = Client::new(config).map_err(|e| RuntimeError::Updates {
            path: config_file.clone(),
            reason: e.to_string(),
        })?;
        // The same switch as failure reports: telemetry on (no `DO_NOT_TRACK`) and a server.
        let outcome_log = OutcomeLog::for_client(&client).unwrap_or_else(|e| {
            tracing::warn!("outcome counts off: {e}");
            None
        });
        Ok(Packs {
            store: client.store().clone(),
            client: Some(Arc::new(client)),
            config_file,
            outcomes: outcome_log
                .clone()
                .map(|log| Arc::new(OutcomeRecorder::new(log))),
            outcome_log,
        })
    }

    /// Only the built-in pack, for callers that have no data directory to read.
    pub fn builtin() -> Packs {
        Packs {
            client: None,
            store: Arc::new(PromptStore::new(pack_client::builtin::snapshot())),
            config_file: PathBuf::new(),
            outcomes: None,
            outcome_log: None,
        }
    }

    pub fn store(&self) -> &Arc<PromptStore> {
        &self.store
    }

    /// The client, when a server is configured.
    pub fn client(&self) -> Option<&Client> {
        self.client.as_deref()
    }

    /// Where this process counts how its turns went: `Some` only when the client shares
    /// usage data (a server configured, `telemetry` on and no `DO_NOT_TRACK`, the rule of
    /// failure reports).
    pub fn outcomes(&self) -> Option<&Arc<OutcomeRecorder>> {
        self.outcomes.as_ref()
    }

    /// Whether outcome counts are due to be sent (today's, changed and an hour after their
    /// last send, or a finished day's final counts).
    fn outcomes_due(&self, now: time::OffsetDateTime) -> bool {
        self.outcome_log.as_ref().is_some_and(|log| log.due(now))
    }

    /// Starts the six-hour refresh (and a start-up refresh when the last success is over
    /// six hours old) and the watch of the channel, for a long-running session. `None` when
    /// no server is configured. Must be called inside a tokio runtime; the watch stops when
    /// the result is dropped.
    pub async fn start_schedule(&self) -> Option<pack_client::schedule::Schedule> {
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
    /// Failure reports that wait (see `pack_client::report`), and outcome counts that are due
    /// (`pack_client::outcomes`), also start one: the background refresh sends
    /// them.
    /// Returns what a person who just configured updates should know, if anything (see
    /// `Packs::first_run_note`).
    pub fn refresh_in_background_if_due(&self) -> Option<String> {
        let client = self.client.as_ref()?;
        let now = time::OffsetDateTime::now_utc();
        let started = client.refresh_due(now) || client.reports_due(now) || self.outcomes_due(now);
        if started {
            spawn_background_refresh();
        }
        self.first_run_note(started)
    }

    /// While updates are configured but no refresh ever succeeded and the built-in pack
    /// serves: that a refresh is on its way (`started`), or why none is and how to run one.
    fn first_run_note(&self, started: bool) -> Option<String> {
        let client = self.client.as_ref()?;
        // The common case, on every run, reads no file: something succeeded already.
        if client
            .since_last_success(time::OffsetDateTime::now_utc())
            .is_some()
            || self.store.capture().source() != pack_client::Source::Builtin
        {
            return None;
        }
        let status = client.status();
        let server = status.server.as_deref().unwrap_or("-");
        Some(if started {
            format!(
                "note: the built-in prompts serve this run; a first refresh from {server} started in the background and the next run serves what it installs (`agent packs refresh` installs now and shows the outcome)"
            )
        } else {
            let why = status
                .last_error
                .map_or(String::new(), |e| format!(" (last attempt: {e})"));
            format!(
                "note: the built-in prompts serve: no refresh from {server} has succeeded yet{why}; run `agent packs refresh` to try now"
            )
        })
    }

    /// For the end of a short-lived run: when this run queued failure reports (a template
    /// failed to render), a detached background refresh sends them, so they do not wait for
    /// the next refresh that is due.
    pub fn send_reports_in_background(&self) {
        let Some(client) = &self.client else {
            return;
        };
        if client.reports_due(time::OffsetDateTime::now_utc()) {
            spawn_background_refresh();
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
            "release: {}\nserver: {}\nchannel: {} (sequence {})\nauto-update: {}\npin: {}\nlast check: {}\nlast success: {}\n",
            status.release,
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
        if let Some(reason) = &status.serving_reason {
            out.push_str(&format!("why built-in: {reason}\n"));
        }
        if let Some(failure) = &status.last_failure {
            out.push_str(&format!(
                "last failure: {} ({}\n",
                ts(Some(failure.at)),
                failure.summary(&ts(status.last_success))
            ));
        }
        if let Some(error) = &status.last_error {
            out.push_str(&format!("last error: {error}\n"));
        }
        for bad in &status.bad_packs {
            out.push_str(&format!("refused pack: {} ({})\n", bad.sha256, bad.detail));
        }
        out.push_str(&format!(
            "telemetry: {}\n",
            if status.telemetry {
                let rows = self.outcome_log.as_ref().map_or(0, |log| log.rows().len());
                format!(
                    "on ({} failure reports waiting, {rows} outcome rows kept)",
                    status.pending_reports
                )
            } else {
                "off".to_string()
            }
        ));
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
    config.config_path = Some(path.clone());
    ConfigFile { updates }
        .apply(data_dir.root(), &mut config)
        .map_err(|reason| fail(format!("[updates]: {reason}")))?;
    Ok(config)
}

/// Sets (`Some`) or removes (`None`) `pin` in the `[updates]` table of `text`. The file is
/// edited as TOML, not as lines, so the user's comments and layout survive whatever the
/// header looks like (`[updates] # mine`), and a missing table is added once.
pub fn set_pin(
    data_dir: &DataDir,
    text: &str,
    pin: Option<&semver::Version>,
) -> Result<String, RuntimeError> {
    let fail = |reason: String| RuntimeError::Config {
        path: data_dir.config_file(),
        reason,
    };
    let mut doc: toml_edit::DocumentMut = text
        .parse()
        .map_err(|e: toml_edit::TomlError| fail(e.to_string()))?;
    match pin {
        Some(version) => {
            let updates = doc
                .entry("updates")
                .or_insert_with(toml_edit::table)
                .as_table_like_mut()
                .ok_or_else(|| fail("`updates` is not a table".to_string()))?;
            updates.insert("pin", toml_edit::value(version.to_string()));
        }
        None => {
            let removed = doc
                .get_mut("updates")
                .and_then(toml_edit::Item::as_table_like_mut)
                .and_then(|updates| updates.remove("pin"));
            if removed.is_none() {
                // Nothing to unpin: leave the file byte for byte as it was.
                return Ok(text.to_string());
            }
        }
    }
    Ok(doc.to_string())
}

/// Starts `agent packs refresh --background` as a detached process and returns at once.
fn spawn_background_refresh() {
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

#[cfg(test)]
mod tests {
    use super::*;

    fn pin(text: &str, version: Option<&semver::Version>) -> String {
        let dir = DataDir::new("/home/dev/.agent");
        set_pin(&dir, text, version).unwrap()
    }

    #[test]
    fn pin_edits_only_its_key() {
        let v = semver::Version::new(1, 2, 0);
        let text = "# mine\n[agents.default]\ntools = []\n\n[updates] # from the installer\nserver = \"http://x\" # keep\n";
        let pinned = pin(text, Some(&v));
        assert_eq!(
            pinned,
            "# mine\n[agents.default]\ntools = []\n\n[updates] # from the installer\nserver = \"http://x\" # keep\npin = \"1.2.0\"\n"
        );
        let repinned = pin(&pinned, Some(&semver::Version::new(1, 3, 0)));
        assert!(repinned.contains("pin = \"1.3.0\"") && !repinned.contains("1.2.0"));
        assert_eq!(repinned.matches("[updates]").count(), 1, "{repinned}");
        assert_eq!(pin(&pinned, None), text);
        assert_eq!(pin("", Some(&v)), "[updates]\npin = \"1.2.0\"\n");
        assert_eq!(pin("a = 1", None), "a = 1");
    }

    #[test]
    fn pin_refuses_a_file_that_is_not_toml() {
        let dir = DataDir::new("/home/dev/.agent");
        let v = semver::Version::new(1, 2, 0);
        assert!(set_pin(&dir, "[updates\n", Some(&v)).is_err());
        let err = set_pin(&dir, "updates = 3\n", Some(&v)).unwrap_err();
        assert!(err.to_string().contains("not a table"), "{err}");
    }
}
