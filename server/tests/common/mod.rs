//! Real `packd` processes on loopback, an s3s-fs object store when it is installed, and the
//! keys, packs and signed documents to feed them.
#![allow(dead_code, clippy::print_stderr)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use pack_format::{
    ChannelDocument, ChannelEntry, ContentKey, EntryTarget, Limits, PackRef, Payload, PayloadFile,
    SealInput, SigningKey,
};
use time::OffsetDateTime;

pub const PUBLISH_TOKEN: &str = "ppt_test_publish_token";
pub const READ_ONLY_TOKEN: &str = "ppt_test_read_token";
/// Small so the oversize test does not need to send 64 MiB.
pub const MAX_BLOB_BYTES: u64 = 256 * 1024;

pub fn packd_bin() -> &'static str {
    env!("CARGO_BIN_EXE_packd")
}

/// Where a `packd` keeps its data.
#[derive(Clone, Debug)]
pub enum Backend {
    /// No storage flag at all: the zero-config default under the working directory.
    ZeroConfig,
    Disk(PathBuf),
    S3 {
        url: String,
        env: Vec<(String, String)>,
    },
}

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
        let text = format!(
            r#"publisher_keys = ["signing.pub"]

[[tokens]]
name = "publisher"
sha256 = "{publish}"
scopes = ["publish"]

[limits]
max_blob_bytes = {MAX_BLOB_BYTES}
{extra_toml}
"#,
            publish = hash_token_with_cli(PUBLISH_TOKEN),
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
                }),
            }],
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
    let mut child = Command::new(packd_bin())
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

/// A running `packd serve`. Killed (SIGKILL) when dropped.
pub struct Packd {
    pub child: Child,
    pub addr: SocketAddr,
    pub base: String,
    backend: Backend,
    config: Option<PathBuf>,
    cwd: PathBuf,
    stderr_log: PathBuf,
}

impl Packd {
    pub fn start(backend: &Backend, config: Option<&Path>) -> Packd {
        let cwd = std::env::temp_dir();
        Self::start_in(backend, config, &cwd)
    }

    pub fn start_in(backend: &Backend, config: Option<&Path>, cwd: &Path) -> Packd {
        let stderr_log = tempfile::Builder::new()
            .prefix("packd-stderr-")
            .tempfile()
            .unwrap()
            .into_temp_path()
            .keep()
            .unwrap();
        let mut cmd = Command::new(packd_bin());
        cmd.arg("serve")
            .arg("--listen")
            .arg("127.0.0.1:0")
            .current_dir(cwd);
        if let Some(config) = config {
            cmd.arg("--config").arg(config);
        }
        for var in [
            "PACKD_LISTEN",
            "PACKD_DATA_DIR",
            "PACKD_CONFIG",
            "PACKD_STORAGE",
        ] {
            cmd.env_remove(var);
        }
        match backend {
            Backend::ZeroConfig => {}
            Backend::Disk(dir) => {
                cmd.arg("--data-dir").arg(dir);
            }
            Backend::S3 { url, env } => {
                cmd.arg("--storage").arg(url);
                for (k, v) in env {
                    cmd.env(k, v);
                }
            }
        }
        cmd.env("PACKD_LOG", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&stderr_log).unwrap());
        let mut child = cmd.spawn().expect("spawning packd");
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut lines = BufReader::new(stdout).lines();
            while let Some(Ok(line)) = lines.next() {
                if let Some(addr) = line.strip_prefix("listening on http://") {
                    let _ = tx.send(addr.to_string());
                }
            }
        });
        let addr: SocketAddr = match rx.recv_timeout(Duration::from_secs(30)) {
            Ok(a) => a.parse().unwrap(),
            Err(_) => {
                let _ = child.kill();
                panic!(
                    "packd did not print its address; stderr:\n{}",
                    std::fs::read_to_string(&stderr_log).unwrap_or_default()
                );
            }
        };
        Packd {
            child,
            addr,
            base: format!("http://{addr}"),
            backend: backend.clone(),
            config: config.map(Path::to_path_buf),
            cwd: cwd.to_path_buf(),
            stderr_log,
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// SIGKILL, no chance to clean up.
    pub fn kill9(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// SIGTERM by pid.
    pub fn sigterm(&self) {
        let status = Command::new("kill")
            .arg("-TERM")
            .arg(self.child.id().to_string())
            .status()
            .unwrap();
        assert!(status.success());
    }

    /// A fresh process over the same storage and config.
    pub fn restart(&mut self) -> Packd {
        self.kill9();
        Packd::start_in(&self.backend, self.config.as_deref(), &self.cwd)
    }

    pub fn stderr(&self) -> String {
        std::fs::read_to_string(&self.stderr_log).unwrap_or_default()
    }
}

impl Drop for Packd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_file(&self.stderr_log);
    }
}

/// A running s3s-fs over a temp dir with one bucket. Killed when dropped.
pub struct S3 {
    child: Child,
    pub root: tempfile::TempDir,
    pub endpoint: String,
}

pub const S3_BUCKET: &str = "packs";
const S3_ACCESS_KEY: &str = "packd-test";
const S3_SECRET_KEY: &str = "packd-test-secret";

impl S3 {
    /// Starts s3s-fs, or returns `None` (with a loud message) when it is not installed and
    /// `CI` is unset. Under CI a missing s3s-fs fails the test.
    pub fn start() -> Option<S3> {
        let found = Command::new("s3s-fs")
            .arg("--version")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if !found {
            if std::env::var_os("CI").is_some() {
                panic!(
                    "s3s-fs is not installed and CI is set: run scripts/test.sh, which installs it"
                );
            }
            eprintln!(
                "\n!!!!!!!!!!\n!!! SKIPPING the S3 variant: s3s-fs is not on PATH.\n!!! Install it with: \
                 cargo install s3s-fs@0.14.1 --locked --features binary\n!!!!!!!!!!\n"
            );
            return None;
        }
        let root = tempfile::tempdir().unwrap();
        std::fs::create_dir(root.path().join(S3_BUCKET)).unwrap();
        let port = free_port();
        let child = Command::new("s3s-fs")
            .arg("--host")
            .arg("127.0.0.1")
            .arg("--port")
            .arg(port.to_string())
            .arg("--access-key")
            .arg(S3_ACCESS_KEY)
            .arg("--secret-key")
            .arg(S3_SECRET_KEY)
            .arg(root.path())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawning s3s-fs");
        let deadline = Instant::now() + Duration::from_secs(20);
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                Instant::now() < deadline,
                "s3s-fs did not start listening on port {port}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        Some(S3 {
            child,
            root,
            endpoint: format!("http://127.0.0.1:{port}"),
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

    pub fn backend(&self, prefix: &str) -> Backend {
        Backend::S3 {
            url: format!("s3://{S3_BUCKET}/{prefix}"),
            env: self.env(),
        }
    }
}

impl Drop for S3 {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
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
