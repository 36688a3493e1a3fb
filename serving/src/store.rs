//! `PromptStore`: capture an immutable snapshot, then read from it; on any failure from a
//! remote snapshot, redo the whole request from the built-in one.

use std::fmt::Display;
use std::sync::{Arc, OnceLock};

use arc_swap::ArcSwap;

use crate::snapshot::{Snapshot, Source};

/// Told how each request served by a remote snapshot went (see [`PromptStore::observe`]):
/// the client counts render failures in a row with it (`pack_client::health`), and this
/// crate knows nothing of how it keeps them.
pub trait ServeObserver: Send + Sync {
    /// A request was served from this remote snapshot.
    fn served(&self, snapshot: &Snapshot);
    /// A request failed on this remote snapshot and was served whole from the built-in
    /// one. `true`: stop serving this snapshot (it is now marked bad).
    fn fell_back(&self, snapshot: &Snapshot) -> bool;
}

/// Hands out snapshots. A refresh swaps the current snapshot atomically; a snapshot already
/// captured keeps reading the pack it was captured from.
pub struct PromptStore {
    current: ArcSwap<Snapshot>,
    builtin: Arc<Snapshot>,
    observer: OnceLock<Arc<dyn ServeObserver>>,
}

/// The result of a request served with wholesale fallback.
#[derive(Debug)]
pub struct Served<T> {
    pub value: T,
    /// The snapshot that produced `value`.
    pub snapshot: Arc<Snapshot>,
    /// Why the captured remote snapshot was abandoned for the built-in one, if it was.
    pub fallback: Option<String>,
}

impl PromptStore {
    /// A store serving `builtin` until something else is installed.
    pub fn new(builtin: Arc<Snapshot>) -> Self {
        PromptStore {
            current: ArcSwap::new(builtin.clone()),
            builtin,
            observer: OnceLock::new(),
        }
    }

    /// Tells `observer` how every request [`PromptStore::serve`] runs on a remote snapshot
    /// goes. One observer per store; a second call is ignored.
    pub fn observe(&self, observer: Arc<dyn ServeObserver>) {
        let _ = self.observer.set(observer);
    }

    /// The current snapshot. Cheap: one atomic load and a reference-count increment.
    pub fn capture(&self) -> Arc<Snapshot> {
        self.current.load_full()
    }

    /// The snapshot compiled into the binary.
    pub fn builtin(&self) -> &Arc<Snapshot> {
        &self.builtin
    }

    /// Makes `snapshot` current for the next capture.
    pub fn install(&self, snapshot: Arc<Snapshot>) {
        self.current.store(snapshot);
    }

    /// Serves the built-in pack from the next capture on.
    pub fn reset_to_builtin(&self) {
        self.current.store(self.builtin.clone());
    }

    /// Runs `request` against one captured snapshot. If the snapshot is remote and the
    /// request fails, the *whole* request is redone from the built-in snapshot — never a
    /// mix of two packs — and the reason is returned in [`Served::fallback`].
    pub fn serve<T, E: Display>(
        &self,
        request: impl Fn(&Snapshot) -> Result<T, E>,
    ) -> Result<Served<T>, E> {
        self.serve_from(self.capture(), request)
    }

    /// [`PromptStore::serve`] with a snapshot the caller already captured.
    pub fn serve_from<T, E: Display>(
        &self,
        snapshot: Arc<Snapshot>,
        request: impl Fn(&Snapshot) -> Result<T, E>,
    ) -> Result<Served<T>, E> {
        match request(&snapshot) {
            Ok(value) => {
                if snapshot.source() == Source::Remote
                    && let Some(observer) = self.observer.get()
                {
                    observer.served(&snapshot);
                }
                Ok(Served {
                    value,
                    snapshot,
                    fallback: None,
                })
            }
            Err(e) if snapshot.source() == Source::Remote => {
                let reason = format!(
                    "pack {} {} failed: {e}; served the built-in pack instead",
                    snapshot.name(),
                    snapshot.version()
                );
                tracing::warn!("{reason}");
                let builtin = self.builtin.clone();
                // A request the built-in pack cannot serve either is not the remote pack's
                // failure: it is not counted against it.
                let value = request(&builtin)?;
                if let Some(observer) = self.observer.get()
                    && observer.fell_back(&snapshot)
                {
                    // Only if nothing newer was installed in the meantime.
                    self.current.rcu(|current| {
                        if Arc::ptr_eq(current, &snapshot) {
                            builtin.clone()
                        } else {
                            current.clone()
                        }
                    });
                }
                Ok(Served {
                    value,
                    snapshot: builtin,
                    fallback: Some(reason),
                })
            }
            Err(e) => Err(e),
        }
    }
}
