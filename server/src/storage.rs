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
use futures_util::stream::BoxStream;
use futures_util::{StreamExt, TryStreamExt};
use object_store::aws::{AmazonS3Builder, S3ConditionalPut};
use object_store::local::LocalFileSystem;
use object_store::path::Path;
use object_store::prefix::PrefixStore;
use object_store::{
    GetOptions, GetRange, GetResult, GetResultPayload, ObjectMeta, ObjectStore, ObjectStoreExt,
    PutMode, PutOptions, PutPayload, UpdateVersion,
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

/// One version of an object, from [`Storage::fingerprint`]. Two equal fingerprints of a key
/// taken at different times mean it was not replaced in between: on disk every write is a new
/// file renamed into place (a new inode, new times), on object storage a new ETag or version.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fingerprint(Option<Identity>);

impl Fingerprint {
    /// Whether two fingerprints show the same version. Never, when the store gave nothing
    /// to compare.
    pub fn same_as(&self, other: &Fingerprint) -> bool {
        self.0.is_some() && self.0 == other.0
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Identity {
    File {
        dev: u64,
        ino: u64,
        size: u64,
        mtime: (i64, i64),
        ctime: (i64, i64),
    },
    Object {
        e_tag: Option<String>,
        version: Option<String>,
    },
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
    Local {
        root: PathBuf,
        files: Arc<LocalFileSystem>,
    },
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
        let files = Arc::new(
            LocalFileSystem::new_with_prefix(&root)
                .map_err(|source| StorageError::store("open", &Path::default(), source))?
                .with_fsync(true),
        );
        Ok(Storage {
            store: files.clone(),
            describe: format!("local directory {}", root.display()),
            backend: Backend::Local { root, files },
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

    /// What identifies the current version of an object, or `None` when there is none. Cheap:
    /// on disk one `stat` (see [`Storage::size`]); on object storage a HEAD. A fingerprint
    /// from a store that reports neither an ETag nor a version matches nothing.
    pub async fn fingerprint(&self, key: &str) -> Result<Option<Fingerprint>, StorageError> {
        match &self.backend {
            Backend::Local { files, .. } => {
                use std::os::unix::fs::MetadataExt;
                Ok(stat_local(files, key)?.map(|m| {
                    Fingerprint(Some(Identity::File {
                        dev: m.dev(),
                        ino: m.ino(),
                        size: m.size(),
                        mtime: (m.mtime(), m.mtime_nsec()),
                        ctime: (m.ctime(), m.ctime_nsec()),
                    }))
                }))
            }
            Backend::Object => Ok(self.head(key).await?.map(|meta| {
                Fingerprint((meta.e_tag.is_some() || meta.version.is_some()).then_some(
                    Identity::Object {
                        e_tag: meta.e_tag,
                        version: meta.version,
                    },
                ))
            })),
        }
    }

    /// The size of an object, or `None` when there is none. On disk one `stat`, made inline:
    /// on a local file system the call costs less than the trip through the blocking pool
    /// that object_store (and tokio::fs) would make for it. On object storage a HEAD.
    pub async fn size(&self, key: &str) -> Result<Option<u64>, StorageError> {
        match &self.backend {
            Backend::Local { files, .. } => Ok(stat_local(files, key)?.map(|m| m.len())),
            Backend::Object => Ok(self.head(key).await?.map(|meta| meta.size)),
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

    /// The bytes of a [`Storage::get_stream`] result as a stream of chunks. A file on local
    /// disk is read [`FILE_CHUNK`] bytes per blocking task (object_store's own stream reads
    /// 8 KiB per task, and the hand-off to the blocking pool then costs more than the read).
    pub fn into_chunks(result: GetResult) -> BoxStream<'static, Result<Bytes, StorageError>> {
        match result.payload {
            GetResultPayload::File(file, path) => file_chunks(file, path, result.range),
            GetResultPayload::Stream(stream) => {
                let location = result.meta.location;
                stream
                    .map_err(move |source| StorageError::store("read", &location, source))
                    .boxed()
            }
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
            Backend::Local { root, .. } => acquire::local(root, scope, wait).await,
            Backend::Object => acquire::object(self.clone(), scope, wait).await,
        }
    }
}

/// `stat` of the file holding `key` under a data directory; `None` when there is no such file.
fn stat_local(
    files: &LocalFileSystem,
    key: &str,
) -> Result<Option<std::fs::Metadata>, StorageError> {
    let location = path(key)?;
    let file = files
        .path_to_filesystem(&location)
        .map_err(|source| StorageError::store("stat", &location, source))?;
    match std::fs::metadata(&file) {
        Ok(m) if m.is_file() => Ok(Some(m)),
        Ok(_) => Ok(None),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(source) => Err(StorageError::Io {
            what: format!("stat {}", file.display()),
            source,
        }),
    }
}

/// Bytes read from a local file per blocking task when streaming it. hyper queues up to about
/// 400 KiB of body per connection whatever the chunk size (with 8 KiB chunks, 16 of them), so
/// a slow reader holds at most two of these; larger chunks would only hold more.
pub const FILE_CHUNK: usize = 256 * 1024;

fn file_chunks(
    file: std::fs::File,
    path: PathBuf,
    range: Range<u64>,
) -> BoxStream<'static, Result<Bytes, StorageError>> {
    let file = Arc::new(file);
    let first = range.start;
    futures_util::stream::try_unfold(range, move |range| {
        let file = file.clone();
        let path = path.clone();
        async move {
            if range.start >= range.end {
                return Ok(None);
            }
            let len = (range.end - range.start).min(FILE_CHUNK as u64);
            let start = range.start;
            let bytes = tokio::task::spawn_blocking(move || {
                use std::io::{Read, Seek, SeekFrom};
                let mut file = &*file;
                if start == first {
                    file.seek(SeekFrom::Start(start))?;
                }
                // Not zero-filled first: read_to_end fills the spare capacity.
                let mut buf = Vec::with_capacity(len as usize); // at most FILE_CHUNK
                file.take(len).read_to_end(&mut buf)?;
                if buf.len() as u64 != len {
                    return Err(std::io::ErrorKind::UnexpectedEof.into());
                }
                Ok(Bytes::from(buf))
            })
            .await
            .map_err(|e| std::io::Error::other(e.to_string()))
            .and_then(|r| r)
            .map_err(|source| StorageError::Io {
                what: format!("reading {}", path.display()),
                source,
            })?;
            Ok(Some((bytes, start + len..range.end)))
        }
    })
    .boxed()
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
    async fn a_fingerprint_changes_when_the_object_is_replaced() {
        let dir = tempfile::tempdir().unwrap();
        let storage = Storage::local(dir.path()).unwrap();
        let key = keys::head("stable");
        assert!(storage.fingerprint(&key).await.unwrap().is_none());
        assert!(storage.size(&key).await.unwrap().is_none());
        storage
            .create(&key, Bytes::from_static(b"one"))
            .await
            .unwrap();
        let first = storage.fingerprint(&key).await.unwrap().unwrap();
        assert!(first.same_as(&storage.fingerprint(&key).await.unwrap().unwrap()));
        assert_eq!(storage.size(&key).await.unwrap(), Some(3));
        // Same size, same content even: still another version.
        let version = storage.get(&key).await.unwrap().unwrap().version;
        assert_eq!(
            storage
                .swap(&key, Bytes::from_static(b"one"), Some(version))
                .await
                .unwrap(),
            Swapped::Swapped
        );
        let second = storage.fingerprint(&key).await.unwrap().unwrap();
        assert!(!first.same_as(&second));
        // A directory is not an object.
        assert!(storage.size("channels").await.unwrap().is_none());
        assert!(!Fingerprint(None).same_as(&Fingerprint(None)));
    }

    #[tokio::test]
    async fn local_files_stream_whole_and_in_ranges() {
        let dir = tempfile::tempdir().unwrap();
        let storage = Storage::local(dir.path()).unwrap();
        let bytes: Vec<u8> = (0..(2 * FILE_CHUNK + 1234))
            .map(|i| (i % 251) as u8)
            .collect();
        storage
            .create("blobs/x", Bytes::from(bytes.clone()))
            .await
            .unwrap();
        for range in [
            None,
            Some(0..1),
            Some(10..FILE_CHUNK as u64 + 10),
            Some(FILE_CHUNK as u64..bytes.len() as u64),
        ] {
            let result = storage
                .get_stream("blobs/x", range.clone())
                .await
                .unwrap()
                .unwrap();
            let chunks: Vec<Bytes> = Storage::into_chunks(result).try_collect().await.unwrap();
            assert!(chunks.iter().all(|c| c.len() <= FILE_CHUNK));
            let got: Vec<u8> = chunks.concat();
            let want = match &range {
                Some(r) => &bytes[r.start as usize..r.end as usize],
                None => &bytes[..],
            };
            assert_eq!(got, want, "{range:?}");
        }
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
