//! `packd serve --ready-file PATH`, the signal a script waits for instead of sleeping: the
//! file appears once packd answers, holds the URL it prints, and is gone after a clean exit;
//! a packd that cannot start writes none, and one left by an earlier packd never stands for
//! this one.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// `packd serve` on a free loopback port with `data_dir` and `--ready-file ready`.
fn packd(data_dir: &Path, ready: &Path) -> Child {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_packd"));
    cmd.args(["serve", "--listen", "127.0.0.1:0", "--data-dir"])
        .arg(data_dir)
        .arg("--ready-file")
        .arg(ready);
    for var in [
        "PACKD_LISTEN",
        "PACKD_DATA_DIR",
        "PACKD_CONFIG",
        "PACKD_STORAGE",
        "PACKD_READY_FILE",
    ] {
        cmd.env_remove(var);
    }
    cmd.stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap()
}

/// The answer to `GET path` from `addr`, head and body.
fn get(addr: &str, path: &str) -> String {
    let mut stream = TcpStream::connect(addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).unwrap();
    answer
}

/// Waits for `child` to exit, for at most `within`.
fn exited(child: &mut Child, within: Duration) -> std::process::ExitStatus {
    let deadline = Instant::now() + within;
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        assert!(Instant::now() < deadline, "packd did not exit");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn the_ready_file_names_a_packd_that_answers_and_goes_with_a_clean_exit() {
    let dir = tempfile::tempdir().unwrap();
    let ready = dir.path().join("packd.ready");
    std::fs::write(&ready, "http://127.0.0.1:1\n").unwrap();
    let mut child = packd(&dir.path().join("data"), &ready);

    // The earlier file is not taken for this packd's: wait for one that names another URL.
    let deadline = Instant::now() + Duration::from_secs(30);
    let url = loop {
        let text = std::fs::read_to_string(&ready).unwrap_or_default();
        if text.ends_with('\n') && text != "http://127.0.0.1:1\n" {
            break text.trim_end().to_string();
        }
        assert!(
            child.try_wait().unwrap().is_none(),
            "packd exited before it was ready"
        );
        assert!(Instant::now() < deadline, "no ready file within 30 s");
        std::thread::sleep(Duration::from_millis(20));
    };
    // Ready means answering at once, on the address the file names.
    let addr = url.strip_prefix("http://").expect("an http:// URL");
    for path in ["/healthz", "/readyz"] {
        let answer = get(addr, path);
        assert!(answer.starts_with("HTTP/1.1 200"), "{url}{path}: {answer}");
    }

    let term = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(term.success());
    let status = exited(&mut child, Duration::from_secs(30));
    assert!(status.success(), "{status}");
    assert!(!ready.exists(), "the ready file outlived packd");
}

#[test]
fn a_packd_that_cannot_start_leaves_no_ready_file() {
    let dir = tempfile::tempdir().unwrap();
    let ready = dir.path().join("packd.ready");
    // Left by an earlier packd that was killed.
    std::fs::write(&ready, "http://127.0.0.1:1\n").unwrap();
    // A data directory below a file cannot be created.
    let file = dir.path().join("a-file");
    std::fs::write(&file, "").unwrap();
    let mut child = packd(&file.join("data"), &ready);
    let status = exited(&mut child, Duration::from_secs(60));
    assert_eq!(status.code(), Some(1), "{status}");
    assert!(
        !ready.exists(),
        "a ready file for a packd that never started"
    );
}
