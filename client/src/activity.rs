//! What refreshes did, for people: the last success and the last failure of any process
//! sharing the cache (`<cache>/refreshes.json`), what each client release was last given,
//! and the events a long-running process logs one line each (`pack-client run`).
//!
//! The record is bookkeeping: failing to write it is logged and never fails a refresh. It
//! lives beside `state.json`, not in it, so a client of an earlier release sharing the cache
//! (an app downgrade) still reads the state file it knows.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use time::OffsetDateTime;

use crate::ClientError;
use crate::cache::Cache;
use crate::policy::refresh::RefreshOutcome;

const FILE: &str = "refreshes.json";
/// Releases remembered in the record (the most recent ones).
const MAX_RELEASES: usize = 16;
/// Characters of an error message kept (the message already caps the server's words).
const MAX_MESSAGE: usize = 4096;

/// The record in `<cache>/refreshes.json`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Record {
    pub last_success: Option<Success>,
    pub last_failure: Option<Failure>,
    /// What each client release using this cache was last given, by release.
    #[serde(default)]
    pub releases: BTreeMap<String, Choice>,
}

/// A refresh that finished.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Success {
    /// Unix seconds.
    pub at: i64,
    pub release: String,
    pub outcome: RefreshOutcome,
}

/// A refresh, or a start-up load, that failed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Failure {
    /// Unix seconds.
    pub at: i64,
    pub release: String,
    /// [`ClientError::kind`].
    pub kind: String,
    pub message: String,
    /// Set when a refresh succeeded after it was recorded (in the order of writes, which
    /// seconds cannot tell apart): it is history from then on. Absent in older records.
    #[serde(default)]
    pub resolved: bool,
}

/// What one release was given: a pack, or the built-in one (`sha256` `builtin`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Choice {
    pub pack: String,
    pub version: String,
    pub sha256: String,
    pub sequence: u64,
    /// Unix seconds.
    pub at: i64,
}

/// One thing a long-running process tells its operator about.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum Event {
    /// The watch holds a request on the server (logged when it starts, and again after
    /// failures).
    Watching { channel: String },
    /// A pack was installed and serves now.
    Installed {
        name: String,
        version: String,
        sha256: String,
        sequence: u64,
    },
    /// A pack older than the one that served was installed (the channel rolled back).
    RolledBack {
        name: String,
        version: String,
        from: String,
        sha256: String,
        sequence: u64,
    },
    /// The built-in pack serves now.
    FellBack { reason: String },
    /// A refresh failed; what served keeps serving.
    Failed { kind: String, message: String },
    /// The watch lost the server and tries again after a pause.
    Reconnecting { error: String, retry_in_ms: u64 },
    /// The file view's link now names this version directory (see [`crate::files`]).
    FilesPublished { link: String, dir: String },
    /// The file view could not be brought up to date; its link names what it named before.
    FilesFailed { error: String },
}

impl std::fmt::Display for Event {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Event::Watching { channel } => write!(f, "watching channel {channel}"),
            Event::Installed {
                name,
                version,
                sequence,
                ..
            } => write!(
                f,
                "installed {name} {version} (channel sequence {sequence})"
            ),
            Event::RolledBack {
                name,
                version,
                from,
                sequence,
                ..
            } => write!(
                f,
                "rolled back to {name} {version} from {from} (channel sequence {sequence})"
            ),
            Event::FellBack { reason } => write!(f, "fell back to the built-in pack: {reason}"),
            Event::Failed { kind, message } => {
                write!(
                    f,
                    "refresh failed ({kind}): {message}; still serving what served"
                )
            }
            Event::Reconnecting { error, retry_in_ms } => write!(
                f,
                "watch lost the server ({error}); reconnecting in {:.1} s",
                *retry_in_ms as f64 / 1000.0
            ),
            Event::FilesPublished { link, dir } => write!(f, "file view {link} -> {dir}"),
            Event::FilesFailed { error } => {
                write!(f, "{error}; the file view is unchanged")
            }
        }
    }
}

/// The record's file in a cache, plus the event stream of this process.
#[derive(Debug, Clone)]
pub struct Activity {
    cache: Cache,
    events: tokio::sync::broadcast::Sender<Event>,
}

impl Activity {
    pub fn new(cache: Cache) -> Self {
        Activity {
            cache,
            events: tokio::sync::broadcast::channel(64).0,
        }
    }

    /// The record as every process sharing the cache left it.
    pub fn record(&self) -> Record {
        self.cache.read_json(FILE)
    }

    /// Events from now on (a slow reader loses the oldest, never blocks a refresh).
    pub fn subscribe(&self) -> tokio::sync::broadcast::Receiver<Event> {
        self.events.subscribe()
    }

    pub fn emit(&self, event: Event) {
        // No receiver is fine: nobody is listening.
        let _ = self.events.send(event);
    }

    /// Records a finished refresh and, when it says what this release serves, its choice.
    pub fn succeeded(
        &self,
        now: OffsetDateTime,
        release: &semver::Version,
        outcome: &RefreshOutcome,
        choice: Option<Choice>,
    ) {
        let success = Success {
            at: now.unix_timestamp(),
            release: release.to_string(),
            outcome: outcome.clone(),
        };
        self.update(|record| {
            record.last_success = Some(success);
            if let Some(failure) = &mut record.last_failure {
                failure.resolved = true;
            }
            if let Some(choice) = choice {
                remember(record, release, choice);
            }
        });
    }

    /// Records a failed refresh or start-up load.
    pub fn failed(&self, now: OffsetDateTime, release: &semver::Version, error: &ClientError) {
        self.failed_with(now, release, error.kind(), error.to_string());
    }

    /// [`Activity::failed`] with the error's kind and message taken apart (owned, so it can
    /// move to the blocking pool).
    pub fn failed_with(
        &self,
        now: OffsetDateTime,
        release: &semver::Version,
        kind: &str,
        mut message: String,
    ) {
        if message.len() > MAX_MESSAGE {
            let mut cut = MAX_MESSAGE;
            while !message.is_char_boundary(cut) {
                cut -= 1;
            }
            message.truncate(cut);
        }
        let failure = Failure {
            at: now.unix_timestamp(),
            release: release.to_string(),
            kind: kind.to_string(),
            message,
            resolved: false,
        };
        self.emit(Event::Failed {
            kind: failure.kind.clone(),
            message: failure.message.clone(),
        });
        self.update(|record| record.last_failure = Some(failure));
    }

    fn update(&self, change: impl FnOnce(&mut Record)) {
        let result = self.cache.update_json(FILE, |record: &mut Record| {
            change(record);
            (true, ())
        });
        if let Err(e) = result {
            tracing::warn!("could not record the refresh: {e}");
        }
    }
}

/// Keeps `choice` for `release`, forgetting the least recent releases past [`MAX_RELEASES`].
fn remember(record: &mut Record, release: &semver::Version, choice: Choice) {
    record.releases.insert(release.to_string(), choice);
    while record.releases.len() > MAX_RELEASES {
        let Some(oldest) = record
            .releases
            .iter()
            .min_by_key(|(_, c)| c.at)
            .map(|(r, _)| r.clone())
        else {
            break;
        };
        record.releases.remove(&oldest);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn choice(at: i64) -> Choice {
        Choice {
            pack: "p".to_string(),
            version: "1.0.0".to_string(),
            sha256: "builtin".to_string(),
            sequence: 1,
            at,
        }
    }

    #[test]
    fn the_record_keeps_the_most_recent_releases_only() {
        let mut record = Record::default();
        for minor in 0..(MAX_RELEASES as u64 + 4) {
            remember(
                &mut record,
                &semver::Version::new(1, minor, 0),
                choice(minor as i64),
            );
        }
        assert_eq!(record.releases.len(), MAX_RELEASES);
        assert!(!record.releases.contains_key("1.0.0"));
        assert!(
            record
                .releases
                .contains_key(&format!("1.{}.0", MAX_RELEASES + 3))
        );
    }

    #[test]
    fn a_failure_and_a_success_survive_a_new_process() {
        let dir = tempfile::tempdir().unwrap();
        let cache = Cache::open(dir.path()).unwrap();
        let release = semver::Version::new(2, 0, 0);
        let first = Activity::new(cache.clone());
        first.failed(
            OffsetDateTime::from_unix_timestamp(100).unwrap(),
            &release,
            &ClientError::NoServer,
        );
        first.succeeded(
            OffsetDateTime::from_unix_timestamp(50).unwrap(),
            &release,
            &RefreshOutcome::NotModified,
            Some(choice(50)),
        );
        let record = Activity::new(cache).record();
        let failure = record.last_failure.unwrap();
        assert_eq!((failure.at, failure.kind.as_str()), (100, "no_server"));
        assert_eq!(
            record.last_success.unwrap().outcome,
            RefreshOutcome::NotModified
        );
        assert_eq!(record.releases["2.0.0"].at, 50);
    }
}
