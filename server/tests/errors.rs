//! What an operator sees when `packd` cannot start: one `error:` line naming the problem
//! and its cause once, exit code 1, and no backtrace even with `RUST_BACKTRACE=1` (set on
//! many development machines). And a warning at start when publishing cannot work.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Output, Stdio};

fn packd(dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_packd"))
        .args(args)
        .current_dir(dir)
        .env("RUST_BACKTRACE", "1")
        .env_remove("PACKD_CONFIG")
        .env_remove("PACKD_LISTEN")
        .env_remove("PACKD_DATA_DIR")
        .env_remove("PACKD_STORAGE")
        .output()
        .unwrap()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn a_config_that_does_not_parse_is_one_error_line() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("packd.toml"), "listen = [\n").unwrap();
    let out = packd(dir.path(), &["serve", "--config", "packd.toml"]);
    assert_eq!(out.status.code(), Some(1));
    let text = stderr(&out);
    assert!(
        text.starts_with(
            "error: loading the configuration: config packd.toml: TOML parse error at line 1"
        ),
        "{text}"
    );
    // The parser's message appears once, and nothing of anyhow's `Debug` report.
    assert_eq!(text.matches("TOML parse error").count(), 1, "{text}");
    for noise in ["Caused by", "Stack backtrace", "Error: "] {
        assert!(!text.contains(noise), "{noise:?} in {text}");
    }
}

#[test]
fn an_address_in_use_is_one_error_line() {
    let dir = tempfile::tempdir().unwrap();
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap();
    let out = packd(
        dir.path(),
        &["serve", "--listen", &addr.to_string(), "--data-dir", "data"],
    );
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        stderr(&out)
            .lines()
            .filter(|l| !l.contains(" INFO "))
            .collect::<Vec<_>>(),
        [format!(
            "error: starting packd: binding {addr}: Address already in use (os error 98)"
        )]
    );
}

#[test]
fn a_second_packd_on_the_address_of_a_running_one_is_refused() {
    // packd's own sockets share their port with each other (one per core); another packd
    // must still not be able to join them and take half the connections.
    let dir = tempfile::tempdir().unwrap();
    let mut first = Command::new(env!("CARGO_BIN_EXE_packd"))
        .args(["serve", "--listen", "127.0.0.1:0", "--data-dir", "one"])
        .current_dir(dir.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(first.stdout.take().unwrap()).lines();
    let addr = loop {
        let line = lines
            .next()
            .expect("packd exited before listening")
            .unwrap();
        if let Some(addr) = line.strip_prefix("listening on http://") {
            break addr.to_string();
        }
    };
    let out = packd(
        dir.path(),
        &["serve", "--listen", &addr, "--data-dir", "two"],
    );
    let _ = first.kill();
    let _ = first.wait();
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(
        stderr(&out).contains(&format!(
            "error: starting packd: binding {addr}: Address already in use"
        )),
        "{}",
        stderr(&out)
    );
}

#[test]
fn a_missing_publisher_key_file_names_the_path_tried() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("etc")).unwrap();
    std::fs::write(
        dir.path().join("etc/packd.toml"),
        "publisher_keys = [\"keys/signing.pub\"]\n",
    )
    .unwrap();
    let out = packd(dir.path(), &["serve", "--config", "etc/packd.toml"]);
    assert_eq!(out.status.code(), Some(1));
    let etc = std::path::absolute(dir.path().join("etc")).unwrap();
    assert_eq!(
        stderr(&out),
        format!(
            "error: loading the configuration: publisher key \"keys/signing.pub\": key file \
             {}/keys/signing.pub: no such file (relative key paths resolve against {})\n",
            etc.display(),
            etc.display()
        )
    );
}

#[test]
fn starting_without_publisher_keys_warns_that_publishing_is_disabled() {
    let dir = tempfile::tempdir().unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_packd"))
        .args(["serve", "--listen", "127.0.0.1:0", "--data-dir", "data"])
        .current_dir(dir.path())
        .env_remove("PACKD_CONFIG")
        .env_remove("NO_COLOR")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // The start-up lines up to the warning; a missing warning fails after a timeout
    // rather than waiting on a server that keeps running.
    let stderr = child.stderr.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let mut lines = Vec::new();
    while let Ok(line) = rx.recv_timeout(std::time::Duration::from_secs(20)) {
        let done = line.contains("publishing is disabled");
        lines.push(line);
        if done {
            break;
        }
    }
    child.kill().unwrap();
    child.wait().unwrap();
    let text = lines.join("\n");
    assert!(text.contains("packd started"), "{text}");
    let warning = lines.last().unwrap();
    assert!(
        warning.contains(" WARN ")
            && warning.contains("publishing is disabled: no publisher_keys in the config"),
        "{text}"
    );
    // stderr is a pipe here, not a terminal: no colour codes.
    assert!(!text.contains('\u{1b}'), "{text}");
}
