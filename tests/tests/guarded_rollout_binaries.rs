//! A guarded rollout through the binaries: `packer release --ramp` signs a schedule once and
//! installed `pack-client`s widen along it with no new document; packd's guard freezes a
//! ramp whose pack regresses; `packer release --resume` with the offline key continues it.
//!
//! The installs read their clock from `PROMPTPACK_TEST_NOW` (a hook of debug builds of
//! `pack-client`), so the ramp's growth is seen by moving their clock forward, not by
//! waiting for it.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use pack_protocol::{OutcomeCounts, OutcomeReport, headers, paths};
use promptpack_tests::*;
use time::OffsetDateTime;

const INSTALLS: usize = 40;
const RANGE: &str = ">=0.1.0, <0.2.0";

struct World {
    publisher: Publisher,
    packd: Packd,
    _data: tempfile::TempDir,
    config: PathBuf,
    caches: tempfile::TempDir,
    client_config: PathBuf,
}

fn packd_config(publisher: &Publisher, guard: bool) -> String {
    let hash = pack_format::sha256_hex(publisher.token.as_bytes());
    let mut text = format!(
        "publisher_keys = [{:?}]\n\n[[tokens]]\nname = \"release-ci\"\nsha256 = \"{hash}\"\nscopes = [\"publish\"]\n\n\
         [fleet]\nreports_per_install_per_hour = 100000\nreports_per_second = 100000\n",
        publisher.keys().join("signing.pub").display().to_string()
    );
    if guard {
        text.push_str(&format!(
            "\n[guard]\nkey = {:?}\ninterval_secs = 1\nmin_installs = 20\n",
            publisher.keys().join("guard.key").display().to_string()
        ));
    }
    text
}

impl World {
    fn new() -> World {
        let publisher = Publisher::new();
        let mut keygen = packer();
        keygen
            .args(["keygen", "--guard", "--dir"])
            .arg(publisher.keys());
        run(keygen);
        let config = publisher.dir.path().join("packd-guard.toml");
        std::fs::write(&config, packd_config(&publisher, true)).unwrap();
        let data = tempfile::tempdir().unwrap();
        let packd = Packd::start(data.path(), &config);
        let client_config = publisher.client_config(&packd.url, "");
        World {
            publisher,
            packd,
            _data: data,
            config,
            caches: tempfile::tempdir().unwrap(),
            client_config,
        }
    }

    fn packer(&self, args: &[&str]) -> String {
        let mut cmd = packer();
        cmd.args(args)
            .args(["--server", &self.packd.url])
            .env("PROMPTPACK_TOKEN", &self.publisher.token);
        run(cmd)
    }

    fn release(&self, args: &[&str]) {
        let mut cmd = packer();
        cmd.args(["release", "stable", "--server", &self.packd.url, "--keys"])
            .arg(self.publisher.keys())
            .args(args)
            .arg("--yes")
            .env("PROMPTPACK_TOKEN", &self.publisher.token);
        run(cmd);
    }

    fn publish(&self, version: &str) -> String {
        let path = self.publisher.build(version, &format!("RAMP-{version}"));
        let mut cmd = packer();
        cmd.arg("publish")
            .arg(&path)
            .args(["--server", &self.packd.url])
            .env("PROMPTPACK_TOKEN", &self.publisher.token);
        run(cmd);
        pack_format::sha256_hex(&std::fs::read(path).unwrap())
    }

    fn cache(&self, i: usize) -> PathBuf {
        self.caches.path().join(format!("install-{i}"))
    }

    /// Every install refreshes (four at a time) with its clock at `now`; what each serves and
    /// the sequence it holds.
    fn refresh_all(&self, now: OffsetDateTime) -> Vec<(String, u64)> {
        let mut found = vec![(String::new(), 0); INSTALLS];
        std::thread::scope(|scope| {
            for (lane, slots) in found.chunks_mut(INSTALLS / 4).enumerate() {
                scope.spawn(move || {
                    for (k, slot) in slots.iter_mut().enumerate() {
                        let cache = self.cache(lane * (INSTALLS / 4) + k);
                        *slot = refresh(&cache, &self.client_config, now);
                    }
                });
            }
        });
        found
    }

    /// Outcome reports from `installs` simulated agents on the pack `sha256` (`version`):
    /// `calls` tool calls each, `errors` of them failed.
    fn report(&self, sha256: &str, version: &str, installs: usize, calls: u64, errors: u64) {
        let http = reqwest::blocking::Client::new();
        let day = time::OffsetDateTime::now_utc().date().to_string();
        for i in 0..installs {
            let counts = OutcomeCounts {
                turns: calls,
                tool_calls: calls,
                tool_errors: errors,
                ..OutcomeCounts::default()
            };
            let report = OutcomeReport {
                channel: "stable".to_string(),
                day: day.clone(),
                pack: sha256.to_string(),
                pack_name: "builtin".to_string(),
                pack_version: version.parse().unwrap(),
                client_version: "0.1.5".parse().unwrap(),
                counts,
            };
            let hash = pack_protocol::fleet::install_hash(
                &self.packd.url,
                "stable",
                &format!("agent-{version}-{i}"),
            );
            let response = http
                .post(format!("{}{}", self.packd.url, paths::outcomes("stable")))
                .header(headers::INSTALL, hash)
                .json(&report)
                .send()
                .unwrap();
            assert!(response.status().is_success(), "{}", response.status());
        }
    }

    fn guard_view(&self) -> serde_json::Value {
        reqwest::blocking::get(format!("{}{}", self.packd.url, paths::guard("stable")))
            .unwrap()
            .json()
            .unwrap()
    }
}

/// The time `seconds` from now, for a client's clock.
fn in_secs(seconds: i64) -> OffsetDateTime {
    OffsetDateTime::now_utc() + time::Duration::seconds(seconds)
}

/// `pack-client --json refresh` with its clock at `now`: the version served and the
/// sequence held after it.
fn refresh(cache: &Path, config: &Path, now: OffsetDateTime) -> (String, u64) {
    let mut refresh: Command = client_cmd(cache, config, "0.1.5");
    refresh.args(["--json", "refresh"]).env(
        "PROMPTPACK_TEST_NOW",
        now.format(&time::format_description::well_known::Rfc3339)
            .unwrap(),
    );
    let out = refresh.output().unwrap();
    let answer: serde_json::Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
    let status = &answer["status"];
    (
        status["serving"]["version"].as_str().unwrap().to_string(),
        status["sequence"].as_u64().unwrap(),
    )
}

fn on(found: &[(String, u64)], version: &str) -> usize {
    found.iter().filter(|(v, _)| v == version).count()
}

fn sequences(found: &[(String, u64)]) -> Vec<u64> {
    let mut s: Vec<u64> = found.iter().map(|(_, s)| *s).collect();
    s.dedup();
    s
}

#[test]
fn a_ramp_widens_unsigned_the_guard_freezes_it_and_the_offline_key_resumes_it() {
    if !cfg!(debug_assertions) {
        assert!(
            std::env::var_os("CI").is_none(),
            "under CI this test runs against debug builds, whose pack-client reads PROMPTPACK_TEST_NOW"
        );
        skipped("release builds of pack-client have no PROMPTPACK_TEST_NOW");
        return;
    }
    let mut w = World::new();
    w.publish("1.2.0");
    w.release(&[
        "--new-channel",
        "--pack",
        "builtin",
        "--pin",
        &format!("{RANGE}=1.2.0"),
        "--guard-key",
        w.publisher.keys().join("guard.pub").to_str().unwrap(),
    ]);

    // 1. One signature, and the ramp widens on the clients' clocks.
    w.publish("1.3.0");
    w.release(&["--ramp", &format!("{RANGE}=1.3.0@10,100%/12s")]);
    let early = w.refresh_all(OffsetDateTime::now_utc());
    let sequence = sequences(&early);
    assert_eq!(sequence.len(), 1, "{early:?}");
    assert!(on(&early, "1.3.0") < INSTALLS / 2, "{early:?}");
    // Past the end of the 12 s schedule on the installs' clocks.
    let late = w.refresh_all(in_secs(13));
    assert_eq!(on(&late, "1.3.0"), INSTALLS, "{late:?}");
    assert_eq!(sequences(&late), sequence, "nothing was signed in between");

    // 2. A watched ramp of 1.4.0 over 1.3.0; its agents fail a third of their tool calls.
    let sha_13 = pack_format::sha256_hex(
        &std::fs::read(w.publisher.dir.path().join("builtin-1.3.0.pack")).unwrap(),
    );
    let sha_14 = w.publish("1.4.0");
    w.release(&[
        "--pin",
        &format!("{RANGE}=1.3.0"),
        "--ramp",
        &format!("{RANGE}=1.4.0@20%..100%/60s"),
        "--guard-watch",
        "tool_error_rate",
    ]);
    w.report(&sha_13, "1.3.0", 40, 20, 0);
    w.report(&sha_14, "1.4.0", 20, 20, 7);
    let deadline = Instant::now() + Duration::from_secs(30);
    let decision = loop {
        let view = w.guard_view();
        if let Some(decision) = view["decisions"].as_array().and_then(|d| d.first()) {
            break decision.clone();
        }
        assert!(Instant::now() < deadline, "no decision: {view:#}");
        std::thread::sleep(Duration::from_millis(300));
    };
    assert_eq!(decision["action"], "freeze");
    let frozen_at = decision["percent"].as_u64().unwrap();
    assert!((20..40).contains(&frozen_at), "{decision:#}");

    // Clients take the guard's document; the ramp stops growing for them.
    let frozen = w.refresh_all(OffsetDateTime::now_utc());
    let frozen_sequence = sequences(&frozen);
    assert_eq!(
        frozen_sequence,
        vec![decision["sequence"].as_u64().unwrap()],
        "{frozen:?}"
    );
    let status = w.packer(&["status"]);
    // packer status says what the guard saw and why it acted.
    assert!(status.contains("freeze entry 0"), "{status}");
    assert!(status.contains("tool_error_rate "), "{status}");
    let held = w.refresh_all(in_secs(12));
    assert_eq!(on(&held, "1.4.0"), on(&frozen, "1.4.0"), "{held:?}");

    // 3. The operator takes the guard off and resumes with the offline key.
    std::fs::write(&w.config, packd_config(&w.publisher, false)).unwrap();
    w.packd.restart();
    w.release(&["--resume", RANGE]);
    let resumed = w.refresh_all(OffsetDateTime::now_utc());
    assert!(sequences(&resumed)[0] > frozen_sequence[0], "{resumed:?}");
    let grown = w.refresh_all(in_secs(15));
    assert!(
        on(&grown, "1.4.0") > on(&held, "1.4.0"),
        "resumed: {} on 1.4.0, held: {}",
        on(&grown, "1.4.0"),
        on(&held, "1.4.0")
    );
}
