//! Outcome counts on the device: how the turns served by each pack version went, per UTC
//! day and client release, waiting in `<cache>/outcomes.json` until their day is over, then
//! sent to packd once ([`pack_protocol::OutcomeReport`]). Counts only: the agent adds numbers
//! ([`OutcomeLog::add`]); no text it saw or wrote is ever kept here.
//!
//! The file lives in the pack cache, beside `reports.json`, because everything about it is
//! the cache's: it is written by every process on the cache (under the same lock-and-rename
//! of [`Cache::update_json`]), it is about the packs that cache serves, and it is sent under
//! the install hash of the cache's server and channel. With no server configured there is no
//! cache and nothing is counted.
//!
//! Bounded: at most [`MAX_ROWS`] rows (one per day × pack × release; the oldest goes first),
//! none older than [`MAX_DAYS`] days, each count saturating at the protocol's caps. Off, with
//! nothing counted or sent, under the rule of failure reports: `[updates] telemetry = false`
//! or `DO_NOT_TRACK` ([`crate::ClientConfig::telemetry`]). A server that does not answer, or
//! answers 429 or 5xx, is tried again after the reports' pause; any other refusal drops the
//! row.

use std::time::Duration;

use pack_protocol::{OutcomeReport, headers, paths};
use serde::{Deserialize, Serialize};
use time::{Date, OffsetDateTime};

use crate::cache::Cache;
use crate::report::SendOutcome;
use crate::snapshot::{Snapshot, Source};
use crate::{Client, ClientError};

/// What one turn, tool call or run adds (the wire type: the counts are kept as sent).
pub use pack_protocol::OutcomeCounts;

const OUTCOMES_FILE: &str = "outcomes.json";
const SENDING_LOCK: &str = "outcomes.sending.lock";
/// Rows kept at most: a day × pack × release each.
pub const MAX_ROWS: usize = 32;
/// Days a row is kept, today included: packd's window, past which it refuses them.
pub const MAX_DAYS: i64 = 7;
/// Each outcome request gets this long.
const SEND_TIMEOUT: Duration = Duration::from_secs(5);

/// The pack a turn was meant to be served by: the captured snapshot, whatever it fell back to.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PackKey {
    /// SHA-256 of the sealed pack, or `builtin`.
    pub pack: String,
    pub name: String,
    pub version: String,
}

impl PackKey {
    pub fn of(snapshot: &Snapshot) -> PackKey {
        PackKey {
            pack: match snapshot.source() {
                Source::Remote => snapshot.sha256().to_string(),
                Source::Builtin => headers::INSTALLED_BUILTIN.to_string(),
            },
            name: snapshot.name().to_string(),
            version: snapshot.version().to_string(),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Row {
    channel: String,
    /// `YYYY-MM-DD`, UTC.
    day: String,
    pack: PackKey,
    client_version: String,
    counts: OutcomeCounts,
}

impl Row {
    fn same(&self, other: &Row) -> bool {
        self.channel == other.channel
            && self.day == other.day
            && self.pack == other.pack
            && self.client_version == other.client_version
    }

    fn report(&self) -> OutcomeReport {
        OutcomeReport {
            channel: self.channel.clone(),
            day: self.day.clone(),
            pack: self.pack.pack.clone(),
            pack_name: self.pack.name.clone(),
            pack_version: self.pack.version.clone(),
            client_version: self.client_version.clone(),
            counts: self.counts,
        }
    }
}

#[derive(Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct OutcomeFile {
    /// Oldest first.
    #[serde(default)]
    rows: Vec<Row>,
    /// Unix seconds before which no send is tried (after a failed one).
    #[serde(default)]
    next_attempt: Option<i64>,
}

impl OutcomeFile {
    fn prune(&mut self, today: Date, now: i64) {
        let oldest = day_text(today - time::Duration::days(MAX_DAYS - 1));
        // `YYYY-MM-DD` orders as the dates do.
        self.rows.retain(|r| r.day >= oldest);
        if self.next_attempt.is_some_and(|t| t <= now) {
            self.next_attempt = None;
        }
    }
}

/// `YYYY-MM-DD`.
pub fn day_text(day: Date) -> String {
    format!(
        "{:04}-{:02}-{:02}",
        day.year(),
        u8::from(day.month()),
        day.day()
    )
}

/// The outcome counts of one install on one channel.
#[derive(Debug, Clone)]
pub struct OutcomeLog {
    cache: Cache,
    channel: String,
    client_version: String,
}

impl OutcomeLog {
    pub fn new(cache: Cache, channel: &str, client_version: &semver::Version) -> Self {
        OutcomeLog {
            cache,
            channel: channel.to_string(),
            client_version: client_version.to_string(),
        }
    }

    /// The log of `client`'s cache, or `None` when the client shares nothing: telemetry
    /// off (`[updates] telemetry = false` or `DO_NOT_TRACK`), or no server to send to.
    pub fn for_client(client: &Client) -> Result<Option<Self>, ClientError> {
        let config = client.config();
        if !config.telemetry || config.server.is_none() {
            return Ok(None);
        }
        Ok(Some(OutcomeLog::new(
            Cache::open(&config.cache_dir)?,
            &config.channel,
            &config.client_version,
        )))
    }

    /// Adds `counts` to the rows of `now`'s UTC day, one per pack, creating rows as needed
    /// (the oldest rows go past [`MAX_ROWS`]). Blocking: a locked, fsynced write.
    pub fn add(
        &self,
        now: OffsetDateTime,
        counts: &[(PackKey, OutcomeCounts)],
    ) -> Result<(), ClientError> {
        let counts: Vec<&(PackKey, OutcomeCounts)> =
            counts.iter().filter(|(_, c)| !c.is_empty()).collect();
        if counts.is_empty() {
            return Ok(());
        }
        let (today, at) = (now.date(), now.unix_timestamp());
        self.cache.update_json(OUTCOMES_FILE, |file: &mut OutcomeFile| {
            file.prune(today, at);
            for (pack, add) in counts {
                let row = Row {
                    channel: self.channel.clone(),
                    day: day_text(today),
                    pack: pack.clone(),
                    client_version: self.client_version.clone(),
                    counts: OutcomeCounts::default(),
                };
                let at = match file.rows.iter().position(|r| r.same(&row)) {
                    Some(at) => at,
                    None => {
                        if file.rows.len() >= MAX_ROWS {
                            let dropped = file.rows.remove(0);
                            tracing::info!(
                                "outcome counts of {} for pack {} dropped: {MAX_ROWS} rows at most",
                                dropped.day,
                                dropped.pack.version
                            );
                        }
                        file.rows.push(row);
                        file.rows.len() - 1
                    }
                };
                file.rows[at].counts.add(add);
            }
            (true, ())
        })
    }

    /// Every row kept, as it would be sent, oldest first (today's included).
    pub fn rows(&self) -> Vec<OutcomeReport> {
        let file: OutcomeFile = self.cache.read_json(OUTCOMES_FILE);
        file.rows.iter().map(Row::report).collect()
    }

    /// Whether a row of a day that is over waits and may be sent now. One `stat` when the
    /// file is absent.
    pub fn due(&self, now: OffsetDateTime) -> bool {
        if !self.cache.dir().join(OUTCOMES_FILE).exists() {
            return false;
        }
        let file: OutcomeFile = self.cache.read_json(OUTCOMES_FILE);
        let today = day_text(now.date());
        file.next_attempt.is_none_or(|t| t <= now.unix_timestamp())
            && file.rows.iter().any(|r| r.day < today)
    }

    /// Sends each row whose day is over to `server`, one POST each, and forgets it once
    /// the server took it. Stops at the first the server did not take for now. One process
    /// at a time sends (another one sending: nothing). Rows of another channel (the config
    /// changed) cannot be sent under this channel's install hash and are dropped.
    pub async fn send(
        &self,
        http: &reqwest::Client,
        server: &str,
        install_hash: &str,
        now: OffsetDateTime,
    ) -> SendOutcome {
        if !self.due(now) {
            return SendOutcome::default();
        }
        let Some(_sending) = self.sending_lock() else {
            return SendOutcome::default();
        };
        let file: OutcomeFile = self.cache.read_json(OUTCOMES_FILE);
        let today = day_text(now.date());
        let url = format!("{server}{}", paths::outcomes(&self.channel));
        let mut done: Vec<(Row, bool)> = Vec::new();
        let mut retry = false;
        for row in file.rows.iter().filter(|r| r.day < today) {
            if row.channel != self.channel {
                done.push((row.clone(), false));
                continue;
            }
            let Ok(body) = serde_json::to_vec(&row.report()) else {
                continue;
            };
            let response = http
                .post(&url)
                .timeout(SEND_TIMEOUT)
                .header(reqwest::header::CONTENT_TYPE, "application/json")
                .header(headers::CLIENT_VERSION, &self.client_version)
                .header(headers::INSTALL, install_hash)
                .body(body)
                .send()
                .await;
            match response {
                Ok(r) if r.status().is_success() => done.push((row.clone(), true)),
                Ok(r) if r.status().as_u16() == 429 || r.status().is_server_error() => {
                    tracing::info!("{url} answered {}; outcome counts wait", r.status());
                    retry = true;
                    break;
                }
                Ok(r) => {
                    tracing::warn!(
                        "{url} refused the outcome counts of {} with {}; dropped",
                        row.day,
                        r.status()
                    );
                    done.push((row.clone(), false));
                }
                Err(e) => {
                    tracing::info!(
                        "could not send outcome counts to {url}: {}; they wait",
                        pack_format::error::root_cause(&e)
                    );
                    retry = true;
                    break;
                }
            }
        }
        let cache = self.cache.clone();
        let (today, at) = (now.date(), now.unix_timestamp());
        let recorded = tokio::task::spawn_blocking(move || {
            cache.update_json(OUTCOMES_FILE, |file: &mut OutcomeFile| {
                let mut outcome = SendOutcome::default();
                for (row, sent) in &done {
                    file.rows.retain(|r| !r.same(row));
                    if *sent {
                        outcome.sent += 1;
                    } else {
                        outcome.dropped += 1;
                    }
                }
                if retry {
                    file.next_attempt = Some(at + crate::report::retry_pause().as_secs() as i64);
                }
                file.prune(today, at);
                outcome.waiting = file.rows.len();
                (true, outcome)
            })
        })
        .await;
        match recorded {
            Ok(Ok(outcome)) => outcome,
            Ok(Err(e)) => {
                tracing::warn!("could not record the outcome counts sent: {e}");
                SendOutcome::default()
            }
            Err(e) => {
                tracing::warn!("could not record the outcome counts sent: {e}");
                SendOutcome::default()
            }
        }
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

/// Sends `client`'s outcome counts that are due, under its install hash: what the
/// background refresh and the long-running schedule call after a refresh. Nothing with
/// telemetry off or no server.
pub async fn send_due(client: &Client) -> SendOutcome {
    let log = match OutcomeLog::for_client(client) {
        Ok(Some(log)) => log,
        Ok(None) => return SendOutcome::default(),
        Err(e) => {
            tracing::warn!("outcome counts not sent: {e}");
            return SendOutcome::default();
        }
    };
    let now = OffsetDateTime::now_utc();
    let config = client.config();
    let Some(server) = &config.server else {
        return SendOutcome::default();
    };
    if !log.due(now) {
        return SendOutcome::default();
    }
    let http = match reqwest::Client::builder()
        .connect_timeout(config.connect_timeout)
        .user_agent(format!("promptpack-client/{}", config.client_version))
        .build()
    {
        Ok(http) => http,
        Err(e) => {
            tracing::warn!("outcome counts not sent: {e}");
            return SendOutcome::default();
        }
    };
    let install = pack_protocol::fleet::install_hash(server, &config.channel, client.install_id());
    log.send(&http, server, &install, now).await
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use super::*;

    fn log(dir: &std::path::Path) -> OutcomeLog {
        OutcomeLog::new(
            Cache::open(dir).unwrap(),
            "stable",
            &semver::Version::new(1, 4, 2),
        )
    }

    fn pack(version: &str) -> PackKey {
        PackKey {
            pack: format!("{:064x}", version.len()),
            name: "core".to_string(),
            version: version.to_string(),
        }
    }

    fn turns(n: u64) -> OutcomeCounts {
        OutcomeCounts {
            turns: n,
            tool_calls: n,
            tool_errors: 1,
            ..OutcomeCounts::default()
        }
    }

    fn at(day: &str) -> OffsetDateTime {
        let date = Date::parse(
            day,
            time::macros::format_description!("[year]-[month]-[day]"),
        )
        .unwrap();
        date.with_hms(12, 0, 0).unwrap().assume_utc()
    }

    #[test]
    fn counts_of_one_day_and_pack_add_up_in_one_row() {
        let dir = tempfile::tempdir().unwrap();
        let log = log(dir.path());
        log.add(at("2026-03-01"), &[(pack("1.3.0"), turns(3))])
            .unwrap();
        log.add(
            at("2026-03-01"),
            &[(pack("1.3.0"), turns(2)), (pack("1.4.0"), turns(1))],
        )
        .unwrap();
        log.add(at("2026-03-02"), &[(pack("1.3.0"), turns(4))])
            .unwrap();
        let rows = log.rows();
        let seen: Vec<(&str, &str, u64, u64)> = rows
            .iter()
            .map(|r| {
                (
                    r.day.as_str(),
                    r.pack_version.as_str(),
                    r.counts.turns,
                    r.counts.tool_errors,
                )
            })
            .collect();
        assert_eq!(
            seen,
            [
                ("2026-03-01", "1.3.0", 5, 2),
                ("2026-03-01", "1.4.0", 1, 1),
                ("2026-03-02", "1.3.0", 4, 1)
            ]
        );
        assert!(rows.iter().all(|r| r.client_version == "1.4.2"));
    }

    #[test]
    fn the_file_keeps_a_week_and_a_few_dozen_rows() {
        let dir = tempfile::tempdir().unwrap();
        let log = log(dir.path());
        for i in 0..(MAX_ROWS + 5) {
            log.add(at("2026-03-01"), &[(pack(&format!("1.0.{i}")), turns(1))])
                .unwrap();
        }
        let rows = log.rows();
        assert_eq!(rows.len(), MAX_ROWS);
        // The oldest rows went first.
        assert_eq!(rows[0].pack_version, "1.0.5");
        log.add(at("2026-03-08"), &[(pack("2.0.0"), turns(1))])
            .unwrap();
        let rows = log.rows();
        assert_eq!(rows.len(), 1, "a week later only the new day is kept");
        assert_eq!(rows[0].day, "2026-03-08");
    }

    #[test]
    fn only_days_that_are_over_are_due() {
        let dir = tempfile::tempdir().unwrap();
        let log = log(dir.path());
        assert!(!log.due(at("2026-03-01")));
        log.add(at("2026-03-01"), &[(pack("1.3.0"), turns(1))])
            .unwrap();
        assert!(!log.due(at("2026-03-01")));
        assert!(log.due(at("2026-03-02")));
    }

    /// packd as far as the log can tell: answers each POST with the next status, keeps the
    /// bodies.
    async fn server(statuses: Vec<u16>) -> (String, Arc<Mutex<Vec<serde_json::Value>>>) {
        let bodies = Arc::new(Mutex::new(Vec::new()));
        let statuses = Arc::new(Mutex::new(statuses));
        let kept = bodies.clone();
        let app = axum::Router::new().route(
            "/v1/channels/stable/outcomes",
            axum::routing::post(move |body: axum::body::Bytes| {
                let (kept, statuses) = (kept.clone(), statuses.clone());
                async move {
                    kept.lock()
                        .unwrap()
                        .push(serde_json::from_slice::<serde_json::Value>(&body).unwrap());
                    let status = statuses.lock().unwrap().remove(0);
                    axum::http::StatusCode::from_u16(status).unwrap()
                }
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await });
        (format!("http://{addr}"), bodies)
    }

    #[tokio::test]
    async fn closed_days_are_sent_once_and_a_busy_server_gets_them_later() {
        let dir = tempfile::tempdir().unwrap();
        let log = log(dir.path());
        log.add(at("2026-03-01"), &[(pack("1.3.0"), turns(3))])
            .unwrap();
        log.add(at("2026-03-02"), &[(pack("1.3.0"), turns(2))])
            .unwrap();
        log.add(at("2026-03-03"), &[(pack("1.3.0"), turns(1))])
            .unwrap();
        let (url, bodies) = server(vec![202, 503, 202, 202]).await;
        let http = reqwest::Client::new();
        let install = "0".repeat(32);
        let now = at("2026-03-03");

        let first = log.send(&http, &url, &install, now).await;
        assert_eq!((first.sent, first.dropped, first.waiting), (1, 0, 2));
        // After the 503 nothing is tried until the pause is over.
        assert!(!log.due(now));
        let skipped = log.send(&http, &url, &install, now).await;
        assert_eq!(skipped.sent, 0);
        let later = now + time::Duration::hours(1);
        let second = log.send(&http, &url, &install, later).await;
        assert_eq!((second.sent, second.waiting), (1, 1));

        let bodies = bodies.lock().unwrap().clone();
        let days: Vec<&str> = bodies.iter().map(|b| b["day"].as_str().unwrap()).collect();
        assert_eq!(days, ["2026-03-01", "2026-03-02", "2026-03-02"]);
        assert_eq!(bodies[0]["counts"]["turns"], 3);
        // Today's row stays until its day is over.
        assert_eq!(log.rows().len(), 1);
        assert_eq!(log.rows()[0].day, "2026-03-03");
    }

    #[tokio::test]
    async fn a_refused_row_is_dropped_not_retried() {
        let dir = tempfile::tempdir().unwrap();
        let log = log(dir.path());
        log.add(at("2026-03-01"), &[(pack("1.3.0"), turns(3))])
            .unwrap();
        let (url, _) = server(vec![400]).await;
        let sent = log
            .send(
                &reqwest::Client::new(),
                &url,
                &"0".repeat(32),
                at("2026-03-02"),
            )
            .await;
        assert_eq!((sent.sent, sent.dropped, sent.waiting), (0, 1, 0));
        assert!(log.rows().is_empty());
    }
}
