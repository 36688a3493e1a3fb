//! What a client serves when its release changes under a cache it keeps: an app upgrade or
//! downgrade, two installed releases sharing one cache, and the same through `agent`, whose
//! release is compiled in. Every step runs the release's own process (`pack-client` with
//! `--client-version`), so what serves at start-up is tested, not only what a refresh does.

use std::path::Path;
use std::process::Command;

use promptpack_tests::*;

/// A packd, a publisher, and one cache and config for `pack-client`.
struct World {
    publisher: Publisher,
    _data: tempfile::TempDir,
    packd: Packd,
    cache: tempfile::TempDir,
    config: std::path::PathBuf,
}

fn world() -> World {
    let publisher = Publisher::new();
    let data = tempfile::tempdir().unwrap();
    let packd = Packd::start(data.path(), &publisher.server_config());
    let config = publisher.client_config(&packd.url, "");
    World {
        publisher,
        _data: data,
        packd,
        cache: tempfile::tempdir().unwrap(),
        config,
    }
}

impl World {
    /// Builds, uploads and returns the path of a pack of `version`.
    fn pack(&self, version: &str) -> std::path::PathBuf {
        let pack = self.publisher.build(version, &format!("MARKER-{version}"));
        self.packd.upload(&self.publisher, &pack);
        pack
    }

    fn release(&self, entries: &[String]) {
        self.packd
            .publish(&self.publisher, &self.publisher.sign(entries, "30d"));
    }

    /// `pack-client refresh --json` as `release`: the outcome's tag.
    fn refresh(&self, release: &str) -> String {
        let mut cmd = client_cmd(self.cache.path(), &self.config, release);
        cmd.args(["--json", "refresh"]);
        let out: serde_json::Value = serde_json::from_str(&run(cmd)).unwrap();
        out["outcome"]["outcome"].as_str().unwrap().to_string()
    }

    /// What a fresh `release` process serves at start-up: (version, source).
    fn serves(&self, release: &str) -> (String, String) {
        let (version, source, _) = dump(self.cache.path(), &self.config, release);
        (version, source)
    }

    fn status(&self, release: &str) -> serde_json::Value {
        let mut cmd = client_cmd(self.cache.path(), &self.config, release);
        cmd.args(["--json", "status"]);
        serde_json::from_str(&run(cmd)).unwrap()
    }

    fn state(&self) -> String {
        std::fs::read_to_string(self.cache.path().join("state.json")).unwrap()
    }

    fn cached_packs(&self) -> usize {
        std::fs::read_dir(self.cache.path().join("packs"))
            .unwrap()
            .count()
    }
}

fn remote(version: &str) -> (String, String) {
    (version.to_string(), "remote".to_string())
}

fn builtin() -> (String, String) {
    ("0.0.0".to_string(), "builtin".to_string())
}

#[test]
fn an_upgrade_past_the_pinned_range_serves_the_builtin_pack_at_start_and_after_a_304() {
    let w = world();
    let one = w.pack("1.0.0");
    w.release(&[format!(">=1.0.0, <2.0.0={}", one.display())]);
    assert_eq!(w.refresh("1.0.0"), "installed");
    assert_eq!(w.serves("1.0.0"), remote("1.0.0"));

    // The app is upgraded: the channel says nothing for 3.0.0.
    assert_eq!(w.serves("3.0.0"), builtin());
    let status = w.status("3.0.0");
    assert_eq!(status["release"], "3.0.0");
    assert!(
        status["serving_reason"]
            .as_str()
            .is_some_and(|r| r.contains("no entry of channel sequence 1 matches release 3.0.0")),
        "{status}"
    );
    // The same document again (a 304): still the built-in pack, and the process says so.
    assert_eq!(w.refresh("3.0.0"), "not_modified");
    assert_eq!(w.serves("3.0.0"), builtin());
    // Without --json a person reads sentences, not JSON.
    let mut cmd = client_cmd(w.cache.path(), &w.config, "3.0.0");
    cmd.arg("refresh");
    let said = run(cmd);
    let lines: Vec<&str> = said.lines().collect();
    assert_eq!(lines.len(), 2, "{said}");
    assert_eq!(lines[0], "The channel has not changed.");
    assert!(
        lines[1].starts_with("Serving builtin 0.0.0 (builtin, sha256 ") && lines[1].ends_with(")."),
        "{said}"
    );
}

#[test]
fn a_downgrade_serves_the_pack_of_the_older_release_again_without_a_download() {
    let w = world();
    let one = w.pack("1.0.0");
    w.release(&[format!(">=1.0.0, <2.0.0={}", one.display())]);
    assert_eq!(w.refresh("1.0.0"), "installed");
    assert_eq!(w.serves("3.0.0"), builtin());
    assert_eq!(w.refresh("3.0.0"), "not_modified");
    // Back to 1.0.0 with packd gone: the pack is still in the cache and still vouched for.
    let mut w = w;
    w.packd.stop();
    assert_eq!(w.serves("1.0.0"), remote("1.0.0"));
}

#[test]
fn an_upgrade_into_another_entry_installs_that_entry_on_the_next_refresh_even_after_a_304() {
    let w = world();
    let one = w.pack("1.0.0");
    let two = w.pack("2.0.0");
    w.release(&[
        format!(">=1.0.0, <2.0.0={}", one.display()),
        format!(">=2.0.0={}", two.display()),
    ]);
    assert_eq!(w.refresh("1.0.0"), "installed");

    // Upgraded to 2.1.0: its pack is not in the cache yet, so the built-in one serves (never
    // the 1.x pack), and the process says a refresh will install it.
    assert_eq!(w.serves("2.1.0"), builtin());
    let reason = w.status("2.1.0")["serving_reason"].to_string();
    assert!(reason.contains("selects pack 2.0.0"), "{reason}");
    // The document has not changed, yet the refresh installs 2.0.0 for this release.
    assert_eq!(w.refresh("2.1.0"), "installed");
    assert_eq!(w.serves("2.1.0"), remote("2.0.0"));
}

#[test]
fn two_releases_sharing_a_cache_each_serve_their_own_pack_and_do_not_undo_each_other() {
    let w = world();
    let one = w.pack("1.0.0");
    let two = w.pack("2.0.0");
    w.release(&[
        format!(">=1.0.0, <2.0.0={}", one.display()),
        format!(">=2.0.0, <3.0.0={}", two.display()),
    ]);
    assert_eq!(w.refresh("1.0.0"), "installed");
    assert_eq!(w.refresh("2.0.0"), "installed");
    assert_eq!(w.cached_packs(), 2, "both packs stay in the cache");
    let settled = w.state();

    // Alternating refreshes of the two releases: nothing is downloaded again, and the
    // shared state changes only in its check times.
    for _ in 0..3 {
        assert_eq!(w.refresh("1.0.0"), "not_modified");
        assert_eq!(w.refresh("2.0.0"), "not_modified");
        assert_eq!(w.refresh("3.5.0"), "not_modified");
    }
    let without_times = |state: &str| {
        let mut value: serde_json::Value = serde_json::from_str(state).unwrap();
        value["last_check"] = serde_json::Value::Null;
        value["last_success"] = serde_json::Value::Null;
        value
    };
    assert_eq!(without_times(&w.state()), without_times(&settled));
    assert_eq!(w.serves("1.0.0"), remote("1.0.0"));
    assert_eq!(w.serves("2.0.0"), remote("2.0.0"));
    assert_eq!(w.serves("3.5.0"), builtin());

    // A new document for both: each release moves to its own new pack, and the packs no
    // entry names any more leave the cache.
    let one_one = w.pack("1.1.0");
    w.release(&[
        format!(">=1.0.0, <2.0.0={}", one_one.display()),
        format!(">=2.0.0, <3.0.0={}", two.display()),
    ]);
    assert_eq!(w.refresh("2.0.0"), "unchanged");
    assert_eq!(w.serves("1.0.0"), builtin(), "1.1.0 is not downloaded yet");
    assert_eq!(w.refresh("1.0.0"), "installed");
    assert_eq!(w.serves("1.0.0"), remote("1.1.0"));
    assert_eq!(w.serves("2.0.0"), remote("2.0.0"));
    assert_eq!(w.cached_packs(), 2, "1.0.0 is gone, 1.1.0 and 2.0.0 stay");
}

#[test]
fn two_running_releases_on_one_cache_follow_their_own_entries_through_a_release() {
    let w = world();
    let one = w.pack("1.0.0");
    let two = w.pack("2.0.0");
    w.release(&[
        format!(">=1.0.0, <2.0.0={}", one.display()),
        format!(">=2.0.0={}", two.display()),
    ]);
    // Both long-running, both watching the same cache.
    let old = EventLog::start(&w, "1.2.0");
    let mut new = EventLog::start(&w, "2.2.0");
    let settle = |release: &str, want: (String, String)| {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        loop {
            let now = w.serves(release);
            if now == want {
                return;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "{release} serves {now:?}, expected {want:?}"
            );
            std::thread::sleep(std::time::Duration::from_millis(200));
        }
    };
    settle("1.2.0", remote("1.0.0"));
    settle("2.2.0", remote("2.0.0"));
    // Roll the 2.x releases back to the built-in pack; 1.x keeps its pack.
    w.release(&[
        format!(">=1.0.0, <2.0.0={}", one.display()),
        ">=2.0.0=builtin".to_string(),
    ]);
    settle("2.2.0", builtin());
    // The 1.x process acted on the rollback too: it recorded what sequence 2 gives its
    // release. Only then is "still 1.0.0" worth anything.
    let given = |release: &str| {
        let record = std::fs::read_to_string(w.cache.path().join("refreshes.json")).unwrap();
        let record: serde_json::Value = serde_json::from_str(&record).unwrap();
        record["releases"][release]["sequence"].as_u64()
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while given("1.2.0") != Some(2) {
        assert!(
            std::time::Instant::now() < deadline,
            "the 1.x process never acted on sequence 2: {:?}",
            given("1.2.0")
        );
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    assert_eq!(w.serves("1.2.0"), remote("1.0.0"));
    // The 2.x runner logs its own fall-back. The cache may say "built-in" for 2.x before
    // that line: the 1.x process can store sequence 2 first, and the 2.x process adopts it a
    // moment later. So the line is waited for, not raced with the kill.
    drop(old);
    new.expect("fell_back");
}

/// A child process killed when dropped.
struct Killed(Option<std::process::Child>);

impl Drop for Killed {
    fn drop(&mut self) {
        if let Some(child) = &mut self.0 {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

fn agent(home: &Path) -> Command {
    let mut cmd = Command::new(bin("agent", "agent"));
    cmd.env("AGENT_HOME", home).env_remove("AGENT_BASE_URL");
    cmd
}

/// `agent`'s release is compiled in (the workspace version): what the channel gives it is
/// decided by that release, also when another release's process filled the cache.
#[test]
fn the_agent_serves_what_its_compiled_in_release_selects_from_a_shared_cache() {
    let w = world();
    let agent_release: semver::Version = env!("CARGO_PKG_VERSION").parse().unwrap();
    let older = format!("<{agent_release}");
    let own = format!(">={agent_release}");
    let old_pack = w.pack("5.0.0");
    w.release(&[format!("{older}={}", old_pack.display())]);

    // An older release filled the agent's cache.
    let home = tempfile::tempdir().unwrap();
    let config = std::fs::read_to_string(&w.config).unwrap() + "auto_update = false\n";
    std::fs::write(home.path().join("config.toml"), config).unwrap();
    let cache = home.path().join("packs");
    let mut cmd = client_cmd(&cache, &w.config, "0.0.1");
    cmd.arg("refresh");
    run(cmd);

    let status = |home: &Path| -> serde_json::Value {
        let mut cmd = agent(home);
        cmd.args(["packs", "status", "--json"]);
        serde_json::from_str(&run(cmd)).unwrap()
    };
    let now = status(home.path());
    assert_eq!(now["serving"]["source"], "builtin", "{now}");
    assert_eq!(now["release"], agent_release.to_string());

    // The channel gains an entry for the agent's release: its refresh installs it, and
    // the older release still serves its own from the same cache.
    let own_pack = w.pack("6.0.0");
    w.release(&[
        format!("{older}={}", old_pack.display()),
        format!("{own}={}", own_pack.display()),
    ]);
    let mut cmd = agent(home.path());
    cmd.args(["packs", "refresh"]);
    let out = run(cmd);
    assert!(out.starts_with("Installed builtin 6.0.0"), "{out}");
    assert_eq!(status(home.path())["serving"]["version"], "6.0.0");
    let (version, source, _) = dump(&cache, &w.config, "0.0.1");
    assert_eq!((version, source), remote("5.0.0"));
}

/// `pack-client run --json`'s stderr, one JSON object per line, read as it comes.
struct EventLog {
    _child: Killed,
    lines: std::sync::mpsc::Receiver<serde_json::Value>,
    seen: Vec<serde_json::Value>,
}

impl EventLog {
    fn start(w: &World, release: &str) -> Self {
        let mut cmd = client_cmd(w.cache.path(), &w.config, release);
        cmd.args(["--json", "run"])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped());
        let mut child = cmd.spawn().unwrap();
        let stderr = child.stderr.take().unwrap();
        let (send, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            use std::io::BufRead as _;
            for line in std::io::BufReader::new(stderr).lines() {
                let Ok(line) = line else { break };
                let value = serde_json::from_str(&line)
                    .unwrap_or_else(|_| panic!("a log line that is not JSON: {line}"));
                if send.send(value).is_err() {
                    break;
                }
            }
        });
        EventLog {
            _child: Killed(Some(child)),
            lines,
            seen: Vec::new(),
        }
    }

    /// Waits for the next event named `event`, returning it.
    fn expect(&mut self, event: &str) -> serde_json::Value {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            let line = self
                .lines
                .recv_timeout(left)
                .unwrap_or_else(|_| panic!("no {event} event; logged: {:?}", self.seen));
            self.seen.push(line.clone());
            assert!(line["at"].is_string(), "{line}");
            if line["event"] == event {
                return line;
            }
        }
    }
}

#[test]
fn run_logs_one_line_per_event_through_a_release_an_outage_and_a_rollback() {
    let mut w = world();
    let one = w.pack("1.0.0");
    let two = w.pack("2.0.0");
    w.release(&[format!("*={}", one.display())]);
    let mut log = EventLog::start(&w, "1.0.0");
    assert_eq!(log.expect("serving")["source"], "builtin");
    assert_eq!(log.expect("installed")["version"], "1.0.0");
    log.expect("watching");

    w.release(&[format!("*={}", two.display())]);
    assert_eq!(log.expect("installed")["version"], "2.0.0");

    // An outage: the watch says it lost the server, and when it is back, that it watches.
    w.packd.stop();
    let lost = log.expect("reconnecting");
    assert!(lost["retry_in_ms"].as_u64().is_some(), "{lost}");
    w.packd.restart();
    log.expect("watching");

    // A rollback to the older pack, then to the built-in one.
    w.release(&[format!("*={}", one.display())]);
    let back = log.expect("rolled_back");
    assert_eq!(
        (back["version"].as_str(), back["from"].as_str()),
        (Some("1.0.0"), Some("2.0.0"))
    );
    w.release(&["*=builtin".to_string()]);
    log.expect("fell_back");
}

/// A process that holds the cache's refresh lock for good (a `pack-client refresh` suspended
/// with Ctrl-Z) costs another refresh its deadline, not a hang; the status says why.
#[test]
fn a_refresh_lock_held_for_good_fails_the_refresh_at_its_deadline() {
    let w = world();
    let one = w.pack("1.0.0");
    w.release(&[format!("*={}", one.display())]);
    assert_eq!(w.refresh("1.0.0"), "installed");
    let config = w
        .publisher
        .client_config(&w.packd.url, "deadline_secs = 2\n");
    // util-linux's flock(1) takes the same lock (flock(2)) the client takes.
    let holder = Killed(Some(
        Command::new("flock")
            .arg(w.cache.path().join("refresh.lock"))
            .args(["sleep", "60"])
            .spawn()
            .expect("flock(1) from util-linux"),
    ));
    // Wait until the lock is taken.
    let started = std::time::Instant::now();
    while Command::new("flock")
        .args(["-n"])
        .arg(w.cache.path().join("refresh.lock"))
        .arg("true")
        .status()
        .unwrap()
        .success()
    {
        assert!(
            started.elapsed().as_secs() < 10,
            "flock never took the lock"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let began = std::time::Instant::now();
    let mut cmd = client_cmd(w.cache.path(), &config, "1.0.0");
    cmd.arg("refresh");
    let out = cmd.output().unwrap();
    let took = began.elapsed();
    assert_eq!(out.status.code(), Some(3));
    assert!(
        took >= std::time::Duration::from_secs(2) && took < std::time::Duration::from_secs(10),
        "{took:?}"
    );
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(said.contains("held its refresh lock"), "{said}");
    drop(holder);
    let status = w.status("1.0.0");
    assert_eq!(status["last_failure"]["kind"], "busy", "{status}");
    assert_eq!(status["serving"]["version"], "1.0.0");
}
