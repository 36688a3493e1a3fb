//! Outcome counts on the device: how the turns served by each pack version went, per UTC
//! day and client release, kept in `<cache>/outcomes.json` and sent to packd
//! ([`pack_protocol::OutcomeReport`]) while their day runs, so a ramping rollout's guard
//! sees them within the hour. Counts only: the agent adds numbers ([`OutcomeLog::add`]); no
//! text it saw or wrote is ever kept here.
//!
//! The send rule, per row (day × pack × release). packd *replaces* an install's earlier
//! report of the same day, pack and release, so a row can go out again with larger counts:
//! - while its day runs, provisionally: when it changed since it last went out (or never
//!   did), and at most once per [`PROVISIONAL_INTERVAL`] (`[updates] outcomes_interval_secs`);
//! - once more when its day is over, with its final counts, and then it is forgotten. The
//!   final send waits for this install's spread after midnight UTC (under one interval), so
//!   a fleet does not send the day it closed in the same minute.
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
//! row (one of today stays to count, unsent, until its day is over: sent again later with
//! only the counts since, it would replace larger ones packd may hold).

use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime};

use pack_protocol::{OutcomeReport, headers, paths};
use serde::{Deserialize, Serialize};
use time::{Date, OffsetDateTime};

use crate::cache::Cache;
use crate::http::Transport;
use crate::report::{SendOutcome, post_json, record_sent};
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
/// The provisional interval and the bounds a config may ask for, kept with the other
/// timings in [`crate::policy`].
pub use crate::policy::{MAX_PROVISIONAL_INTERVAL, MIN_PROVISIONAL_INTERVAL, PROVISIONAL_INTERVAL};
const DAY_SECS: i64 = 24 * 60 * 60;

/// The pack a turn was meant to be served by: the captured snapshot, whatever it fell back to.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PackKey {
    /// SHA-256 of the sealed pack, or `builtin`.
    pub pack: String,
    pub name: String,
    pub version: semver::Version,
}

impl PackKey {
    pub fn of(snapshot: &Snapshot) -> PackKey {
        PackKey {
            pack: match snapshot.source() {
                Source::Remote => snapshot.sha256().to_string(),
                Source::Builtin => headers::INSTALLED_BUILTIN.to_string(),
            },
            name: snapshot.name().to_string(),
            version: snapshot.version().clone(),
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
    client_version: semver::Version,
    counts: OutcomeCounts,
    /// The last send packd took: when, and the counts it carried.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    sent: Option<Sent>,
    /// packd refused this row while its day ran: it is not sent again, and goes when the
    /// day is over.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    refused: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Sent {
    /// Unix seconds.
    at: i64,
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

    /// The first moment from `now` (unix seconds) at which this row may go out if nothing
    /// is added to it: at or before `now` when it may go now, `i64::MAX` never. While its
    /// day runs, `interval` after the last send when it changed since (at once when it was
    /// never sent); once the day is over, `spread` after its end.
    fn ready_at(&self, now: i64, interval: i64, spread: i64) -> i64 {
        let Some(end) = day_end(&self.day) else {
            return i64::MAX;
        };
        if self.refused {
            return i64::MAX;
        }
        let provisional = match self.sent {
            None => i64::MIN,
            Some(sent) if sent.counts == self.counts => i64::MAX,
            Some(sent) => sent.at.saturating_add(interval),
        };
        if now < end && provisional < end {
            provisional
        } else {
            end.saturating_add(spread)
        }
    }
}

/// Unix seconds at the end of a `YYYY-MM-DD` UTC day, `None` for anything else.
fn day_end(day: &str) -> Option<i64> {
    let date = Date::parse(
        day,
        time::macros::format_description!("[year]-[month]-[day]"),
    )
    .ok()?;
    Some(date.midnight().assume_utc().unix_timestamp() + DAY_SECS)
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
    fn prune(&mut self, now: OffsetDateTime) {
        let oldest = day_text(now.date() - time::Duration::days(MAX_DAYS - 1));
        let at = now.unix_timestamp();
        // `YYYY-MM-DD` orders as the dates do. A refused row goes when its day is over.
        self.rows.retain(|r| {
            r.day >= oldest && day_end(&r.day).is_some_and(|end| !(r.refused && end <= at))
        });
        if self.next_attempt.is_some_and(|t| t <= at) {
            self.next_attempt = None;
        }
    }

    /// The first moment from `now` at which a row may go out if the file stays as it is
    /// (see [`Row::ready_at`]), after the pause that follows a failed send.
    fn next_ready(&self, now: i64, interval: i64, spread: i64) -> i64 {
        let ready = self
            .rows
            .iter()
            .map(|r| r.ready_at(now, interval, spread))
            .min()
            .unwrap_or(i64::MAX);
        match self.next_attempt {
            Some(t) if t > now => t.max(ready),
            _ => ready,
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

/// What packd did with a row sent.
#[derive(Debug, Clone, Copy)]
enum Fate {
    Taken,
    Refused,
    /// Not sent: counted under another channel (the config changed), whose install hash
    /// this log does not send under.
    OtherChannel,
}

/// The outcome counts of one install on one channel.
#[derive(Debug, Clone)]
pub struct OutcomeLog {
    cache: Cache,
    channel: String,
    client_version: semver::Version,
    /// Seconds between provisional sends of a row ([`PROVISIONAL_INTERVAL`] by default).
    interval: i64,
    /// Seconds after midnight UTC before a day's final send (none by default).
    spread: i64,
    /// The last look at the file that found nothing due, shared by clones.
    quiet: Arc<Mutex<Option<Quiet>>>,
}

/// Nothing is due before `until` while the file keeps the modification time, length and
/// inode it had when read at `read`. Every write replaces the file (a new inode), so a write
/// within one tick of a coarse file-system clock, at the same length, still shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Quiet {
    stamp: (Option<SystemTime>, u64, u64),
    read: i64,
    until: i64,
}

impl OutcomeLog {
    pub fn new(cache: Cache, channel: &str, client_version: &semver::Version) -> Self {
        OutcomeLog {
            cache,
            channel: channel.to_string(),
            client_version: client_version.clone(),
            interval: PROVISIONAL_INTERVAL.as_secs() as i64,
            spread: 0,
            quiet: Arc::new(Mutex::new(None)),
        }
    }

    /// The same log with another provisional interval, and a wait after midnight UTC before
    /// a day's final send (taken modulo the interval).
    pub fn with_timing(mut self, interval: Duration, spread: Duration) -> Self {
        let interval = interval.as_secs().max(1);
        self.interval = interval as i64;
        self.spread = (spread.as_secs() % interval) as i64;
        self
    }

    /// How often a row of today goes out at most.
    pub fn interval(&self) -> Duration {
        Duration::from_secs(self.interval as u64)
    }

    /// The log of `client`'s cache, or `None` when the client shares nothing: telemetry
    /// off (`[updates] telemetry = false` or `DO_NOT_TRACK`), or no server to send to. Its
    /// interval is the config's, its spread after midnight the install's.
    pub fn for_client(client: &Client) -> Result<Option<Self>, ClientError> {
        let config = client.config();
        if !config.telemetry || config.server.is_none() {
            return Ok(None);
        }
        let spread = Duration::from_secs(crate::policy::spread(client.install_id()));
        Ok(Some(
            OutcomeLog::new(
                Cache::open(&config.cache_dir)?,
                &config.channel,
                &config.client_version,
            )
            .with_timing(config.outcomes_interval, spread),
        ))
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
        let today = now.date();
        self.cache.update_json(OUTCOMES_FILE, |file: &mut OutcomeFile| {
            file.prune(now);
            for (pack, add) in counts {
                let row = Row {
                    channel: self.channel.clone(),
                    day: day_text(today),
                    pack: pack.clone(),
                    client_version: self.client_version.clone(),
                    counts: OutcomeCounts::default(),
                    sent: None,
                    refused: false,
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
        })?;
        // This process changed the file: whatever its stamp says, look again.
        *self.quiet.lock().unwrap_or_else(PoisonError::into_inner) = None;
        Ok(())
    }

    /// Every row kept, as it would be sent, oldest first (today's included).
    pub fn rows(&self) -> Vec<OutcomeReport> {
        let file: OutcomeFile = self.cache.read_json(OUTCOMES_FILE);
        file.rows.iter().map(Row::report).collect()
    }

    /// Whether a row may go out now (see the module's rule). One `stat` when the file is
    /// absent, or unchanged since a look that found nothing due before now.
    pub fn due(&self, now: OffsetDateTime) -> bool {
        let Ok(meta) = std::fs::metadata(self.cache.dir().join(OUTCOMES_FILE)) else {
            return false;
        };
        let stamp = (meta.modified().ok(), meta.len(), inode(&meta));
        let at = now.unix_timestamp();
        let mut quiet = self.quiet.lock().unwrap_or_else(PoisonError::into_inner);
        if quiet.is_some_and(|q| q.stamp == stamp && q.read <= at && at < q.until) {
            return false;
        }
        let file: OutcomeFile = self.cache.read_json(OUTCOMES_FILE);
        let next = file.next_ready(at, self.interval, self.spread);
        if next <= at {
            *quiet = None;
            return true;
        }
        // A change the stamp misses (a file system with a coarse clock) waits one interval
        // at most.
        *quiet = Some(Quiet {
            stamp,
            read: at,
            until: next.min(at.saturating_add(self.interval)),
        });
        false
    }

    /// Sends each row that may go out now to `server`, one POST each; forgets a row whose
    /// day is over once the server took its final counts, and notes what it took of one
    /// whose day runs. Stops at the first the server did not take for now. One process at
    /// a time sends (another one sending: nothing). Rows of another channel (the config
    /// changed) cannot be sent under this channel's install hash and are dropped.
    pub async fn send(
        &self,
        transport: &dyn Transport,
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
        // Read again under the lock: another process may have sent, or paused, since.
        let file: OutcomeFile = self.cache.read_json(OUTCOMES_FILE);
        let at = now.unix_timestamp();
        if file.next_attempt.is_some_and(|t| t > at) {
            return SendOutcome::default();
        }
        let url = format!("{server}{}", paths::outcomes(&self.channel));
        let mut done: Vec<(Row, Fate)> = Vec::new();
        let mut retry = false;
        let ready = file
            .rows
            .iter()
            .filter(|r| r.ready_at(at, self.interval, self.spread) <= at);
        for row in ready {
            if row.channel != self.channel {
                done.push((row.clone(), Fate::OtherChannel));
                continue;
            }
            let Ok(body) = serde_json::to_vec(&row.report()) else {
                continue;
            };
            let response =
                post_json(transport, &url, &self.client_version, install_hash, body).await;
            match response {
                Ok(r) if r.status.is_success() => done.push((row.clone(), Fate::Taken)),
                Ok(r) if r.status.as_u16() == 429 || r.status.is_server_error() => {
                    tracing::info!("{url} answered {}; outcome counts wait", r.status);
                    retry = true;
                    break;
                }
                Ok(r) => {
                    tracing::warn!(
                        "{url} refused the outcome counts of {} with {}; not sent again",
                        row.day,
                        r.status
                    );
                    done.push((row.clone(), Fate::Refused));
                }
                Err(e) => {
                    tracing::info!("could not send outcome counts to {url}: {e}; they wait");
                    retry = true;
                    break;
                }
            }
        }
        record_sent(
            &self.cache,
            OUTCOMES_FILE,
            "outcome counts",
            move |file: &mut OutcomeFile| {
                let mut outcome = SendOutcome::default();
                for (sent, fate) in &done {
                    let Some(i) = file.rows.iter().position(|r| r.same(sent)) else {
                        continue;
                    };
                    let over = day_end(&sent.day).is_none_or(|end| at >= end);
                    match fate {
                        Fate::Taken => {
                            outcome.sent += 1;
                            // Counts added while it was on its way (a writer whose clock is
                            // a little behind) go with the next send.
                            if over && file.rows[i].counts == sent.counts {
                                file.rows.remove(i);
                            } else {
                                file.rows[i].sent = Some(Sent {
                                    at,
                                    counts: sent.counts,
                                });
                            }
                        }
                        // Sent again with only the counts added since, the row would
                        // replace larger ones packd may hold: it stays, unsent, until its
                        // day is over.
                        Fate::Refused if !over => {
                            outcome.dropped += 1;
                            file.rows[i].refused = true;
                        }
                        Fate::Refused | Fate::OtherChannel => {
                            outcome.dropped += 1;
                            file.rows.remove(i);
                        }
                    }
                }
                if retry {
                    file.next_attempt = Some(at + crate::report::retry_pause().as_secs() as i64);
                }
                file.prune(now);
                outcome.waiting = file.rows.len();
                outcome
            },
        )
        .await
    }

    /// Sends what may go out now under `client`'s server and install hash. One `stat` when
    /// nothing is due (see [`OutcomeLog::due`]): what a long-running process calls on a
    /// timer.
    pub async fn send_due(&self, client: &Client) -> SendOutcome {
        let config = client.config();
        let now = config.clock.now();
        let Some(server) = &config.server else {
            return SendOutcome::default();
        };
        if !self.due(now) {
            return SendOutcome::default();
        }
        let install =
            pack_protocol::fleet::install_hash(server, &config.channel, client.install_id());
        self.send(client.transport(), server, &install, now).await
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

/// Sends `client`'s outcome counts that may go out now, under its install hash: what the
/// background refresh and the long-running schedule call after a refresh. Nothing with
/// telemetry off or no server.
pub async fn send_due(client: &Client) -> SendOutcome {
    match OutcomeLog::for_client(client) {
        Ok(Some(log)) => log.send_due(client).await,
        Ok(None) => SendOutcome::default(),
        Err(e) => {
            tracing::warn!("outcome counts not sent: {e}");
            SendOutcome::default()
        }
    }
}

/// The file's inode number, where the platform has one.
#[cfg(unix)]
fn inode(meta: &std::fs::Metadata) -> u64 {
    std::os::unix::fs::MetadataExt::ino(meta)
}

#[cfg(not(unix))]
fn inode(_: &std::fs::Metadata) -> u64 {
    0
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
            version: version.parse().unwrap(),
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

    /// `day` at `hh:mm` UTC.
    fn at_time(day: &str, hour: u8, minute: u8) -> OffsetDateTime {
        let date = Date::parse(
            day,
            time::macros::format_description!("[year]-[month]-[day]"),
        )
        .unwrap();
        date.with_hms(hour, minute, 0).unwrap().assume_utc()
    }

    fn at(day: &str) -> OffsetDateTime {
        at_time(day, 12, 0)
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
        let seen: Vec<(&str, String, u64, u64)> = rows
            .iter()
            .map(|r| {
                (
                    r.day.as_str(),
                    r.pack_version.to_string(),
                    r.counts.turns,
                    r.counts.tool_errors,
                )
            })
            .collect();
        assert_eq!(
            seen,
            [
                ("2026-03-01", "1.3.0".to_string(), 5, 2),
                ("2026-03-01", "1.4.0".to_string(), 1, 1),
                ("2026-03-02", "1.3.0".to_string(), 4, 1)
            ]
        );
        assert!(rows.iter().all(|r| r.client_version.to_string() == "1.4.2"));
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
        assert_eq!(rows[0].pack_version.to_string(), "1.0.5");
        log.add(at("2026-03-08"), &[(pack("2.0.0"), turns(1))])
            .unwrap();
        let rows = log.rows();
        assert_eq!(rows.len(), 1, "a week later only the new day is kept");
        assert_eq!(rows[0].day, "2026-03-08");
    }

    #[test]
    fn a_row_is_due_at_once_then_only_when_changed_and_an_interval_later() {
        let dir = tempfile::tempdir().unwrap();
        let log = log(dir.path());
        assert!(!log.due(at("2026-03-01")));
        log.add(at("2026-03-01"), &[(pack("1.3.0"), turns(1))])
            .unwrap();
        assert!(log.due(at("2026-03-01")), "never sent: due at once");
        // As if sent at noon with these counts.
        log.cache
            .update_json(OUTCOMES_FILE, |file: &mut OutcomeFile| {
                file.rows[0].sent = Some(Sent {
                    at: at("2026-03-01").unix_timestamp(),
                    counts: file.rows[0].counts,
                });
                (true, ())
            })
            .unwrap();
        assert!(!log.due(at_time("2026-03-01", 14, 0)), "unchanged");
        log.add(at_time("2026-03-01", 12, 30), &[(pack("1.3.0"), turns(1))])
            .unwrap();
        assert!(!log.due(at_time("2026-03-01", 12, 59)), "changed, too soon");
        assert!(log.due(at_time("2026-03-01", 13, 0)));
        assert!(log.due(at_time("2026-03-02", 0, 0)), "the day is over");
    }

    /// packd as far as the log can tell: answers each POST with the next status, keeps the
    /// bodies, and signals each one.
    struct Packd {
        url: String,
        bodies: Arc<Mutex<Vec<serde_json::Value>>>,
        posted: Arc<tokio::sync::Notify>,
    }

    async fn server(statuses: Vec<u16>) -> Packd {
        let bodies = Arc::new(Mutex::new(Vec::new()));
        let posted = Arc::new(tokio::sync::Notify::new());
        let statuses = Arc::new(Mutex::new(statuses));
        let (kept, signal) = (bodies.clone(), posted.clone());
        let app = axum::Router::new().route(
            "/v1/channels/stable/outcomes",
            axum::routing::post(move |body: axum::body::Bytes| {
                let (kept, statuses, signal) = (kept.clone(), statuses.clone(), signal.clone());
                async move {
                    kept.lock()
                        .unwrap()
                        .push(serde_json::from_slice::<serde_json::Value>(&body).unwrap());
                    signal.notify_one();
                    let status = statuses.lock().unwrap().remove(0);
                    axum::http::StatusCode::from_u16(status).unwrap()
                }
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await });
        Packd {
            url: format!("http://{addr}"),
            bodies,
            posted,
        }
    }

    /// What the server was sent: day, pack version and turns of each POST.
    fn sent(bodies: &Mutex<Vec<serde_json::Value>>) -> Vec<(String, String, u64)> {
        bodies
            .lock()
            .unwrap()
            .iter()
            .map(|b| {
                (
                    b["day"].as_str().unwrap().to_string(),
                    b["pack_version"].as_str().unwrap().to_string(),
                    b["counts"]["turns"].as_u64().unwrap(),
                )
            })
            .collect()
    }

    fn row(day: &str, version: &str, turns: u64) -> (String, String, u64) {
        (day.to_string(), version.to_string(), turns)
    }

    #[tokio::test]
    async fn todays_row_goes_out_at_once_then_hourly_and_only_when_changed() {
        let dir = tempfile::tempdir().unwrap();
        let log = log(dir.path());
        let Packd { url, bodies, .. } = server(vec![202, 202, 202]).await;
        let (http, install) = (reqwest::Client::new(), "0".repeat(32));
        let day = "2026-03-01";

        log.add(at_time(day, 9, 0), &[(pack("1.3.0"), turns(3))])
            .unwrap();
        let first = log.send(&http, &url, &install, at_time(day, 9, 0)).await;
        assert_eq!((first.sent, first.waiting), (1, 1), "today's row is kept");

        // More turns within the hour wait for it.
        log.add(at_time(day, 9, 20), &[(pack("1.3.0"), turns(2))])
            .unwrap();
        let early = log.send(&http, &url, &install, at_time(day, 9, 59)).await;
        assert_eq!(early.sent, 0);
        let hourly = log.send(&http, &url, &install, at_time(day, 10, 0)).await;
        assert_eq!(hourly.sent, 1);

        // Unchanged since: nothing, however long it waits.
        assert!(!log.due(at_time(day, 15, 0)));
        let unchanged = log.send(&http, &url, &install, at_time(day, 15, 0)).await;
        assert_eq!(unchanged.sent, 0);
        log.add(at_time(day, 15, 0), &[(pack("1.3.0"), turns(1))])
            .unwrap();
        let changed = log.send(&http, &url, &install, at_time(day, 15, 1)).await;
        assert_eq!(changed.sent, 1, "an hour after the last send, changed");

        assert_eq!(
            sent(&bodies),
            [
                row(day, "1.3.0", 3),
                row(day, "1.3.0", 5),
                row(day, "1.3.0", 6)
            ]
        );
    }

    #[tokio::test]
    async fn a_day_that_is_over_goes_out_once_more_with_its_final_counts() {
        let dir = tempfile::tempdir().unwrap();
        // This install's spread: the final send waits 20 minutes after midnight.
        let log = log(dir.path()).with_timing(PROVISIONAL_INTERVAL, Duration::from_secs(20 * 60));
        let Packd { url, bodies, .. } = server(vec![202, 202, 202, 202, 202]).await;
        let (http, install) = (reqwest::Client::new(), "0".repeat(32));

        log.add(
            at_time("2026-03-01", 23, 10),
            &[(pack("1.3.0"), turns(3)), (pack("1.4.0"), turns(1))],
        )
        .unwrap();
        let provisional = log
            .send(&http, &url, &install, at_time("2026-03-01", 23, 10))
            .await;
        assert_eq!(provisional.sent, 2);
        // Counted within the hour before midnight: too late for another provisional send.
        log.add(at_time("2026-03-01", 23, 50), &[(pack("1.3.0"), turns(2))])
            .unwrap();
        assert!(!log.due(at_time("2026-03-01", 23, 59)));
        assert!(!log.due(at_time("2026-03-02", 0, 19)), "the spread");

        // Both rows once more, the unchanged one too (packd replaces it with the same
        // counts), and then forgotten.
        let last = log
            .send(&http, &url, &install, at_time("2026-03-02", 0, 20))
            .await;
        assert_eq!((last.sent, last.dropped, last.waiting), (2, 0, 0));
        assert!(log.rows().is_empty());
        assert!(!log.due(at_time("2026-03-02", 12, 0)));
        let again = log
            .send(&http, &url, &install, at_time("2026-03-02", 12, 0))
            .await;
        assert_eq!(again.sent, 0);

        assert_eq!(
            sent(&bodies),
            [
                row("2026-03-01", "1.3.0", 3),
                row("2026-03-01", "1.4.0", 1),
                row("2026-03-01", "1.3.0", 5),
                row("2026-03-01", "1.4.0", 1),
            ]
        );
    }

    #[tokio::test]
    async fn a_busy_server_gets_the_counts_after_the_pause() {
        let dir = tempfile::tempdir().unwrap();
        let log = log(dir.path());
        log.add(at("2026-03-01"), &[(pack("1.3.0"), turns(3))])
            .unwrap();
        log.add(at("2026-03-02"), &[(pack("1.3.0"), turns(2))])
            .unwrap();
        log.add(at("2026-03-03"), &[(pack("1.3.0"), turns(1))])
            .unwrap();
        let Packd { url, bodies, .. } = server(vec![202, 429, 202, 202]).await;
        let http = reqwest::Client::new();
        let install = "0".repeat(32);
        let now = at("2026-03-03");

        let first = log.send(&http, &url, &install, now).await;
        assert_eq!((first.sent, first.dropped, first.waiting), (1, 0, 2));
        // After the 429 nothing is tried until the pause is over, not even today's row
        // that changed.
        log.add(now, &[(pack("1.3.0"), turns(4))]).unwrap();
        assert!(!log.due(now + time::Duration::minutes(14)));
        let skipped = log
            .send(&http, &url, &install, now + time::Duration::minutes(14))
            .await;
        assert_eq!(skipped.sent, 0);
        let later = now + time::Duration::minutes(30);
        let second = log.send(&http, &url, &install, later).await;
        assert_eq!((second.sent, second.waiting), (2, 1));

        assert_eq!(
            sent(&bodies),
            [
                row("2026-03-01", "1.3.0", 3),
                row("2026-03-02", "1.3.0", 2),
                row("2026-03-02", "1.3.0", 2),
                row("2026-03-03", "1.3.0", 5),
            ]
        );
        // Today's row stays, to go out again when it changes and once its day is over.
        assert_eq!(log.rows().len(), 1);
        assert_eq!(log.rows()[0].day, "2026-03-03");
    }

    #[tokio::test]
    async fn a_refused_row_is_dropped_not_retried() {
        let dir = tempfile::tempdir().unwrap();
        let log = log(dir.path());
        log.add(at("2026-03-01"), &[(pack("1.3.0"), turns(3))])
            .unwrap();
        let Packd { url, .. } = server(vec![400]).await;
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

    #[tokio::test]
    async fn a_row_refused_while_its_day_runs_is_not_sent_again() {
        let dir = tempfile::tempdir().unwrap();
        let log = log(dir.path());
        let Packd { url, bodies, .. } = server(vec![202, 400, 202]).await;
        let (http, install) = (reqwest::Client::new(), "0".repeat(32));
        let day = "2026-03-01";
        log.add(at_time(day, 9, 0), &[(pack("1.3.0"), turns(3))])
            .unwrap();
        log.send(&http, &url, &install, at_time(day, 9, 0)).await;
        log.add(at_time(day, 9, 30), &[(pack("1.3.0"), turns(1))])
            .unwrap();
        let refused = log.send(&http, &url, &install, at_time(day, 10, 0)).await;
        assert_eq!((refused.sent, refused.dropped), (0, 1));
        // Counting goes on, but a row with only the counts since would replace the 3 turns
        // packd holds: nothing more of that day goes out.
        log.add(at_time(day, 12, 0), &[(pack("1.3.0"), turns(1))])
            .unwrap();
        assert!(!log.due(at_time(day, 14, 0)));
        assert!(!log.due(at_time("2026-03-02", 12, 0)));
        log.add(at("2026-03-02"), &[(pack("1.3.0"), turns(7))])
            .unwrap();
        let next_day = log.send(&http, &url, &install, at("2026-03-02")).await;
        assert_eq!((next_day.sent, next_day.waiting), (1, 1));
        assert_eq!(
            sent(&bodies),
            [
                row(day, "1.3.0", 3),
                row(day, "1.3.0", 4),
                row("2026-03-02", "1.3.0", 7)
            ]
        );
    }

    #[test]
    fn the_interval_is_a_config_knob_between_a_minute_and_a_day() {
        let apply = |secs: u64| {
            let file: crate::config::ConfigFile =
                toml::from_str(&format!("[updates]\noutcomes_interval_secs = {secs}")).unwrap();
            let mut config = crate::ClientConfig::new("cache", semver::Version::new(1, 4, 2));
            file.apply(std::path::Path::new("."), &mut config)
                .map(|()| config.outcomes_interval)
        };
        assert_eq!(apply(600), Ok(Duration::from_secs(600)));
        assert_eq!(
            apply(59),
            Err(
                "outcomes_interval_secs must be between 60 and 86400 (a day), found 59".to_string()
            )
        );
        assert!(apply(86_401).is_err());
        assert_eq!(
            crate::ClientConfig::new("cache", semver::Version::new(1, 4, 2)).outcomes_interval,
            PROVISIONAL_INTERVAL
        );
    }

    /// A client of `server` on a cache in `dir`, sharing usage data or not.
    fn client(dir: &std::path::Path, server: &str, telemetry: bool) -> Arc<Client> {
        let mut config = crate::ClientConfig::new(dir, semver::Version::new(1, 4, 2));
        config.server = Some(server.to_string());
        config.telemetry = telemetry;
        Arc::new(Client::new(config).unwrap())
    }

    #[tokio::test]
    async fn telemetry_off_sends_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let Packd { url, bodies, .. } = server(vec![202]).await;
        // Counted while telemetry was on.
        log(dir.path())
            .add(OffsetDateTime::now_utc(), &[(pack("1.3.0"), turns(3))])
            .unwrap();

        let off = client(dir.path(), &url, false);
        assert!(OutcomeLog::for_client(&off).unwrap().is_none());
        assert_eq!(send_due(&off).await, SendOutcome::default());

        // The same cache and server with telemetry on: the row was due all along.
        let on = client(dir.path(), &url, true);
        assert_eq!(send_due(&on).await.sent, 1);
        assert_eq!(bodies.lock().unwrap().len(), 1);
    }

    #[tokio::test]
    async fn a_long_running_process_sends_without_waiting_for_a_refresh() {
        let dir = tempfile::tempdir().unwrap();
        let packd = server(vec![202]).await;
        log(dir.path())
            .add(OffsetDateTime::now_utc(), &[(pack("1.3.0"), turns(3))])
            .unwrap();
        let mut config = crate::ClientConfig::new(dir.path(), semver::Version::new(1, 4, 2));
        config.server = Some(packd.url.clone());
        config.telemetry = true;
        // No refresh: nothing but the outcome timer sends.
        config.auto_update = false;
        let client = Arc::new(Client::new(config).unwrap());
        let schedule = crate::schedule::start(client).await.unwrap();
        tokio::time::timeout(Duration::from_secs(10), packd.posted.notified())
            .await
            .expect("the counts went out");
        schedule.shutdown().await.unwrap();
        assert_eq!(packd.bodies.lock().unwrap()[0]["counts"]["turns"], 3);
    }
}
