//! The refresh state machine (DESIGN.md, "Client state machine"): a [`Client`], its start-up
//! load, and one refresh at a time across processes. Its parts, one file each: fetching with
//! its retries ([`fetch`]), installing and serving ([`install`]), failure reports
//! ([`reporting`]), the file view ([`file_view`]) and the status ([`status`]).

mod fetch;
mod file_view;
mod install;
mod reporting;
mod status;

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use backon::Retryable;

use pack_format::{
    ContentKeyRing, EntryTarget, FormatError, Limits, PackRef, channel, pack, sha256_hex,
};
use pack_protocol::retry::Backoff;
use pack_protocol::{ReportReason, headers, paths};
use serde::Serialize;
use time::OffsetDateTime;

use crate::activity::{Activity, Choice, Event};
use crate::cache::{BadReason, Cache, State};
use crate::config::key_set_fingerprint;
use crate::files::{FileView, Published};
use crate::health::Health;
use crate::http::{HeaderName, Request, StatusCode, Transport, TransportError, error_detail};
use crate::policy;
pub use crate::policy::refresh::RefreshOutcome;
use crate::policy::refresh::{self, Answer, Held, Next, Opened, Plan, Serve};
use crate::report::{Outbox, SendOutcome};
use crate::snapshot::{Snapshot, SnapshotMeta, Source};
use crate::{ClientConfig, ClientError, PromptStore, builtin};

pub use fetch::MAX_BACKOFF;
use file_view::FilesState;
use install::{Loaded, installed_event, lift_key_marks};
pub use status::{ClientStatus, FailureRecord, FilesStatus, RefusedPack};

/// A client: a [`PromptStore`] kept up to date from one channel.
pub struct Client {
    config: ClientConfig,
    cache: Cache,
    store: Arc<PromptStore>,
    transport: Arc<dyn Transport>,
    install_id: String,
    state: Mutex<State>,
    last_outcome: Mutex<Option<RefreshOutcome>>,
    last_error: Mutex<Option<String>>,
    /// One refresh at a time.
    refreshing: tokio::sync::Mutex<()>,
    /// What the server knows this install by (`None` with telemetry off).
    install_hash: Option<String>,
    health: Arc<Health>,
    /// `None` with telemetry off.
    outbox: Option<Arc<Outbox>>,
    /// The SHA-256 of the pack the running refresh considers, for its failure report.
    considering: Mutex<Option<String>>,
    /// Outcomes recorded for every process on the cache, and this process's events.
    activity: Activity,
    /// Why the built-in pack serves although a document is held (see [`Loaded`]).
    serving_reason: Mutex<Option<String>>,
    /// The held document selects a pack for this release that is not installed: a refresh
    /// is due now, whatever the schedule says.
    install_pending: Mutex<bool>,
    /// The file view, when the config turns it on.
    files: Option<FileView>,
    /// Held for a whole sync of the file view: one at a time in this process, so a sync
    /// that captured an older snapshot never publishes after one that captured a newer.
    files_state: Mutex<FilesState>,
}

impl Client {
    /// Opens the cache and loads what it holds, re-verified; anything wrong → built-in,
    /// with the reason in [`ClientStatus::last_error`]. The built-in pack is the one compiled
    /// in, or the config's `builtin_dir`.
    pub fn new(config: ClientConfig) -> Result<Self, ClientError> {
        let builtin = match &config.builtin_dir {
            Some(dir) => builtin::from_dir_for(dir, &config.contract)?,
            None => builtin::snapshot(),
        };
        Client::with_builtin(config, builtin)
    }

    /// [`Client::new`] with another built-in pack than the one compiled in (see
    /// [`builtin::from_dir`]): what serves when nothing else can, and what every fallback
    /// serves whole.
    pub fn with_builtin(config: ClientConfig, builtin: Arc<Snapshot>) -> Result<Self, ClientError> {
        let transport = Arc::new(crate::http::reqwest_client(&config)?);
        Client::with_transport(config, builtin, transport)
    }

    /// [`Client::with_builtin`] talking to packd through `transport` rather than over HTTP:
    /// an in-process server for tests (see [`crate::http`]).
    pub fn with_transport(
        config: ClientConfig,
        builtin: Arc<Snapshot>,
        transport: Arc<dyn Transport>,
    ) -> Result<Self, ClientError> {
        let cache = Cache::open(&config.cache_dir)?;
        let install_id = cache.install_id()?;
        let store = Arc::new(PromptStore::new(builtin));
        let mut last_error = None;
        let mut state = match cache.load_state() {
            Ok(Some(state)) if state.channel == config.channel => state,
            Ok(Some(other)) => {
                tracing::info!(
                    "cache was for channel {:?}; starting over for {:?}",
                    other.channel,
                    config.channel
                );
                State::new(&config.channel)
            }
            Ok(None) => State::new(&config.channel),
            Err(e) => {
                tracing::warn!(
                    "{e}; serving the built-in pack until the next refresh repairs the cache"
                );
                last_error = Some(e.to_string());
                State::new(&config.channel)
            }
        };
        lift_key_marks(&mut state, &key_set_fingerprint(&config.content_keys));
        let telemetry = config.telemetry;
        let install_hash = match (&config.server, telemetry) {
            (Some(server), true) => Some(pack_protocol::fleet::install_hash(
                server,
                &config.channel,
                &install_id,
            )),
            (Some(_) | None, _) => None,
        };
        let outbox = telemetry.then(|| {
            Arc::new(
                Outbox::new(cache.clone(), &config.channel, &config.client_version)
                    .with_clock(config.clock.clone()),
            )
        });
        let health = Arc::new(
            Health::new(
                cache.clone(),
                config.mark_bad_after_failures,
                outbox.clone(),
            )
            .with_clock(config.clock.clone()),
        );
        store.observe(health.clone());
        let client = Client {
            install_hash,
            health,
            outbox,
            considering: Mutex::new(None),
            activity: Activity::new(cache.clone()),
            serving_reason: Mutex::new(None),
            install_pending: Mutex::new(false),
            files: config
                .files
                .as_ref()
                .map(|files| FileView::new(&config.cache_dir, files)),
            files_state: Mutex::new(FilesState::default()),
            config,
            cache,
            store,
            transport,
            install_id,
            state: Mutex::new(state),
            last_outcome: Mutex::new(None),
            last_error: Mutex::new(last_error),
            refreshing: tokio::sync::Mutex::new(()),
        };
        match client.load_selected() {
            Ok(Loaded::Nothing | Loaded::Pack) => {}
            Ok(Loaded::Builtin { reason }) => {
                tracing::info!("{reason}; serving the built-in pack");
                *lock(&client.serving_reason) = Some(reason);
            }
            Ok(Loaded::Missing { version, sha256 }) => {
                let reason = format!(
                    "release {} selects pack {version} ({sha256}), not downloaded yet; the built-in pack serves until a refresh installs it",
                    client.config.client_version
                );
                tracing::info!("{reason}");
                *lock(&client.serving_reason) = Some(reason);
                *lock(&client.install_pending) = true;
            }
            Err(e) => {
                tracing::warn!(
                    "installed pack failed verification at start-up: {e}; serving the built-in pack"
                );
                *lock(&client.last_error) = Some(format!("start-up: {e}"));
                *lock(&client.serving_reason) = Some(format!("the start-up check failed: {e}"));
                client.activity.failed(
                    client.config.clock.now(),
                    &client.config.client_version,
                    &e,
                );
                let installed = lock(&client.state).installed.clone();
                // A pack marked bad here was reported when it was marked.
                if let (Some(outbox), Some(installed)) = (&client.outbox, installed)
                    && !matches!(e, ClientError::KnownBad { .. })
                {
                    outbox.queue(&installed.sha256, ReportReason::StartupCheck);
                }
                // Forget what cannot be loaded, but keep the rollback high-water mark.
                let mut state = lock(&client.state);
                state.installed = None;
                state.etag = None;
                *lock(&client.install_pending) = true;
            }
        }
        client.sync_files();
        Ok(client)
    }

    pub fn store(&self) -> &Arc<PromptStore> {
        &self.store
    }

    pub fn config(&self) -> &ClientConfig {
        &self.config
    }

    pub fn install_id(&self) -> &str {
        &self.install_id
    }

    /// A scheduled refresh: does nothing when auto-update is off.
    pub async fn refresh(&self) -> Result<RefreshOutcome, ClientError> {
        if !self.config.auto_update {
            let outcome = RefreshOutcome::Skipped {
                reason: "auto-update is off".to_string(),
            };
            *lock(&self.last_outcome) = Some(outcome.clone());
            return Ok(outcome);
        }
        self.refresh_now().await
    }

    /// A refresh the user asked for: runs even with auto-update off (a local pin still holds).
    ///
    /// The network and the CPU work (download, hash, decrypt, decompress, untar, compile)
    /// run under the deadline, the heavy parts on blocking threads; what the refresh decided
    /// is then made durable and served whole, outside the deadline, so a refresh is never
    /// cut off half-committed.
    pub async fn refresh_now(&self) -> Result<RefreshOutcome, ClientError> {
        self.refresh_locked(true).await
    }

    /// A refresh unless another process sharing the cache is refreshing right now (then
    /// `Skipped`): the background refresh that short-lived entry points start.
    pub async fn refresh_if_idle(&self) -> Result<RefreshOutcome, ClientError> {
        self.refresh_locked(false).await
    }

    /// Whether a short-lived process should start a background refresh: updates are on, a
    /// server is configured, the last success is older than the six-hour interval plus this
    /// install's spread (up to an hour, so installs that ran together drift apart), and no
    /// check was made in the last [`policy::RETRY_AFTER`] (an unreachable server is not
    /// asked on every run).
    pub fn refresh_due(&self, now: OffsetDateTime) -> bool {
        if !self.config.auto_update || self.config.server.is_none() {
            return false;
        }
        let state = lock(&self.state);
        let age = |t: Option<i64>| t.map(|t| now.unix_timestamp().saturating_sub(t));
        let interval = policy::INTERVAL.as_secs() + policy::spread(&self.install_id);
        let stale = age(state.last_success).is_none_or(|a| a < 0 || a as u64 > interval);
        let tried_lately = age(state.last_check)
            .is_some_and(|a| a >= 0 && (a as u64) < policy::RETRY_AFTER.as_secs());
        // A pack this release selects but does not have is due at once, unless the last
        // check failed lately (an unreachable server is not asked on every run).
        let failed_lately = tried_lately && state.last_check != state.last_success;
        (stale && !tried_lately) || (*lock(&self.install_pending) && !failed_lately)
    }

    /// One refresh at a time in this process, and under the cache's refresh lock across
    /// processes. Under the lock the state is read again: another process may have refreshed
    /// since this one loaded it, and its newer state must not be overwritten with an older one.
    async fn refresh_locked(&self, wait: bool) -> Result<RefreshOutcome, ClientError> {
        let _one_at_a_time = self.refreshing.lock().await;
        let started = tokio::time::Instant::now();
        let deadline = self.config.deadline;
        let _across_processes = match self.lock_refresh(wait, deadline).await {
            Ok(Some(lock)) => lock,
            Ok(None) => {
                return Ok(RefreshOutcome::Skipped {
                    reason: "another process is refreshing this cache".to_string(),
                });
            }
            Err(e) => {
                self.note_failure(self.config.clock.now(), &e).await;
                return Err(e);
            }
        };
        self.adopt_newer_state().await;
        *lock(&self.considering) = None;
        let now = self.config.clock.now();
        let left = deadline.saturating_sub(started.elapsed());
        let plan = match tokio::time::timeout(left, self.prepare(now)).await {
            Ok(Ok(plan)) => plan,
            Ok(Err(e)) => Plan::failed(e),
            Err(_) => Plan::failed(ClientError::Deadline {
                seconds: deadline.as_secs(),
            }),
        };
        let before = self.store.capture();
        let result = self.apply(plan, now).await;
        match &result {
            Ok(outcome) => {
                *lock(&self.last_outcome) = Some(outcome.clone());
                *lock(&self.last_error) = None;
                self.note_success(now, outcome, &before).await;
            }
            Err(e) => {
                self.note_failure(now, e).await;
                self.report_refusal(e).await;
            }
        }
        // Still under the refresh lock: no other process's refresh moves the link meanwhile.
        crate::cache::off_async(|| self.sync_files());
        // The server was just reachable (or not): a good moment for what waits.
        if let Err(e) = self.send_reports().await {
            tracing::info!("failure reports not sent: {e}");
        }
        result
    }

    /// The cache's cross-process refresh lock, waited for under `deadline` (`wait`) or tried
    /// once: a process that holds it for good (a refresh suspended with Ctrl-Z) costs the
    /// others their deadline, never a hang.
    async fn lock_refresh(
        &self,
        wait: bool,
        deadline: Duration,
    ) -> Result<Option<std::fs::File>, ClientError> {
        let until = tokio::time::Instant::now() + deadline;
        let mut pause = Duration::from_millis(10);
        loop {
            let cache = self.cache.clone();
            if let Some(lock) = blocking(move || cache.lock_refresh(false)).await?? {
                return Ok(Some(lock));
            }
            if !wait {
                return Ok(None);
            }
            let now = tokio::time::Instant::now();
            if now >= until {
                return Err(ClientError::Busy {
                    path: self.cache.dir().join("refresh.lock").display().to_string(),
                    seconds: deadline.as_secs(),
                });
            }
            tokio::time::sleep(pause.min(until - now)).await;
            pause = (pause * 2).min(Duration::from_millis(250));
        }
    }

    /// Records a finished refresh for every process on the cache and tells this process's
    /// listeners what changed in what it serves.
    async fn note_success(&self, now: OffsetDateTime, outcome: &RefreshOutcome, before: &Snapshot) {
        let after = self.store.capture();
        let choice = match outcome {
            RefreshOutcome::Skipped { .. } => None,
            RefreshOutcome::NotModified
            | RefreshOutcome::Unchanged { .. }
            | RefreshOutcome::Installed { .. }
            | RefreshOutcome::Builtin { .. } => Some(Choice {
                pack: after.name().to_string(),
                version: after.version().to_string(),
                sha256: match after.source() {
                    Source::Remote => after.sha256().to_string(),
                    Source::Builtin => headers::INSTALLED_BUILTIN.to_string(),
                },
                sequence: lock(&self.state).sequence,
                at: now.unix_timestamp(),
            }),
        };
        let (activity, release, done) = (
            self.activity.clone(),
            self.config.client_version.clone(),
            outcome.clone(),
        );
        if let Err(e) = blocking(move || activity.succeeded(now, &release, &done, choice)).await {
            tracing::warn!("could not record the refresh: {e}");
        }
        match outcome {
            RefreshOutcome::Installed { .. } => {
                *lock(&self.install_pending) = false;
                *lock(&self.serving_reason) = None;
                self.activity.emit(installed_event(before, &after));
            }
            RefreshOutcome::Builtin { reason, .. } => {
                *lock(&self.install_pending) = false;
                *lock(&self.serving_reason) = Some(reason.clone());
                if before.source() == Source::Remote {
                    self.activity.emit(Event::FellBack {
                        reason: reason.clone(),
                    });
                }
            }
            RefreshOutcome::NotModified | RefreshOutcome::Unchanged { .. } => {
                *lock(&self.install_pending) = false;
                if after.source() == Source::Remote {
                    *lock(&self.serving_reason) = None;
                }
            }
            RefreshOutcome::Skipped { .. } => {}
        }
    }

    /// Says that a refresh failed (the previous pack still serves), in this process's status
    /// and, on the blocking pool, for every process on the cache.
    async fn note_failure(&self, now: OffsetDateTime, error: &ClientError) {
        tracing::warn!("refresh failed, still serving the previous pack: {error}");
        *lock(&self.last_error) = Some(error.to_string());
        let (activity, release, kind, message) = (
            self.activity.clone(),
            self.config.client_version.clone(),
            error.kind(),
            error.to_string(),
        );
        if let Err(e) = blocking(move || activity.failed_with(now, &release, kind, message)).await {
            tracing::warn!("could not record the refresh: {e}");
        }
    }

    /// The events of this process from now on: installs, rollbacks, fallbacks, failures and
    /// the watch's state (see [`crate::activity`]).
    pub fn events(&self) -> tokio::sync::broadcast::Receiver<Event> {
        self.activity.subscribe()
    }

    /// Tells this process's listeners about the watch (see [`crate::watch`]).
    pub(crate) fn emit(&self, event: Event) {
        self.activity.emit(event);
    }

    /// Whether the held document selects a pack for this release that is not installed
    /// (after an app upgrade, say): a refresh is due now.
    pub fn install_pending(&self) -> bool {
        *lock(&self.install_pending)
    }

    /// Clears bad-pack marks: the given hashes, or all of them. Returns the hashes cleared.
    /// The next refresh downloads and checks those packs again. A given hash that carries no
    /// mark is an error that lists the marks, and nothing is cleared.
    pub async fn forget_bad(&self, only: &[String]) -> Result<Vec<String>, ClientError> {
        let _one_at_a_time = self.refreshing.lock().await;
        let mut next = lock(&self.state).clone();
        let rendered = self.health.marked();
        if let Some(unknown) = only
            .iter()
            .find(|sha| !next.bad.contains_key(*sha) && !rendered.contains_key(*sha))
        {
            let mut marked: Vec<String> = next.bad.keys().cloned().collect();
            marked.extend(rendered.into_keys());
            return Err(ClientError::NotMarked {
                sha256: unknown.clone(),
                marked,
            });
        }
        let mut cleared: Vec<String> = next
            .bad
            .keys()
            .filter(|sha| only.is_empty() || only.contains(sha))
            .cloned()
            .collect();
        let health = self.health.clone();
        let only_rendered = only.to_vec();
        for sha in blocking(move || health.forget(&only_rendered)).await? {
            if !cleared.contains(&sha) {
                cleared.push(sha);
            }
        }
        if cleared.iter().all(|sha| !next.bad.contains_key(sha)) {
            return Ok(cleared);
        }
        for sha in &cleared {
            next.bad.remove(sha);
        }
        let cache = self.cache.clone();
        let to_write = next.clone();
        blocking(move || cache.write_state(&to_write)).await??;
        *lock(&self.state) = next;
        Ok(cleared)
    }
}

/// Bytes of a failed response's body kept for the error message.
pub use crate::http::ERROR_BODY_LIMIT;

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // A panic while holding one of these locks leaves plain data behind; keep serving.
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Runs CPU or disk work on tokio's blocking pool.
async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> T + Send + 'static,
) -> Result<T, ClientError> {
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|e| ClientError::Worker {
            reason: e.to_string(),
        })
}
