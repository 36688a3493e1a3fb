//! Watching the channel, with real processes: a release and a rollback reach a running
//! `pack-client run` and an interactive agent session within seconds; a pin, `auto_update =
//! false` and `watch = false` are respected; a hostile server that answers at once, forever,
//! gets a backoff and not a spin.

#![allow(clippy::print_stderr)] // tests report what they measured

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use promptpack_tests::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// A child process, killed when dropped.
struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
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

/// The version and source the cache serves, as a fresh process loads it.
fn served(cache: &Path, config: &Path) -> (String, String) {
    let (version, source, _) = dump(cache, config, "1.0.0");
    (version, source)
}

/// A packd with `version` released to every client, and a publisher to release more.
fn released(version: &str) -> (Publisher, tempfile::TempDir, Packd) {
    let publisher = Publisher::new();
    let data = tempfile::tempdir().unwrap();
    let packd = Packd::start(data.path(), &publisher.server_config());
    release(&publisher, &packd, version);
    (publisher, data, packd)
}

fn release(publisher: &Publisher, packd: &Packd, version: &str) {
    let pack = publisher.build(version, &format!("WATCHED-{version}"));
    packd.upload(publisher, &pack);
    packd.publish(
        publisher,
        &publisher.sign(&[format!("*={}", pack.display())], "30d"),
    );
}

#[test]
fn a_release_and_a_rollback_reach_a_watching_pack_client_run_within_seconds() {
    let (publisher, _data, packd) = released("1.0.0");
    let config = publisher.client_config(&packd.url, "");
    let cache = tempfile::tempdir().unwrap();
    let _run = pack_client_run(cache.path(), &config);
    // The start-up refresh installs what is live, then the watch holds.
    until_served(cache.path(), &config, "1.0.0", Duration::from_secs(30));
    packd.until_watching(1.0);

    release(&publisher, &packd, "2.0.0");
    let took = until_served(cache.path(), &config, "2.0.0", Duration::from_secs(10));
    eprintln!("release reached pack-client run in {} ms", took.as_millis());
    assert!(took < Duration::from_secs(5), "{took:?}");

    packd.until_watching(1.0);
    packd.publish(
        &publisher,
        &publisher.sign(&["*=builtin".to_string()], "30d"),
    );
    let took = until_served(cache.path(), &config, "0.0.0", Duration::from_secs(10));
    eprintln!(
        "rollback reached pack-client run in {} ms",
        took.as_millis()
    );
    assert!(took < Duration::from_secs(5), "{took:?}");
    assert_eq!(served(cache.path(), &config).1, "builtin");
}

/// A pinned client watches, and the refresh a change starts keeps the pin; it does not act
/// on the same change again and again.
#[test]
fn a_pinned_client_keeps_its_pin_and_does_not_refresh_in_a_loop() {
    let (publisher, _data, packd) = released("1.0.0");
    let config = publisher.client_config(&packd.url, "pin = \"1.0.0\"\n");
    let cache = tempfile::tempdir().unwrap();
    let _run = pack_client_run(cache.path(), &config);
    until_served(cache.path(), &config, "1.0.0", Duration::from_secs(30));
    packd.until_watching(1.0);
    let fetches = packd.metric("packd_channel_fetches_total", "");
    let watches = packd.watch_requests();

    release(&publisher, &packd, "2.0.0");
    // First the sign that the client acted on the change (its refresh fetched the channel),
    // then that it watches again; only then is "still 1.0.0" worth anything.
    let deadline = Instant::now() + Duration::from_secs(30);
    while packd.metric("packd_channel_fetches_total", "") <= fetches {
        assert!(Instant::now() < deadline, "the client never refreshed");
        std::thread::sleep(Duration::from_millis(50));
    }
    packd.until_watching(1.0);
    assert_eq!(served(cache.path(), &config).0, "1.0.0");
    let fetched = packd.metric("packd_channel_fetches_total", "") - fetches;
    let watched = packd.watch_requests() - watches;
    assert!(
        fetched <= 3.0,
        "{fetched} channel fetches after one release"
    );
    assert!(
        watched <= 2.0,
        "{watched} watches answered after one release"
    );
}

/// `auto_update = false` and `watch = false` start no watch.
#[test]
fn no_watch_with_auto_update_off_or_watch_off() {
    let (publisher, _data, packd) = released("1.0.0");
    for extra in ["auto_update = false\n", "watch = false\n"] {
        let config = publisher.client_config(&packd.url, extra);
        let cache = tempfile::tempdir().unwrap();
        // The sign of life: the process says its schedule runs, and whether it watches.
        let mut cmd = client_cmd(cache.path(), &config, "1.0.0");
        cmd.args(["--json", "run"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        let mut child = cmd.spawn().unwrap();
        let stderr = std::io::BufReader::new(child.stderr.take().unwrap());
        let mut run = Running(child);
        // Read to the end, so the process never writes into a closed pipe.
        let (send, events) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in std::io::BufRead::lines(stderr).map_while(Result::ok) {
                if let Ok(event) = serde_json::from_str::<serde_json::Value>(&line) {
                    let _ = send.send(event);
                }
            }
        });
        let scheduled = loop {
            let event = events
                .recv_timeout(Duration::from_secs(30))
                .expect("pack-client run never said its schedule runs");
            if event["event"] == "scheduled" {
                break event;
            }
        };
        assert_eq!(scheduled["watching"], false, "{extra}");
        // Alive and scheduled (the sign of life above), and nothing watches.
        assert!(
            run.0.try_wait().unwrap().is_none(),
            "pack-client run exited"
        );
        assert_eq!(packd.metric("packd_watchers", ""), 0.0, "{extra}");
        assert_eq!(packd.watch_requests(), 0.0, "{extra}");
        drop(run);
    }
}

/// A server that answers every request at once, with what `answer` says for the request's
/// path; it records each request's path and when it came.
struct Hostile {
    url: String,
    seen: Arc<Mutex<Vec<(Instant, String)>>>,
    _runtime: tokio::runtime::Runtime,
}

impl Hostile {
    fn start(answer: fn(&str) -> String) -> Hostile {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let listener = runtime
            .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
            .unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let seen = Arc::new(Mutex::new(Vec::new()));
        let log = seen.clone();
        runtime.spawn(async move {
            while let Ok((mut socket, _)) = listener.accept().await {
                let log = log.clone();
                tokio::spawn(async move {
                    let mut head = Vec::new();
                    let mut buf = [0u8; 2048];
                    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                        match socket.read(&mut buf).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => head.extend_from_slice(&buf[..n]),
                        }
                    }
                    let text = String::from_utf8_lossy(&head).into_owned();
                    let path = text.split_whitespace().nth(1).unwrap_or("/").to_string();
                    log.lock().unwrap().push((Instant::now(), path.clone()));
                    let _ = socket.write_all(answer(&path).as_bytes()).await;
                    let _ = socket.shutdown().await;
                });
            }
        });
        Hostile {
            url,
            seen,
            _runtime: runtime,
        }
    }
}

/// How `watch_once` reads what a server answers: the loop's reaction to each answer (the
/// backoff, the Retry-After, the pause for a server that does not watch) is tested on a
/// paused clock in `client/src/watch.rs`; this is the same answer over real HTTP.
#[test]
fn each_kind_of_watch_answer_is_read_from_the_wire() {
    use pack_client::watch::{Answer, Held, watch_once};
    type Answering = fn(&str) -> String;
    let cases: [(Answering, &str); 4] = [
        (
            |_| {
                "HTTP/1.1 304 Not Modified\r\nETag: \"x\"\r\nX-Promptpack-Wait: 50\r\nConnection: close\r\n\r\n".to_string()
            },
            "held",
        ),
        (
            // A plain 304, without X-Promptpack-Wait: an older packd, or a CDN in front.
            |_| "HTTP/1.1 304 Not Modified\r\nETag: \"x\"\r\nConnection: close\r\n\r\n".to_string(),
            "unsupported",
        ),
        (
            |_| {
                "HTTP/1.1 200 OK\r\nETag: \"y\"\r\nX-Promptpack-Sequence: 9\r\nX-Promptpack-Wait: 50\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}".to_string()
            },
            "changed",
        ),
        (
            |_| {
                "HTTP/1.1 503 Service Unavailable\r\nRetry-After: 3\r\nContent-Length: 0\r\nConnection: close\r\n\r\n".to_string()
            },
            "retry",
        ),
    ];
    let publisher = Publisher::new();
    for (answer, kind) in cases {
        let hostile = Hostile::start(answer);
        let cache = tempfile::tempdir().unwrap();
        let config = pack_client::ClientConfig::load(
            &publisher.client_config(&hostile.url, ""),
            cache.path().to_path_buf(),
            "1.0.0".parse().unwrap(),
        )
        .unwrap();
        let client = pack_client::Client::new(config).unwrap();
        let held = Held {
            etag: "\"x\"".to_string(),
            sequence: 3,
        };
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let got = runtime.block_on(watch_once(&client, &held, Duration::from_secs(50)));
        match (kind, got) {
            ("held", Ok(Answer::Unchanged { granted })) => {
                assert_eq!(granted, Duration::from_secs(50))
            }
            ("unsupported", Ok(Answer::Unsupported)) => {}
            ("changed", Ok(Answer::Changed { etag, sequence })) => {
                assert_eq!((etag.as_deref(), sequence), (Some("\"y\""), Some(9)))
            }
            ("retry", Err(failure)) => {
                assert_eq!(failure.retry_after, Some(Duration::from_secs(3)))
            }
            (kind, other) => panic!("{kind}: {other:?}"),
        }
        // The request said what it holds, in the URL and in If-None-Match.
        let seen = hostile.seen.lock().unwrap();
        assert!(
            seen[0].1.contains("wait=50") && seen[0].1.contains("after=3"),
            "{seen:?}"
        );
    }
}

/// Drives `agent` on a pty. Steps are `[send, expect]`, `["timed", expect]` (wait for the
/// text and print on stderr how long that took), or `["signal", text]` (print `text` on
/// stderr and go on: the test waits for it before changing the channel).
const DRIVER: &str = r#"
import json, os, pty, select, sys, time
steps = json.loads(sys.argv[1])
pid, fd = pty.fork()
if pid == 0:
    os.execv(sys.argv[2], [sys.argv[2]])
seen = b""
ended = False
def read_some(seconds):
    # Returns as soon as something was read, or after `seconds`.
    global seen, ended
    ready, _, _ = select.select([fd], [], [], seconds)
    if ready:
        try:
            chunk = os.read(fd, 4096)
        except OSError:
            chunk = b""
        if not chunk:
            ended = True
        seen += chunk
def wait_for(needle, timeout):
    start = len(seen)
    deadline = time.time() + timeout
    while needle.encode() not in seen[start:]:
        if ended or time.time() > deadline:
            sys.stdout.write(seen.decode(errors="replace"))
            sys.exit("the program ended" if ended else "timed out waiting for %r" % needle)
        read_some(0.1)
for step in steps:
    if step[0] == "signal":
        sys.stderr.write(step[1] + "\n")
        sys.stderr.flush()
    elif step[0] == "timed":
        started = time.time()
        wait_for(step[1], 20)
        sys.stderr.write("took %d ms\n" % ((time.time() - started) * 1000))
        sys.stderr.flush()
    else:
        if step[0]:
            os.write(fd, step[0].encode())
        if step[1]:
            wait_for(step[1], 30)
_, status = os.waitpid(pid, 0)
sys.stdout.write(seen.decode(errors="replace"))
sys.exit(os.waitstatus_to_exitcode(status))
"#;

/// An interactive session follows the channel: a rollback published while it runs is
/// announced above the prompt and is what `/packs` shows within seconds, with no one running
/// `agent packs refresh`.
#[test]
fn a_rollback_reaches_a_watching_interactive_session_within_seconds() {
    let (publisher, _data, packd) = released("3.1.0");
    let home = tempfile::tempdir().unwrap();
    let config = std::fs::read_to_string(publisher.client_config(&packd.url, "")).unwrap();
    std::fs::write(home.path().join("config.toml"), config).unwrap();
    let agent = bin("agent", "agent");
    let mut refresh = Command::new(&agent);
    refresh
        .args(["packs", "refresh"])
        .env("AGENT_HOME", home.path());
    run(refresh);

    let steps = serde_json::json!([
        ["", "pack builtin 3.1.0 (remote)"],
        ["signal", "WATCHING"],
        ["timed", "pack now builtin 0.0.0 (builtin)"],
        ["/packs\r", "serving: builtin 0.0.0 (builtin)"],
        ["/exit\r", "saved"],
    ]);
    let work = tempfile::tempdir().unwrap();
    let mut driver = Command::new("python3")
        .arg("-c")
        .arg(DRIVER)
        .arg(steps.to_string())
        .arg(&agent)
        .current_dir(work.path())
        .env("AGENT_HOME", home.path())
        .env("TERM", "xterm")
        .env_remove("AGENT_BASE_URL")
        .env_remove("AGENT_MODEL")
        .env_remove("AGENT_API")
        .env_remove("AGENT_API_KEY")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stderr = BufReader::new(driver.stderr.take().unwrap()).lines();
    let mut line = || match stderr.next() {
        Some(Ok(line)) => line,
        _ => panic!("the pty driver ended before the session was watching"),
    };
    loop {
        let next = line();
        if next == "WATCHING" {
            break;
        }
        eprintln!("driver: {next}");
    }
    packd.until_watching(1.0);
    packd.publish(
        &publisher,
        &publisher.sign(&["*=builtin".to_string()], "30d"),
    );
    let published = Instant::now();
    let took = line();
    let elapsed = published.elapsed();
    let rest: Vec<String> = stderr.map_while(Result::ok).collect();
    let out = driver.wait_with_output().unwrap();
    let screen = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{took} {:?} {rest:?}\n---\n{screen}",
        out.status,
    );
    eprintln!("rollback reached the session: {took} after the publish returned");
    assert!(elapsed < Duration::from_secs(5), "{elapsed:?}\n{screen}");
}
