//! packd refuses to run on storage it cannot write: at start it writes, reads back and
//! deletes a probe object, and a refusal stops it with one line naming the data directory
//! or bucket and the fix; a storage that turns unwritable later turns `/readyz` to `503`
//! with the same words. Without this, packd started, answered `/readyz` 200, and failed
//! every publish with a `503 storage_unavailable` that reads as "retry later".

use crate::common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use common::*;
use reqwest::StatusCode;
use serde_json::Value;

/// A directory that really refuses writes while this guard lives, to packd running as the
/// same user as the tests. The tests run as root in CI, and root writes through any file
/// mode (chmod 0555 stops nobody), so as root the directory gets the immutable flag
/// (`chattr +i`), which refuses creating, renaming and removing entries to root too. The
/// directories live under Cargo's target tmpdir, on the disk of the build (ext4 here), not
/// on a tmpfs that may not keep the flag. Any other user gets `chmod 0555`. Either way the
/// guard checks the refusal before a test relies on it, and lifts it when dropped (also on
/// a failed assertion), so the temporary directory can be removed.
struct Unwritable {
    dir: PathBuf,
    root: bool,
}

impl Unwritable {
    fn new(dir: &Path) -> Unwritable {
        let root = rustix::process::geteuid().is_root();
        let status = if root {
            Command::new("chattr").arg("+i").arg(dir).status()
        } else {
            Command::new("chmod").arg("0555").arg(dir).status()
        };
        let guard = Unwritable {
            dir: dir.to_path_buf(),
            root,
        };
        assert!(
            status.as_ref().is_ok_and(|s| s.success()),
            "could not make {} refuse writes ({status:?}); as root the tests need `chattr` \
             (e2fsprogs) and a file system with immutable flags under the target directory",
            dir.display()
        );
        let probe = dir.join("write-test");
        assert!(
            std::fs::write(&probe, b"x").is_err(),
            "{} still takes writes",
            dir.display()
        );
        guard
    }
}

impl Drop for Unwritable {
    fn drop(&mut self) {
        let _ = if self.root {
            Command::new("chattr").arg("-i").arg(&self.dir).status()
        } else {
            Command::new("chmod").arg("0755").arg(&self.dir).status()
        };
    }
}

/// A temporary directory on the build's disk (see [`Unwritable`]).
fn tempdir() -> tempfile::TempDir {
    tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap()
}

/// `packd serve` with `args`, which must fail to start; what it printed.
fn packd_start_fails(args: &[&str], env: &[(String, String)]) -> Output {
    let mut command = Command::new(bin("pack-server", "packd"));
    command
        .arg("serve")
        .args(["--listen", "127.0.0.1:0"])
        .args(args)
        .env("RUST_BACKTRACE", "1");
    for var in [
        "PACKD_LISTEN",
        "PACKD_DATA_DIR",
        "PACKD_CONFIG",
        "PACKD_STORAGE",
    ] {
        command.env_remove(var);
    }
    command.envs(env.iter().map(|(k, v)| (k, v)));
    let mut child = command
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // A packd that starts anyway would serve forever: give it the time a start takes.
    let deadline = Instant::now() + Duration::from_secs(60);
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            let out = child.wait_with_output().unwrap();
            panic!(
                "packd started on storage it cannot write; stderr:\n{}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = child.wait_with_output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.stdout.is_empty(), "it never listened");
    out
}

/// The `error:` line of a failed start (the log lines before it are not errors).
fn error_line(out: &Output) -> String {
    let stderr = String::from_utf8_lossy(&out.stderr);
    let errors: Vec<&str> = stderr
        .lines()
        .filter(|l| l.starts_with("error: "))
        .collect();
    assert_eq!(errors.len(), 1, "{stderr}");
    errors[0].to_string()
}

/// What the fix says, by how the tests made the directory refuse writes.
fn fix_for_refusal() -> &'static str {
    if rustix::process::geteuid().is_root() {
        "operation not permitted; give the user running packd write access (chown/chmod) and \
         clear any immutable flag (`lsattr -d` shows it, `chattr -i` clears it), or pick \
         another --data-dir"
    } else {
        "permission denied; give the user running packd write access (chown/chmod), or pick \
         another --data-dir"
    }
}

#[test]
fn a_data_dir_packd_cannot_write_stops_it_at_start() {
    let dir = tempdir();
    let data = dir.path().join("data");
    std::fs::create_dir(&data).unwrap();
    let _refusing = Unwritable::new(&data);
    let out = packd_start_fails(&["--data-dir", data.to_str().unwrap()], &[]);
    assert_eq!(
        error_line(&out),
        format!(
            "error: starting packd: packd cannot write its data directory {}: {}",
            data.canonicalize().unwrap().display(),
            fix_for_refusal()
        )
    );
}

#[test]
fn a_data_dir_packd_cannot_create_stops_it_at_start() {
    let dir = tempdir();
    let parent = dir.path().join("srv");
    std::fs::create_dir(&parent).unwrap();
    let _refusing = Unwritable::new(&parent);
    let data = parent.join("packd");
    let out = packd_start_fails(&["--data-dir", data.to_str().unwrap()], &[]);
    assert_eq!(
        error_line(&out),
        format!(
            "error: starting packd: packd cannot create its data directory {}: {}",
            data.display(),
            fix_for_refusal()
        )
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readyz_turns_503_when_the_data_dir_stops_taking_writes() {
    let dir = tempdir();
    let data = dir.path().join("data");
    let server = Packd::start(&Backend::Disk(data.clone()), None);
    let c = client();
    let readyz = || async { c.get(server.url("/readyz")).send().await.unwrap() };
    assert_eq!(readyz().await.status(), StatusCode::OK);

    let refusing = Unwritable::new(&data);
    // An answer stands for a couple of seconds: wait for the probe that sees the change.
    let deadline = Instant::now() + Duration::from_secs(30);
    let response = loop {
        let response = readyz().await;
        if response.status() != StatusCode::OK || Instant::now() > deadline {
            break response;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["error"]["code"], "not_ready", "{body}");
    assert_eq!(
        body["error"]["message"],
        format!(
            "packd cannot write its data directory {}: {}",
            data.canonicalize().unwrap().display(),
            fix_for_refusal()
        )
    );

    // Writable again: ready again, without a restart.
    drop(refusing);
    let deadline = Instant::now() + Duration::from_secs(30);
    while readyz().await.status() != StatusCode::OK {
        assert!(Instant::now() < deadline, "still not ready after the fix");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // The probe leaves nothing behind.
    assert_eq!(files_under(&data), Vec::<String>::new());
}

/// Credentials that may read the bucket but not write to it: a HEAD, which was all the old
/// readiness check did, succeeds; the write probe does not.
#[test]
fn a_bucket_packd_cannot_write_stops_it_at_start() {
    let Some(s3) = Seaweed::shared() else { return };
    let url = format!("s3://{S3_BUCKET}/read-only-{:08x}", rand::random::<u32>());
    let out = packd_start_fails(&["--storage", &url], &s3.read_only_env());
    let line = error_line(&out);
    let start = format!(
        "error: starting packd: packd cannot write bucket {S3_BUCKET} (object storage {url} at \
         {}): access denied (",
        s3.endpoint
    );
    assert!(line.starts_with(&start), "{line}");
    assert!(
        line.ends_with(
            "; check AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, and that they may put, get \
             and delete objects in the bucket"
        ),
        "{line}"
    );
}
