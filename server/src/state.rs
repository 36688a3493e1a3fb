//! What every handler can reach: the settings, the storage, the metrics and the caches.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use tokio::sync::Semaphore;

use crate::cache::BlobCache;
use crate::config::Settings;
use crate::fleet::Fleet;
use crate::live::LiveChannels;
use crate::metrics::Metrics;
use crate::readiness::Readiness;
use crate::reports::ReportLimiter;
use crate::storage::Storage;

/// Everything a handler can reach. Nothing in here changes after start-up except metrics and
/// two caches that cannot serve anything storage no longer holds (the live channel records,
/// checked against storage at least once per poll interval, and immutable blobs): all state
/// that matters lives in [`Storage`].
#[derive(Debug)]
pub struct AppState {
    pub settings: Settings,
    pub storage: Storage,
    /// `/readyz`'s answer: the last write probe of `storage`.
    pub readiness: Readiness,
    pub metrics: Metrics,
    pub live: Arc<LiveChannels>,
    pub blobs: BlobCache,
    pub uploads: Semaphore,
    pub openapi: serde_json::Value,
    /// This node's fleet counts (the accept loop's flusher writes them to storage).
    pub fleet: Arc<Fleet>,
    pub report_limiter: ReportLimiter,
    /// The same bounds, counted apart, for outcome reports.
    pub outcome_limiter: ReportLimiter,
    /// The guard's latest look per channel on this node.
    pub guard_looks: GuardLooks,
}

pub type SharedState = Arc<AppState>;

/// This node's latest look per channel.
#[derive(Debug, Default)]
pub struct GuardLooks(Mutex<BTreeMap<String, pack_protocol::guard::GuardLook>>);

impl GuardLooks {
    pub fn put(&self, channel: &str, look: pack_protocol::guard::GuardLook) {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(channel.to_string(), look);
    }

    pub fn get(&self, channel: &str) -> Option<pack_protocol::guard::GuardLook> {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(channel)
            .cloned()
    }
}
