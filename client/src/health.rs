//! Device-side rollback: a remote pack whose templates keep failing to render here is marked
//! bad here, and the built-in pack serves until the mark is cleared or the channel offers
//! other bytes.
//!
//! [`PromptStore::serve`](crate::PromptStore::serve) already redoes a failed request whole
//! from the built-in pack; [`Health`] is its [`ServeObserver`] and counts those fallbacks per
//! pack in `<cache>/health.json`, shared by every process on the cache (the agent's short
//! runs, a REPL, `pack-client`). A request served by the pack resets its count; the
//! `mark_bad_after_failures`-th failure in a row (default 3) marks it bad: the store switches
//! to the built-in pack at once, a refresh refuses those bytes (`KnownBad`), a restart does
//! not load them, and `forget-bad` clears the mark. Each failure is reported as
//! `render_failed` and the mark as `marked_bad` (when telemetry is on; see [`crate::report`]).

use std::collections::BTreeMap;
use std::sync::Arc;

use pack_protocol::ReportReason;
use serde::{Deserialize, Serialize};

use crate::cache::Cache;
use crate::clock::Clock;
use crate::report::Outbox;
use crate::snapshot::Snapshot;
use crate::store::ServeObserver;

const HEALTH_FILE: &str = "health.json";
/// Packs tracked at most; the ones failed longest ago (and not marked) go first.
const MAX_TRACKED: usize = 16;

/// How one pack has fared on this device.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PackHealth {
    /// Requests in a row that failed on this pack and were served from the built-in one.
    pub failures_in_a_row: u32,
    /// Unix seconds of the last failure.
    pub last_failure: i64,
    /// Unix seconds it was marked bad, if it was.
    pub marked_bad: Option<i64>,
}

#[derive(Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct HealthFile {
    #[serde(default)]
    packs: BTreeMap<String, PackHealth>,
}

/// The render-failure counter of one cache.
pub struct Health {
    cache: Cache,
    threshold: u32,
    outbox: Option<Arc<Outbox>>,
    clock: Clock,
}

impl Health {
    pub fn new(cache: Cache, threshold: u32, outbox: Option<Arc<Outbox>>) -> Self {
        Health {
            cache,
            threshold: threshold.max(1),
            outbox,
            clock: Clock::system(),
        }
    }

    /// Failures are timed by `clock` rather than the system clock.
    pub fn with_clock(self, clock: Clock) -> Self {
        Health { clock, ..self }
    }

    /// Packs marked bad on this device, by SHA-256.
    pub fn marked(&self) -> BTreeMap<String, PackHealth> {
        let file: HealthFile = self.cache.read_json(HEALTH_FILE);
        file.packs
            .into_iter()
            .filter(|(_, h)| h.marked_bad.is_some())
            .collect()
    }

    pub fn is_marked(&self, sha256: &str) -> bool {
        self.marked().contains_key(sha256)
    }

    /// Why a marked pack is refused, for errors and the status.
    pub fn detail(&self) -> String {
        format!(
            "its templates failed to render {} times in a row on this device",
            self.threshold
        )
    }

    /// Clears the marks and counts of the given packs (all when empty); returns the marks
    /// cleared.
    pub fn forget(&self, only: &[String]) -> Vec<String> {
        let result = self
            .cache
            .update_json(HEALTH_FILE, |file: &mut HealthFile| {
                let cleared: Vec<String> = file
                    .packs
                    .iter()
                    .filter(|(sha, h)| {
                        h.marked_bad.is_some() && (only.is_empty() || only.contains(sha))
                    })
                    .map(|(sha, _)| sha.clone())
                    .collect();
                file.packs
                    .retain(|sha, _| !(only.is_empty() || only.contains(sha)));
                (true, cleared)
            });
        result.unwrap_or_else(|e| {
            tracing::warn!("could not clear render-failure marks: {e}");
            Vec::new()
        })
    }

    /// Counts a failure; `true` when the pack is (now) marked bad.
    fn failed(&self, sha256: &str) -> bool {
        let now = self.clock.now().unix_timestamp();
        let threshold = self.threshold;
        let updated = self
            .cache
            .update_json(HEALTH_FILE, |file: &mut HealthFile| {
                let entry = file.packs.entry(sha256.to_string()).or_insert(PackHealth {
                    failures_in_a_row: 0,
                    last_failure: now,
                    marked_bad: None,
                });
                entry.failures_in_a_row = entry.failures_in_a_row.saturating_add(1);
                entry.last_failure = now;
                let newly = entry.marked_bad.is_none() && entry.failures_in_a_row >= threshold;
                if newly {
                    entry.marked_bad = Some(now);
                }
                let marked = entry.marked_bad.is_some();
                while file.packs.len() > MAX_TRACKED {
                    let oldest = file
                        .packs
                        .iter()
                        .filter(|(sha, h)| h.marked_bad.is_none() && sha.as_str() != sha256)
                        .min_by_key(|(_, h)| h.last_failure)
                        .map(|(sha, _)| sha.clone());
                    match oldest {
                        Some(sha) => file.packs.remove(&sha),
                        None => break,
                    };
                }
                (true, (marked, newly))
            });
        let (marked, newly) = match updated {
            Ok(result) => result,
            Err(e) => {
                tracing::warn!("could not count a render failure of pack {sha256}: {e}");
                return false;
            }
        };
        if let Some(outbox) = &self.outbox {
            outbox.queue(sha256, ReportReason::RenderFailed);
            if newly {
                outbox.queue(sha256, ReportReason::MarkedBad);
            }
        }
        if newly {
            tracing::warn!(
                "pack {sha256} {}: marked bad here, serving the built-in pack; `forget-bad` clears the mark",
                self.detail()
            );
        }
        marked
    }

    /// A request this pack served resets its count. One `stat` when nothing is counted.
    fn succeeded(&self, sha256: &str) {
        if !self.cache.dir().join(HEALTH_FILE).exists() {
            return;
        }
        let file: HealthFile = self.cache.read_json(HEALTH_FILE);
        let counted = file
            .packs
            .get(sha256)
            .is_some_and(|h| h.failures_in_a_row > 0 && h.marked_bad.is_none());
        if !counted {
            return;
        }
        let reset = self
            .cache
            .update_json(HEALTH_FILE, |file: &mut HealthFile| {
                match file.packs.get(sha256) {
                    Some(h) if h.marked_bad.is_none() => {
                        file.packs.remove(sha256);
                        (true, ())
                    }
                    Some(_) | None => (false, ()),
                }
            });
        if let Err(e) = reset {
            tracing::warn!("could not reset the render-failure count of pack {sha256}: {e}");
        }
    }
}

/// Runs in the request that rendered: the file work (a lock, an fsync) does not stall an
/// async worker (see [`crate::cache::off_async`]).
impl ServeObserver for Health {
    fn served(&self, snapshot: &Snapshot) {
        crate::cache::off_async(|| self.succeeded(snapshot.sha256()));
    }

    fn fell_back(&self, snapshot: &Snapshot) -> bool {
        crate::cache::off_async(|| self.failed(snapshot.sha256()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_nth_failure_in_a_row_marks_the_pack_and_a_success_resets_the_count() {
        let dir = tempfile::tempdir().unwrap();
        let cache = Cache::open(dir.path()).unwrap();
        let health = Health::new(cache, 3, None);
        let sha = "ab".repeat(32);
        assert!(!health.failed(&sha));
        assert!(!health.failed(&sha));
        health.succeeded(&sha);
        assert!(
            !dir.path().join(HEALTH_FILE).exists(),
            "nothing left to keep"
        );
        assert!(!health.failed(&sha));
        assert!(!health.failed(&sha));
        assert!(health.failed(&sha), "third in a row");
        assert!(health.is_marked(&sha));
        // A mark is not undone by a success (nothing serves a marked pack anyway).
        health.succeeded(&sha);
        assert!(health.is_marked(&sha));
        assert_eq!(health.forget(&[]), vec![sha.clone()]);
        assert!(!health.is_marked(&sha));
    }

    #[test]
    fn a_second_health_on_the_same_cache_sees_the_count() {
        let dir = tempfile::tempdir().unwrap();
        let sha = "cd".repeat(32);
        let first = Health::new(Cache::open(dir.path()).unwrap(), 2, None);
        assert!(!first.failed(&sha));
        let second = Health::new(Cache::open(dir.path()).unwrap(), 2, None);
        assert!(
            second.failed(&sha),
            "the count is the device's, not the process's"
        );
    }
}
