//! The live document of each channel: found in storage, kept in memory, checked once per
//! poll interval while watched, and every watcher woken when it changes.
//!
//! A committed document never changes, so the only question about a channel is whether a
//! newer one was committed since the one in memory: one existence check of
//! `history/{live + 1}` (a `stat` on disk, a HEAD on object storage). Every check is
//! remembered with the instant it *started*. Sequences only grow, so what a check started at
//! `p` found is at least what storage held at `p`; a request within one poll interval of `p`
//! answers from memory, and so is never answered with a document older than what storage held
//! one poll interval before it. Past that, the request checks storage itself (and its check
//! serves the requests of the next interval). What memory holds was read from a committed
//! history object (its channel and sequence checked against its key) or is the document this
//! node has just committed: never a hint, never anything storage does not hold.
//!
//! While a channel has watchers, one task checks its storage once per poll interval — never
//! once per watcher — and wakes them all when the live sequence moves; a publish through this
//! node wakes them at once. Watchers are counted per node and refused past the limit.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use prometheus::{IntCounter, IntCounterVec, IntGauge, Opts};
use tokio::sync::{Notify, watch};
use tokio::time::MissedTickBehavior;

use crate::config::Settings;
use crate::error::ApiError;
use crate::metrics::Metrics;
use crate::model::ChannelRecord;
use crate::storage::{Storage, keys};

/// The live documents of the channels this node has served, and their watchers.
#[derive(Debug)]
pub struct LiveChannels {
    storage: Storage,
    poll: Duration,
    max_watchers: usize,
    /// The origin of the microsecond clock of [`Channel::confirmed`].
    epoch: Instant,
    /// At most one entry per channel that exists in storage: one is added only once a
    /// lookup found a committed document.
    channels: RwLock<HashMap<String, Arc<Channel>>>,
    watchers: AtomicUsize,
    closing: AtomicBool,
    closed: Notify,
    metrics: WatchMetrics,
}

#[derive(Debug)]
struct Channel {
    name: String,
    /// The highest committed record seen. Watchers subscribe to it.
    live: watch::Sender<Arc<ChannelRecord>>,
    /// Microseconds since `epoch` at which the latest check that found `live` (or something
    /// older) to be live started, plus one; 0: never.
    confirmed: AtomicU64,
    watchers: AtomicUsize,
    /// Whether a task checks storage for this channel.
    polling: AtomicBool,
}

/// How a watch ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WaitEnd {
    /// The live sequence moved past the one the watcher had.
    Changed,
    /// The wait is over, nothing changed.
    TimedOut,
    /// The node is shutting down.
    Closing,
}

/// Marks a response that answered a watch, for the request metrics: a wait is not latency.
#[derive(Debug, Clone, Copy)]
pub struct Watched;

#[derive(Debug)]
struct WatchMetrics {
    watchers: IntGauge,
    woken: IntCounter,
    refused: IntCounter,
    polls: IntCounterVec,
}

impl WatchMetrics {
    fn new(metrics: &Metrics) -> Result<Self, prometheus::Error> {
        let watchers = IntGauge::new("packd_watchers", "Watches this node holds now.")?;
        let woken = IntCounter::new(
            "packd_watch_wakeups_total",
            "Watches answered because the live document changed.",
        )?;
        let refused = IntCounter::new(
            "packd_watch_refused_total",
            "Watches refused because the node held its limit (503 watchers_full).",
        )?;
        let polls = IntCounterVec::new(
            Opts::new(
                "packd_watch_polls_total",
                "Storage checks of watched channels, by result (ok, error).",
            ),
            &["result"],
        )?;
        metrics.register(Box::new(watchers.clone()))?;
        metrics.register(Box::new(woken.clone()))?;
        metrics.register(Box::new(refused.clone()))?;
        metrics.register(Box::new(polls.clone()))?;
        Ok(WatchMetrics {
            watchers,
            woken,
            refused,
            polls,
        })
    }
}

/// Counts one watcher while it lives.
struct Registered<'a> {
    live: &'a LiveChannels,
    channel: &'a Channel,
}

impl Drop for Registered<'_> {
    fn drop(&mut self) {
        self.channel.watchers.fetch_sub(1, Ordering::AcqRel);
        self.live.watchers.fetch_sub(1, Ordering::AcqRel);
        self.live.metrics.watchers.dec();
    }
}

impl LiveChannels {
    pub fn new(
        storage: Storage,
        settings: &Settings,
        metrics: &Metrics,
    ) -> Result<Self, prometheus::Error> {
        Ok(LiveChannels {
            storage,
            poll: settings.watch_poll,
            max_watchers: settings.max_watchers,
            epoch: Instant::now(),
            channels: RwLock::default(),
            watchers: AtomicUsize::new(0),
            closing: AtomicBool::new(false),
            closed: Notify::new(),
            metrics: WatchMetrics::new(metrics)?,
        })
    }

    /// Watches held now.
    pub fn watchers(&self) -> usize {
        self.watchers.load(Ordering::Acquire)
    }

    /// The live document of `channel`, or `None` when nothing was published on it: from
    /// memory when a check of storage started within the poll interval, else checked now.
    pub async fn find(&self, channel: &str) -> Result<Option<Arc<ChannelRecord>>, ApiError> {
        if let Some(record) = self.cached(channel) {
            return Ok(Some(record));
        }
        self.check(channel).await
    }

    /// The live document of `channel` if memory holds one a check of storage confirmed
    /// within the poll interval; `None` where [`LiveChannels::find`] would look at storage.
    pub fn cached(&self, channel: &str) -> Option<Arc<ChannelRecord>> {
        let channels = self.channels.read().unwrap_or_else(|p| p.into_inner());
        self.fresh(channels.get(channel)?)
    }

    /// The live document of `channel` as storage holds it now (for publishing, and for
    /// readers that send `Cache-Control: no-cache`); its check serves later requests too.
    pub async fn check(&self, channel: &str) -> Result<Option<Arc<ChannelRecord>>, ApiError> {
        let started = Instant::now();
        let cached = self.entry(channel).map(|e| e.live.borrow().clone());
        Ok(self
            .look_up(channel, cached)
            .await?
            .map(|record| self.confirm(channel, record, started)))
    }

    /// Records a document this node committed, waking the channel's watchers. `before` is an
    /// instant before the create was sent: storage held nothing newer then.
    pub fn published(&self, record: Arc<ChannelRecord>, before: Instant) {
        let channel = record.summary.channel.clone();
        self.confirm(&channel, record, before);
    }

    /// Waits until the live sequence of `channel` moves past `seen`, for at most `hold`, as
    /// one of at most `max_watchers` watchers of this node. The channel must have been
    /// looked up with [`LiveChannels::find`] just before.
    pub async fn wait(
        self: &Arc<Self>,
        channel: &str,
        seen: u64,
        hold: Duration,
    ) -> Result<WaitEnd, ApiError> {
        let entry = self.entry(channel).ok_or_else(|| ApiError::NotFound {
            what: format!("channel {channel}"),
        })?;
        if self.watchers.fetch_add(1, Ordering::AcqRel) >= self.max_watchers {
            self.watchers.fetch_sub(1, Ordering::AcqRel);
            self.metrics.refused.inc();
            return Err(ApiError::WatchersFull {
                limit: self.max_watchers,
                retry_after: rand::random_range(10..=40),
            });
        }
        entry.watchers.fetch_add(1, Ordering::AcqRel);
        self.metrics.watchers.inc();
        let _registered = Registered {
            live: self,
            channel: &entry,
        };
        self.ensure_polling(&entry);

        let closed = self.closed.notified();
        tokio::pin!(closed);
        closed.as_mut().enable();
        if self.closing.load(Ordering::Acquire) {
            return Ok(WaitEnd::Closing);
        }
        let mut updates = entry.live.subscribe();
        let changed = async {
            loop {
                // Checked before the first wait: a publish may have landed since the lookup.
                if updates.borrow_and_update().summary.sequence > seen {
                    return;
                }
                if updates.changed().await.is_err() {
                    // The sender lives as long as the entry, which outlives this borrow.
                    std::future::pending::<()>().await;
                }
            }
        };
        let end = tokio::select! {
            () = changed => WaitEnd::Changed,
            () = tokio::time::sleep(hold) => WaitEnd::TimedOut,
            () = closed => WaitEnd::Closing,
        };
        if end == WaitEnd::Changed {
            self.metrics.woken.inc();
        }
        Ok(end)
    }

    /// Ends every watch now (at shutdown), and every later one at once.
    pub fn close(&self) {
        self.closing.store(true, Ordering::Release);
        self.closed.notify_waiters();
    }

    fn entry(&self, channel: &str) -> Option<Arc<Channel>> {
        let channels = self.channels.read().unwrap_or_else(|p| p.into_inner());
        channels.get(channel).cloned()
    }

    fn micros(&self, at: Instant) -> u64 {
        u64::try_from(at.saturating_duration_since(self.epoch).as_micros()).unwrap_or(u64::MAX)
    }

    /// The record in memory if a check of storage started within the poll interval.
    fn fresh(&self, entry: &Channel) -> Option<Arc<ChannelRecord>> {
        // Read before the record: the record is at least as new as the check said.
        let confirmed = entry.confirmed.load(Ordering::Acquire);
        if confirmed == 0 {
            return None;
        }
        let age = self.micros(Instant::now()).saturating_sub(confirmed - 1);
        (age < self.poll.as_micros() as u64).then(|| entry.live.borrow().clone())
    }

    /// Keeps the higher of the record in memory and `record` (two lookups resolving at once
    /// must not move it back), wakes the watchers when it moved, and notes that storage held
    /// nothing newer than `record` at `started`. Returns the record now in memory.
    fn confirm(
        &self,
        channel: &str,
        record: Arc<ChannelRecord>,
        started: Instant,
    ) -> Arc<ChannelRecord> {
        let entry = match self.entry(channel) {
            Some(entry) => entry,
            None => {
                let mut channels = self.channels.write().unwrap_or_else(|p| p.into_inner());
                channels
                    .entry(channel.to_string())
                    .or_insert_with(|| {
                        Arc::new(Channel {
                            name: channel.to_string(),
                            live: watch::Sender::new(record.clone()),
                            confirmed: AtomicU64::new(0),
                            watchers: AtomicUsize::new(0),
                            polling: AtomicBool::new(false),
                        })
                    })
                    .clone()
            }
        };
        entry.live.send_if_modified(|current| {
            if record.summary.sequence > current.summary.sequence {
                *current = record;
                true
            } else {
                false
            }
        });
        // After the record: a reader that sees this confirmation sees that record or a newer one.
        entry
            .confirmed
            .fetch_max(self.micros(started) + 1, Ordering::AcqRel);
        entry.live.borrow().clone()
    }

    fn ensure_polling(self: &Arc<Self>, entry: &Arc<Channel>) {
        if entry.polling.swap(true, Ordering::AcqRel) {
            return;
        }
        let live = self.clone();
        let entry = entry.clone();
        tokio::spawn(async move { live.poll(entry).await });
    }

    /// Checks storage for `entry` once per poll interval while it has watchers.
    async fn poll(self: Arc<Self>, entry: Arc<Channel>) {
        let mut ticks = tokio::time::interval(self.poll);
        ticks.set_missed_tick_behavior(MissedTickBehavior::Delay);
        // The first tick is immediate; the lookup that came before the first watch was a check.
        ticks.tick().await;
        let mut failing = false;
        loop {
            ticks.tick().await;
            if entry.watchers.load(Ordering::Acquire) == 0 {
                entry.polling.store(false, Ordering::Release);
                // A watcher that came in meanwhile may have found `polling` still set and
                // relies on this task; if it started another one, that one goes on instead.
                if entry.watchers.load(Ordering::Acquire) == 0
                    || entry.polling.swap(true, Ordering::AcqRel)
                {
                    return;
                }
            }
            let started = Instant::now();
            let cached = entry.live.borrow().clone();
            match self.look_up(&entry.name, Some(cached)).await {
                Ok(found) => {
                    if let Some(record) = found {
                        self.confirm(&entry.name, record, started);
                    }
                    if failing {
                        tracing::info!(channel = entry.name, "storage answers again");
                    }
                    failing = false;
                    self.metrics.polls.with_label_values(&["ok"]).inc();
                }
                Err(err) => {
                    // Once per outage: requests meanwhile check storage themselves and fail
                    // (or succeed) on their own.
                    if !failing {
                        tracing::warn!(channel = entry.name, %err, "checking a watched channel failed");
                    }
                    failing = true;
                    self.metrics.polls.with_label_values(&["error"]).inc();
                }
            }
        }
    }

    /// The live record of `channel` in storage, starting from `cached` (a committed record)
    /// when there is one: one existence check when nothing newer was committed.
    async fn look_up(
        &self,
        channel: &str,
        cached: Option<Arc<ChannelRecord>>,
    ) -> Result<Option<Arc<ChannelRecord>>, ApiError> {
        let storage = &self.storage;
        let known = match cached {
            Some(cached) => {
                let next = cached.summary.sequence.saturating_add(1);
                if !storage.exists(&keys::history(channel, next)).await? {
                    return Ok(Some(cached));
                }
                // Newer documents were committed; the hint may point past the first of them.
                hinted(storage, channel)
                    .await?
                    .map_or(next, |hint| hint.max(next))
            }
            None => match hinted(storage, channel).await? {
                Some(sequence) => sequence,
                // No usable hint (a new channel, or a crash right after its first create):
                // the history itself says.
                None => match history_sequences(storage, channel).await?.last() {
                    Some(&sequence) => sequence,
                    None => return Ok(None),
                },
            },
        };
        // `known` is committed; sequences above it are contiguous, so the first gap ends them.
        let mut sequence = known;
        while storage
            .exists(&keys::history(channel, sequence.saturating_add(1)))
            .await?
        {
            sequence += 1;
        }
        let record = load_committed(storage, channel, sequence)
            .await?
            .ok_or_else(|| {
                ApiError::Internal(format!("history {sequence} of {channel} vanished"))
            })?;
        Ok(Some(Arc::new(record)))
    }
}

/// The value of parameter `name` in a query string, if it is there.
fn query_value<'q>(query: Option<&'q str>, name: &str) -> Option<&'q str> {
    query
        .unwrap_or_default()
        .split('&')
        .find_map(|pair| pair.strip_prefix(name)?.strip_prefix('='))
}

/// The granted wait of a watch request (`wait=N` in the query), capped at `max`; `None`
/// when the request is no watch (no `wait`, or `wait=0`).
pub fn requested_wait(query: Option<&str>, max: Duration) -> Result<Option<Duration>, ApiError> {
    let Some(value) = query_value(query, pack_protocol::paths::WAIT_PARAM) else {
        return Ok(None);
    };
    let secs: u64 = value.parse().map_err(|_| ApiError::InvalidWait {
        found: value.chars().take(40).collect(),
    })?;
    Ok((secs > 0).then(|| Duration::from_secs(secs).min(max)))
}

/// The sequence a watch request holds (`after=S` in the query); `None` when the request
/// does not say, as an older client's, which says it in `If-None-Match` only.
pub fn requested_after(query: Option<&str>) -> Result<Option<u64>, ApiError> {
    let Some(value) = query_value(query, pack_protocol::paths::AFTER_PARAM) else {
        return Ok(None);
    };
    value.parse().map(Some).map_err(|_| ApiError::InvalidAfter {
        found: value.chars().take(40).collect(),
    })
}

/// Whether the query names a wait at all (`wait=0` and a malformed one too): whatever the
/// answer is, no cache may keep it.
pub fn names_wait(query: Option<&str>) -> bool {
    query_value(query, pack_protocol::paths::WAIT_PARAM).is_some()
}

/// How long a watch granted `granted` is held: up to a sixteenth more, at random, so watchers
/// that started together (after a release, or a node's restart) come back spread out.
pub fn stretch(granted: Duration) -> Duration {
    let extra = granted.as_millis() as u64 / 16;
    granted + Duration::from_millis(rand::random_range(0..=extra))
}

/// A stored record, or `None`.
pub async fn load_record(storage: &Storage, key: &str) -> Result<Option<ChannelRecord>, ApiError> {
    let Some(bytes) = storage.get(key).await? else {
        return Ok(None);
    };
    serde_json::from_slice(&bytes)
        .map(Some)
        .map_err(|e| ApiError::Internal(format!("stored record {key} is corrupt: {e}")))
}

/// The committed document `sequence` of `channel`, checked to be what its key says.
pub async fn load_committed(
    storage: &Storage,
    channel: &str,
    sequence: u64,
) -> Result<Option<ChannelRecord>, ApiError> {
    let key = keys::history(channel, sequence);
    let Some(record) = load_record(storage, &key).await? else {
        return Ok(None);
    };
    if record.summary.sequence != sequence || record.summary.channel != channel {
        return Err(ApiError::Internal(format!(
            "stored record {key} holds channel {} sequence {}",
            record.summary.channel, record.summary.sequence
        )));
    }
    Ok(Some(record))
}

/// Every published sequence of `channel`, ascending.
pub async fn history_sequences(storage: &Storage, channel: &str) -> Result<Vec<u64>, ApiError> {
    let mut sequences: Vec<u64> = storage
        .list(&keys::history_dir(channel))
        .await?
        .iter()
        .filter_map(|m| keys::history_sequence(m.location.as_ref()))
        .collect();
    sequences.sort_unstable();
    Ok(sequences)
}

/// The sequence the head hint points at, when it points at a committed document. A missing
/// or unreadable hint is no error: the history is the truth.
async fn hinted(storage: &Storage, channel: &str) -> Result<Option<u64>, ApiError> {
    // A store that does not answer is an error; a hint that does not parse is only no hint.
    let Some(bytes) = storage.get(&keys::head(channel)).await? else {
        return Ok(None);
    };
    let hint = match serde_json::from_slice::<ChannelRecord>(&bytes) {
        Ok(record) => record.summary.sequence,
        Err(err) => {
            tracing::warn!(channel, %err, "ignoring an unreadable head hint");
            return Ok(None);
        }
    };
    if storage.exists(&keys::history(channel, hint)).await? {
        Ok(Some(hint))
    } else {
        tracing::warn!(
            channel,
            hint,
            "ignoring a head hint that names no committed document"
        );
        Ok(None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_wait_comes_from_the_query_and_is_capped() {
        let max = Duration::from_secs(50);
        assert_eq!(requested_wait(None, max).unwrap(), None);
        assert_eq!(requested_wait(Some("limit=3"), max).unwrap(), None);
        assert_eq!(requested_wait(Some("wait=0"), max).unwrap(), None);
        assert_eq!(
            requested_wait(Some("x=1&wait=20"), max).unwrap(),
            Some(Duration::from_secs(20))
        );
        assert_eq!(requested_wait(Some("wait=86400"), max).unwrap(), Some(max));
        // `waiting=5` is another parameter, not `wait`.
        assert_eq!(requested_wait(Some("waiting=5"), max).unwrap(), None);
        let err = requested_wait(Some("wait=-1"), max).unwrap_err();
        assert!(matches!(err, ApiError::InvalidWait { .. }), "{err}");
        let err = requested_wait(Some("wait=99999999999999999999999"), max).unwrap_err();
        assert!(matches!(err, ApiError::InvalidWait { .. }), "{err}");
    }

    #[test]
    fn the_held_sequence_comes_from_the_query() {
        assert_eq!(requested_after(None).unwrap(), None);
        assert_eq!(requested_after(Some("wait=50")).unwrap(), None);
        assert_eq!(requested_after(Some("wait=50&after=41")).unwrap(), Some(41));
        assert_eq!(requested_after(Some("after=0&wait=5")).unwrap(), Some(0));
        // `afterwards=5` is another parameter, not `after`.
        assert_eq!(requested_after(Some("afterwards=5")).unwrap(), None);
        for bad in [
            "after=",
            "after=-1",
            "after=4.5",
            "after=x",
            "after=99999999999999999999",
        ] {
            let err = requested_after(Some(bad)).unwrap_err();
            assert!(matches!(err, ApiError::InvalidAfter { .. }), "{bad}: {err}");
        }
        assert!(names_wait(Some("wait=0")) && names_wait(Some("after=1&wait=x")));
        assert!(!names_wait(None) && !names_wait(Some("waiting=5&after=1")));
    }

    #[test]
    fn the_stretch_is_at_most_a_sixteenth() {
        let granted = Duration::from_secs(32);
        for _ in 0..200 {
            let held = stretch(granted);
            assert!(
                held >= granted && held <= granted + Duration::from_secs(2),
                "{held:?}"
            );
        }
    }
}
