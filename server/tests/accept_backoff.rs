//! packd out of file descriptors: failed accepts pause on the shared backoff schedule
//! (growing, jittered, each under a second) instead of spinning, and once descriptors are
//! free again the next connection is served.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Descriptors packd may hold: enough to start and serve, few enough for a test to use up.
const FD_LIMIT: u32 = 48;

fn healthz(addr: SocketAddr) -> Option<String> {
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(2)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    stream
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
        .ok()?;
    let mut answer = String::new();
    stream.read_to_string(&mut answer).ok()?;
    Some(answer)
}

/// The `pause_ms` of every "accept failed" line, in order, of the accept loop that logged
/// the most of them (packd runs one loop per core, each on its own schedule).
fn pauses(log: &str) -> Vec<u64> {
    let field = |line: &str, name: &str| -> Option<u64> {
        let value = line.split(&format!("{name}=")).nth(1)?;
        value.split_whitespace().next()?.parse().ok()
    };
    let mut by_loop = std::collections::BTreeMap::<u64, Vec<u64>>::new();
    for line in log.lines().filter(|line| line.contains("accept failed")) {
        if let (Some(core), Some(pause)) = (field(line, "core"), field(line, "pause_ms")) {
            by_loop.entry(core).or_default().push(pause);
        }
    }
    by_loop
        .into_values()
        .max_by_key(Vec::len)
        .unwrap_or_default()
}

/// Kills the packd it holds when dropped, so a failing assertion does not leave it running.
struct KillOnDrop(std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn failed_accepts_back_off_under_a_second_and_serving_resumes() {
    let data = tempfile::tempdir().unwrap();
    let stderr_log = data.path().join("stderr.log");
    let mut child = Command::new("sh")
        .arg("-c")
        .arg(format!("ulimit -n {FD_LIMIT} && exec \"$0\" \"$@\""))
        .arg(env!("CARGO_BIN_EXE_packd"))
        .args(["serve", "--listen", "127.0.0.1:0", "--data-dir"])
        .arg(data.path().join("store"))
        .env("PACKD_LOG", "info")
        .env("NO_COLOR", "1")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(&stderr_log).unwrap())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let _child = KillOnDrop(child);
    let addr: SocketAddr = loop {
        let line = lines
            .next()
            .expect("packd exited before listening")
            .unwrap();
        if let Some(addr) = line.strip_prefix("listening on http://") {
            break addr.parse().unwrap();
        }
    };
    assert!(healthz(addr).unwrap().starts_with("HTTP/1.1 200"));

    // Idle connections until packd has no descriptor left to accept with.
    let mut held = Vec::new();
    for _ in 0..FD_LIMIT * 2 {
        held.push(TcpStream::connect(addr).unwrap());
    }
    let log = || std::fs::read_to_string(&stderr_log).unwrap_or_default();
    let deadline = Instant::now() + Duration::from_secs(20);
    while pauses(&log()).len() < 6 {
        assert!(
            Instant::now() < deadline,
            "packd never reported failed accepts:\n{}",
            log()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let seen = pauses(&log());
    assert!(
        seen.iter().all(|&ms| ms < 1000),
        "every pause is under the 1 s cap: {seen:?}"
    );
    assert!(seen[0] < 20, "the first pause is 10-20 ms: {seen:?}");
    assert!(
        seen[5] >= 5 * seen[0],
        "the pauses grow (10 ms doubling): {seen:?}"
    );

    drop(held);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if healthz(addr).is_some_and(|a| a.starts_with("HTTP/1.1 200")) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "packd did not serve again once descriptors were free:\n{}",
            log()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}
