//! The publisher console: read-only HTML pages under `/console` that show what is live on
//! which release range, how far each rollout has got, the adoption of each version over the
//! last days, failure reports (flagging a version whose failures rise: [`health`]), every
//! channel's history and every pack version with where it is live.
//!
//! Server-rendered (maud, which escapes every value), one stylesheet compiled into the
//! binary, charts drawn as SVG on the server, no script: every page works without
//! JavaScript. It reads what the API reads (the same storage, the same live-document
//! lookup, the fleet view) and writes nothing; it never shows a token or a token hash. Who may
//! look: [`access`]; what its sign-in cookie holds: [`session`].
//!
//! - `/console`: every channel (100 a page) with its live entries and rollout percentages.
//! - `/console/channels/{channel}`: live entries with the installs they reach; each rollout
//!   with its ramp's schedule, what the guard watches, its outcome evidence beside the
//!   version it replaces and the guard's test ([`rollouts`]); a banner when the guard froze
//!   or rolled one back, with the command that resumes it; the guard's decisions; adoption
//!   charts per release range, failure reports, the latest history.
//! - `/console/channels/{channel}/history[?before=SEQ]`: the history, 50 a page, newest
//!   first, each with the token that published it and what changed.
//! - `/console/channels/{channel}/history/{sequence}[?with=SEQ]`: one document, and what
//!   changed since the one before (or since `with`).
//! - `/console/packs`: every uploaded version with size, schema and where it is live.

pub mod access;
pub mod chart;
pub mod entries;
pub mod health;
pub mod layout;
mod pages;
pub mod rollouts;
pub mod session;

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use futures_util::{StreamExt, TryStreamExt};
use maud::{Markup, html};
use pack_format::ChannelDocument;
use pack_protocol::{FleetView, PackRecord};
use time::OffsetDateTime;

use crate::error::ApiError;
use crate::fleet::{MAX_WINDOW_DAYS, ViewScope};
use crate::live::load_committed;
use crate::model::ChannelRecord;
use crate::routes::channels::live;
use crate::routes::check_name;
use crate::state::SharedState;
use crate::storage::{keys, listed_write};

use access::Viewer;
use layout::{Section, page};

/// Channels on one page of the overview.
pub const CHANNELS_PER_PAGE: usize = 100;
/// History entries on one page.
pub const HISTORY_PER_PAGE: u64 = 50;
/// History entries on a channel's page.
pub const RECENT_HISTORY: u64 = 8;
/// Longest a channel's fleet view is reused for the overview (at most the flush interval:
/// the fleet data of other nodes changes no more often than that).
const FLEET_VIEW_TTL: Duration = Duration::from_secs(10);
/// Flush intervals after which the overview stops showing a stale fleet view while its
/// successor is computed.
const FLEET_VIEW_STALE_MAX: u32 = 30;
/// How long into a request the overview may still wait for fleet views it has not computed
/// yet (a packd that just started): reading the channels counts against it too, so a cold
/// overview answers in about this time plus rendering; the page says which channels are
/// still being read.
pub const OVERVIEW_FLEET_WAIT: Duration = Duration::from_millis(25);
/// Fleet views kept for the overview.
const MAX_CACHED_VIEWS: usize = 4096;
/// Pack records kept (a deployment has far fewer).
const MAX_CACHED_RECORDS: usize = 100_000;
/// Storage reads in flight for one page.
const CONCURRENT_READS: usize = 16;

/// What the console pages share: packd's state and two caches of data that cannot go stale
/// in a way that matters (pack records, read again when the listing shows another write;
/// fleet views at most a flush old).
pub struct Console {
    pub app: SharedState,
    /// Pack records by key, with the write they were read from.
    records: Mutex<HashMap<String, (String, Arc<PackRecord>)>>,
    views: Mutex<HashMap<String, (Instant, Arc<FleetView>)>>,
    /// Channels whose fleet view a background task is computing.
    refreshing: Mutex<HashSet<String>>,
    /// Background fleet views computed at once.
    background: tokio::sync::Semaphore,
}

impl std::fmt::Debug for Console {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Console").finish_non_exhaustive()
    }
}

pub type ConsoleState = Arc<Console>;

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|p| p.into_inner())
}

/// The console's routes, with their own state, to merge into packd's router.
pub fn router(app: SharedState) -> Router {
    let console = Arc::new(Console {
        app,
        records: Mutex::new(HashMap::new()),
        views: Mutex::new(HashMap::new()),
        refreshing: Mutex::new(HashSet::new()),
        background: tokio::sync::Semaphore::new(CONCURRENT_READS),
    });
    if let Ok(runtime) = tokio::runtime::Handle::try_current() {
        runtime.spawn(warm(console.clone()));
    }
    Router::new()
        .route("/console", get(pages::overview))
        .route("/console/", get(pages::overview))
        .route("/console/packs", get(pages::packs))
        .route("/console/channels/{channel}", get(pages::channel))
        .route("/console/channels/{channel}/history", get(pages::history))
        .route(
            "/console/channels/{channel}/history/{sequence}",
            get(pages::sequence),
        )
        .route(
            "/console/login",
            get(access::login_form)
                .post(access::login)
                .layer(DefaultBodyLimit::max(access::MAX_LOGIN_BYTES)),
        )
        .route("/console/logout", post(access::logout))
        .route("/console/assets/console.css", get(stylesheet))
        .with_state(console)
}

/// Reads, once at start-up, what every page needs first: each channel's live document and
/// every pack record, so the first page a publisher opens after a restart answers from
/// memory instead of reading storage for every channel. Only a head start: a failure here
/// is logged, and the pages read whatever is still missing themselves.
async fn warm(console: ConsoleState) {
    let started = Instant::now();
    let warmed = async {
        let names = console.channel_names().await?;
        let channels = console.live_many(&names).await?.len();
        let records = console.pack_records().await?.len();
        Ok::<_, ApiError>((channels, records))
    }
    .await;
    match warmed {
        Ok((channels, packs)) => tracing::debug!(
            channels,
            packs,
            ms = started.elapsed().as_millis(),
            "console data read"
        ),
        Err(err) => {
            tracing::warn!(%err, "console: could not read its data ahead of the first page")
        }
    }
}

/// Headers of every console page: no caching (pages show live state, and private ones must
/// not stay in shared caches), a Content-Security-Policy that allows nothing but the
/// console's own stylesheet and forms (no script at all), no framing, no sniffing.
fn secure_headers(headers: &mut HeaderMap) {
    let set = |headers: &mut HeaderMap, name: header::HeaderName, value: &'static str| {
        headers.insert(name, HeaderValue::from_static(value));
    };
    set(
        headers,
        header::CONTENT_SECURITY_POLICY,
        "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; \
         frame-ancestors 'none'; base-uri 'none'",
    );
    set(headers, header::X_CONTENT_TYPE_OPTIONS, "nosniff");
    set(headers, header::X_FRAME_OPTIONS, "DENY");
    set(headers, header::REFERRER_POLICY, "same-origin");
}

/// An HTML answer with the console's headers.
pub fn html_response(status: StatusCode, markup: Markup) -> Response {
    let mut response = (status, markup.into_string()).into_response();
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/html; charset=utf-8"),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    secure_headers(headers);
    response
}

/// An error as a page: what went wrong, in the API's words, with the API's status.
pub fn error_page(viewer: Option<&Viewer>, error: &ApiError) -> Response {
    let status = error.status();
    let heading = match status {
        StatusCode::NOT_FOUND => "Not found",
        StatusCode::BAD_REQUEST => "Bad request",
        StatusCode::SERVICE_UNAVAILABLE => "Storage unavailable",
        _ => "Something went wrong",
    };
    let content = html! {
        h1 { (heading) }
        p class="problem" { (error.to_string()) }
        p { a href="/console" { "All channels" } }
    };
    html_response(status, page(heading, Section::None, viewer, content))
}

async fn stylesheet() -> Response {
    let mut response = layout::CSS.into_response();
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/css; charset=utf-8"),
    );
    // The page links it with its content hash in the query: a new binary, a new URL.
    headers.insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static("public, max-age=31536000, immutable"),
    );
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    response
}

/// A live channel: its record and its parsed document.
#[derive(Debug, Clone)]
pub struct LiveChannel {
    pub record: Arc<ChannelRecord>,
    /// `None` if the stored document does not parse (nothing packd accepted does).
    pub document: Option<ChannelDocument>,
}

/// A document's text as packd stored it, parsed (it was verified when it was published); a
/// stop order with the entries of the document it restricts.
pub fn parse_document(text: &str) -> Option<ChannelDocument> {
    let doc: ChannelDocument = serde_json::from_str(text).ok()?;
    Some(pack_format::guard::effective(&doc).unwrap_or(doc))
}

/// Why fleet data is not on a page, if it is not.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FleetAccess {
    Shown,
    Disabled,
    PublishersOnly,
}

impl Console {
    /// Every channel name, sorted (directory names that are no channel name are skipped:
    /// packd wrote none of them).
    async fn channel_names(&self) -> Result<Vec<String>, ApiError> {
        let mut names = self.app.storage.list_dirs(keys::CHANNELS).await?;
        names.retain(|n| check_name("channel", n).is_ok());
        names.sort();
        Ok(names)
    }

    async fn live(&self, channel: &str) -> Result<LiveChannel, ApiError> {
        // From memory, as a client's read is: at most a storage poll interval old.
        let record = live(&self.app, channel, &axum::http::HeaderMap::new()).await?;
        Ok(LiveChannel {
            document: parse_document(&record.document),
            record,
        })
    }

    /// The live document of each channel named (skipping one whose history vanished in
    /// between), concurrently.
    async fn live_many(&self, names: &[String]) -> Result<Vec<LiveChannel>, ApiError> {
        let found: Vec<Option<LiveChannel>> = futures_util::stream::iter(names.to_vec())
            .map(|name| async move {
                match self.live(&name).await {
                    Ok(channel) => Ok(Some(channel)),
                    Err(ApiError::NotFound { .. }) => Ok(None),
                    Err(other) => Err(other),
                }
            })
            .buffered(CONCURRENT_READS)
            .try_collect()
            .await?;
        Ok(found.into_iter().flatten().collect())
    }

    /// Committed documents `sequences` of `channel`, concurrently; a sequence with no
    /// document (a gap an old packd left) is `None`.
    async fn documents(
        &self,
        channel: &str,
        sequences: impl Iterator<Item = u64>,
    ) -> Result<Vec<(u64, Option<ChannelRecord>)>, ApiError> {
        futures_util::stream::iter(sequences)
            .map(|sequence| async move {
                Ok::<_, ApiError>((
                    sequence,
                    load_committed(&self.app.storage, channel, sequence).await?,
                ))
            })
            .buffered(CONCURRENT_READS)
            .try_collect()
            .await
    }

    /// Every uploaded pack record. Each write of a record is read once (a record changes
    /// only while its version is unreleased, by a replacing upload).
    async fn pack_records(&self) -> Result<Vec<Arc<PackRecord>>, ApiError> {
        let listing = self.app.storage.list(keys::PACKS).await?;
        let keys: Vec<(String, String)> = listing
            .iter()
            .map(|m| (m.location.to_string(), listed_write(m)))
            .filter(|(k, _)| k.ends_with(".json"))
            .collect();
        let missing: Vec<(String, String)> = {
            let records = lock(&self.records);
            keys.iter()
                .filter(|(k, write)| records.get(k).is_none_or(|(read, _)| read != write))
                .cloned()
                .collect()
        };
        let read: Vec<((String, String), Option<PackRecord>)> = futures_util::stream::iter(missing)
            .map(|key| async move {
                let bytes = self.app.storage.get(&key.0).await?;
                let record = bytes.and_then(|b| serde_json::from_slice::<PackRecord>(&b).ok());
                Ok::<_, ApiError>((key, record))
            })
            .buffered(CONCURRENT_READS)
            .try_collect()
            .await?;
        let mut records = lock(&self.records);
        if records.len() + read.len() > MAX_CACHED_RECORDS {
            records.clear();
        }
        for ((key, write), record) in read {
            match record {
                Some(r) => {
                    records.insert(key, (write, Arc::new(r)));
                }
                None => tracing::warn!(key, "unreadable pack record; left out of the console"),
            }
        }
        Ok(keys
            .iter()
            .filter_map(|(k, _)| records.get(k).map(|(_, r)| r.clone()))
            .collect())
    }

    /// Whether this viewer sees fleet data.
    pub fn fleet_access(&self, viewer: &Viewer) -> FleetAccess {
        let settings = self.app.fleet.settings();
        if !settings.enabled {
            return FleetAccess::Disabled;
        }
        match settings.view {
            ViewScope::Read => FleetAccess::Shown,
            ViewScope::Publish if viewer.can_publish() => FleetAccess::Shown,
            ViewScope::Publish => FleetAccess::PublishersOnly,
        }
    }

    /// The 7-day fleet view of a channel, merged from every node now (a channel's own page).
    async fn fleet_view(&self, live: &LiveChannel) -> Result<Arc<FleetView>, ApiError> {
        self.compute_view(live).await
    }

    /// The overview's fleet view of a channel, without waiting for storage: the one
    /// computed last if it is younger than the flush interval (other nodes' counts change no
    /// more often); an older one too, while a background task computes its successor; none
    /// when there is none (or it is [`FLEET_VIEW_STALE_MAX`] flush intervals old), while a
    /// background task computes it.
    fn cached_view(self: &Arc<Self>, live: &LiveChannel) -> Option<Arc<FleetView>> {
        let ttl = self.app.fleet.settings().flush_interval.min(FLEET_VIEW_TTL);
        let cached = lock(&self.views).get(&live.record.summary.channel).cloned();
        match cached {
            Some((at, view)) if at.elapsed() < ttl => Some(view),
            Some((at, view)) if at.elapsed() < ttl * FLEET_VIEW_STALE_MAX => {
                self.refresh_in_background(live);
                Some(view)
            }
            Some(_) | None => {
                self.refresh_in_background(live);
                None
            }
        }
    }

    /// Starts computing a channel's fleet view unless a task already is; at most
    /// [`CONCURRENT_READS`] run at once.
    fn refresh_in_background(self: &Arc<Self>, live: &LiveChannel) {
        let channel = live.record.summary.channel.clone();
        if !lock(&self.refreshing).insert(channel.clone()) {
            return;
        }
        let console = self.clone();
        let live = live.clone();
        tokio::spawn(async move {
            if let Ok(_slot) = console.background.acquire().await
                && let Err(err) = console.compute_view(&live).await
            {
                tracing::warn!(channel, %err, "console: computing a fleet view failed");
            }
            lock(&console.refreshing).remove(&channel);
        });
    }

    /// The overview's fleet views of `lives`, waiting for missing ones until `deadline` at
    /// most (`None`: still being computed; a later request shows it).
    async fn views_by(
        self: &Arc<Self>,
        lives: &[LiveChannel],
        deadline: Instant,
    ) -> Vec<Option<Arc<FleetView>>> {
        let asked = Instant::now();
        let mut views: Vec<Option<Arc<FleetView>>> =
            lives.iter().map(|live| self.cached_view(live)).collect();
        while views.iter().any(Option::is_none) && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(2)).await;
            let cached = lock(&self.views);
            for (view, live) in views.iter_mut().zip(lives) {
                if view.is_none() {
                    // Only one computed since this request asked: an older one was too stale.
                    *view = cached
                        .get(&live.record.summary.channel)
                        .filter(|(at, _)| *at >= asked)
                        .map(|(_, v)| v.clone());
                }
            }
        }
        views
    }

    /// Today's fleet view of a channel alone (UTC): its ranges count each install once.
    async fn fleet_today(&self, live: &LiveChannel) -> Result<FleetView, ApiError> {
        Ok(self.merge_view(live, 1).await?)
    }

    async fn merge_view(
        &self,
        live: &LiveChannel,
        days: u32,
    ) -> Result<FleetView, crate::storage::StorageError> {
        let ranges: Vec<semver::VersionReq> = live
            .document
            .iter()
            .flat_map(|d| d.entries.iter().map(|e| e.clients.clone()))
            .collect();
        self.app
            .fleet
            .view(
                &self.app.storage,
                &live.record.summary.channel,
                days,
                Some(&live.record.summary.pack),
                &ranges,
                OffsetDateTime::now_utc(),
            )
            .await
    }

    async fn compute_view(&self, live: &LiveChannel) -> Result<Arc<FleetView>, ApiError> {
        let channel = live.record.summary.channel.as_str();
        let view = Arc::new(self.merge_view(live, MAX_WINDOW_DAYS).await?);
        let mut views = lock(&self.views);
        if views.len() >= MAX_CACHED_VIEWS {
            views.clear();
        }
        views.insert(channel.to_string(), (Instant::now(), view.clone()));
        Ok(view)
    }
}
