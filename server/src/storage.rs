//! Where everything lives: an [`ObjectStore`] (local disk or S3-compatible).
//!
//! Nodes keep no state of their own, so every rule that spans requests is enforced here:
//! writes are whole objects (temp file + rename or hard link on disk, one PUT on S3) so
//! nothing partial is ever visible, and records that must never change are written
//! create-only. A create-only write is the only coordination packd needs between processes
//! and machines: it is atomic on disk (`link(2)` fails when the name exists) and on object
//! stores that implement `If-None-Match: *` atomically (AWS S3, SeaweedFS). There are no
//! locks.
//!
//! Layout under the root (a data directory or `s3://bucket/prefix`):
//!
//! | key | what |
//! |---|---|
//! | `blobs/{sha256}` | a sealed pack, content-addressed |
//! | `packs/{name}/{version}.json` | which blob holds pack `name` at `version`: created create-only, rewritten only by the upload that holds the record's claim |
//! | `pack-claims/{name}/{version}/{sha256}.json` | the claim on the record whose bytes hash to `sha256` (create-only, never removed): taken by the one upload that replaces it, or by the first publish that releases it, never both (the `claims` module) |
//! | `channels/{channel}/history/{sequence:020}.json` | every document ever published (create-only); the highest is live |
//! | `channels/{channel}/head.json` | a hint: a recently live document, for finding the live one without a LIST |
//! | `fleet/{channel}/{day}/{node}.json` | one node's fleet counts of one UTC day (the `fleet` module) |
//! | `outcomes/{channel}/{day}/{node}.json` | one node's latest outcome counts per install and pack × release of one UTC day (`fleet::outcomes`) |
//! | `readyz-probe-{random}` | one process's write probe ([`Storage::check_writable`]), deleted after each probe |

use std::ops::Range;
use std::path::{Path as FsPath, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use futures_util::stream::BoxStream;
use futures_util::{StreamExt, TryStreamExt};
use object_store::aws::{AmazonS3Builder, S3ConditionalPut};
use object_store::local::LocalFileSystem;
use object_store::path::Path;
use object_store::prefix::PrefixStore;
use object_store::{
    GetOptions, GetRange, GetResult, GetResultPayload, ObjectMeta, ObjectStore, ObjectStoreExt,
    PutMode, PutOptions, PutPayload,
};

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
    /// The write probe ([`Storage::check_writable`]) failed: packd cannot keep data here.
    #[error("packd cannot {action} {place}: {cause}; {fix}")]
    Unusable {
        /// `create`, `write`, `read back what it writes to`, `delete from`.
        action: &'static str,
        /// `its data directory /srv/packd`, `bucket packs (s3://packs/prod at …)`.
        place: String,
        cause: String,
        /// What the operator does about it.
        fix: &'static str,
    },
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

/// What a sweep of staging files did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Sweep {
    /// Staging files old enough to be left by a dead writer, removed.
    pub removed: usize,
    /// Staging files too young to be sure nobody is still writing them, kept.
    pub kept: usize,
    /// Staging files that could not be removed (logged).
    pub failed: usize,
}

/// Outcome of a create-only write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Created {
    Created,
    AlreadyExists,
}

#[derive(Debug, Clone)]
enum Backend {
    /// A directory.
    Local {
        root: PathBuf,
        files: Arc<LocalFileSystem>,
    },
    /// S3-compatible object storage.
    Object { bucket: String },
}

/// The storage of one deployment.
#[derive(Debug, Clone)]
pub struct Storage {
    store: Arc<dyn ObjectStore>,
    backend: Backend,
    describe: String,
    /// This process's probe object ([`Storage::check_writable`]): one per process, so that
    /// nodes sharing the storage never delete each other's probe mid-check.
    probe_key: Arc<str>,
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
    /// The claim on the record of pack `name` at `version` whose stored bytes hash to
    /// `record_sha256`: the `claims` module takes it.
    pub fn pack_claim(name: &str, version: &str, record_sha256: &str) -> String {
        format!("pack-claims/{name}/{version}/{record_sha256}.json")
    }
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
    /// The write probe of one process ([`super::Storage::check_writable`]), at the top
    /// level: a probe in a directory of its own would test that directory, not the one
    /// every other key is created under.
    pub fn probe(process: u64) -> String {
        format!("readyz-probe-{process:016x}")
    }
}

/// What tells one write of a listed object from another: its ETag (a hash of the content on
/// S3; inode, time and size on disk), or where a store gives none, its time and size. A
/// reader that caches what it read of an object rewritten in place (a pack record, while its
/// version is unreleased) reads it again when this changes.
pub fn listed_write(meta: &ObjectMeta) -> String {
    match &meta.e_tag {
        Some(tag) => tag.clone(),
        None => format!("{}-{}", meta.last_modified.to_rfc3339(), meta.size),
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
        std::fs::create_dir_all(root).map_err(|source| {
            let (cause, fix) = io_refusal(&source);
            StorageError::Unusable {
                action: "create",
                place: format!(
                    "its data directory {}",
                    std::path::absolute(root)
                        .as_deref()
                        .unwrap_or(root)
                        .display()
                ),
                cause,
                fix,
            }
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
            probe_key: keys::probe(rand::random()).into(),
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
            backend: Backend::Object {
                bucket: bucket.to_string(),
            },
            describe: format!("object storage s3://{bucket}/{prefix}{at}"),
            probe_key: keys::probe(rand::random()).into(),
        })
    }

    pub fn describe(&self) -> &str {
        &self.describe
    }

    /// Whether packd can keep data here, as a publish would: writes a small probe object,
    /// reads it back and deletes it. Run at start (a refusal stops packd) and by `/readyz`.
    /// A failure is [`StorageError::Unusable`], naming the data directory or bucket, the
    /// cause and what to do about it.
    pub async fn check_writable(&self) -> Result<(), StorageError> {
        let location = path(&self.probe_key)?;
        if let Err(source) = self
            .store
            .put(&location, PutPayload::from_static(PROBE_BYTES))
            .await
        {
            return Err(self.unusable("write", &source));
        }
        let read = match self.store.get(&location).await {
            Ok(got) => got.bytes().await,
            Err(source) => Err(source),
        };
        match read {
            Ok(bytes) if bytes == PROBE_BYTES => {}
            Ok(bytes) => {
                return Err(StorageError::Corrupt {
                    key: location.to_string(),
                    reason: format!(
                        "a probe of {} bytes was written and {} other bytes read back",
                        PROBE_BYTES.len(),
                        bytes.len()
                    ),
                });
            }
            Err(source) => return Err(self.unusable("read back what it writes to", &source)),
        }
        match self.store.delete(&location).await {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(source) => Err(self.unusable("delete from", &source)),
        }
    }

    /// What a failed probe step means, for the operator.
    fn unusable(&self, action: &'static str, source: &object_store::Error) -> StorageError {
        match &self.backend {
            Backend::Local { root, .. } => {
                let (cause, fix) = local_refusal(source);
                StorageError::Unusable {
                    action,
                    place: format!("its data directory {}", root.display()),
                    cause,
                    fix,
                }
            }
            Backend::Object { bucket } => {
                let (cause, fix) = match source {
                    object_store::Error::PermissionDenied { .. }
                    | object_store::Error::Unauthenticated { .. } => (
                        format!("access denied ({})", s3_detail(source)),
                        "check AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, and that they may \
                         put, get and delete objects in the bucket",
                    ),
                    object_store::Error::NotFound { .. } => (
                        format!("the bucket does not exist ({})", s3_detail(source)),
                        "create the bucket, or name an existing one in --storage",
                    ),
                    _ => (
                        s3_detail(source),
                        "check AWS_ENDPOINT_URL and that the object storage is up",
                    ),
                };
                let place = format!("bucket {bucket} ({})", self.describe);
                StorageError::Unusable {
                    action,
                    place,
                    cause,
                    fix,
                }
            }
        }
    }

    /// A whole small object, or `None`.
    pub async fn get(&self, key: &str) -> Result<Option<Bytes>, StorageError> {
        let location = path(key)?;
        let result = match self.store.get(&location).await {
            Ok(r) => r,
            Err(object_store::Error::NotFound { .. }) => return Ok(None),
            Err(source) => return Err(StorageError::store("get", &location, source)),
        };
        result
            .bytes()
            .await
            .map(Some)
            .map_err(|source| StorageError::store("read", &location, source))
    }

    pub async fn head(&self, key: &str) -> Result<Option<ObjectMeta>, StorageError> {
        let location = path(key)?;
        match self.store.head(&location).await {
            Ok(meta) => Ok(Some(meta)),
            Err(object_store::Error::NotFound { .. }) => Ok(None),
            Err(source) => Err(StorageError::store("head", &location, source)),
        }
    }

    /// Whether an object exists. On disk one `stat` (see [`Storage::size`]), on object
    /// storage a HEAD.
    pub async fn exists(&self, key: &str) -> Result<bool, StorageError> {
        Ok(self.size(key).await?.is_some())
    }

    /// The size of an object, or `None` when there is none. On disk one `stat`, made inline:
    /// on a local file system the call costs less than the trip through the blocking pool
    /// that object_store (and tokio::fs) would make for it. On object storage a HEAD.
    pub async fn size(&self, key: &str) -> Result<Option<u64>, StorageError> {
        match &self.backend {
            Backend::Local { files, .. } => Ok(stat_local(files, key)?.map(|m| m.len())),
            Backend::Object { .. } => Ok(self.head(key).await?.map(|meta| meta.size)),
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

    /// Writes or replaces an object. Only for hints that readers verify (`head.json`): a
    /// replace is not a commit.
    pub async fn put(&self, key: &str, bytes: Bytes) -> Result<(), StorageError> {
        let location = path(key)?;
        self.store
            .put(&location, PutPayload::from(bytes))
            .await
            .map(|_| ())
            .map_err(|source| StorageError::store("put", &location, source))
    }

    /// Removes an object; one that is already gone is no error. Only for data that is not
    /// a commit (old fleet counts).
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
}

impl Storage {
    /// Removes the staging files that writers killed mid-write left under a data directory:
    /// LocalFileSystem writes `{key}#{n}` and renames or links it into place, so a `kill -9`
    /// in between leaves the staging file (a whole pack, for a blob). They are never listed
    /// or served, only wasted space. Files younger than `min_age` are kept: several nodes may
    /// share one data directory, and a young staging file may be another node's write in
    /// progress. On object storage there is nothing to sweep (see server/README.md).
    pub async fn sweep_staging(&self, min_age: Duration) -> Result<Sweep, StorageError> {
        let Backend::Local { root, .. } = &self.backend else {
            return Ok(Sweep::default());
        };
        let root = root.clone();
        tokio::task::spawn_blocking(move || sweep_dir(&root, min_age))
            .await
            .map_err(|e| StorageError::Io {
                what: "sweeping staging files".to_string(),
                source: std::io::Error::other(e.to_string()),
            })?
    }
}

/// What [`Storage::check_writable`] writes.
const PROBE_BYTES: &[u8] = b"packd storage probe\n";

/// An object storage's refusal on one line: the S3 error code and message of its XML body
/// when there is one (`AccessDenied: Access Denied.`), else object_store's text.
fn s3_detail(source: &object_store::Error) -> String {
    let text = source.to_string();
    let element = |name: &str| {
        let open = format!("<{name}>");
        let start = text.find(&open)? + open.len();
        let end = start + text[start..].find(&format!("</{name}>"))?;
        Some(text[start..end].trim().to_string())
    };
    match (element("Code"), element("Message")) {
        (Some(code), Some(message)) => format!("{code}: {message}"),
        (Some(code), None) => code,
        (None, _) => text.split_whitespace().collect::<Vec<_>>().join(" "),
    }
}

/// Why a data directory refused a probe step, and what the operator does about it: from
/// the operating system's error under object_store's.
fn local_refusal(source: &object_store::Error) -> (String, &'static str) {
    let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(source);
    let io = std::iter::from_fn(|| {
        let current = cause?;
        cause = current.source();
        Some(current)
    })
    .find_map(|e| e.downcast_ref::<std::io::Error>());
    match io {
        Some(io) => io_refusal(io),
        None => (
            source.to_string(),
            "check the directory, or pick another --data-dir",
        ),
    }
}

/// Why the file system refused, in words, and what the operator does about it.
fn io_refusal(io: &std::io::Error) -> (String, &'static str) {
    use std::io::ErrorKind;
    match io.kind() {
        // EPERM, not EACCES: more than the file mode refuses.
        ErrorKind::PermissionDenied if io.raw_os_error() == Some(1) => (
            "operation not permitted".to_string(),
            "give the user running packd write access (chown/chmod) and clear any immutable \
             flag (`lsattr -d` shows it, `chattr -i` clears it), or pick another --data-dir",
        ),
        ErrorKind::PermissionDenied => (
            "permission denied".to_string(),
            "give the user running packd write access (chown/chmod), or pick another \
             --data-dir",
        ),
        ErrorKind::ReadOnlyFilesystem => (
            "read-only file system".to_string(),
            "mount it read-write, or pick another --data-dir",
        ),
        ErrorKind::StorageFull | ErrorKind::QuotaExceeded => (
            "no space left on its file system".to_string(),
            "free some space, or pick another --data-dir",
        ),
        _ => (
            io.to_string(),
            "check the directory, or pick another --data-dir",
        ),
    }
}

/// Whether a file name is one of LocalFileSystem's staging names, `{name}#{digits}`. No key
/// packd writes contains `#` (names and versions are checked on the way in).
fn is_staging_name(name: &str) -> bool {
    name.rsplit_once('#').is_some_and(|(base, n)| {
        !base.is_empty() && !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit())
    })
}

fn sweep_dir(root: &FsPath, min_age: Duration) -> Result<Sweep, StorageError> {
    let mut sweep = Sweep::default();
    let now = SystemTime::now();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let entries = match std::fs::read_dir(&dir) {
            Ok(entries) => entries,
            // Removed by another node in the meantime.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(source) => {
                return Err(StorageError::Io {
                    what: format!("listing {}", dir.display()),
                    source,
                });
            }
        };
        for entry in entries {
            let entry = entry.map_err(|source| StorageError::Io {
                what: format!("listing {}", dir.display()),
                source,
            })?;
            // Not followed: a link is nothing packd wrote.
            let Ok(kind) = entry.file_type() else {
                continue;
            };
            let file = entry.path();
            if kind.is_dir() {
                stack.push(file);
                continue;
            }
            if !kind.is_file() || !is_staging_name(&entry.file_name().to_string_lossy()) {
                continue;
            }
            // A modification time in the future counts as brand new.
            let age = entry
                .metadata()
                .and_then(|m| m.modified())
                .map(|t| now.duration_since(t).unwrap_or_default())
                .unwrap_or_default();
            if age < min_age {
                sweep.kept += 1;
                continue;
            }
            match std::fs::remove_file(&file) {
                Ok(()) => {
                    tracing::info!(file = %file.display(), age_secs = age.as_secs(), "removed a stale staging file");
                    sweep.removed += 1;
                }
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(err) => {
                    tracing::warn!(file = %file.display(), %err, "could not remove a stale staging file");
                    sweep.failed += 1;
                }
            }
        }
    }
    Ok(sweep)
}

/// The name of the file holding `key` under a data directory, for `op` on it.
fn local_name(
    files: &LocalFileSystem,
    key: &str,
    op: &'static str,
) -> Result<PathBuf, StorageError> {
    let location = path(key)?;
    files
        .path_to_filesystem(&location)
        .map_err(|source| StorageError::store(op, &location, source))
}

/// `stat` of the file holding `key` under a data directory; `None` when there is no such file.
fn stat_local(
    files: &LocalFileSystem,
    key: &str,
) -> Result<Option<std::fs::Metadata>, StorageError> {
    let file = local_name(files, key, "stat")?;
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
    async fn put_replaces_and_exists_sees_only_objects() {
        let dir = tempfile::tempdir().unwrap();
        let storage = Storage::local(dir.path()).unwrap();
        let key = keys::head("stable");
        assert!(!storage.exists(&key).await.unwrap());
        storage.put(&key, Bytes::from_static(b"one")).await.unwrap();
        storage.put(&key, Bytes::from_static(b"two")).await.unwrap();
        assert!(storage.exists(&key).await.unwrap());
        assert_eq!(
            storage.get(&key).await.unwrap().unwrap(),
            Bytes::from_static(b"two")
        );
        // A directory is not an object.
        assert!(!storage.exists("channels").await.unwrap());
    }

    #[test]
    fn staging_names_are_told_apart_from_keys() {
        assert!(is_staging_name("head.json#1"));
        assert!(is_staging_name(&format!("{}#12", "ab".repeat(32))));
        assert!(!is_staging_name("head.json"));
        assert!(!is_staging_name("head.json#"));
        assert!(!is_staging_name("#3"));
        assert!(!is_staging_name("head.json#1a"));
    }

    /// Old staging files go, young ones (maybe another node's write in progress) and real
    /// objects stay.
    #[tokio::test]
    async fn the_sweep_removes_only_old_staging_files() {
        let dir = tempfile::tempdir().unwrap();
        let storage = Storage::local(dir.path()).unwrap();
        let sha = "cd".repeat(32);
        storage
            .create(&keys::blob(&sha), Bytes::from_static(b"whole"))
            .await
            .unwrap();
        let old = dir.path().join(format!("blobs/{sha}#1"));
        let young = dir.path().join(format!("blobs/{sha}#2"));
        std::fs::create_dir_all(dir.path().join("channels/stable")).unwrap();
        let old_head = dir.path().join("channels/stable/head.json#7");
        for file in [&old, &young, &old_head] {
            std::fs::write(file, b"partial").unwrap();
        }
        let two_hours_ago = SystemTime::now() - Duration::from_secs(7200);
        for file in [&old, &old_head] {
            std::fs::File::options()
                .write(true)
                .open(file)
                .unwrap()
                .set_modified(two_hours_ago)
                .unwrap();
        }
        let sweep = storage
            .sweep_staging(Duration::from_secs(3600))
            .await
            .unwrap();
        assert_eq!(
            sweep,
            Sweep {
                removed: 2,
                kept: 1,
                failed: 0
            }
        );
        assert!(!old.exists() && !old_head.exists());
        assert!(young.exists());
        assert!(storage.exists(&keys::blob(&sha)).await.unwrap());
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
    async fn local_create_never_replaces() {
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
        assert_eq!(
            storage.get("a/b").await.unwrap().unwrap(),
            Bytes::from_static(b"1")
        );
        // The losing write's staging file is gone too.
        assert_eq!(files_in(&dir.path().join("a")), ["b"]);
    }

    fn files_in(dir: &FsPath) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }
}
