//! Guarded rollouts through a real packd holding the guard key: a fleet of 1,000 simulated
//! installs follows a ramp over a compressed clock (72 hours become two minutes), counts its
//! tool calls per pack and sends them as outcome reports; packd's guard compares the ramping
//! pack with the one it replaces and, on a regression, signs a freeze with the guard key.
//!
//! A pack with twice the tool-error rate is frozen before its ramp passes 10 %; an equal pack
//! and a better one ramp to 100 % untouched; a real client follows the guard's freeze.

use std::path::Path;
use std::time::{Duration, Instant};

use pack_format::{
    ChannelDocument, ChannelEntry, EntryTarget, Guard, PackRef, Ramp, Rollout, SigningKey,
    TrustedKeys, Watch, WatchAction,
};
use pack_protocol::{headers, paths};
use promptpack_tests::rollout_sim::{Served, SimFleet};
use promptpack_tests::*;
use time::OffsetDateTime;

const INSTALLS: usize = 1000;
const BASE_RATE: f64 = 0.05;

struct Channel {
    publisher: Publisher,
    packd: Packd,
    _data: tempfile::TempDir,
    trusted: TrustedKeys,
    signer: SigningKey,
    guard: SigningKey,
    old: PackRef,
    new: PackRef,
}

fn pack_ref(path: &Path) -> PackRef {
    let bytes = std::fs::read(path).unwrap();
    let (header, _) = pack_format::read_header(&bytes, &pack_format::Limits::DEFAULT).unwrap();
    PackRef {
        version: header.version,
        sha256: pack_format::sha256_hex(&bytes),
        size: bytes.len() as u64,
        schema: header.schema,
    }
}

/// packd with the publisher's key, a guard key it looks with every second, and report limits
/// a thousand installs reporting every second, all from one address, stay under.
fn start() -> Channel {
    let publisher = Publisher::new();
    let guard = SigningKey::generate(None).unwrap();
    let guard_path = publisher.dir.path().join("guard.key");
    std::fs::write(&guard_path, guard.secret_file.as_bytes()).unwrap();
    let config = publisher.server_config();
    let mut text = std::fs::read_to_string(&config).unwrap();
    text.push_str(&format!(
        "\n[fleet]\nreports_per_install_per_hour = 1000000\nreports_per_address_per_hour = 1000000\nreports_per_second = 1000000\n\n\
         [guard]\nkey = {:?}\ninterval_secs = 1\nmin_installs = 30\n",
        guard_path.display().to_string()
    ));
    std::fs::write(&config, text).unwrap();
    let data = tempfile::tempdir().unwrap();
    let packd = Packd::start(data.path(), &config);
    let old_path = publisher.build("1.2.0", "GUARD-OLD");
    let new_path = publisher.build("1.3.0", "GUARD-NEW");
    packd.upload(&publisher, &old_path);
    packd.upload(&publisher, &new_path);
    let signer = SigningKey::load(&publisher.keys().join("signing.key"), None).unwrap();
    let mut trusted = TrustedKeys::new();
    trusted.add_signing_key(&signer);
    Channel {
        old: pack_ref(&old_path),
        new: pack_ref(&new_path),
        trusted,
        signer,
        guard: guard.key,
        publisher,
        packd,
        _data: data,
    }
}

impl Channel {
    /// Publishes a ramp of the new pack over the old one for releases 0.1.x, watched on
    /// `tool_error_rate` with a freeze on regression.
    fn publish_ramp(&self, ramp: &str) {
        let now = OffsetDateTime::now_utc();
        let (first, ramp) = Ramp::parse(ramp, now).unwrap();
        let range: semver::VersionReq = ">=0.1.0, <0.2.0".parse().unwrap();
        let doc = ChannelDocument {
            format: 1,
            channel: "stable".to_string(),
            pack: "builtin".to_string(),
            sequence: 1,
            issued_at: now,
            expires_at: now + time::Duration::days(1),
            entries: vec![
                ChannelEntry {
                    clients: range.clone(),
                    target: EntryTarget::Pack(self.new.clone()),
                    rollout: Some(Rollout {
                        percent: first,
                        salt: "builtin@1.3.0".to_string(),
                        ramp: Some(ramp),
                        watch: Some(Watch {
                            metrics: vec!["tool_error_rate".to_string()],
                            action: WatchAction::Freeze,
                        }),
                    }),
                },
                ChannelEntry {
                    clients: range,
                    target: EntryTarget::Pack(self.old.clone()),
                    rollout: None,
                },
                ChannelEntry {
                    clients: "*".parse().unwrap(),
                    target: EntryTarget::Builtin,
                    rollout: None,
                },
            ],
            guard: Some(Guard::for_key(&self.guard)),
            restricts: None,
        };
        let signed = doc.sign(&self.signer).unwrap();
        self.packd
            .publish(&self.publisher, &(signed.document, signed.signature));
    }

    /// The live document, verified as a client verifies it (`None` while a publish lands
    /// between the two reads).
    fn live(&self, http: &reqwest::blocking::Client) -> Option<pack_format::VerifiedChannel> {
        let document = http
            .get(format!("{}{}", self.packd.url, paths::channel("stable")))
            .send()
            .ok()?
            .bytes()
            .ok()?;
        let signature = http
            .get(format!(
                "{}{}",
                self.packd.url,
                paths::channel_signature("stable")
            ))
            .send()
            .ok()?
            .text()
            .ok()?;
        pack_format::channel::verify(
            &document,
            &signature,
            &self.trusted,
            OffsetDateTime::now_utc(),
            &pack_format::Limits::DEFAULT,
        )
        .ok()
    }

    /// Runs the fleet until the guard freezes the ramp or it has been at 100 % for a few
    /// rounds (or `limit` passes): the frozen percentage, if frozen.
    fn run(&self, new_rate: f64, seed: u64, limit: Duration) -> Option<u8> {
        let http = reqwest::blocking::Client::new();
        let mut fleet = SimFleet::new(INSTALLS, seed);
        let new_sha = self.new.sha256.clone();
        let rate = move |s: &Served| {
            if s.pack == new_sha {
                new_rate
            } else {
                BASE_RATE
            }
        };
        let started = Instant::now();
        let mut at_full = 0;
        let mut round = 0usize;
        while started.elapsed() < limit {
            let Some(live) = self.live(&http) else {
                continue;
            };
            let doc = &live.document;
            if let (Some(_), Some(order)) = (&live.base, &doc.restricts) {
                return Some(match order.stops[0] {
                    pack_format::Stop::Hold { percent, .. } => percent,
                    pack_format::Stop::Revert { .. } => 0,
                });
            }
            let now = OffsetDateTime::now_utc();
            if doc.entries[0].rollout.as_ref().unwrap().percent_at(now) == 100 {
                at_full += 1;
                if at_full > 5 {
                    return None;
                }
            }
            fleet.round(doc, now, 4, &rate);
            let day = now.date().to_string();
            for (i, report) in fleet.reports(|i| i % 5 == round % 5, "stable", &day) {
                let hash = pack_protocol::fleet::install_hash(
                    &self.packd.url,
                    "stable",
                    &fleet.install_ids[i],
                );
                let response = http
                    .post(format!("{}{}", self.packd.url, paths::outcomes("stable")))
                    .header(headers::INSTALL, hash)
                    .json(&report)
                    .send()
                    .unwrap();
                assert!(
                    response.status().is_success(),
                    "outcome report: {} {}",
                    response.status(),
                    response.text().unwrap_or_default()
                );
            }
            round += 1;
            std::thread::sleep(Duration::from_millis(100));
        }
        panic!("the rollout neither stopped nor reached 100% within {limit:?}");
    }

    fn guard_view(&self) -> serde_json::Value {
        reqwest::blocking::get(format!("{}{}", self.packd.url, paths::guard("stable")))
            .unwrap()
            .json()
            .unwrap()
    }
}

#[test]
fn a_pack_with_twice_the_tool_error_rate_is_frozen_before_its_ramp_passes_ten_percent() {
    let r = start();
    r.publish_ramp("1%..100%/120s");
    let frozen = r.run(BASE_RATE * 2.0, 1, Duration::from_secs(150));
    let percent = frozen.expect("the guard froze the ramp");
    assert!(percent <= 10, "frozen at {percent}%, past 10%");

    // packd says what it saw and why it acted.
    let view = r.guard_view();
    let decision = &view["decisions"][0];
    assert_eq!(decision["action"], "freeze", "{view:#}");
    assert_eq!(decision["version"], "1.3.0");
    let reason = decision["reason"].as_str().unwrap();
    assert!(reason.starts_with("tool_error_rate "), "{reason}");

    // A real client follows the freeze: it accepts the guard's document, and the ramp no
    // longer grows for it.
    let cache = tempfile::tempdir().unwrap();
    let config = r.publisher.client_config(&r.packd.url, "");
    let status = run_client(&cache.path().join("c"), &config);
    assert!(status.contains("(sequence 2)"), "{status}");
}

#[test]
fn an_equal_pack_and_a_better_pack_ramp_to_a_hundred_percent() {
    // Side by side, each with its own packd.
    std::thread::scope(|scope| {
        for (rate, seed) in [(BASE_RATE, 2), (BASE_RATE / 2.0, 3)] {
            scope.spawn(move || {
                let r = start();
                r.publish_ramp("1%..100%/30s");
                assert_eq!(
                    r.run(rate, seed, Duration::from_secs(90)),
                    None,
                    "a pack at {rate} against {BASE_RATE} was stopped"
                );
                let view = r.guard_view();
                assert!(view["decisions"].as_array().unwrap().is_empty(), "{view:#}");
                // Not stopped because the test judged, not because the guard never had the
                // evidence to: its last look compared both sides past the minimum sample.
                let metric = &view["last"]["entries"][0]["metrics"][0];
                assert_eq!(metric["metric"], "tool_error_rate", "{view:#}");
                assert!(metric["difference"].is_f64(), "{view:#}");
                assert_eq!(metric["regressed"], false, "{view:#}");
            });
        }
    });
}

/// `pack-client refresh` then `status` on `cache`.
fn run_client(cache: &Path, config: &Path) -> String {
    let mut refresh = client_cmd(cache, config, "0.1.5");
    refresh.arg("refresh");
    run(refresh);
    let mut status = client_cmd(cache, config, "0.1.5");
    status.arg("status");
    run(status)
}
