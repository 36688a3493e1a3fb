//! The in-memory blob cache of a node. Not state of the node: it holds only what storage
//! also holds and cannot change (content-addressed blobs), and every request still asks
//! storage whether it is there. (The live channel documents are kept by `live.rs`.)

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;

use bytes::Bytes;
use tokio::sync::{Semaphore, SemaphorePermit};

/// Bytes of blobs kept in memory by [`BlobCache`].
pub const BLOB_CACHE_BYTES: usize = 64 * 1024 * 1024;
/// Blobs this size or smaller are kept whole in [`BlobCache`]; larger ones are always
/// streamed from storage.
pub const BLOB_CACHE_MAX_ENTRY: u64 = 4 * 1024 * 1024;
/// Whole-blob reads to fill the cache at once. Requests that find them all busy (the rush
/// right after a release) stream from storage meanwhile instead of each reading the blob.
const BLOB_CACHE_FILLS: usize = 2;

/// Recently served blobs, whole, least recently used evicted first. A blob's bytes never
/// change (its key is their SHA-256), so nothing here can be stale; whether the blob is still
/// stored is asked of storage on every request all the same. Every response of a cached blob
/// is a slice of one shared buffer: no read, no copy, no memory per reader.
#[derive(Debug)]
pub struct BlobCache {
    budget: usize,
    max_entry: u64,
    fills: Semaphore,
    inner: Mutex<BlobCacheInner>,
}

#[derive(Debug, Default)]
struct BlobCacheInner {
    /// sha256 → bytes and the tick of their last use.
    entries: HashMap<String, (Bytes, u64)>,
    /// tick of last use → sha256, oldest first.
    by_use: BTreeMap<u64, String>,
    bytes: usize,
    clock: u64,
}

impl Default for BlobCache {
    fn default() -> Self {
        BlobCache::new(BLOB_CACHE_BYTES, BLOB_CACHE_MAX_ENTRY)
    }
}

impl BlobCache {
    pub fn new(budget: usize, max_entry: u64) -> Self {
        BlobCache {
            budget,
            max_entry: max_entry.min(budget as u64),
            fills: Semaphore::new(BLOB_CACHE_FILLS),
            inner: Mutex::default(),
        }
    }

    /// The blob, if cached with this size.
    pub fn get(&self, sha256: &str, size: u64) -> Option<Bytes> {
        let mut inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        inner.clock += 1;
        let now = inner.clock;
        let (bytes, used) = inner.entries.get_mut(sha256)?;
        if bytes.len() as u64 != size {
            return None;
        }
        let bytes = bytes.clone();
        let before = std::mem::replace(used, now);
        inner.by_use.remove(&before);
        inner.by_use.insert(now, sha256.to_string());
        Some(bytes)
    }

    /// Leave to fill the cache with a blob of this size: `None` when it is too large or
    /// enough fills are running.
    pub fn try_fill(&self, size: u64) -> Option<SemaphorePermit<'_>> {
        if size > self.max_entry {
            return None;
        }
        self.fills.try_acquire().ok()
    }

    pub fn put(&self, sha256: &str, bytes: Bytes) {
        if bytes.len() as u64 > self.max_entry {
            return;
        }
        let mut inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        if inner.entries.contains_key(sha256) {
            return;
        }
        while inner.bytes + bytes.len() > self.budget {
            let Some((_, oldest)) = inner.by_use.pop_first() else {
                break;
            };
            if let Some((evicted, _)) = inner.entries.remove(&oldest) {
                inner.bytes -= evicted.len();
            }
        }
        inner.clock += 1;
        let now = inner.clock;
        inner.bytes += bytes.len();
        inner.by_use.insert(now, sha256.to_string());
        inner.entries.insert(sha256.to_string(), (bytes, now));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn blob(n: usize) -> Bytes {
        Bytes::from(vec![7u8; n])
    }

    #[test]
    fn the_blob_cache_keeps_the_most_recently_used_within_its_budget() {
        let cache = BlobCache::new(100, 60);
        cache.put("a", blob(40));
        cache.put("b", blob(40));
        assert!(cache.get("a", 40).is_some(), "a is now the most recent");
        cache.put("c", blob(40));
        assert!(
            cache.get("b", 40).is_none(),
            "b was the least recently used"
        );
        assert!(cache.get("a", 40).is_some());
        assert!(cache.get("c", 40).is_some());
        assert!(cache.get("a", 41).is_none(), "another size is another blob");
        cache.put("big", blob(61));
        assert!(cache.get("big", 61).is_none(), "over the entry limit");
        assert!(cache.try_fill(61).is_none());
        let inner = cache.inner.lock().unwrap();
        assert_eq!(inner.bytes, 80);
        assert_eq!(inner.entries.len(), inner.by_use.len());
    }

    #[test]
    fn only_a_few_fills_run_at_once() {
        let cache = BlobCache::new(100, 60);
        let fills: Vec<_> = (0..BLOB_CACHE_FILLS).map(|_| cache.try_fill(10)).collect();
        assert!(fills.iter().all(Option::is_some));
        assert!(cache.try_fill(10).is_none());
        drop(fills);
        assert!(cache.try_fill(10).is_some());
    }
}
