//! Where everything lives: an [`ObjectStore`] (local disk or S3-compatible) plus a lock per
//! channel and per pack version.
//!
//! Nodes keep no state of their own, so every rule that spans requests is enforced here:
//! writes are whole objects (temp file + rename on disk, one PUT on S3) so nothing partial is
//! ever visible; records that must never change are written create-only; and a publish runs
//! under a lock that works across processes and machines (see [`crate::lock`]).
//!
//! Layout under the root (a data directory or `s3://bucket/prefix`):
//!
//! | key | what |
//! |---|---|
//! | `blobs/{sha256}` | a sealed pack, content-addressed |
//! | `packs/{name}/{version}.json` | which blob holds pack `name` at `version` (create-only) |
//! | `channels/{channel}/head.json` | the live document and its signature |
//! | `channels/{channel}/history/{sequence:020}.json` | every document ever published (create-only) |
//! | `locks/{scope}/…` | claim objects of the object-storage lock |

use std::ops::Range;
use std::path::{Path as FsPath, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures_util::TryStreamExt;
use object_store::aws::{AmazonS3Builder, S3ConditionalPut};
use object_store::local::LocalFileSystem;
use object_store::path::Path;
use object_store::prefix::PrefixStore;
use object_store::{
    GetOptions, GetRange, GetResult, ObjectMeta, ObjectStore, ObjectStoreExt, PutMode, PutOptions,
    PutPayload, UpdateVersion,
};

use crate::lock::{LockGuard, acquire};

/// A storage failure. Not-found and lost races are not errors: they are return values.
#[derive(Debug, thiserror::Error)]
pub enum StorageError {
    #[error("{op} {key}: {source}")]
    Store {
        op: &'static str,
        key: String,
        #[source]
        source: object_store::Error,
    },
    #[error("invalid storage key {key:?}: {source}")]
    Key {
        key: String,
        #[source]
        source: object_store::path::Error,
    },
    #[error("{what}: {source}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },
    #[error("stored record {key} is corrupt: {reason}")]
    Corrupt { key: String, reason: String },
    #[error("invalid storage URL {url:?}: expected s3://bucket[/prefix]")]
    BadUrl { url: String },
}

impl StorageError {
    fn store(op: &'static str, key: &Path, source: object_store::Error) -> Self {
        StorageError::Store {
            op,
            key: key.to_string(),
            source,
        }
    }
}

/// A small object and the version to compare against when replacing it.
#[derive(Debug, Clone)]
pub struct Versioned {
    pub bytes: Bytes,
    pub version: UpdateVersion,
}

/// Outcome of a create-only write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Created {
    Created,
    AlreadyExists,
}

/// Outcome of a compare-and-swap write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Swapped {
    Swapped,
    /// Someone else changed the object since it was read.
    Conflict,
}

#[derive(Debug, Clone)]
enum Backend {
    /// A directory. Locks are `flock`s on files under `{root}/.locks`.
    Local { root: PathBuf },
    /// S3-compatible object storage. Locks are claim objects under `locks/`.
    Object,
}

/// The storage of one deployment.
#[derive(Debug, Clone)]
pub struct Storage {
    store: Arc<dyn ObjectStore>,
    backend: Backend,
    describe: String,
}

/// Object keys.
pub mod keys {
    pub fn blob(sha256: &str) -> String {
        format!("blobs/{sha256}")
    }
    pub fn pack_record(name: &str, version: &str) -> String {
        format!("packs/{name}/{version}.json")
    }
    pub const PACKS: &str = "packs";
    pub const CHANNELS: &str = "channels";
    pub fn head(channel: &str) -> String {
        format!("channels/{channel}/head.json")
    }
    pub fn history_dir(channel: &str) -> String {
        format!("channels/{channel}/history")
    }
    pub fn history(channel: &str, sequence: u64) -> String {
        format!("channels/{channel}/history/{sequence:020}.json")
    }
    /// The sequence of a history key, from its file name.
    pub fn history_sequence(key: &str) -> Option<u64> {
        key.rsplit('/').next()?.strip_suffix(".json")?.parse().ok()
    }
    pub fn lock_dir(scope: &str) -> String {
        format!("locks/{scope}")
    }
}

fn path(key: &str) -> Result<Path, StorageError> {
    Path::parse(key).map_err(|source| StorageError::Key {
        key: key.to_string(),
        source,
    })
}

impl Storage {
    /// A data directory on local disk (created if missing). Files are fsynced before they are
    /// renamed into place.
    pub fn local(root: &FsPath) -> Result<Self, StorageError> {
        std::fs::create_dir_all(root).map_err(|source| StorageError::Io {
            what: format!("creating data directory {}", root.display()),
            source,
        })?;
        let root = root.canonicalize().map_err(|source| StorageError::Io {
            what: format!("resolving data directory {}", root.display()),
            source,
        })?;
        let store = LocalFileSystem::new_with_prefix(&root)
            .map_err(|source| StorageError::store("open", &Path::default(), source))?
            .with_fsync(true);
        Ok(Storage {
            store: Arc::new(store),
            describe: format!("local directory {}", root.display()),
            backend: Backend::Local { root },
        })
    }

    /// `s3://bucket[/prefix]`, configured from the usual `AWS_*` environment variables
    /// (`AWS_ENDPOINT_URL`, `AWS_REGION`, `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, …).
    /// Plain `http://` endpoints are allowed on loopback, or anywhere with `AWS_ALLOW_HTTP=true`.
    pub fn s3(url: &str) -> Result<Self, StorageError> {
        let bad = || StorageError::BadUrl {
            url: url.to_string(),
        };
        let rest = url.strip_prefix("s3://").ok_or_else(bad)?;
        let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
        if bucket.is_empty() {
            return Err(bad());
        }
        let prefix = prefix.trim_matches('/');
        let mut builder = AmazonS3Builder::from_env()
            .with_bucket_name(bucket)
            .with_conditional_put(S3ConditionalPut::ETagMatch);
        let endpoint = std::env::var("AWS_ENDPOINT_URL")
            .or_else(|_| std::env::var("AWS_ENDPOINT"))
            .unwrap_or_default();
        if is_loopback_http(&endpoint) {
            builder = builder.with_allow_http(true);
        }
        let s3 = builder
            .build()
            .map_err(|source| StorageError::store("configure", &Path::default(), source))?;
        let store: Arc<dyn ObjectStore> = if prefix.is_empty() {
            Arc::new(s3)
        } else {
            Arc::new(PrefixStore::new(s3, path(prefix)?))
        };
        let at = if endpoint.is_empty() {
            String::new()
        } else {
            format!(" at {endpoint}")
        };
        Ok(Storage {
            store,
            backend: Backend::Object,
            describe: format!("object storage s3://{bucket}/{prefix}{at}"),
        })
    }

    pub fn describe(&self) -> &str {
        &self.describe
    }

    /// Reachability check for `/readyz`: a HEAD of a key that need not exist.
    pub async fn probe(&self) -> Result<(), StorageError> {
        self.head("readyz-probe").await.map(|_| ())
    }

    /// A whole small object with its version, or `None`.
    pub async fn get(&self, key: &str) -> Result<Option<Versioned>, StorageError> {
        let location = path(key)?;
        let result = match self.store.get(&location).await {
            Ok(r) => r,
            Err(object_store::Error::NotFound { .. }) => return Ok(None),
            Err(source) => return Err(StorageError::store("get", &location, source)),
        };
        let version = UpdateVersion {
            e_tag: result.meta.e_tag.clone(),
            version: result.meta.version.clone(),
        };
        let bytes = result
            .bytes()
            .await
            .map_err(|source| StorageError::store("read", &location, source))?;
        Ok(Some(Versioned { bytes, version }))
    }

    pub async fn head(&self, key: &str) -> Result<Option<ObjectMeta>, StorageError> {
        let location = path(key)?;
        match self.store.head(&location).await {
            Ok(meta) => Ok(Some(meta)),
            Err(object_store::Error::NotFound { .. }) => Ok(None),
            Err(source) => Err(StorageError::store("head", &location, source)),
        }
    }

    /// A streaming read of `range` (or all) of an object, or `None`.
    pub async fn get_stream(
        &self,
        key: &str,
        range: Option<Range<u64>>,
    ) -> Result<Option<GetResult>, StorageError> {
        let location = path(key)?;
        let options = GetOptions {
            range: range.map(GetRange::Bounded),
            ..GetOptions::default()
        };
        match self.store.get_opts(&location, options).await {
            Ok(r) => Ok(Some(r)),
            Err(object_store::Error::NotFound { .. }) => Ok(None),
            Err(source) => Err(StorageError::store("get", &location, source)),
        }
    }

    /// Writes `bytes` unless the key exists. Never replaces anything.
    pub async fn create(&self, key: &str, bytes: Bytes) -> Result<Created, StorageError> {
        let location = path(key)?;
        let options = PutOptions::from(PutMode::Create);
        match self
            .store
            .put_opts(&location, PutPayload::from(bytes), options)
            .await
        {
            Ok(_) => Ok(Created::Created),
            Err(
                object_store::Error::AlreadyExists { .. }
                | object_store::Error::Precondition { .. },
            ) => Ok(Created::AlreadyExists),
            Err(source) => Err(StorageError::store("create", &location, source)),
        }
    }

    /// Replaces the object if it is still at `expected` (`None`: if it still does not exist).
    /// Callers hold the lock for the key as well; on object storage the conditional PUT is a
    /// second line of defence, on disk the lock is the only one (LocalFileSystem has no
    /// compare-and-swap) and the version is re-checked under it.
    pub async fn swap(
        &self,
        key: &str,
        bytes: Bytes,
        expected: Option<UpdateVersion>,
    ) -> Result<Swapped, StorageError> {
        let location = path(key)?;
        let mode = match (&self.backend, expected) {
            (Backend::Object, Some(version)) => PutMode::Update(version),
            (Backend::Object, None) => PutMode::Create,
            (Backend::Local { .. }, None) => PutMode::Create,
            (Backend::Local { .. }, Some(version)) => {
                let current = self.head(key).await?;
                let unchanged = current
                    .is_some_and(|m| m.e_tag == version.e_tag && m.version == version.version);
                if !unchanged {
                    return Ok(Swapped::Conflict);
                }
                PutMode::Overwrite
            }
        };
        match self
            .store
            .put_opts(&location, PutPayload::from(bytes), PutOptions::from(mode))
            .await
        {
            Ok(_) => Ok(Swapped::Swapped),
            Err(
                object_store::Error::AlreadyExists { .. }
                | object_store::Error::Precondition { .. },
            ) => Ok(Swapped::Conflict),
            Err(source) => Err(StorageError::store("swap", &location, source)),
        }
    }

    /// Writes or replaces an object (lock claims only).
    pub async fn put(&self, key: &str, bytes: Bytes) -> Result<(), StorageError> {
        let location = path(key)?;
        self.store
            .put(&location, PutPayload::from(bytes))
            .await
            .map(|_| ())
            .map_err(|source| StorageError::store("put", &location, source))
    }

    /// Deletes an object (lock claims only); a missing object is fine.
    pub async fn delete(&self, key: &str) -> Result<(), StorageError> {
        let location = path(key)?;
        match self.store.delete(&location).await {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(source) => Err(StorageError::store("delete", &location, source)),
        }
    }

    /// Every object under `prefix/`, recursively.
    pub async fn list(&self, prefix: &str) -> Result<Vec<ObjectMeta>, StorageError> {
        let location = path(prefix)?;
        self.store
            .list(Some(&location))
            .try_collect()
            .await
            .map_err(|source| StorageError::store("list", &location, source))
    }

    /// The names of the "directories" directly under `prefix/`.
    pub async fn list_dirs(&self, prefix: &str) -> Result<Vec<String>, StorageError> {
        let location = path(prefix)?;
        let listing = self
            .store
            .list_with_delimiter(Some(&location))
            .await
            .map_err(|source| StorageError::store("list", &location, source))?;
        Ok(listing
            .common_prefixes
            .iter()
            .filter_map(|p| p.filename().map(str::to_string))
            .collect())
    }

    /// Takes the lock named `scope`, waiting up to `wait`. `None` when it stayed busy.
    pub async fn lock(
        &self,
        scope: &str,
        wait: Duration,
    ) -> Result<Option<LockGuard>, StorageError> {
        match &self.backend {
            Backend::Local { root } => acquire::local(root, scope, wait).await,
            Backend::Object => acquire::object(self.clone(), scope, wait).await,
        }
    }
}

fn is_loopback_http(endpoint: &str) -> bool {
    let Some(rest) = endpoint.strip_prefix("http://") else {
        return false;
    };
    let host = rest.split('/').next().unwrap_or_default();
    let host = if let Some(v6) = host.strip_prefix('[') {
        v6.split(']').next().unwrap_or_default()
    } else {
        host.rsplit_once(':').map_or(host, |(h, _)| h)
    };
    host == "localhost"
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn history_keys_sort_by_sequence() {
        let a = keys::history("stable", 9);
        let b = keys::history("stable", 10);
        assert!(a < b);
        assert_eq!(keys::history_sequence(&b), Some(10));
        assert_eq!(keys::history_sequence("channels/x/history/nope.json"), None);
    }

    #[test]
    fn only_loopback_http_is_allowed() {
        assert!(is_loopback_http("http://127.0.0.1:9000"));
        assert!(is_loopback_http("http://localhost:9000/"));
        assert!(is_loopback_http("http://[::1]:9000"));
        assert!(!is_loopback_http("http://10.0.0.1:9000"));
        assert!(!is_loopback_http("https://127.0.0.1:9000"));
    }

    /// LocalFileSystem writes `{key}#{n}` and renames it into place; a crash in between
    /// leaves that staging file, which must never be visible as the object.
    #[tokio::test]
    async fn a_staging_file_left_by_a_crash_is_invisible() {
        let dir = tempfile::tempdir().unwrap();
        let storage = Storage::local(dir.path()).unwrap();
        let sha = "ab".repeat(32);
        std::fs::create_dir_all(dir.path().join("blobs")).unwrap();
        std::fs::write(dir.path().join(format!("blobs/{sha}#3")), b"half a pa").unwrap();
        assert!(storage.head(&keys::blob(&sha)).await.unwrap().is_none());
        assert!(storage.get(&keys::blob(&sha)).await.unwrap().is_none());
        assert!(storage.list("blobs").await.unwrap().is_empty());
        assert_eq!(
            storage
                .create(&keys::blob(&sha), Bytes::from_static(b"whole"))
                .await
                .unwrap(),
            Created::Created
        );
        assert_eq!(storage.list("blobs").await.unwrap().len(), 1);
    }

    #[tokio::test]
    async fn local_create_never_replaces_and_swap_checks_the_version() {
        let dir = tempfile::tempdir().unwrap();
        let storage = Storage::local(dir.path()).unwrap();
        assert_eq!(
            storage
                .create("a/b", Bytes::from_static(b"1"))
                .await
                .unwrap(),
            Created::Created
        );
        assert_eq!(
            storage
                .create("a/b", Bytes::from_static(b"2"))
                .await
                .unwrap(),
            Created::AlreadyExists
        );
        let first = storage.get("a/b").await.unwrap().unwrap();
        assert_eq!(first.bytes, Bytes::from_static(b"1"));
        assert_eq!(
            storage
                .swap("a/b", Bytes::from_static(b"3"), Some(first.version.clone()))
                .await
                .unwrap(),
            Swapped::Swapped
        );
        assert_eq!(
            storage
                .swap("a/b", Bytes::from_static(b"4"), Some(first.version))
                .await
                .unwrap(),
            Swapped::Conflict
        );
        assert_eq!(
            storage.get("a/b").await.unwrap().unwrap().bytes,
            Bytes::from_static(b"3")
        );
    }
}
