//! Evidence no single sender can bend, through a real packd holding a channel's guard key.
//! Every outcome report here is made up by the test, as a forger would make it: any install
//! hash, any counts within the protocol's caps. One property per test:
//!
//! - two forged reports (one install on each side) move nothing: the guard needs
//!   `min_installs` distinct installs a side;
//! - one forged install claiming a million clean tool calls cannot hide a regression that
//!   real installs show: it is one install, its day capped at plausible use;
//! - a flood of reports for made-up client releases is refused and real reports are still
//!   counted;
//! - one address over its hourly limit gets 429 whatever install hashes it names, while
//!   another address is counted;
//! - on a private deployment a report needs a read token.
//!
//! The channel ramps pack 1.3.0 over 1.2.0 for client releases 0.1.x only (no entry for any
//! other release), watched on `tool_error_rate` with a freeze on regression.

use std::net::IpAddr;
use std::path::Path;
use std::time::{Duration, Instant};

use pack_format::{
    ChannelDocument, ChannelEntry, EntryTarget, Guard, PackRef, Ramp, Rollout, SigningKey, Watch,
    WatchAction,
};
use pack_protocol::{OutcomeCounts, OutcomeReport, headers, paths};
use promptpack_tests::*;
use reqwest::StatusCode;
use time::OffsetDateTime;

/// A release the channel serves.
const RELEASE: &str = "0.1.5";

struct Channel {
    publisher: Publisher,
    packd: Packd,
    _data: tempfile::TempDir,
    /// The read token of a private deployment.
    read_token: Option<String>,
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

/// packd with a guard key it looks with every second, `fleet` and `extra` appended to its
/// config, and the watched ramp published.
fn start(fleet: &str, extra: &str, read_token: Option<&str>) -> Channel {
    let publisher = Publisher::new();
    let guard = SigningKey::generate(None).unwrap();
    let guard_path = publisher.dir.path().join("guard.key");
    std::fs::write(&guard_path, guard.secret_file.as_bytes()).unwrap();
    let read = read_token.map_or(String::new(), |token| {
        format!(
            "\n[[tokens]]\nname = \"agents\"\nsha256 = \"{}\"\nscopes = [\"read\"]\n",
            pack_format::sha256_hex(token.as_bytes())
        )
    });
    let config = publisher.server_config_with(&format!(
        "{read}{extra}\n[fleet]\n{fleet}\n\n[guard]\nkey = {:?}\ninterval_secs = 1\nmin_installs = 30\n",
        guard_path.display().to_string()
    ));
    let data = tempfile::tempdir().unwrap();
    let packd = Packd::start(data.path(), &config);
    let old_path = publisher.build("1.2.0", "EVIDENCE-OLD");
    let new_path = publisher.build("1.3.0", "EVIDENCE-NEW");
    packd.upload(&publisher, &old_path);
    packd.upload(&publisher, &new_path);
    let channel = Channel {
        old: pack_ref(&old_path),
        new: pack_ref(&new_path),
        read_token: read_token.map(str::to_string),
        publisher,
        packd,
        _data: data,
    };
    channel.publish_ramp(&guard.key);
    channel
}

impl Channel {
    fn publish_ramp(&self, guard: &SigningKey) {
        let signer = SigningKey::load(&self.publisher.keys().join("signing.key"), None).unwrap();
        let now = OffsetDateTime::now_utc();
        let (first, ramp) = Ramp::parse("20%..100%/24h", now).unwrap();
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
            ],
            guard: Some(Guard::for_key(guard)),
            restricts: None,
        };
        let signed = doc.sign(&signer).unwrap();
        self.packd
            .publish(&self.publisher, &(signed.document, signed.signature));
    }

    fn http(from: Option<IpAddr>) -> reqwest::blocking::Client {
        reqwest::blocking::Client::builder()
            .local_address(from)
            .build()
            .unwrap()
    }

    /// Posts one install's day on `pack` (`calls` tool calls, `errors` of them failed) from
    /// `install` (any text: hashed as a client hashes its install id), under `release`.
    fn report_as(
        &self,
        http: &reqwest::blocking::Client,
        token: Option<&str>,
        install: &str,
        pack: &PackRef,
        release: &str,
        (calls, errors): (u64, u64),
    ) -> (StatusCode, String) {
        let report = OutcomeReport {
            channel: "stable".to_string(),
            day: OffsetDateTime::now_utc().date().to_string(),
            pack: pack.sha256.clone(),
            pack_name: "builtin".to_string(),
            pack_version: pack.version.clone(),
            client_version: release.parse().unwrap(),
            counts: OutcomeCounts {
                turns: calls,
                tool_calls: calls,
                tool_errors: errors,
                ..OutcomeCounts::default()
            },
        };
        let hash = pack_protocol::fleet::install_hash(&self.packd.url, "stable", install);
        let mut request = http
            .post(self.packd.url(&paths::outcomes("stable")))
            .header(headers::INSTALL, hash)
            .json(&report);
        if let Some(token) = token {
            request = request.bearer_auth(token);
        }
        let response = request.send().unwrap();
        (response.status(), response.text().unwrap_or_default())
    }

    /// [`Channel::report_as`] from 127.0.0.1 with the deployment's read token, which must
    /// take it.
    fn report(&self, install: &str, pack: &PackRef, counts: (u64, u64)) {
        let (status, body) = self.report_as(
            &Channel::http(None),
            self.read_token.as_deref(),
            install,
            pack,
            RELEASE,
            counts,
        );
        assert_eq!(status, StatusCode::ACCEPTED, "{install}: {body}");
    }

    fn get(&self, path: &str) -> serde_json::Value {
        let mut request = Channel::http(None).get(self.packd.url(path));
        if let Some(token) = &self.read_token {
            request = request.bearer_auth(token);
        }
        request.send().unwrap().json().unwrap()
    }

    /// The guard's view once a look at the channel saw `new` and `old` installs on the
    /// watched metric (the positive sign that it weighed the reports sent), or once it
    /// decided.
    fn guard_after_look(&self, new: u64, old: u64) -> serde_json::Value {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let view = self.get(&paths::guard("stable"));
            let metric = &view["last"]["entries"][0]["metrics"][0];
            let decided = !view["decisions"].as_array().unwrap().is_empty();
            if decided || (metric["new_installs"] == new && metric["old_installs"] == old) {
                return view;
            }
            assert!(Instant::now() < deadline, "no such look: {view:#}");
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Channel {
    /// The guard's first decision, once it made one.
    fn decision(&self) -> serde_json::Value {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let view = self.get(&paths::guard("stable"));
            if let Some(decision) = view["decisions"].as_array().unwrap().first() {
                return decision.clone();
            }
            assert!(Instant::now() < deadline, "no decision: {view:#}");
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

#[test]
fn two_forged_reports_move_nothing() {
    let c = start("", "", None);
    // The new pack fails half of a thousand calls, the old one 1 %: as a forger would say.
    c.report("forged-new", &c.new, (1000, 500));
    c.report("forged-old", &c.old, (1000, 10));
    let view = c.guard_after_look(1, 1);
    assert!(view["decisions"].as_array().unwrap().is_empty(), "{view:#}");
    let metric = &view["last"]["entries"][0]["metrics"][0];
    assert_eq!(metric["regressed"], false, "{view:#}");
    assert!(metric["difference"].is_null(), "undecided: {view:#}");
    assert_eq!(view["min_installs"], 30);
}

#[test]
fn one_forged_install_cannot_hide_a_regression_that_real_installs_show() {
    let c = start("", "", None);
    // One forged install claims a million clean calls on the new pack (first, so that every
    // look that can decide weighs it).
    c.report("forged", &c.new, (1_000_000, 0));
    // Real installs: the new pack fails about 25 % of their tool calls, the old one 5 %,
    // each install a little differently.
    for i in 0..40u64 {
        c.report(
            &format!("real-new-{i}"),
            &c.new,
            (40, [8, 10, 12, 10][i as usize % 4]),
        );
    }
    for i in 0..100u64 {
        c.report(
            &format!("real-old-{i}"),
            &c.old,
            (40, [1, 2, 3, 2][i as usize % 4]),
        );
    }
    let decision = c.decision();
    assert_eq!(decision["action"], "freeze", "{decision:#}");
    let metric = &decision["look"]["metrics"][0];
    assert_eq!(metric["new_installs"], 41, "{decision:#}");
    // The forged day counted as a day of plausible use, not a million calls.
    let trials = metric["new"]["trials"].as_u64().unwrap();
    assert_eq!(
        trials,
        40 * 40 + pack_protocol::outcomes::DAY_TOOL_CALLS,
        "{decision:#}"
    );
    let reason = decision["reason"].as_str().unwrap();
    assert!(reason.contains("over 41 installs"), "{reason}");
}

#[test]
fn a_flood_of_made_up_releases_is_refused_and_real_reports_are_still_counted() {
    let c = start("max_cells = 8\nreports_per_second = 100000", "", None);
    let http = Channel::http(None);
    for i in 0..300 {
        let (status, body) = c.report_as(
            &http,
            None,
            &format!("flood-{i}"),
            &c.new,
            &format!("7.0.{i}"),
            (10, 0),
        );
        assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
        if i == 0 {
            assert!(
                body.contains("client release 7.0.0 is in no entry") && body.contains(">=0.1.0"),
                "{body}"
            );
        }
    }
    c.report("real-new", &c.new, (40, 2));
    c.report("real-old", &c.old, (40, 1));
    let outcomes = c.get(&paths::outcomes("stable"));
    let rows = outcomes["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 2, "{outcomes:#}");
    assert!(
        rows.iter().all(|r| r["client_version"] == RELEASE),
        "{outcomes:#}"
    );
    assert_eq!(outcomes["overflow"], false, "{outcomes:#}");
    // And the guard weighs them.
    c.guard_after_look(1, 1);
}

#[test]
fn an_address_over_its_limit_gets_429_while_another_address_is_counted() {
    let c = start(
        "reports_per_address_per_hour = 10\nreports_per_install_per_hour = 100",
        "",
        None,
    );
    let one = Channel::http(Some("127.0.0.1".parse().unwrap()));
    for i in 0..10 {
        let (status, body) = c.report_as(&one, None, &format!("one-{i}"), &c.new, RELEASE, (10, 0));
        assert_eq!(status, StatusCode::ACCEPTED, "{i}: {body}");
    }
    // A new install hash from the same address changes nothing.
    let (status, body) = c.report_as(&one, None, "one-10", &c.new, RELEASE, (10, 0));
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS, "{body}");
    assert!(body.contains("from one address"), "{body}");
    let other = Channel::http(Some("127.0.0.2".parse().unwrap()));
    let (status, body) = c.report_as(&other, None, "other-0", &c.new, RELEASE, (10, 3));
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    let outcomes = c.get(&paths::outcomes("stable"));
    let row = &outcomes["rows"][0];
    assert_eq!(row["installs"], 11, "{outcomes:#}");
    assert_eq!(row["counts"]["tool_errors"], 3, "{outcomes:#}");
}

#[test]
fn on_a_private_deployment_a_report_needs_a_read_token() {
    let token = "agents-read-token";
    let c = start("", "", Some(token));
    let http = Channel::http(None);
    let (status, body) = c.report_as(&http, None, "tokenless", &c.new, RELEASE, (10, 0));
    assert_eq!(status, StatusCode::UNAUTHORIZED, "{body}");
    let (status, body) = c.report_as(&http, Some("wrong"), "wrong", &c.new, RELEASE, (10, 0));
    assert!(
        status.is_client_error() && status != StatusCode::ACCEPTED,
        "{status} {body}"
    );
    c.report("with-token", &c.new, (10, 0));
    let outcomes = c.get(&paths::outcomes("stable"));
    assert_eq!(outcomes["rows"][0]["installs"], 1, "{outcomes:#}");
}
