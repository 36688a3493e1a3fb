//! Harness for the end-to-end tests: the real binaries, `packd` on loopback and a publisher
//! (from promptpack-harness, which packd's and packer's tests share), the `pack-client`
//! commands, a headless browser, a chat model server and the simulated fleet.

#![allow(clippy::print_stderr)]

pub mod browser;
pub mod chat_server;
pub mod rollout_sim;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

pub use promptpack_harness::{
    Packd, Publisher, bin, copy_tree, packer, run, skipped, walk, workspace,
};

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
    cmd.args(["--json", "dump"]);
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
        format: pack_format::FORMAT_VERSION,
        name: &opened.header.name,
        version: &opened.header.version,
        schema: opened.header.schema,
        payload: &opened.payload,
        mtime: 0,
        zstd_level: 3,
    };
    pack_format::seal(&input, &[key]).unwrap()
}

/// An npm package's executable under `~/.cache/promptpack-tests/<dir>` (`env` names another)
/// whose `--version` names `version`. Missing: a failure under `CI`, else the test
/// says it skipped.
pub fn npm_tool(env: &str, dir: &str, exe: &str, version: &str) -> Option<PathBuf> {
    let path = match std::env::var_os(env) {
        Some(path) => PathBuf::from(path),
        None => {
            let cache = std::env::var_os("XDG_CACHE_HOME")
                .map(PathBuf::from)
                .or_else(|| std::env::var_os("HOME").map(|h| Path::new(&h).join(".cache")))?;
            cache
                .join("promptpack-tests")
                .join(dir)
                .join("node_modules/.bin")
                .join(exe)
        }
    };
    let home = tempfile::tempdir().unwrap();
    let found = Command::new(&path)
        .arg("--version")
        .env_clear()
        .env("HOME", home.path())
        .env("PATH", "/usr/bin:/bin")
        .output()
        .ok()
        .filter(|out| out.status.success())
        .map(|out| String::from_utf8_lossy(&out.stdout).trim().to_string());
    if found.as_deref().is_some_and(|v| v.contains(version)) {
        return Some(path);
    }
    let why = format!(
        "{exe} {version} is not at {} (found {found:?}); scripts/test.sh installs it",
        path.display()
    );
    if std::env::var_os("CI").is_some() {
        panic!("{why}");
    }
    skipped(&why);
    None
}
