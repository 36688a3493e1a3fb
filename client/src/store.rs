//! `PromptStore`: capture an immutable snapshot, then read from it; on any failure from a
//! remote snapshot, redo the whole request from the built-in one.

use std::fmt::Display;
use std::sync::Arc;

use arc_swap::ArcSwap;

use crate::snapshot::{Snapshot, Source};

/// Hands out snapshots. A refresh swaps the current snapshot atomically; a snapshot already
/// captured keeps reading the pack it was captured from.
pub struct PromptStore {
    current: ArcSwap<Snapshot>,
    builtin: Arc<Snapshot>,
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
        }
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
            Ok(value) => Ok(Served {
                value,
                snapshot,
                fallback: None,
            }),
            Err(e) if snapshot.source() == Source::Remote => {
                let reason = format!(
                    "pack {} {} failed: {e}; served the built-in pack instead",
                    snapshot.name(),
                    snapshot.version()
                );
                tracing::warn!("{reason}");
                let builtin = self.builtin.clone();
                let value = request(&builtin)?;
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
