//! A real `packd serve` on loopback, over a data directory or an S3 bucket; killed on drop.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::{Publisher, bin};

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

/// What [`Packd::start`] stores in: a [`Backend`], or a data directory.
pub trait Storage {
    fn backend(&self) -> Backend;
}

impl Storage for Backend {
    fn backend(&self) -> Backend {
        self.clone()
    }
}

impl Storage for Path {
    fn backend(&self) -> Backend {
        Backend::Disk(self.to_path_buf())
    }
}

impl Storage for PathBuf {
    fn backend(&self) -> Backend {
        Backend::Disk(self.clone())
    }
}

/// The `--config` a packd starts with: a path, or an `Option` of one (`None`: no config).
#[derive(Clone, Debug)]
pub struct ConfigFile(Option<PathBuf>);

impl From<&Path> for ConfigFile {
    fn from(path: &Path) -> Self {
        ConfigFile(Some(path.to_path_buf()))
    }
}

impl From<&PathBuf> for ConfigFile {
    fn from(path: &PathBuf) -> Self {
        ConfigFile(Some(path.clone()))
    }
}

impl From<Option<&PathBuf>> for ConfigFile {
    fn from(path: Option<&PathBuf>) -> Self {
        ConfigFile(path.cloned())
    }
}

/// A running `packd serve`. Killed (SIGKILL) when dropped.
pub struct Packd {
    pub child: Child,
    pub addr: SocketAddr,
    /// `http://<addr>`; [`Packd::url`] for a path under it.
    pub url: String,
    backend: Backend,
    config: ConfigFile,
    cwd: PathBuf,
    one_core: bool,
    stderr_log: PathBuf,
}

impl Packd {
    /// packd on a free loopback port over `storage` (a data directory or a [`Backend`]), with
    /// `config` (a path, or an `Option` of one), in the temporary directory.
    pub fn start(storage: &(impl Storage + ?Sized), config: impl Into<ConfigFile>) -> Packd {
        Self::start_in(&storage.backend(), config, &std::env::temp_dir())
    }

    /// [`Packd::start`] with `cwd` as the working directory.
    pub fn start_in(backend: &Backend, config: impl Into<ConfigFile>, cwd: &Path) -> Packd {
        Self::spawn(backend, config.into(), cwd, false, "127.0.0.1:0")
    }

    /// A packd that may run on one core only (`taskset`): it then serves every connection
    /// on one thread, as each of its threads does on a machine of many cores, so whatever
    /// holds that thread up shows as the latency of every other request.
    pub fn start_on_one_core(backend: &Backend, config: impl Into<ConfigFile>) -> Packd {
        Self::spawn(
            backend,
            config.into(),
            &std::env::temp_dir(),
            true,
            "127.0.0.1:0",
        )
    }

    fn spawn(
        backend: &Backend,
        config: ConfigFile,
        cwd: &Path,
        one_core: bool,
        listen: &str,
    ) -> Packd {
        let mut cmd = if one_core {
            let mut cmd = Command::new("taskset");
            cmd.arg("--cpu-list")
                .arg(first_allowed_cpu())
                .arg(bin("pack-server", "packd"));
            cmd
        } else {
            Command::new(bin("pack-server", "packd"))
        };
        let stderr_log = tempfile::Builder::new()
            .prefix("packd-stderr-")
            .tempfile()
            .unwrap()
            .into_temp_path()
            .keep()
            .unwrap();
        cmd.args(["serve", "--listen", listen]).current_dir(cwd);
        if let Some(config) = &config.0 {
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
        // Reads on after the address, so packd never blocks on a full pipe.
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if let Some(addr) = line.strip_prefix("listening on http://") {
                    let _ = tx.send(addr.to_string());
                }
            }
        });
        let addr: SocketAddr = match rx.recv_timeout(Duration::from_secs(30)) {
            Ok(a) => a.parse().unwrap(),
            Err(_) => {
                let _ = child.kill();
                let _ = child.wait();
                let stderr = std::fs::read_to_string(&stderr_log).unwrap_or_default();
                let _ = std::fs::remove_file(&stderr_log);
                panic!("packd did not print its address; stderr:\n{stderr}");
            }
        };
        Packd {
            child,
            addr,
            url: format!("http://{addr}"),
            backend: backend.clone(),
            config,
            cwd: cwd.to_path_buf(),
            one_core,
            stderr_log,
        }
    }

    /// `path` on this packd.
    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.url)
    }

    /// SIGKILL, no chance to clean up; waits for the process.
    pub fn stop(&mut self) {
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

    /// Stops this packd and starts a fresh process over the same storage and config, on the
    /// same address (clients keep their URL).
    pub fn restart(&mut self) {
        self.stop();
        let listen = self.addr.to_string();
        let mut last = None;
        // The address is free once the killed process is reaped; something else may still
        // take it for a moment.
        for _ in 0..50 {
            let started = std::panic::catch_unwind(|| {
                Packd::spawn(
                    &self.backend,
                    self.config.clone(),
                    &self.cwd,
                    self.one_core,
                    &listen,
                )
            });
            match started {
                Ok(new) => {
                    *self = new;
                    return;
                }
                Err(e) => {
                    last = Some(e);
                    std::thread::sleep(Duration::from_millis(100));
                }
            }
        }
        std::panic::resume_unwind(last.unwrap());
    }

    /// What packd wrote to stderr so far.
    pub fn stderr(&self) -> String {
        std::fs::read_to_string(&self.stderr_log).unwrap_or_default()
    }

    /// Sum of every sample of `name` in packd's metrics whose labels contain `labels`.
    pub fn metric(&self, name: &str, labels: &str) -> f64 {
        let text = http()
            .get(self.url("/metrics"))
            .send()
            .unwrap()
            .text()
            .unwrap();
        text.lines()
            .filter(|line| {
                line.strip_prefix(name)
                    .is_some_and(|rest| rest.starts_with([' ', '{']) && rest.contains(labels))
            })
            .filter_map(|line| line.rsplit(' ').next()?.parse::<f64>().ok())
            .sum()
    }

    /// Waits until packd holds `n` watches.
    pub fn until_watching(&self, n: f64) {
        let deadline = Instant::now() + Duration::from_secs(30);
        while self.metric("packd_watchers", "") != n {
            assert!(Instant::now() < deadline, "packd never held {n} watches");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Watch requests packd answered, by the route they are counted under.
    pub fn watch_requests(&self) -> f64 {
        self.metric(
            "packd_http_requests_total",
            "route=\"/v1/channels/{channel}?wait\"",
        )
    }

    /// Uploads a sealed pack with `publisher`'s token; returns its SHA-256.
    pub fn upload(&self, publisher: &Publisher, pack: &Path) -> String {
        let bytes = std::fs::read(pack).unwrap();
        let sha = pack_format::sha256_hex(&bytes);
        let response = http()
            .put(self.url(&format!("/v1/blobs/{sha}")))
            .bearer_auth(&publisher.token)
            .body(bytes)
            .send()
            .unwrap();
        assert!(
            response.status().is_success(),
            "upload: {} {}",
            response.status(),
            response.text().unwrap_or_default()
        );
        sha
    }

    /// Publishes a signed channel document (document, signature) to `stable`.
    pub fn publish(&self, publisher: &Publisher, signed: &(Vec<u8>, String)) {
        let response = http()
            .put(self.url("/v1/channels/stable"))
            .bearer_auth(&publisher.token)
            .json(&serde_json::json!({
                "document": String::from_utf8(signed.0.clone()).unwrap(),
                "signature": signed.1,
            }))
            .send()
            .unwrap();
        assert!(
            response.status().is_success(),
            "publish: {} {}",
            response.status(),
            response.text().unwrap_or_default()
        );
    }
}

impl Drop for Packd {
    fn drop(&mut self) {
        self.stop();
        let _ = std::fs::remove_file(&self.stderr_log);
    }
}

fn http() -> reqwest::blocking::Client {
    reqwest::blocking::Client::builder()
        .timeout(Duration::from_secs(30))
        .build()
        .unwrap()
}

/// The first CPU this process may run on (`Cpus_allowed_list` in `/proc/self/status`).
fn first_allowed_cpu() -> String {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let allowed = status
        .lines()
        .find_map(|line| line.strip_prefix("Cpus_allowed_list:"))
        .expect("Cpus_allowed_list in /proc/self/status");
    allowed
        .trim()
        .chars()
        .take_while(char::is_ascii_digit)
        .collect()
}
