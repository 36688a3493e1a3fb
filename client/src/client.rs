//! The refresh state machine (DESIGN.md, "Client state machine"), start-up load, and status.

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use backon::Retryable;
use pack_contract::Contract;
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

/// What the client serves and how its last refresh went.
#[derive(Debug, Clone, Serialize)]
pub struct ClientStatus {
    pub serving: SnapshotMeta,
    pub channel: String,
    pub server: Option<String>,
    pub sequence: u64,
    pub auto_update: bool,
    pub pin: Option<String>,
    pub install_id: String,
    #[serde(with = "time::serde::rfc3339::option")]
    pub last_check: Option<OffsetDateTime>,
    #[serde(with = "time::serde::rfc3339::option")]
    pub last_success: Option<OffsetDateTime>,
    pub last_outcome: Option<RefreshOutcome>,
    /// Why the last refresh or the start-up load failed, if nothing succeeded since: this
    /// process's, else the last failure any process sharing the cache recorded.
    pub last_error: Option<String>,
    /// The last failed refresh or start-up load of any process sharing the cache, even when
    /// a success followed.
    pub last_failure: Option<FailureRecord>,
    /// The client release channel entries are matched against.
    pub release: String,
    /// Why the built-in pack serves although a channel document is held, if it does.
    pub serving_reason: Option<String>,
    /// Packs refused after their bytes matched the signed hash, not downloaded again until
    /// the mark is lifted (a content-key mark lifts when the content keys change), and
    /// packs marked bad here after failing to render (`reason: render`).
    pub bad_packs: Vec<RefusedPack>,
    /// Whether the install hash and failure reports are sent.
    pub telemetry: bool,
    /// Failure reports waiting to be sent.
    pub pending_reports: usize,
    /// The file view, when the config turns it on.
    pub files: Option<FilesStatus>,
}

/// The file view's state, for [`ClientStatus`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FilesStatus {
    /// The link readers resolve (`<cache>/files/<link>`).
    pub link: String,
    /// The version directory it names now, resolved; `None` before the first publish.
    pub dir: Option<String>,
    /// Why this process could not bring the view up to date, if its last try failed.
    pub error: Option<String>,
}

/// What this process last did to the file view.
#[derive(Debug, Default)]
struct FilesState {
    /// SHA-256 of the pack whose directory this process last made the link name.
    published: Option<String>,
    error: Option<String>,
}

/// A failure as the cache recorded it, for [`ClientStatus`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FailureRecord {
    #[serde(with = "time::serde::rfc3339")]
    pub at: OffsetDateTime,
    /// The release of the process that failed.
    pub release: String,
    /// A stable name for the kind of failure (`ClientError::kind`).
    pub kind: String,
    pub message: String,
}

/// What the store serves after [`Client::load_selected`].
enum Loaded {
    /// No channel document is held: the built-in pack.
    Nothing,
    /// The pack the document selects serves.
    Pack,
    /// The document sends this release to the built-in pack.
    Builtin { reason: String },
    /// The document selects a pack for this release that is not in the cache.
    Missing {
        version: semver::Version,
        sha256: String,
    },
}

/// One bad-pack mark, for [`ClientStatus`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RefusedPack {
    pub sha256: String,
    pub reason: BadReason,
    pub detail: String,
}

/// A response body read under its cap, with what the client uses from the headers.
struct Fetched {
    body: Vec<u8>,
    etag: Option<String>,
    /// `X-Promptpack-Sequence`: the channel sequence of the document sent.
    sequence: Option<u64>,
}

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
            Some(dir) => builtin::from_dir(dir)?,
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
            Arc::new(Outbox::new(
                cache.clone(),
                &config.channel,
                &config.client_version,
            ))
        });
        let health = Arc::new(Health::new(
            cache.clone(),
            config.mark_bad_after_failures,
            outbox.clone(),
        ));
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
                    OffsetDateTime::now_utc(),
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

    /// The file view, when the config turns it on.
    pub fn file_view(&self) -> Option<&FileView> {
        self.files.as_ref()
    }

    /// Brings the file view (when on) up to date with what the store serves now, then
    /// removes version directories out of their grace period. Blocking disk work, run at
    /// start-up, after every refresh and periodically by [`crate::schedule::start`]. A failure is
    /// logged, kept for the status and told to listeners once; serving is not affected and
    /// the link keeps naming what it named.
    pub fn sync_files(&self) {
        let Some(view) = &self.files else {
            return;
        };
        let mut files = lock(&self.files_state);
        let snapshot = self.store.capture();
        let now = std::time::SystemTime::now();
        // The link still names what this process published (nobody removed the view):
        // only the sweep is due.
        let linked = std::fs::read_link(view.link_path())
            .is_ok_and(|dir| dir == Path::new(&crate::files::dir_name(snapshot.meta())));
        if files.error.is_none() && files.published.as_deref() == Some(snapshot.sha256()) && linked
        {
            if let Err(e) = view.sweep(now) {
                tracing::warn!("{e}");
            }
            return;
        }
        // A process whose state is older than the one on disk (another process installed
        // meanwhile) must not move the link back: that process publishes what it installed.
        let held = lock(&self.state).sequence;
        let (cache, channel) = (&self.cache, &self.config.channel);
        let still_current = || match cache.load_state() {
            Ok(Some(disk)) => disk.channel != *channel || disk.sequence <= held,
            Ok(None) | Err(_) => true,
        };
        match view.publish(&snapshot, now, still_current) {
            Ok(Published::Current { dir, moved }) => {
                let recovered = files.error.take().is_some();
                files.published = Some(snapshot.sha256().to_string());
                if moved || recovered {
                    tracing::info!("file view {} -> {dir}", view.link_path().display());
                    self.activity.emit(Event::FilesPublished {
                        link: view.link_path().display().to_string(),
                        dir,
                    });
                }
            }
            Ok(Published::Superseded) => {
                tracing::debug!("file view left to the process that wrote the newer state");
            }
            Err(e) => {
                let error = e.to_string();
                tracing::warn!("{error}");
                if files.error.as_deref() != Some(&error) {
                    self.activity.emit(Event::FilesFailed {
                        error: error.clone(),
                    });
                }
                files.error = Some(error);
            }
        }
    }

    /// Serves what the stored document selects for this client's release of now, loaded and
    /// verified again (see [`select`]). For start-up, which runs before any async work.
    fn load_selected(&self) -> Result<Loaded, ClientError> {
        let selection = select(self.selector())?;
        Ok(self.serve_selection(selection))
    }

    /// [`Client::load_selected`] with the disk and CPU work on the blocking pool.
    async fn load_selected_off_thread(&self) -> Result<Loaded, ClientError> {
        let selector = self.selector();
        let selection = blocking(move || select(selector)).await??;
        Ok(self.serve_selection(selection))
    }

    fn selector(&self) -> Selector {
        Selector {
            state: lock(&self.state).clone(),
            config: self.config.clone(),
            install_id: self.install_id.clone(),
            cache: self.cache.clone(),
            health: self.health.clone(),
            serving: self.store.capture(),
            now: OffsetDateTime::now_utc(),
        }
    }

    /// Makes the store serve what [`select`] chose.
    fn serve_selection(&self, selection: Selection) -> Loaded {
        match selection {
            Selection::Loaded(
                loaded @ (Loaded::Nothing | Loaded::Pack | Loaded::Missing { .. }),
            ) => loaded,
            Selection::Loaded(Loaded::Builtin { reason }) => {
                if self.store.capture().source() == Source::Remote {
                    self.store.reset_to_builtin();
                }
                Loaded::Builtin { reason }
            }
            Selection::Open(snapshot) => {
                self.store.install(Arc::new(*snapshot));
                Loaded::Pack
            }
        }
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

    pub fn status(&self) -> ClientStatus {
        let state = lock(&self.state).clone();
        let ts = |t: Option<i64>| t.and_then(|t| OffsetDateTime::from_unix_timestamp(t).ok());
        let record = self.activity.record();
        let last_failure = record.last_failure.and_then(|f| {
            Some(FailureRecord {
                at: OffsetDateTime::from_unix_timestamp(f.at).ok()?,
                release: f.release,
                kind: f.kind,
                message: f.message,
            })
        });
        // Another process's failure counts while nothing succeeded after it.
        let last_error = lock(&self.last_error).clone().or_else(|| {
            let failure = last_failure.as_ref()?;
            let later_success = state
                .last_success
                .is_some_and(|s| s >= failure.at.unix_timestamp());
            (!later_success).then(|| failure.message.clone())
        });
        ClientStatus {
            serving: self.store.capture().meta().clone(),
            channel: self.config.channel.clone(),
            server: self.config.server.clone(),
            sequence: state.sequence,
            auto_update: self.config.auto_update,
            pin: self.config.pin.as_ref().map(ToString::to_string),
            install_id: self.install_id.clone(),
            last_check: ts(state.last_check),
            last_success: ts(state.last_success),
            last_outcome: lock(&self.last_outcome).clone(),
            last_error,
            last_failure,
            release: self.config.client_version.to_string(),
            serving_reason: lock(&self.serving_reason).clone(),
            bad_packs: state
                .bad
                .iter()
                .map(|(sha256, mark)| RefusedPack {
                    sha256: sha256.clone(),
                    reason: mark.reason,
                    detail: mark.detail.clone(),
                })
                .chain(self.health.marked().into_keys().map(|sha256| RefusedPack {
                    sha256,
                    reason: BadReason::Render,
                    detail: self.health.detail(),
                }))
                .collect(),
            telemetry: self.config.telemetry,
            pending_reports: self.outbox.as_ref().map_or(0, |o| o.pending().len()),
            files: self.files.as_ref().map(|view| FilesStatus {
                link: std::path::absolute(view.link_path())
                    .unwrap_or_else(|_| view.link_path())
                    .display()
                    .to_string(),
                dir: view.resolve().map(|dir| dir.display().to_string()),
                error: lock(&self.files_state).error.clone(),
            }),
        }
    }

    /// The ETag of the accepted channel document: what a watch waits to see change.
    pub fn accepted_etag(&self) -> Option<String> {
        lock(&self.state).etag.clone()
    }

    /// The channel sequence of the accepted document (0 before any): what a watch holds.
    pub fn accepted_sequence(&self) -> u64 {
        lock(&self.state).sequence
    }

    /// Seconds since the last successful check, `None` if there never was one.
    pub fn since_last_success(&self, now: OffsetDateTime) -> Option<Duration> {
        let last = lock(&self.state).last_success?;
        // `last` comes from the state file: saturate rather than trust it.
        Some(Duration::from_secs(
            u64::try_from(now.unix_timestamp().saturating_sub(last)).unwrap_or(0),
        ))
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
                self.note_failure(OffsetDateTime::now_utc(), &e).await;
                return Err(e);
            }
        };
        self.adopt_newer_state().await;
        *lock(&self.considering) = None;
        let now = OffsetDateTime::now_utc();
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

    /// Queues the failure report a refused refresh calls for, if any.
    async fn report_refusal(&self, error: &ClientError) {
        let Some(outbox) = &self.outbox else {
            return;
        };
        let considered = lock(&self.considering).clone();
        let serving = {
            let snapshot = self.store.capture();
            match snapshot.source() {
                Source::Remote => snapshot.sha256().to_string(),
                Source::Builtin => headers::INSTALLED_BUILTIN.to_string(),
            }
        };
        let (pack, reason) = match error {
            ClientError::HashMismatch { expected, .. } => {
                (expected.clone(), ReportReason::HashMismatch)
            }
            ClientError::Pack(FormatError::UnknownContentKey { .. })
            | ClientError::Pack(FormatError::WrongContentKey { .. }) => {
                (considered.unwrap_or(serving), ReportReason::ContentKey)
            }
            ClientError::Pack(_) | ClientError::Snapshot(_) => {
                (considered.unwrap_or(serving), ReportReason::InvalidPack)
            }
            ClientError::IncompatibleSchema { .. } => (
                considered.unwrap_or(serving),
                ReportReason::IncompatibleSchema,
            ),
            ClientError::HeaderMismatch { .. } => {
                (considered.unwrap_or(serving), ReportReason::HeaderMismatch)
            }
            ClientError::Document(FormatError::Expired { .. }) => (serving, ReportReason::Expired),
            // Transport trouble, refused documents (a mirror's doing, not the publisher's
            // rollout), packs refused before and the client's own state: nothing to report.
            ClientError::NoServer
            | ClientError::Http { .. }
            | ClientError::Status { .. }
            | ClientError::BodyTooLong { .. }
            | ClientError::Truncated { .. }
            | ClientError::Deadline { .. }
            | ClientError::Busy { .. }
            | ClientError::Document(_)
            | ClientError::WrongChannel { .. }
            | ClientError::WrongPack { .. }
            | ClientError::Rollback { .. }
            | ClientError::Equivocation { .. }
            | ClientError::KnownBad { .. }
            | ClientError::Cache { .. }
            | ClientError::Config { .. }
            | ClientError::NotMarked { .. }
            | ClientError::Builtin { .. }
            | ClientError::Worker { .. } => return,
        };
        let outbox = outbox.clone();
        if let Err(e) = blocking(move || outbox.queue(&pack, reason)).await {
            tracing::warn!("could not queue a failure report: {e}");
        }
    }

    /// Whether failure reports wait to be sent (telemetry on, a server configured).
    pub fn reports_due(&self, now: OffsetDateTime) -> bool {
        self.config.server.is_some() && self.outbox.as_ref().is_some_and(|o| o.due(now))
    }

    /// Failure reports waiting to be sent, oldest first (none with telemetry off).
    pub fn pending_reports(&self) -> Vec<pack_protocol::FailureReport> {
        self.outbox.as_ref().map_or_else(Vec::new, |o| o.pending())
    }

    /// Sends the failure reports that wait (see [`crate::report`]).
    pub async fn send_reports(&self) -> Result<SendOutcome, ClientError> {
        let (Some(outbox), Some(server), Some(install)) = (
            self.outbox.clone(),
            self.config.server.clone(),
            self.install_hash.clone(),
        ) else {
            return Ok(SendOutcome::default());
        };
        Ok(outbox.send(self.transport(), &server, &install).await)
    }

    /// Resolves when a failure report is queued in this process (never with telemetry off):
    /// long-running processes send it then rather than at the next refresh.
    pub async fn report_queued(&self) {
        match &self.outbox {
            Some(outbox) => outbox.queued().await,
            None => std::future::pending().await,
        }
    }

    /// Takes the state on disk when another process wrote a newer one (a higher sequence, or
    /// the same with later checks), and serves what it installed: otherwise this refresh
    /// would answer 304 to the adopted ETag and keep serving the old pack for good.
    async fn adopt_newer_state(&self) {
        let cache = self.cache.clone();
        let Ok(Ok(Some(disk))) = blocking(move || cache.load_state()).await else {
            return;
        };
        {
            let mut state = lock(&self.state);
            let newer = disk.sequence > state.sequence
                || (disk.sequence == state.sequence && disk.last_check > state.last_check);
            if disk.channel != state.channel || !newer {
                return;
            }
            *state = disk;
            lift_key_marks(&mut state, &key_set_fingerprint(&self.config.content_keys));
        }
        let serving = self.store.capture();
        // Loaded and verified as at start-up; on failure the current pack keeps serving.
        match self.load_selected_off_thread().await {
            Ok(Loaded::Builtin { reason }) => {
                if serving.source() == Source::Remote {
                    self.activity.emit(Event::FellBack {
                        reason: reason.clone(),
                    });
                }
                *lock(&self.serving_reason) = Some(reason);
            }
            Ok(Loaded::Pack) => {
                let now = self.store.capture();
                if now.sha256() != serving.sha256() {
                    *lock(&self.serving_reason) = None;
                    self.activity.emit(installed_event(&serving, &now));
                }
            }
            Ok(Loaded::Nothing | Loaded::Missing { .. }) => {}
            Err(e) => tracing::warn!(
                "the state another process wrote does not load: {e}; still serving {} {}",
                serving.name(),
                serving.version()
            ),
        }
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

    /// The signature of exactly the sequence a document response carried, so a release
    /// landing between the two requests cannot pair one publish's document with another's
    /// signature. A server that does not say which sequence it sent gets the live one.
    async fn fetch_signature(
        &self,
        server: &str,
        channel: &str,
        sequence: Option<u64>,
    ) -> Result<String, ClientError> {
        let sig_url = match sequence {
            Some(sequence) => format!("{server}{}", paths::history_signature(channel, sequence)),
            None => format!("{server}{}", paths::channel_signature(channel)),
        };
        let Some(signature) = self
            .get_capped(
                &sig_url,
                "channel signature",
                self.config.limits.max_signature_len as u64,
                None,
                None,
            )
            .await?
        else {
            return Err(ClientError::Status {
                url: sig_url,
                status: 304,
                detail: "Not Modified, to a request that was not conditional".to_string(),
            });
        };
        String::from_utf8(signature.body).map_err(|_| {
            ClientError::Document(FormatError::Malformed {
                what: "channel signature",
                reason: "not UTF-8".to_string(),
            })
        })
    }

    /// Steps 1-6 of a refresh: everything but writing. `Err` means nothing is to be written
    /// beyond the check time.
    async fn prepare(&self, now: OffsetDateTime) -> Result<Plan, ClientError> {
        let server = self.config.server.as_deref().ok_or(ClientError::NoServer)?;
        let state = lock(&self.state).clone();
        let channel = &self.config.channel;
        let channel_url = format!("{server}{}", paths::channel(channel));

        // 1. Conditional GET of the document, sent whenever a document is held; the
        // signature of the sequence it carried with a new one.
        let etag = state.document.as_ref().and(state.etag.as_deref());
        let fetched = self
            .get_capped(
                &channel_url,
                "channel document",
                self.config.limits.max_channel_len as u64,
                None,
                etag,
            )
            .await?;
        let answer = match fetched {
            None => Answer::NotModified { url: channel_url },
            Some(fetched) => Answer::Document {
                signature: self
                    .fetch_signature(server, channel, fetched.sequence)
                    .await?,
                body: fetched.body,
                etag: fetched.etag,
            },
        };

        // 2-3. Verify, select, and the checks before a download (`policy::refresh`).
        let serving = self.store.capture();
        let render_marked = |sha256: &str| self.health.is_marked(sha256);
        let render_detail = self.health.detail();
        let held = Held {
            state: &state,
            serving: &serving,
            render_marked: &render_marked,
            render_detail: &render_detail,
        };
        let decided = refresh::decide(&self.config, &self.install_id, &held, answer, now);
        *lock(&self.considering) = decided.considering;
        let download = match decided.next? {
            Next::Plan(plan) => return Ok(plan),
            Next::Download(download) => download,
        };

        // 4. Download, never more than the signed size; hash before parsing anything.
        let entry = download.entry.clone();
        let blob_url = format!("{server}{}", paths::blob(&entry.sha256));
        let Some(fetched) = self
            .get_capped(&blob_url, "pack", entry.size, Some(entry.size), None)
            .await?
        else {
            return Err(ClientError::Status {
                url: blob_url,
                status: 304,
                detail: "Not Modified, to a request that was not conditional".to_string(),
            });
        };

        // 5-6. Hash, header against the entry, decrypt, untar, validate: on a blocking
        // thread, so the async workers stay free for the network (and the model stream).
        let opened = {
            let pack_name = download.pack_name.clone();
            let sequence = download.sequence;
            let keys = self.config.content_keys.clone();
            let limits = self.config.limits;
            blocking(move || {
                let bytes = fetched.body;
                let found = sha256_hex(&bytes);
                if found != entry.sha256 {
                    return Err(ClientError::HashMismatch {
                        expected: entry.sha256.clone(),
                        found,
                    });
                }
                let snapshot = open_pack(&bytes, &entry, &pack_name, sequence, &keys, &limits);
                Ok(Opened { bytes, snapshot })
            })
            .await?
        };
        Ok(refresh::decide_pack(
            &state,
            download,
            opened,
            &key_set_fingerprint(&self.config.content_keys),
            now,
        ))
    }

    /// Step 7: makes the plan durable (pack first, then the state naming it, with the check
    /// times), swaps what is served, and drops packs nothing points at. Runs whole: the
    /// deadline is over by now, and the disk work runs on a blocking thread.
    async fn apply(&self, plan: Plan, now: OffsetDateTime) -> Result<RefreshOutcome, ClientError> {
        let Plan {
            next,
            pack,
            serve,
            result,
        } = plan;
        let changed = next.is_some();
        let mut state = next.unwrap_or_else(|| lock(&self.state).clone());
        state.last_check = Some(now.unix_timestamp());
        if result.is_ok() {
            state.last_success = Some(now.unix_timestamp());
        }
        let cache = self.cache.clone();
        let to_write = state.clone();
        let written = blocking(move || -> Result<(), ClientError> {
            if let Some((sha256, bytes)) = &pack {
                cache.write_pack(sha256, bytes)?;
            }
            cache.write_state(&to_write)?;
            if changed {
                let keep = kept_packs(&to_write);
                cache.collect_garbage(&keep.iter().map(String::as_str).collect::<Vec<_>>());
            }
            Ok(())
        })
        .await
        .and_then(|written| written);
        match written {
            Ok(()) => {
                *lock(&self.state) = state;
                match serve {
                    Serve::Keep => {}
                    Serve::Builtin => self.store.reset_to_builtin(),
                    Serve::Snapshot(snapshot) => self.store.install(snapshot),
                }
                result
            }
            // Nothing new is durable, so nothing new is served.
            Err(e) if changed => match result {
                Ok(_) => Err(e),
                Err(original) => {
                    tracing::warn!("could not record the refused pack: {e}");
                    Err(original)
                }
            },
            // Check times are bookkeeping: failing to record them must not fail the refresh.
            Err(e) => {
                tracing::warn!("could not record the check time: {e}");
                *lock(&self.state) = state;
                result
            }
        }
    }

    /// GET with a byte cap, optional exact length and `If-None-Match`, retried on transient
    /// failures on the shared [`Backoff`] schedule (jitter, under [`MAX_BACKOFF`]). `None`
    /// means 304.
    async fn get_capped(
        &self,
        url: &str,
        what: &'static str,
        cap: u64,
        exact: Option<u64>,
        etag: Option<&str>,
    ) -> Result<Option<Fetched>, ClientError> {
        let backoff = Backoff {
            first: self.config.backoff,
            cap: MAX_BACKOFF,
            retries: Some(self.config.attempts.saturating_sub(1) as usize),
        };
        // The refresh deadline still bounds the whole refresh, waits included.
        (|| self.get_once(url, what, cap, exact, etag))
            .retry(backoff.delays())
            .when(ClientError::is_transient)
            .notify(|e, wait| tracing::info!("{e}; retrying in {} ms", wait.as_millis()))
            .await
    }

    /// A GET of `url` with the headers every request to packd carries (this release, the
    /// installed pack, and the install hash with telemetry on).
    pub(crate) fn request(&self, url: &str) -> Request {
        let installed = match self.store.capture().source() {
            Source::Remote => self.store.capture().sha256().to_string(),
            Source::Builtin => headers::INSTALLED_BUILTIN.to_string(),
        };
        let request = Request::get(url)
            .header(
                HeaderName::from_static(headers::CLIENT_VERSION),
                self.config.client_version.to_string(),
            )
            .header(HeaderName::from_static(headers::INSTALLED_PACK), installed);
        match &self.install_hash {
            Some(install) => request.header(HeaderName::from_static(headers::INSTALL), install),
            None => request,
        }
    }

    /// What this client sends its requests to packd through.
    pub fn transport(&self) -> &dyn Transport {
        &*self.transport
    }

    async fn get_once(
        &self,
        url: &str,
        what: &'static str,
        cap: u64,
        exact: Option<u64>,
        etag: Option<&str>,
    ) -> Result<Option<Fetched>, ClientError> {
        let http_err = |e: TransportError| e.at(url);
        let mut request = self.request(url);
        if let Some(etag) = etag {
            request = request.header(reqwest::header::IF_NONE_MATCH, etag);
        }
        let mut response = self.transport.send(request).await.map_err(http_err)?;
        let status = response.status;
        if status == StatusCode::NOT_MODIFIED {
            // Only an answer to `If-None-Match`: otherwise there is nothing it can refer to.
            if etag.is_none() {
                return Err(ClientError::Status {
                    url: url.to_string(),
                    status: 304,
                    detail: "Not Modified, to a request that was not conditional".to_string(),
                });
            }
            return Ok(None);
        }
        if !status.is_success() {
            return Err(ClientError::Status {
                url: url.to_string(),
                status: status.as_u16(),
                detail: error_detail(response).await,
            });
        }
        let too_long = || ClientError::BodyTooLong {
            what,
            url: url.to_string(),
            limit: cap,
        };
        if response.content_length.is_some_and(|len| len > cap) {
            return Err(too_long());
        }
        // Stored in the state and sent back: an oversized one is dropped (no conditional
        // request next time) rather than kept.
        let new_etag = response
            .header(reqwest::header::ETAG)
            .filter(|v| v.len() <= MAX_ETAG_LEN)
            .map(str::to_string);
        // Anything but a plain number is ignored: the signature is then fetched as the live
        // one, and the signature check decides.
        let sequence = response
            .header(headers::SEQUENCE)
            .and_then(|v| v.parse::<u64>().ok());
        // The server's length is only a hint: never reserve more than a bounded first piece.
        let hint = response.content_length.unwrap_or(0).min(cap).min(1 << 20);
        let mut body = Vec::with_capacity(usize::try_from(hint).unwrap_or(0));
        while let Some(chunk) = response.chunk().await.map_err(http_err)? {
            if body.len() as u64 + chunk.len() as u64 > cap {
                return Err(too_long());
            }
            body.extend_from_slice(&chunk);
        }
        if let Some(expected) = exact
            && (body.len() as u64) < expected
        {
            return Err(ClientError::Truncated {
                what,
                url: url.to_string(),
                expected,
                found: body.len() as u64,
            });
        }
        Ok(Some(Fetched {
            body,
            etag: new_etag,
            sequence,
        }))
    }
}

/// Bytes of a failed response's body kept for the error message.
pub use crate::http::ERROR_BODY_LIMIT;
/// Longest ETag kept.
const MAX_ETAG_LEN: usize = 256;
/// Every pause between attempts is shorter than this.
pub const MAX_BACKOFF: Duration = Duration::from_secs(30);

/// What [`select`] needs: owned, so it runs on the blocking pool.
struct Selector {
    state: State,
    config: ClientConfig,
    install_id: String,
    cache: Cache,
    health: Arc<Health>,
    serving: Arc<Snapshot>,
    /// The clock ramps are read at.
    now: OffsetDateTime,
}

/// What [`select`] chose; [`Client::serve_selection`] makes the store serve it.
enum Selection {
    Loaded(Loaded),
    /// The selected pack, opened and verified: to install.
    Open(Box<Snapshot>),
}

/// What the stored document selects for this client's release of now, loaded and
/// verified again (the release may have changed since the document was accepted: an app
/// upgrade or downgrade, or another release sharing the cache). With a local pin, the
/// installed pack while the document still names it. Expiry is not checked here: an
/// offline client keeps what it verified.
fn select(selector: Selector) -> Result<Selection, ClientError> {
    let Selector {
        state,
        config,
        install_id,
        cache,
        health,
        serving,
        now,
    } = selector;
    let (Some(document), Some(signature)) = (&state.document, &state.signature) else {
        if state.installed.is_some() {
            return Err(ClientError::Cache {
                path: cache.state_path().display().to_string(),
                reason: "installed pack without its channel document".to_string(),
            });
        }
        return Ok(Selection::Loaded(Loaded::Nothing));
    };
    let verified = channel::verify_ignoring_expiry(
        document.as_bytes(),
        signature,
        &config.trusted_keys,
        &config.limits,
    )
    .map_err(ClientError::Document)?;
    let doc = &verified.document;
    let entry = if config.pin.is_some() {
        // The stored document must still vouch for the installed pack.
        let vouched = state.installed.as_ref().and_then(|installed| {
            doc.entries.iter().find_map(|entry| match &entry.target {
                EntryTarget::Pack(p)
                    if p.sha256 == installed.sha256 && p.version == installed.version =>
                {
                    Some(p.clone())
                }
                EntryTarget::Pack(_) | EntryTarget::Builtin => None,
            })
        });
        match (vouched, &state.installed) {
            (Some(entry), _) => entry,
            (None, None) => return Ok(Selection::Loaded(Loaded::Nothing)),
            (None, Some(installed)) => {
                return Err(ClientError::Cache {
                    path: cache.state_path().display().to_string(),
                    reason: format!(
                        "the stored channel document (sequence {}) has no entry for installed pack {}",
                        doc.sequence, installed.sha256
                    ),
                });
            }
        }
    } else {
        match doc.select(&config.client_version, &install_id, now) {
            Some(EntryTarget::Pack(entry)) => entry.clone(),
            selected @ (Some(EntryTarget::Builtin) | None) => {
                return Ok(Selection::Loaded(Loaded::Builtin {
                    reason: match selected {
                        Some(_) => format!(
                            "channel sequence {} sends release {} to the built-in pack",
                            doc.sequence, config.client_version
                        ),
                        None => format!(
                            "no entry of channel sequence {} matches release {}",
                            doc.sequence, config.client_version
                        ),
                    },
                }));
            }
        }
    };
    if serving.source() == Source::Remote && serving.sha256() == entry.sha256 {
        return Ok(Selection::Loaded(Loaded::Pack));
    }
    if health.is_marked(&entry.sha256) {
        return Err(ClientError::KnownBad {
            sha256: entry.sha256.clone(),
            reason: health.detail(),
        });
    }
    if let Some(mark) = state.bad.get(&entry.sha256) {
        return Err(ClientError::KnownBad {
            sha256: entry.sha256.clone(),
            reason: mark.detail.clone(),
        });
    }
    let bytes = match cache.read_pack(&entry.sha256, config.limits.max_sealed_len) {
        Ok(bytes) => bytes,
        // Selected for this release but never downloaded here: the next refresh does.
        // (After adopting another process's state, the current pack serves meanwhile.)
        // The pack the state says was installed is damage, not news: an error.
        Err(_)
            if !cache.pack_path(&entry.sha256).exists()
                && state
                    .installed
                    .as_ref()
                    .is_none_or(|i| i.sha256 != entry.sha256) =>
        {
            return Ok(Selection::Loaded(Loaded::Missing {
                version: entry.version.clone(),
                sha256: entry.sha256.clone(),
            }));
        }
        Err(e) => return Err(e),
    };
    if bytes.len() as u64 != entry.size || sha256_hex(&bytes) != entry.sha256 {
        return Err(ClientError::Cache {
            path: cache.pack_path(&entry.sha256).display().to_string(),
            reason: "the cached pack does not match its signed size and SHA-256".to_string(),
        });
    }
    let snapshot = open_pack(
        &bytes,
        &entry,
        &doc.pack,
        doc.sequence,
        &config.content_keys,
        &config.limits,
    )?;
    Ok(Selection::Open(Box::new(snapshot)))
}

/// [`Event::Installed`], or [`Event::RolledBack`] when `after` is an older version of the
/// pack `before` served.
fn installed_event(before: &Snapshot, after: &Snapshot) -> Event {
    if before.source() == Source::Remote
        && before.name() == after.name()
        && after.version() < before.version()
    {
        Event::RolledBack {
            name: after.name().to_string(),
            version: after.version().to_string(),
            from: before.version().to_string(),
            sha256: after.sha256().to_string(),
            sequence: after.meta().sequence,
        }
    } else {
        Event::Installed {
            name: after.name().to_string(),
            version: after.version().to_string(),
            sha256: after.sha256().to_string(),
            sequence: after.meta().sequence,
        }
    }
}

/// The packs a state keeps on disk: the installed one and every pack its document names, so
/// that a process of another client release sharing the cache finds the pack its release
/// selects (a document names a bounded number of packs: see `Limits`).
fn kept_packs(state: &State) -> Vec<String> {
    let mut keep: Vec<String> = state.installed.iter().map(|i| i.sha256.clone()).collect();
    // The stored document was verified before it was stored.
    if let Some(doc) = state
        .document
        .as_deref()
        .and_then(|d| serde_json::from_str::<channel::ChannelDocument>(d).ok())
    {
        keep.extend(
            doc.entries
                .into_iter()
                .filter_map(|entry| match entry.target {
                    EntryTarget::Pack(p) => Some(p.sha256),
                    EntryTarget::Builtin => None,
                }),
        );
    }
    keep
}

/// Lifts the content-key marks made under another set of content keys: a key added since
/// may open those packs now. Marks against the pack itself stay.
fn lift_key_marks(state: &mut State, keys: &str) {
    state.bad.retain(|sha256, mark| match mark.reason {
        BadReason::ContentKey if mark.content_keys != keys => {
            tracing::info!("the content keys changed: pack {sha256} will be tried again");
            false
        }
        BadReason::ContentKey | BadReason::Pack | BadReason::Render => true,
    });
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // A panic while holding one of these locks leaves plain data behind; keep serving.
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Steps 5-6: header against the signed entry, decrypt, untar, check the index, compile
/// and validate every template, and check the runtime's required templates exist.
fn open_pack(
    bytes: &[u8],
    entry: &PackRef,
    pack_name: &str,
    sequence: u64,
    content_keys: &ContentKeyRing,
    limits: &Limits,
) -> Result<Snapshot, ClientError> {
    let (header, _) = pack::read_header(bytes, limits).map_err(ClientError::Pack)?;
    let mismatch =
        |field: &'static str, expected: String, found: String| ClientError::HeaderMismatch {
            field,
            expected,
            found,
        };
    if header.name != pack_name {
        return Err(mismatch("name", pack_name.to_string(), header.name));
    }
    if header.version != entry.version {
        return Err(mismatch(
            "version",
            entry.version.to_string(),
            header.version.to_string(),
        ));
    }
    if header.schema != entry.schema {
        return Err(mismatch(
            "schema",
            entry.schema.to_string(),
            header.schema.to_string(),
        ));
    }
    let opened = pack::open(bytes, content_keys, limits).map_err(ClientError::Pack)?;
    let meta = SnapshotMeta {
        name: opened.header.name.clone(),
        version: opened.header.version.clone(),
        sequence,
        source: Source::Remote,
        sha256: opened.sha256.clone(),
        schema: opened.header.schema,
    };
    let snapshot =
        Snapshot::new(meta, opened.payload.into_files()).map_err(ClientError::Snapshot)?;
    let contract = Contract::builtin(header.schema).ok_or(ClientError::IncompatibleSchema {
        schema: header.schema,
        known: Contract::builtin_schemas().to_vec(),
    })?;
    let required: Vec<&str> = contract
        .required_templates()
        .iter()
        .map(String::as_str)
        .collect();
    snapshot.require(&required).map_err(ClientError::Snapshot)?;
    Ok(snapshot)
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
