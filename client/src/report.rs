//! Failure reports: when the client refuses a pack or falls back to its built-in one, it
//! tells the server `{channel, pack, reason, client_version}` — a reason code, never an error
//! text or anything from a template — so the publisher sees a bad rollout before widening it.
//!
//! Reports wait in `<cache>/reports.json` (shared by every process on the cache) and go out
//! after the next refresh, or from the short-lived entry points through a detached
//! background refresh. Per install, the client sends the same pack and reason at most once
//! a day and at most [`MAX_PER_DAY`] reports a day; at most [`MAX_PENDING`] wait. A server
//! that does not answer, answers 429 or 5xx is tried again after [`RETRY_AFTER_SECS`] to
//! twice that (the shared backoff's jitter, so installs that failed together during an outage
//! do not all come back in the same second); any other refusal drops the report. `[updates] telemetry = false` (or `DO_NOT_TRACK=1`)
//! queues and sends nothing.

use std::time::Duration;

use pack_protocol::retry::Backoff;
use pack_protocol::{FailureReport, ReportReason, headers, paths};
use serde::{Deserialize, Serialize};
use time::OffsetDateTime;

use crate::cache::Cache;
use crate::clock::Clock;
use crate::http::{HeaderName, Method, Request, Response, Transport, TransportError};

const OUTBOX_FILE: &str = "reports.json";
const SENDING_LOCK: &str = "reports.sending.lock";
/// Reports sent or waiting per rolling day, at most.
pub const MAX_PER_DAY: usize = 10;
/// Reports waiting at most.
pub const MAX_PENDING: usize = 8;
/// After a failed send, the next try waits at least this long (and under twice as long).
pub const RETRY_AFTER_SECS: i64 = 15 * 60;
const DAY_SECS: i64 = 24 * 60 * 60;
/// Each report or outcome counts request gets this long.
const SEND_TIMEOUT: Duration = Duration::from_secs(5);

/// The pause before the next send after a failed one: the shared schedule's first wait,
/// in `[RETRY_AFTER_SECS, 2 × RETRY_AFTER_SECS)`.
pub(crate) fn retry_pause() -> Duration {
    let first = Duration::from_secs(RETRY_AFTER_SECS as u64);
    Backoff {
        first,
        cap: first * 2,
        retries: Some(1),
    }
    .delays()
    .next()
    .unwrap_or(first)
}

/// POSTs the JSON `body` to `url` as `install_hash` (failure reports, outcome counts).
pub(crate) async fn post_json(
    transport: &dyn Transport,
    url: &str,
    client_version: &semver::Version,
    install_hash: &str,
    body: Vec<u8>,
) -> Result<Response, TransportError> {
    let mut request = Request::get(url)
        .header(reqwest::header::CONTENT_TYPE, "application/json")
        .header(
            HeaderName::from_static(headers::CLIENT_VERSION),
            client_version.to_string(),
        )
        .header(HeaderName::from_static(headers::INSTALL), install_hash);
    request.method = Method::POST;
    request.body = Some(body);
    request.timeout = Some(SEND_TIMEOUT);
    transport.send(request).await
}

/// Records what a send did in the cache file `name` (`what` names its contents in the log):
/// `change` under the file's lock and fsynced, on the blocking pool, off the async workers.
/// A file that cannot be updated is logged, and the send counts as nothing.
pub(crate) async fn record_sent<T>(
    cache: &Cache,
    name: &'static str,
    what: &'static str,
    change: impl FnOnce(&mut T) -> SendOutcome + Send + 'static,
) -> SendOutcome
where
    T: Default + PartialEq + Serialize + for<'de> Deserialize<'de>,
{
    let cache = cache.clone();
    let recorded = tokio::task::spawn_blocking(move || {
        cache.update_json(name, |file: &mut T| (true, change(file)))
    })
    .await;
    match recorded {
        Ok(Ok(outcome)) => outcome,
        Ok(Err(e)) => {
            tracing::warn!("could not record the {what} sent: {e}");
            SendOutcome::default()
        }
        Err(e) => {
            tracing::warn!("could not record the {what} sent: {e}");
            SendOutcome::default()
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Queued {
    report: FailureReport,
    queued_at: i64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Sent {
    pack: String,
    reason: ReportReason,
    at: i64,
}

#[derive(Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct OutboxFile {
    #[serde(default)]
    pending: Vec<Queued>,
    /// Sent in the last day: the once-a-day and per-day rules.
    #[serde(default)]
    sent: Vec<Sent>,
    /// Unix seconds before which no send is tried (after a failed one).
    #[serde(default)]
    next_attempt: Option<i64>,
}

impl OutboxFile {
    fn prune(&mut self, now: i64) {
        self.sent.retain(|s| now - s.at < DAY_SECS && s.at <= now);
        if self.next_attempt.is_some_and(|t| t <= now) {
            self.next_attempt = None;
        }
    }
}

/// What one send did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct SendOutcome {
    pub sent: usize,
    /// Refused by the server for good (not rate limiting): dropped.
    pub dropped: usize,
    /// Still waiting (the server did not take them now).
    pub waiting: usize,
}

/// The reports of one install on one channel.
pub struct Outbox {
    cache: Cache,
    channel: String,
    client_version: semver::Version,
    notify: tokio::sync::Notify,
    clock: Clock,
}

impl Outbox {
    pub fn new(cache: Cache, channel: &str, client_version: &semver::Version) -> Self {
        Outbox {
            cache,
            channel: channel.to_string(),
            client_version: client_version.clone(),
            notify: tokio::sync::Notify::new(),
            clock: Clock::system(),
        }
    }

    /// Reports are dated by `clock` rather than the system clock.
    pub fn with_clock(self, clock: Clock) -> Self {
        Outbox { clock, ..self }
    }

    /// Queues a report of `reason` about `pack` (a SHA-256 or `builtin`) unless the rules
    /// above hold it back. `true` when queued.
    pub fn queue(&self, pack: &str, reason: ReportReason) -> bool {
        let now = self.clock.now().unix_timestamp();
        let report = FailureReport {
            channel: self.channel.clone(),
            pack: pack.to_string(),
            reason,
            client_version: self.client_version.clone(),
        };
        let queued = self.cache.update_json(OUTBOX_FILE, |file: &mut OutboxFile| {
            file.prune(now);
            let same = |p: &str, r: ReportReason| p == pack && r == reason;
            if file.pending.iter().any(|q| same(&q.report.pack, q.report.reason))
                || file.sent.iter().any(|s| same(&s.pack, s.reason))
            {
                return (false, false);
            }
            if file.pending.len() + file.sent.len() >= MAX_PER_DAY
                || file.pending.len() >= MAX_PENDING
            {
                tracing::info!(
                    "not reporting {reason} for pack {pack}: {MAX_PER_DAY} reports a day at most"
                );
                return (false, false);
            }
            file.pending.push(Queued {
                report: report.clone(),
                queued_at: now,
            });
            (true, true)
        });
        match queued {
            Ok(true) => {
                self.notify.notify_one();
                true
            }
            Ok(false) => false,
            Err(e) => {
                tracing::warn!("could not queue a failure report: {e}");
                false
            }
        }
    }

    /// Reports waiting, oldest first.
    pub fn pending(&self) -> Vec<FailureReport> {
        let file: OutboxFile = self.cache.read_json(OUTBOX_FILE);
        file.pending.into_iter().map(|q| q.report).collect()
    }

    /// Whether reports wait and may be sent now. One `stat` when none wait.
    pub fn due(&self, now: OffsetDateTime) -> bool {
        if !self.cache.dir().join(OUTBOX_FILE).exists() {
            return false;
        }
        let file: OutboxFile = self.cache.read_json(OUTBOX_FILE);
        !file.pending.is_empty() && file.next_attempt.is_none_or(|t| t <= now.unix_timestamp())
    }

    /// Resolves when a report was queued in this process.
    pub async fn queued(&self) {
        self.notify.notified().await;
    }

    /// Sends what waits to `server`, one POST each, stopping at the first that the server
    /// did not take for now. One process at a time sends (another one sending: nothing).
    pub async fn send(
        &self,
        transport: &dyn Transport,
        server: &str,
        install_hash: &str,
    ) -> SendOutcome {
        let now = self.clock.now();
        if !self.due(now) {
            return SendOutcome::default();
        }
        let Some(_sending) = self.sending_lock() else {
            return SendOutcome::default();
        };
        let file: OutboxFile = self.cache.read_json(OUTBOX_FILE);
        let url = format!("{server}{}", paths::reports(&self.channel));
        let mut done: Vec<(Queued, bool)> = Vec::new();
        let mut retry = false;
        for queued in &file.pending {
            let body = match serde_json::to_vec(&queued.report) {
                Ok(body) => body,
                Err(_) => continue,
            };
            let response =
                post_json(transport, &url, &self.client_version, install_hash, body).await;
            match response {
                Ok(r) if r.status.is_success() => done.push((queued.clone(), true)),
                Ok(r) if r.status.as_u16() == 429 || r.status.is_server_error() => {
                    tracing::info!("{url} answered {}; reports wait", r.status);
                    retry = true;
                    break;
                }
                Ok(r) => {
                    tracing::warn!(
                        "{url} refused a {} report with {}; dropped",
                        queued.report.reason,
                        r.status
                    );
                    done.push((queued.clone(), false));
                }
                Err(e) => {
                    tracing::info!("could not send a failure report to {url}: {e}; it waits");
                    retry = true;
                    break;
                }
            }
        }
        let at = self.clock.now().unix_timestamp();
        record_sent(
            &self.cache,
            OUTBOX_FILE,
            "reports",
            move |file: &mut OutboxFile| {
                let mut outcome = SendOutcome::default();
                for (queued, sent) in &done {
                    if let Some(i) = file.pending.iter().position(|q| q == queued) {
                        file.pending.remove(i);
                    }
                    if *sent {
                        outcome.sent += 1;
                        file.sent.push(Sent {
                            pack: queued.report.pack.clone(),
                            reason: queued.report.reason,
                            at,
                        });
                    } else {
                        outcome.dropped += 1;
                    }
                }
                if retry {
                    file.next_attempt = Some(at + retry_pause().as_secs() as i64);
                }
                file.prune(at);
                outcome.waiting = file.pending.len();
                outcome
            },
        )
        .await
    }

    fn sending_lock(&self) -> Option<std::fs::File> {
        let path = self.cache.dir().join(SENDING_LOCK);
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .ok()?;
        file.try_lock().ok()?;
        Some(file)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn outbox(dir: &std::path::Path) -> Outbox {
        Outbox::new(
            Cache::open(dir).unwrap(),
            "stable",
            &semver::Version::new(1, 4, 2),
        )
    }

    #[test]
    fn the_same_pack_and_reason_is_queued_once_a_day() {
        let dir = tempfile::tempdir().unwrap();
        let outbox = outbox(dir.path());
        let sha = "ab".repeat(32);
        assert!(outbox.queue(&sha, ReportReason::RenderFailed));
        assert!(!outbox.queue(&sha, ReportReason::RenderFailed));
        assert!(outbox.queue(&sha, ReportReason::MarkedBad));
        assert_eq!(outbox.pending().len(), 2);
        assert!(outbox.due(OffsetDateTime::now_utc()));
    }

    #[test]
    fn at_most_a_few_reports_wait() {
        let dir = tempfile::tempdir().unwrap();
        let outbox = outbox(dir.path());
        let queued = (0..20)
            .filter(|i| outbox.queue(&format!("{i:064x}"), ReportReason::InvalidPack))
            .count();
        assert_eq!(queued, MAX_PENDING);
    }

    #[test]
    fn a_report_holds_four_fields_and_no_text() {
        let dir = tempfile::tempdir().unwrap();
        let outbox = outbox(dir.path());
        outbox.queue("builtin", ReportReason::Expired);
        let body = serde_json::to_value(&outbox.pending()[0]).unwrap();
        assert_eq!(
            body,
            serde_json::json!({"channel": "stable", "pack": "builtin", "reason": "expired", "client_version": "1.4.2"})
        );
    }

    #[test]
    fn installs_that_failed_together_retry_spread_over_the_next_quarter_hour() {
        let pauses: Vec<u64> = (0..100).map(|_| retry_pause().as_secs()).collect();
        let lowest = *pauses.iter().min().unwrap();
        let highest = *pauses.iter().max().unwrap();
        let first = RETRY_AFTER_SECS as u64;
        assert!(
            lowest >= first && highest < 2 * first,
            "{lowest}..{highest}"
        );
        assert!(highest - lowest > 60, "no jitter: {lowest}..{highest}");
    }
}
