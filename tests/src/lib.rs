//! Harness for the end-to-end tests: find (or build) the real binaries, run `packd` on
//! loopback, make keys and packs with the real `packer`, and publish through the API.

#![allow(clippy::print_stderr)]

pub mod browser;
pub mod chat_server;
pub mod rollout_sim;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

pub use promptpack_harness::{Publisher, bin, copy_tree, packer, run, skipped, walk, workspace};

/// A `packd` process on loopback over a data directory; killed on drop.
pub struct Packd {
    child: Child,
    pub url: String,
    pub data_dir: PathBuf,
    config: PathBuf,
}

impl Packd {
    pub fn start(data_dir: &Path, config: &Path) -> Self {
        Self::start_on(data_dir, config, "127.0.0.1:0")
    }

    pub fn start_on(data_dir: &Path, config: &Path, listen: &str) -> Self {
        let mut child = Command::new(bin("pack-server", "packd"))
            .arg("serve")
            .args(["--listen", listen, "--data-dir"])
            .arg(data_dir)
            .arg("--config")
            .arg(config)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let mut lines = BufReader::new(stdout).lines();
        let url = loop {
            let line = lines
                .next()
                .expect("packd exited before listening")
                .unwrap();
            if let Some(rest) = line.strip_prefix("listening on ") {
                break rest.trim().to_string();
            }
        };
        // Keep draining stdout so packd never blocks on a full pipe.
        std::thread::spawn(move || for _ in lines {});
        Packd {
            child,
            url,
            data_dir: data_dir.to_path_buf(),
            config: config.to_path_buf(),
        }
    }

    /// Stops the server (SIGKILL) and waits for it.
    pub fn stop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Starts again on the same address and data.
    pub fn restart(&mut self) {
        self.stop();
        let addr = self.url.trim_start_matches("http://").to_string();
        let mut last = None;
        for _ in 0..50 {
            match std::panic::catch_unwind(|| Packd::start_on(&self.data_dir, &self.config, &addr))
            {
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

    /// Sum of every sample of `name` in packd's metrics whose labels contain `labels`.
    pub fn metric(&self, name: &str, labels: &str) -> f64 {
        let text = Self::http()
            .get(format!("{}/metrics", self.url))
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
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while self.metric("packd_watchers", "") != n {
            assert!(
                std::time::Instant::now() < deadline,
                "packd never held {n} watches"
            );
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

    fn http() -> reqwest::blocking::Client {
        reqwest::blocking::Client::builder()
            .timeout(Duration::from_secs(30))
            .build()
            .unwrap()
    }

    /// Uploads a sealed pack; returns its SHA-256.
    pub fn upload(&self, publisher: &Publisher, pack: &Path) -> String {
        let bytes = std::fs::read(pack).unwrap();
        let sha = pack_format::sha256_hex(&bytes);
        let response = Self::http()
            .put(format!("{}/v1/blobs/{sha}", self.url))
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

    /// Publishes a signed channel document.
    pub fn publish(&self, publisher: &Publisher, signed: &(Vec<u8>, String)) {
        let response = Self::http()
            .put(format!("{}/v1/channels/stable", self.url))
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
    }
}

/// A `pack-client` command for a cache and config.
pub fn client_cmd(cache: &Path, config: &Path, client_version: &str) -> Command {
    let mut cmd = Command::new(bin("pack-client", "pack-client"));
    cmd.arg("--cache").arg(cache).arg("--config").arg(config);
    cmd.args(["--client-version", client_version]);
    cmd
}

/// Waits until a fresh `pack-client` of release 1.0.0 on `cache` serves `version`; how long
/// that took.
pub fn until_served(cache: &Path, config: &Path, version: &str, within: Duration) -> Duration {
    let started = std::time::Instant::now();
    loop {
        let (now, source, _) = dump(cache, config, "1.0.0");
        if now == version {
            return started.elapsed();
        }
        assert!(
            started.elapsed() < within,
            "{version} not served within {within:?}; serving {now} ({source})"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Runs `pack-client … dump` and returns (version, source, {key: sha256}).
pub fn dump(
    cache: &Path,
    config: &Path,
    client_version: &str,
) -> (String, String, serde_json::Map<String, serde_json::Value>) {
    let mut cmd = client_cmd(cache, config, client_version);
    cmd.arg("dump");
    let out: serde_json::Value = serde_json::from_str(&run(cmd)).unwrap();
    let files = out["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| (f["key"].as_str().unwrap().to_string(), f["sha256"].clone()))
        .collect();
    (
        out["meta"]["version"].as_str().unwrap().to_string(),
        out["meta"]["source"].as_str().unwrap().to_string(),
        files,
    )
}

/// The files of sealed `pack` (opened with `keys`) sealed again, as the same name and
/// version, for `key` only: a pack whose bytes are genuine but that a client without `key`
/// cannot open.
pub fn reseal_for(
    pack: &[u8],
    keys: &pack_format::ContentKeyRing,
    key: &pack_format::ContentKey,
) -> Vec<u8> {
    let opened = pack_format::pack::open(pack, keys, &pack_format::Limits::DEFAULT).unwrap();
    let input = pack_format::SealInput {
        name: &opened.header.name,
        version: &opened.header.version,
        schema: opened.header.schema,
        payload: &opened.payload,
        mtime: 0,
        zstd_level: 3,
    };
    pack_format::seal(&input, &[key]).unwrap()
}
