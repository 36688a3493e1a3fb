//! Watching the channel through a caching proxy, with real processes: Debian's nginx with
//! `proxy_cache` on, configured as server/README.md ("Behind a cache or CDN") shows, in front
//! of a real packd, and a real `pack-client run` watching through it. nginx does not pass `If-None-Match` on to packd for a request it may cache, and keys
//! its cache on the URL; a watch that said what it holds only in that header was answered at
//! once, every time, and a rollback took 34.5 s to reach an idle client. Here, after several
//! whole watch holds idle (packd's hold shortened to a few seconds) the watch is still held, a rollback reaches the client within 2 s, blobs come from
//! nginx's cache, and a plain refresh right after a release sees it.
//!
//! Skipped, loudly, when nginx is not installed; under `CI` a missing nginx fails (run
//! scripts/test.sh, which installs Debian's `nginx-light`).

#![allow(clippy::print_stderr)] // tests report what they measured

use crate::ports;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use pack_client::watch::MIN_REFRESH_GAP;
use promptpack_tests::*;

/// A child process, killed when dropped.
struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The nginx binary, if one is installed. Under `CI` a missing nginx is a failure
/// (`scripts/test.sh` installs Debian's `nginx-light`); elsewhere the test skips, loudly.
fn nginx_binary() -> Option<PathBuf> {
    // Debian installs it in /usr/sbin, which is not on every user's PATH.
    for candidate in ["nginx", "/usr/sbin/nginx"] {
        let found = Command::new(candidate)
            .arg("-v")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if found {
            return Some(PathBuf::from(candidate));
        }
    }
    if std::env::var_os("CI").is_some() {
        panic!("nginx is not installed and CI is set: run scripts/test.sh, which installs it");
    }
    // Straight to the file descriptor: the test harness captures `eprintln!` of passing
    // tests, and this must be seen.
    let _ = std::io::stderr().write_all(
        b"\n!!!!!!!!!!\n!!! skipped: nginx not installed (tests/tests/proxy_watch.rs).\n\
          !!! Install it with: apt-get install nginx-light\n!!!!!!!!!!\n",
    );
    skipped("nginx is not installed");
    None
}

/// nginx with `proxy_cache` on in front of packd, configured as server/README.md shows, as a
/// user process with everything in a temporary directory; killed when dropped.
struct Nginx {
    _process: Running,
    url: String,
    dir: tempfile::TempDir,
}

/// The ```nginx block of server/README.md's "Behind a cache or CDN", as written but for its
/// cache directory, its port and packd's address.
fn readme_nginx(cache: &Path, port: u16, upstream: &str) -> String {
    let readme = std::fs::read_to_string(workspace().join("server/README.md")).unwrap();
    let section = &readme[readme
        .find("### Behind a cache or CDN")
        .expect("server/README.md has a section \"Behind a cache or CDN\"")..];
    let start = section.find("```nginx\n").expect("an ```nginx block") + "```nginx\n".len();
    let end = section[start..].find("```").expect("the block ends") + start;
    let mut block = section[start..end].to_string();
    for (written, here) in [
        ("/var/cache/nginx/packd", cache.display().to_string()),
        ("listen 80;", format!("listen 127.0.0.1:{port};")),
        ("http://127.0.0.1:8470", upstream.to_string()),
    ] {
        assert!(
            block.contains(written),
            "the README's nginx block has no {written:?}"
        );
        block = block.replace(written, &here);
    }
    block
}

/// The README's block, with everything else nginx writes in `dir`.
fn nginx_config(dir: &Path, port: u16, upstream: &str) -> String {
    let server = readme_nginx(&dir.join("cache"), port, upstream);
    let dir = dir.display();
    format!(
        r#"# One process, so that killing it leaves nothing behind (not for production).
master_process off;
pid {dir}/nginx.pid;
error_log {dir}/error.log warn;
events {{ worker_connections 256; }}
http {{
    log_format cache '$request $status $upstream_cache_status $request_time';
    access_log {dir}/access.log cache;
    client_body_temp_path {dir}/body;
    proxy_temp_path {dir}/proxy;
    fastcgi_temp_path {dir}/fastcgi;
    uwsgi_temp_path {dir}/uwsgi;
    scgi_temp_path {dir}/scgi;
{server}}}
"#
    )
}

impl Nginx {
    /// Started on a port from below the kernel's ephemeral range (a port `bind(0)` hands out
    /// can go to an outgoing connection of a parallel test before nginx binds it); when the
    /// port is taken anyway nginx exits, and it is started again on another.
    fn start(binary: &Path, upstream: &str) -> Nginx {
        let mut said = Vec::new();
        for _ in 0..3 {
            let dir = tempfile::tempdir().unwrap();
            let port = ports::unassigned_port();
            let conf = dir.path().join("nginx.conf");
            std::fs::write(&conf, nginx_config(dir.path(), port, upstream)).unwrap();
            let log = dir.path().join("error.log");
            let child = Command::new(binary)
                .arg("-p")
                .arg(dir.path())
                .arg("-c")
                .arg(&conf)
                .arg("-e")
                .arg(&log)
                .args(["-g", "daemon off;"])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap();
            let mut process = Running(child);
            let url = format!("http://127.0.0.1:{port}");
            // Up when packd's health check answers through it.
            let deadline = Instant::now() + Duration::from_secs(20);
            let up = loop {
                if let Some(status) = process.0.try_wait().unwrap() {
                    break Err(format!("nginx exited ({status})"));
                }
                let health = reqwest::blocking::get(format!("{url}/healthz"));
                if health.is_ok_and(|r| r.status().is_success()) {
                    break Ok(());
                }
                if Instant::now() > deadline {
                    break Err("nginx did not answer within 20 s".to_string());
                }
                std::thread::sleep(Duration::from_millis(50));
            };
            let logged = std::fs::read_to_string(&log).unwrap_or_default();
            match up {
                Ok(()) => {
                    return Nginx {
                        _process: process,
                        url,
                        dir,
                    };
                }
                Err(why) if logged.contains("Address already in use") => {
                    said.push(format!("port {port}: {why}"));
                }
                Err(why) => panic!("nginx on port {port}: {why}\n{logged}"),
            }
        }
        panic!("nginx never listened: {}", said.join("; "));
    }

    /// The requests nginx served, with their cache status.
    fn access_log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("access.log")).unwrap_or_default()
    }
}

/// `pack-client run`: the six-hour schedule and the watch, in the foreground.
fn pack_client_run(cache: &Path, config: &Path) -> Running {
    let mut cmd = client_cmd(cache, config, "1.0.0");
    cmd.arg("run")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    Running(cmd.spawn().unwrap())
}

/// The version the cache serves, as a fresh process loads it.
fn served(cache: &Path, config: &Path) -> String {
    dump(cache, config, "1.0.0").0
}

fn percentile(samples: &[Duration], p: f64) -> Duration {
    let mut sorted = samples.to_vec();
    sorted.sort();
    let rank = ((p * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

fn publish(publisher: &Publisher, packd: &Packd, entry: &str) {
    packd.publish(publisher, &publisher.sign(&[format!("*={entry}")], "30d"));
}

/// Rounds of a release and a rollback after the idle stretch.
const ROUNDS: usize = 10;
/// How long packd holds a watch in this test (`[limits] max_watch_secs`).
const WATCH_HOLD: Duration = Duration::from_secs(4);
/// Whole holds the idle stretch lasts.
const IDLE_HOLDS: u32 = 3;

#[test]
fn a_rollback_reaches_a_client_watching_through_a_caching_nginx_within_two_seconds() {
    let Some(binary) = nginx_binary() else {
        return;
    };
    let started = Instant::now();
    let publisher = Publisher::new();
    let data = tempfile::tempdir().unwrap();
    // packd holds a watch WATCH_HOLD (not its default 50 s) so that the idle stretch below
    // sees several whole holds in seconds.
    let packd = Packd::start(
        data.path(),
        &publisher.server_config_with(&format!(
            "[limits]\nmax_watch_secs = {}\n",
            WATCH_HOLD.as_secs()
        )),
    );
    let nginx = Nginx::start(&binary, &packd.url);
    let v1 = publisher.build("1.0.0", "PROXIED-1.0.0");
    let v2 = publisher.build("2.0.0", "PROXIED-2.0.0");
    let v2_sha = packd.upload(&publisher, &v2);
    packd.upload(&publisher, &v1);
    publish(&publisher, &packd, &v1.display().to_string());

    let config = publisher.client_config(&nginx.url, "");
    let cache = tempfile::tempdir().unwrap();
    let _run = pack_client_run(cache.path(), &config);
    until_served(cache.path(), &config, "1.0.0", Duration::from_secs(30));
    eprintln!("set up in {:?}", started.elapsed());

    // Idle for IDLE_HOLDS whole holds: the watch is held through nginx all along, not
    // answered early (one answer at the end of each hold). The samples are spread over the
    // stretch; what is asserted is packd's own count of watches it held and answered.
    let answered_before = packd.watch_requests();
    let idle = Instant::now();
    let (mut samples, mut held) = (0, 0);
    while idle.elapsed() < WATCH_HOLD * IDLE_HOLDS {
        std::thread::sleep(Duration::from_millis(250));
        samples += 1;
        if packd.metric("packd_watchers", "") == 1.0 {
            held += 1;
        }
    }
    let answered = packd.watch_requests() - answered_before;
    eprintln!(
        "{IDLE_HOLDS} holds idle: packd held the watch at {held} of {samples} samples, answered \
         {answered} watches"
    );
    assert!(
        held >= samples * 9 / 10 && answered <= f64::from(IDLE_HOLDS + 1),
        "the watch was not held through nginx while idle: held at {held} of {samples} \
         samples, {answered} watches answered in {IDLE_HOLDS} holds\n{}",
        nginx.access_log()
    );

    // A rollback right after the idle stretch. Then rounds of a release and a rollback, each
    // published once the client watches again and its last refresh is a refresh gap old (a
    // refresh a watch starts waits for that gap; a release is not rolled back within it).
    let change = |entry: &str, version: &str| {
        publish(&publisher, &packd, entry);
        let took = until_served(cache.path(), &config, version, Duration::from_secs(20));
        eprintln!(
            "{version} reached pack-client run through nginx in {} ms",
            took.as_millis()
        );
        took
    };
    let settle = || {
        let settled = Instant::now();
        packd.until_watching(1.0);
        std::thread::sleep(MIN_REFRESH_GAP.saturating_sub(settled.elapsed()));
    };
    let v2_entry = v2.display().to_string();
    let mut rollbacks = vec![change("builtin", "0.0.0")];
    let mut releases = Vec::new();
    for _ in 0..ROUNDS {
        settle();
        releases.push(change(&v2_entry, "2.0.0"));
        settle();
        rollbacks.push(change("builtin", "0.0.0"));
    }
    eprintln!("rounds done at {:?}", started.elapsed());
    let ms = |d: Duration| d.as_millis();
    eprintln!(
        "rollback through nginx over {} rollbacks: p50 {} ms, p99 {} ms; release: p50 {} ms, p99 {} ms",
        rollbacks.len(),
        ms(percentile(&rollbacks, 0.5)),
        ms(percentile(&rollbacks, 0.99)),
        ms(percentile(&releases, 0.5)),
        ms(percentile(&releases, 0.99)),
    );

    // Blobs come from nginx's cache: immutable, content-addressed.
    let blob = || {
        let r = reqwest::blocking::get(format!("{}/v1/blobs/{v2_sha}", nginx.url)).unwrap();
        assert!(r.status().is_success(), "{}", r.status());
        let status = r
            .headers()
            .get("x-cache-status")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_string();
        (status, pack_format::sha256_hex(&r.bytes().unwrap()))
    };
    let (first, second) = (blob(), blob());
    eprintln!("blob through nginx: {} then {}", first.0, second.0);

    // A plain refresh right after a release sees it, however often the channel document
    // went through nginx before.
    let other = tempfile::tempdir().unwrap();
    let refresh = || {
        let mut cmd = client_cmd(other.path(), &config, "1.0.0");
        cmd.arg("refresh");
        run(cmd);
        served(other.path(), &config)
    };
    assert_eq!(refresh(), "0.0.0");
    for _ in 0..3 {
        let r = reqwest::blocking::get(format!("{}/v1/channels/stable", nginx.url)).unwrap();
        assert!(r.status().is_success(), "{}", r.status());
    }
    publish(&publisher, &packd, &v1.display().to_string());
    let refreshed = refresh();

    // The same cache after an app upgrade, through the proxy: the channel pins 1.0.0 for
    // the 1.x releases only, so 3.0.0 serves the built-in pack however the proxy answers
    // its conditional GET, and its 1.x neighbour still serves 1.0.0.
    packd.publish(
        &publisher,
        &publisher.sign(&[format!(">=1.0.0, <2.0.0={}", v1.display())], "30d"),
    );
    let as_release = |release: &str, command: &str| {
        let mut cmd = client_cmd(other.path(), &config, release);
        cmd.args(["--json", command]);
        serde_json::from_str::<serde_json::Value>(&run(cmd)).unwrap()
    };
    assert_eq!(
        as_release("1.0.0", "refresh")["outcome"]["outcome"],
        "unchanged"
    );
    let upgraded: Vec<serde_json::Value> = (0..2)
        .map(|_| as_release("3.0.0", "refresh")["status"]["serving"]["source"].clone())
        .collect();
    let upgraded_start = as_release("3.0.0", "dump")["meta"]["source"].clone();
    let neighbour = served(other.path(), &config);

    eprintln!("the test took {:?}", started.elapsed());
    let log = nginx.access_log();
    assert!(
        percentile(&rollbacks, 0.99) < Duration::from_secs(2),
        "{rollbacks:?}"
    );
    assert!(
        percentile(&releases, 0.99) < Duration::from_secs(2),
        "{releases:?}"
    );
    assert_eq!(
        second.0, "HIT",
        "the blob's second GET through nginx\n{log}"
    );
    assert_eq!(first.1, v2_sha);
    assert_eq!(second.1, v2_sha);
    assert_eq!(refreshed, "1.0.0", "a refresh right after a release\n{log}");
    assert_eq!(
        upgraded,
        ["builtin", "builtin"],
        "an upgraded release\n{log}"
    );
    assert_eq!(upgraded_start, "builtin");
    assert_eq!(neighbour, "1.0.0");
}
