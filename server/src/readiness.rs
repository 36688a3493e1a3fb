//! `/readyz`'s answer: whether this node can keep data in its storage, from the probe that
//! writes, reads back and deletes an object ([`Storage::check_writable`]).
//!
//! A probe is three storage operations (three requests on S3), and load balancers and
//! orchestrators ask every few seconds, often several of them: an answer is kept for
//! [`READY_TTL`], and requests that arrive while a probe runs wait for its answer instead of
//! starting their own. So a storage that turns unwritable shows in `/readyz` within
//! [`READY_TTL`] (plus the probe's own time), and `/readyz` costs storage at most one probe
//! per [`READY_TTL`] however often it is asked.

use std::time::{Duration, Instant};

use tokio::sync::Mutex;

use crate::storage::Storage;

/// How long one probe's answer stands.
pub const READY_TTL: Duration = Duration::from_secs(2);

/// How long a probe may take before the storage counts as not answering: under a load
/// balancer's own timeout, so that it hears a `503` with the reason, not silence.
pub const PROBE_TIMEOUT: Duration = Duration::from_secs(5);

/// The last probe's answer, shared by every request.
#[derive(Debug)]
pub struct Readiness {
    storage: Storage,
    last: Mutex<Option<(Instant, Result<(), String>)>>,
}

impl Readiness {
    pub fn new(storage: Storage) -> Self {
        Readiness {
            storage,
            last: Mutex::new(None),
        }
    }

    /// `Ok` when the storage took a probe within the last [`READY_TTL`], else why not (what
    /// the operator reads in `/readyz`'s body).
    pub async fn check(&self) -> Result<(), String> {
        let mut last = self.last.lock().await;
        if let Some((at, answer)) = &*last
            && at.elapsed() < READY_TTL
        {
            return answer.clone();
        }
        let answer = match tokio::time::timeout(PROBE_TIMEOUT, self.storage.check_writable()).await
        {
            Ok(probed) => probed.map_err(|e| e.to_string()),
            Err(_) => Err(format!(
                "the {} did not answer a write probe within {} s",
                self.storage.describe(),
                PROBE_TIMEOUT.as_secs()
            )),
        };
        if let Err(reason) = &answer {
            tracing::warn!(%reason, "not ready");
        }
        *last = Some((Instant::now(), answer.clone()));
        answer
    }
}
