//! The fleet view and failure reports against real `packd` processes: counts from many
//! installs through two nodes over one storage (a data directory, and SeaweedFS), what is
//! stored, and the bounds on reports — one test per bound, each asserting its error code.

#![allow(clippy::print_stderr)] // tests report what they measured

use crate::common;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use common::*;
use pack_protocol::fleet::install_hash;
use pack_protocol::{FleetView, headers, paths};
use reqwest::StatusCode;
use serde_json::{Value, json};

/// The URL clients are configured with: a load balancer in front of both nodes, so one
/// install has one install hash whichever node answers.
const PUBLIC_URL: &str = "https://packs.example.com";

fn setup(kind: Kind, extra_toml: &str) -> Option<Env> {
    Env::on(
        kind,
        Fixture::new(&format!("[fleet]\nflush_secs = 1\n{extra_toml}")),
        "fleet",
    )
}

on_both_backends!(
    fifty_installs_through_two_nodes_are_counted_once_each,
    failure_reports_through_two_nodes_are_summed,
);

/// Uploads a pack and publishes it to every client of `stable`; returns its SHA-256.
async fn publish_pack(server: &Packd, fx: &Fixture) -> String {
    let pack = fx.pack("core", "1.0.0", "fleet");
    let sha = pack_format::sha256_hex(&pack);
    assert_eq!(upload(server, &pack).await.status(), StatusCode::CREATED);
    let doc = fx.document("stable", 1, &pack, "fleet");
    publish_created(server, "stable", &fx.publish_body(&doc)).await;
    sha
}

/// One simulated install: its install hash, release and installed pack.
struct Install {
    hash: String,
    release: &'static str,
    pack: String,
}

fn installs(n: usize, sha: &str) -> Vec<Install> {
    (0..n)
        .map(|i| Install {
            hash: install_hash(PUBLIC_URL, "stable", &format!("install-{i}")),
            release: if i < 30 { "1.4.2" } else { "1.3.0" },
            pack: if i % 5 == 0 {
                "builtin".to_string()
            } else {
                sha.to_string()
            },
        })
        .collect()
}

/// A channel fetch as the client sends it; the second of each pair revalidates (304).
async fn fetch(server: &Packd, install: &Install) {
    let c = client();
    let url = server.url(&paths::channel("stable"));
    let first = c
        .get(&url)
        .header(headers::CLIENT_VERSION, install.release)
        .header(headers::INSTALLED_PACK, &install.pack)
        .header(headers::INSTALL, &install.hash)
        .send()
        .await
        .unwrap();
    assert_eq!(first.status(), StatusCode::OK);
    let etag = first.headers()["etag"].to_str().unwrap().to_string();
    let again = c
        .get(&url)
        .header(headers::CLIENT_VERSION, install.release)
        .header(headers::INSTALLED_PACK, &install.pack)
        .header(headers::INSTALL, &install.hash)
        .header("if-none-match", etag)
        .send()
        .await
        .unwrap();
    assert_eq!(again.status(), StatusCode::NOT_MODIFIED);
}

async fn fleet(server: &Packd, query: &str) -> FleetView {
    let r = client()
        .get(server.url(&format!("{}{query}", paths::fleet("stable"))))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    r.json().await.unwrap()
}

/// Polls `server`'s fleet view until `done` holds (the other node writes every second).
async fn fleet_until(server: &Packd, done: impl Fn(&FleetView) -> bool) -> FleetView {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let view = fleet(server, "").await;
        if done(&view) || Instant::now() > deadline {
            return view;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The UTC day `server`'s fleet view ends on now (`YYYY-MM-DD`).
async fn today_on(server: &Packd) -> String {
    fleet(server, "").await.days.last().cloned().unwrap()
}

/// The last days of `view` that hold what a test counted since `started` (the view's last
/// day when the test began): today's alone, or yesterday's and today's when the test ran
/// over midnight UTC and its counts fell on both.
fn days_since(view: &FleetView, started: &str) -> usize {
    if view.days.last().map(String::as_str) == Some(started) {
        1
    } else {
        2
    }
}

/// The sum of the last `days` entries of `daily`.
fn last_days(daily: &[u64], days: usize) -> u64 {
    daily[daily.len().saturating_sub(days)..].iter().sum()
}

fn cells(view: &FleetView) -> BTreeMap<(String, String), u64> {
    view.cells
        .iter()
        .map(|c| ((c.client_version.clone(), c.pack.clone()), c.installs))
        .collect()
}

/// Every byte packd stored under `fleet/`.
fn stored_fleet_bytes(env: &Env) -> Vec<(String, Vec<u8>)> {
    match (&env.backend, env.s3) {
        (Backend::Disk(dir), _) => files_under(&dir.join("fleet"))
            .into_iter()
            .map(|f| {
                (
                    f.clone(),
                    std::fs::read(dir.join("fleet").join(&f)).unwrap(),
                )
            })
            .collect(),
        (Backend::S3 { url, .. }, Some(s3)) => s3
            .keys_under(url)
            .into_iter()
            .filter(|k| k.contains("/fleet/"))
            .map(|k| {
                let key = k.split_once("/fleet/").unwrap().1.to_string();
                let bytes = s3.read(url, &format!("fleet/{key}")).unwrap();
                (key, bytes)
            })
            .collect(),
        _ => unreachable!(),
    }
}

/// 50 installs, each fetching from one of two nodes (a third of them from both, every one
/// twice): both nodes answer with exactly 50 installs in exactly the cells they sent, the
/// counts survive a `kill -9` of a node, and storage holds no install hash.
async fn fifty_installs_through_two_nodes_are_counted_once_each(env: Env) {
    let fx = &env.fx;
    let a = Packd::start(&env.backend, Some(&fx.config));
    let mut b = Packd::start(&env.backend, Some(&fx.config));
    let sha = publish_pack(&a, fx).await;
    let started = today_on(&a).await;
    let fleet_installs = installs(50, &sha);
    let mut expected: BTreeMap<(String, String), u64> = BTreeMap::new();
    for (i, install) in fleet_installs.iter().enumerate() {
        let (first, second) = if i % 2 == 0 { (&a, &b) } else { (&b, &a) };
        fetch(first, install).await;
        if i % 3 == 0 {
            fetch(second, install).await;
        }
        *expected
            .entry((install.release.to_string(), install.pack.clone()))
            .or_default() += 1;
    }
    // Fetches without an install hash (telemetry off) or with a malformed one count nothing.
    let c = client();
    for bad in [None, Some("not-a-hash"), Some(&*"A".repeat(32))] {
        let mut request = c
            .get(a.url(&paths::channel("stable")))
            .header(headers::CLIENT_VERSION, "9.9.9");
        if let Some(bad) = bad {
            request = request.header(headers::INSTALL, bad);
        }
        assert_eq!(request.send().await.unwrap().status(), StatusCode::OK);
    }

    for server in [&a, &b] {
        let view = fleet_until(server, |v| cells(v) == expected).await;
        assert_eq!(cells(&view), expected, "{view:#?}");
        assert_eq!(view.installs, 50);
        assert!(!view.overflow);
        assert_eq!(view.days.len(), 7);
        // Every install was counted today (or, over midnight, yesterday and today).
        let days = days_since(&view, &started);
        for cell in &view.cells {
            assert_eq!(last_days(&cell.daily, days), cell.installs, "{cell:?}");
            let version = if cell.pack == sha {
                Some("1.0.0")
            } else {
                None
            };
            assert_eq!(
                cell.pack_version
                    .as_ref()
                    .map(ToString::to_string)
                    .as_deref(),
                version,
                "{cell:?}"
            );
        }
        let today = fleet(server, &format!("?days={days}")).await;
        assert_eq!(today.installs, 50);
    }

    // Each node wrote its own file (each view above holds installs only the other node
    // saw, so both have written); none holds an install hash.
    let stored = stored_fleet_bytes(&env);
    assert_eq!(
        stored.len(),
        2,
        "{:?}",
        stored.iter().map(|s| &s.0).collect::<Vec<_>>()
    );
    for (key, bytes) in &stored {
        let text = String::from_utf8_lossy(bytes);
        for install in &fleet_installs {
            assert!(!text.contains(&install.hash), "{key} holds an install hash");
        }
    }

    // A node killed after writing loses nothing; its successor adds a file of its own.
    b.stop();
    b.restart();
    fetch(&b, &fleet_installs[0]).await;
    let view = fleet_until(&a, |v| v.sources >= 3).await;
    assert_eq!(cells(&view), expected);
    assert_eq!(view.installs, 50);

    let metrics = metrics_text(&a).await;
    let line = format!(
        "packd_fleet_installs{{channel=\"stable\",client_version=\"1.4.2\",pack=\"{sha}\"}} {}",
        expected[&("1.4.2".to_string(), sha.clone())]
    );
    assert!(metrics.contains(&line), "{line} not in\n{metrics}");
    b.stop();
}

async fn report(
    server: &Packd,
    install: Option<&str>,
    body: &str,
    token: Option<&str>,
) -> reqwest::Response {
    let mut request = client()
        .post(server.url(&paths::reports("stable")))
        .header("content-type", "application/json")
        .body(body.to_string());
    if let Some(install) = install {
        request = request.header(headers::INSTALL, install);
    }
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    request.send().await.unwrap()
}

fn report_body(pack: &str, reason: &str) -> String {
    json!({"channel": "stable", "pack": pack, "reason": reason, "client_version": "1.4.2"})
        .to_string()
}

async fn error_code(response: reqwest::Response) -> String {
    let body: Value = response.json().await.unwrap();
    body["error"]["code"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

/// Six installs report a render failure and two a bad mark, through two nodes: both
/// nodes show the sums and the distinct installs.
async fn failure_reports_through_two_nodes_are_summed(env: Env) {
    let fx = &env.fx;
    let a = Packd::start(&env.backend, Some(&fx.config));
    let b = Packd::start(&env.backend, Some(&fx.config));
    let sha = publish_pack(&a, fx).await;
    let started = today_on(&a).await;
    for i in 0..6 {
        let install = install_hash(PUBLIC_URL, "stable", &format!("failing-{i}"));
        let node = if i % 2 == 0 { &a } else { &b };
        let r = report(
            node,
            Some(&install),
            &report_body(&sha, "render_failed"),
            None,
        )
        .await;
        assert_eq!(r.status(), StatusCode::ACCEPTED);
        if i < 2 {
            let r = report(node, Some(&install), &report_body(&sha, "marked_bad"), None).await;
            assert_eq!(r.status(), StatusCode::ACCEPTED);
        }
    }
    let counts = |v: &FleetView| -> BTreeMap<String, (u64, u64)> {
        v.failures
            .iter()
            .map(|f| (f.reason.clone(), (f.reports, f.installs)))
            .collect()
    };
    let expected: BTreeMap<String, (u64, u64)> = [
        ("marked_bad".to_string(), (2, 2)),
        ("render_failed".to_string(), (6, 6)),
    ]
    .into();
    for server in [&a, &b] {
        let view = fleet_until(server, |v| counts(v) == expected).await;
        assert_eq!(counts(&view), expected, "{view:#?}");
        assert!(view.failures.iter().all(|f| f.pack == sha
            && f.pack_version.as_ref().map(ToString::to_string).as_deref() == Some("1.0.0")
            && f.client_version == "1.4.2"));
        // By pack: six distinct installs (the two that also marked it bad count once).
        assert_eq!(view.failing_packs.len(), 1, "{view:#?}");
        let by_pack = &view.failing_packs[0];
        assert_eq!((by_pack.reports, by_pack.installs), (8, 6));
        // Per day too: every failing install reported today, the last day of the window
        // (or, over midnight, yesterday and today).
        let days = days_since(&view, &started);
        if days == 1 {
            assert_eq!(by_pack.daily.last(), Some(&6));
        }
        for f in &view.failures {
            assert_eq!(f.daily.len(), view.days.len(), "{f:?}");
            assert_eq!(last_days(&f.daily, days), f.installs, "{f:?}");
            assert_eq!(f.daily.iter().sum::<u64>(), f.installs, "{f:?}");
        }
    }
}

fn disk(extra_toml: &str) -> Env {
    setup(Kind::Disk, extra_toml).unwrap()
}

async fn started(env: &Env) -> (Packd, String) {
    let server = Packd::start(&env.backend, Some(&env.fx.config));
    let sha = publish_pack(&server, &env.fx).await;
    (server, sha)
}

fn one_install() -> String {
    install_hash(PUBLIC_URL, "stable", "one")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_report_over_512_bytes_is_refused_with_payload_too_large() {
    let env = disk("");
    let (server, _) = started(&env).await;
    let big = json!({"channel": "stable", "pack": "builtin", "reason": "render_failed",
                     "client_version": format!("1.0.0-{}", "x".repeat(600))})
    .to_string();
    let r = report(&server, Some(&one_install()), &big, None).await;
    assert_eq!(r.status(), StatusCode::PAYLOAD_TOO_LARGE);
    assert_eq!(error_code(r).await, "payload_too_large");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_report_with_a_field_beyond_the_four_is_refused_with_invalid_body() {
    let env = disk("");
    let (server, sha) = started(&env).await;
    let body = json!({"channel": "stable", "pack": sha, "reason": "render_failed",
                      "client_version": "1.4.2", "template": "You are Mavis"})
    .to_string();
    let r = report(&server, Some(&one_install()), &body, None).await;
    assert_eq!(r.status(), StatusCode::BAD_REQUEST);
    let text = r.text().await.unwrap();
    assert!(
        text.contains("invalid_body") && text.contains("unknown field"),
        "{text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_report_with_an_unknown_reason_is_refused_with_invalid_body() {
    let env = disk("");
    let (server, sha) = started(&env).await;
    let r = report(
        &server,
        Some(&one_install()),
        &report_body(&sha, "it broke"),
        None,
    )
    .await;
    assert_eq!(r.status(), StatusCode::BAD_REQUEST);
    assert_eq!(error_code(r).await, "invalid_body");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_report_without_an_install_hash_is_refused_with_invalid_body() {
    let env = disk("");
    let (server, sha) = started(&env).await;
    let r = report(&server, None, &report_body(&sha, "render_failed"), None).await;
    assert_eq!(r.status(), StatusCode::BAD_REQUEST);
    let text = r.text().await.unwrap();
    assert!(text.contains("x-promptpack-install"), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_report_for_a_channel_never_published_is_refused_with_not_found() {
    let env = disk("");
    let (server, sha) = started(&env).await;
    let body = report_body(&sha, "render_failed").replace("stable", "ghost");
    let r = client()
        .post(server.url(&paths::reports("ghost")))
        .header(headers::INSTALL, one_install())
        .body(body)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::NOT_FOUND);
    assert_eq!(error_code(r).await, "not_found");
    assert!(!env.fx.dir.path().join("data/fleet/ghost").exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reports_past_the_hourly_count_of_an_install_are_refused_with_rate_limited() {
    let env = disk("reports_per_install_per_hour = 3\n");
    let (server, sha) = started(&env).await;
    for _ in 0..3 {
        let r = report(
            &server,
            Some(&one_install()),
            &report_body(&sha, "render_failed"),
            None,
        )
        .await;
        assert_eq!(r.status(), StatusCode::ACCEPTED);
    }
    let r = report(
        &server,
        Some(&one_install()),
        &report_body(&sha, "render_failed"),
        None,
    )
    .await;
    assert_eq!(r.status(), StatusCode::TOO_MANY_REQUESTS);
    let retry: u64 = r.headers()["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!(retry > 3000, "Retry-After {retry}");
    assert_eq!(error_code(r).await, "rate_limited");
    // Another install is not held back by this one.
    let other = install_hash(PUBLIC_URL, "stable", "other");
    let r = report(
        &server,
        Some(&other),
        &report_body(&sha, "render_failed"),
        None,
    )
    .await;
    assert_eq!(r.status(), StatusCode::ACCEPTED);
    // And only what was accepted counts.
    let view = fleet_until(&server, |v| {
        v.failures.first().is_some_and(|f| f.reports == 4)
    })
    .await;
    assert_eq!(
        (view.failures[0].reports, view.failures[0].installs),
        (4, 2)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_private_deployment_needs_a_read_token_for_the_fleet_and_for_reports() {
    let env = disk(&Fixture::read_token_toml());
    let server = Packd::start(&env.backend, Some(&env.fx.config));
    let c = client();
    let r = c
        .get(server.url(&paths::fleet("stable")))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
    let r = report(
        &server,
        Some(&one_install()),
        &report_body("builtin", "expired"),
        None,
    )
    .await;
    assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
    assert_eq!(error_code(r).await, "unauthorized");
    let r = c
        .get(server.url(&paths::fleet("stable")))
        .bearer_auth(READ_ONLY_TOKEN)
        .send()
        .await
        .unwrap();
    // Authorized: now the missing channel is what stops it.
    assert_eq!(r.status(), StatusCode::NOT_FOUND);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_fleet_view_can_be_kept_to_publishers() {
    let env = disk("view = \"publish\"\n");
    let (server, _) = started(&env).await;
    let c = client();
    let r = c
        .get(server.url(&paths::fleet("stable")))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
    let r = c
        .get(server.url(&paths::fleet("stable")))
        .bearer_auth(PUBLISH_TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
}

/// A node stopped with SIGTERM writes what it counted since its last write, even when that
/// write was not due for an hour.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_writes_the_counts_not_yet_written() {
    let env = disk("");
    // A second config with an hour between writes.
    let slow = env.fx.dir.path().join("slow.toml");
    let text = std::fs::read_to_string(&env.fx.config)
        .unwrap()
        .replace("flush_secs = 1", "flush_secs = 3600");
    std::fs::write(&slow, text).unwrap();
    let a = Packd::start(&env.backend, Some(&env.fx.config));
    let sha = publish_pack(&a, &env.fx).await;
    let mut b = Packd::start(&env.backend, Some(&slow));
    for install in installs(5, &sha).iter() {
        fetch(&b, install).await;
    }
    // The sign that a node writing every second would have written b's counts by now: a
    // writes twice, each write seen by b (its view is its own 5 and the files it reads). The
    // first came after b's fetches, the second a whole interval after the first.
    for (n, seen) in [(0, 6), (1, 7)] {
        let late = Install {
            hash: install_hash(PUBLIC_URL, "stable", &format!("late-{n}")),
            release: "1.4.2",
            pack: sha.clone(),
        };
        fetch(&a, &late).await;
        let view = fleet_until(&b, |v| v.installs == seen).await;
        assert_eq!(view.installs, seen, "a's write {n} never reached b");
    }
    assert_eq!(fleet(&a, "").await.installs, 2, "b wrote before it was due");
    b.sigterm();
    let _ = b.child.wait();
    assert_eq!(fleet(&a, "").await.installs, 7);
}
