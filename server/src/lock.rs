//! Locks that hold across `packd` processes sharing one storage.
//!
//! - **Disk:** an exclusive `flock` on `{data_dir}/.locks/{scope}.lock`. The kernel drops it
//!   when the holder exits, even on `kill -9`.
//! - **Object storage:** a claim object `locks/{scope}/{millis}-{nonce}`, then a LIST of
//!   `locks/{scope}/`. The lock is held when the only live claim listed is ours; otherwise
//!   the claim is withdrawn and retried after a random pause. Two claimants cannot both
//!   hold it: if neither LIST showed the other claim, each LIST ran before the other's PUT,
//!   which cannot be true of both (PUT-then-LIST is strongly consistent on S3 and on
//!   S3-compatible stores). Claims older than [`LEASE`] are from a crashed holder and are
//!   ignored and removed; a holder finishes its work well inside the lease because every
//!   request is bounded by the request timeout.
//!
//! This lock needs no conditional write, on purpose: some S3-compatible stores (s3s-fs
//! among them) check `If-None-Match`/`If-Match` before writing the body without holding any
//! lock, so two racing conditional PUTs can both succeed. Conditional writes are still used
//! under the lock as a second line of defence on stores that implement them atomically.

use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use tokio::time::Instant;

use crate::storage::{Storage, StorageError, keys};

/// How long an object-storage claim is honoured. Requests are bounded well below this.
pub const LEASE: Duration = Duration::from_secs(60);

/// A held lock. Release it with [`LockGuard::release`]; dropping it releases it too (in the
/// background for object storage).
#[derive(Debug)]
pub struct LockGuard {
    held: Held,
}

#[derive(Debug)]
enum Held {
    /// Closing the file releases the `flock`.
    File(Option<std::fs::File>),
    Claim {
        storage: Storage,
        key: Option<String>,
    },
}

impl LockGuard {
    pub async fn release(mut self) {
        match &mut self.held {
            Held::File(file) => drop(file.take()),
            Held::Claim { storage, key } => {
                if let Some(key) = key.take()
                    && let Err(err) = storage.delete(&key).await
                {
                    tracing::warn!(%err, key, "could not remove lock claim; it expires after the lease");
                }
            }
        }
    }
}

impl Drop for LockGuard {
    fn drop(&mut self) {
        match &mut self.held {
            Held::File(file) => drop(file.take()),
            Held::Claim { storage, key } => {
                if let Some(key) = key.take() {
                    let storage = storage.clone();
                    if let Ok(handle) = tokio::runtime::Handle::try_current() {
                        handle.spawn(async move {
                            if let Err(err) = storage.delete(&key).await {
                                tracing::warn!(%err, key, "could not remove lock claim; it expires after the lease");
                            }
                        });
                    }
                }
            }
        }
    }
}

fn pause(attempt: u32) -> Duration {
    let base = 5u64 << attempt.min(5);
    Duration::from_millis(base + rand::random_range(0..base * 2))
}

pub(crate) mod acquire {
    use super::*;

    pub async fn local(
        root: &Path,
        scope: &str,
        wait: Duration,
    ) -> Result<Option<LockGuard>, StorageError> {
        let dir = root.join(".locks");
        let file_path = dir.join(format!("{scope}.lock"));
        let io = |what: String| move |source| StorageError::Io { what, source };
        let file = tokio::task::spawn_blocking({
            let file_path = file_path.clone();
            move || -> Result<std::fs::File, StorageError> {
                std::fs::create_dir_all(&dir).map_err(io(format!("creating {}", dir.display())))?;
                std::fs::OpenOptions::new()
                    .create(true)
                    .truncate(false)
                    .write(true)
                    .open(&file_path)
                    .map_err(io(format!("opening {}", file_path.display())))
            }
        })
        .await
        .map_err(|e| StorageError::Io {
            what: "lock task".to_string(),
            source: std::io::Error::other(e),
        })??;
        let deadline = Instant::now() + wait;
        let mut attempt = 0;
        loop {
            match file.try_lock() {
                Ok(()) => {
                    return Ok(Some(LockGuard {
                        held: Held::File(Some(file)),
                    }));
                }
                Err(std::fs::TryLockError::WouldBlock) => {}
                Err(std::fs::TryLockError::Error(source)) => {
                    return Err(StorageError::Io {
                        what: format!("locking {}", file_path.display()),
                        source,
                    });
                }
            }
            if Instant::now() >= deadline {
                return Ok(None);
            }
            tokio::time::sleep(pause(attempt).min(Duration::from_millis(50))).await;
            attempt += 1;
        }
    }

    pub async fn object(
        storage: Storage,
        scope: &str,
        wait: Duration,
    ) -> Result<Option<LockGuard>, StorageError> {
        let dir = keys::lock_dir(scope);
        let deadline = Instant::now() + wait;
        let mut attempt = 0;
        loop {
            let now_ms = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .unwrap_or_default()
                .as_millis();
            let nonce: u64 = rand::random();
            let mine = format!("{dir}/{now_ms:015}-{nonce:016x}");
            storage.put(&mine, Bytes::new()).await?;
            let mut contested = false;
            for claim in storage.list(&dir).await? {
                let key = claim.location.to_string();
                if key == mine {
                    continue;
                }
                let age = age_of(claim.last_modified.timestamp_millis());
                if age > LEASE {
                    tracing::warn!(
                        key,
                        age_secs = age.as_secs(),
                        "removing an expired lock claim"
                    );
                    storage.delete(&key).await?;
                    continue;
                }
                contested = true;
            }
            if !contested {
                return Ok(Some(LockGuard {
                    held: Held::Claim {
                        storage,
                        key: Some(mine),
                    },
                }));
            }
            storage.delete(&mine).await?;
            if Instant::now() >= deadline {
                return Ok(None);
            }
            tokio::time::sleep(pause(attempt)).await;
            attempt += 1;
        }
    }

    /// How long ago the store says a claim was written (zero if its clock is ahead of ours).
    fn age_of(written_ms: i64) -> Duration {
        let written = UNIX_EPOCH + Duration::from_millis(written_ms.max(0) as u64);
        SystemTime::now()
            .duration_since(written)
            .unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_local_lock_excludes_a_second_holder_until_released() {
        let dir = tempfile::tempdir().unwrap();
        let storage = Storage::local(dir.path()).unwrap();
        let first = storage
            .lock("channel.x", Duration::ZERO)
            .await
            .unwrap()
            .unwrap();
        assert!(
            storage
                .lock("channel.x", Duration::from_millis(30))
                .await
                .unwrap()
                .is_none()
        );
        assert!(
            storage
                .lock("channel.y", Duration::ZERO)
                .await
                .unwrap()
                .is_some()
        );
        first.release().await;
        assert!(
            storage
                .lock("channel.x", Duration::ZERO)
                .await
                .unwrap()
                .is_some()
        );
    }
}
