//! Outcome counts against real `packd` processes: reports through two nodes over one storage
//! (a data directory, and SeaweedFS) merge, a later report of an install replaces its
//! earlier one whichever node took it, the rates and intervals are the hand-computed ones,
//! and every malformed report is refused with its code.

use crate::common;

use std::time::{Duration, Instant};

use common::*;
use pack_protocol::fleet::install_hash;
use pack_protocol::outcomes::MAX_OUTCOME_BYTES;
use pack_protocol::{OutcomeRow, OutcomesView, Rate, headers, paths};
use reqwest::StatusCode;
use serde_json::{Value, json};

const PUBLIC_URL: &str = "https://packs.example.com";

fn setup(kind: Kind, extra_toml: &str) -> Option<Env> {
    Env::on(
        kind,
        Fixture::new(&format!("[fleet]\nflush_secs = 1\n{extra_toml}")),
        "outcomes",
    )
}

on_both_backends!(two_nodes_merge_and_a_later_report_replaces_the_earlier);

async fn publish_pack(server: &Packd, fx: &Fixture) -> String {
    let pack = fx.pack("core", "1.0.0", "outcomes");
    let sha = pack_format::sha256_hex(&pack);
    assert_eq!(upload(server, &pack).await.status(), StatusCode::CREATED);
    let doc = fx.document("stable", 1, &pack, "outcomes");
    publish_created(server, "stable", &fx.publish_body(&doc)).await;
    sha
}

fn body(day: &str, pack: &str, version: &str, counts: Value) -> Value {
    let mut full = json!({
        "turns": 0, "tool_calls": 0, "tool_errors": 0, "permission_denials": 0,
        "model_errors": 0, "aborted_turns": 0, "builtin_fallbacks": 0, "compactions": 0,
        "input_tokens": 0, "output_tokens": 0, "exec_runs": 0, "exec_failures": 0
    });
    for (key, value) in counts.as_object().unwrap() {
        full[key] = value.clone();
    }
    json!({
        "channel": "stable", "day": day, "pack": pack, "pack_name": "core",
        "pack_version": version, "client_version": "1.4.2", "counts": full
    })
}

async fn post(server: &Packd, install: Option<&str>, body: &str) -> reqwest::Response {
    let mut request = client()
        .post(server.url(&paths::outcomes("stable")))
        .header("content-type", "application/json")
        .body(body.to_string());
    if let Some(install) = install {
        request = request.header(headers::INSTALL, install);
    }
    request.send().await.unwrap()
}

async fn accepted(server: &Packd, install: &str, body: Value) {
    let r = post(server, Some(install), &body.to_string()).await;
    assert_eq!(
        r.status(),
        StatusCode::ACCEPTED,
        "{}",
        r.text().await.unwrap()
    );
}

async fn view(server: &Packd, query: &str) -> reqwest::Response {
    client()
        .get(server.url(&format!("{}{query}", paths::outcomes("stable"))))
        .send()
        .await
        .unwrap()
}

async fn view_until(server: &Packd, done: impl Fn(&OutcomesView) -> bool) -> OutcomesView {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let r = view(server, "").await;
        assert_eq!(r.status(), StatusCode::OK);
        let view: OutcomesView = r.json().await.unwrap();
        if done(&view) || Instant::now() > deadline {
            return view;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

fn row<'a>(view: &'a OutcomesView, version: &str) -> Option<&'a OutcomeRow> {
    view.rows
        .iter()
        .find(|r| r.pack_version.to_string() == version)
}

fn assert_rate(rate: &Rate, events: u64, trials: u64, point: f64, low: f64, high: f64) {
    let close = |a: f64, b: f64| (a - b).abs() < 1e-6;
    assert_eq!((rate.events, rate.trials), (events, trials), "{rate:?}");
    assert!(
        close(rate.rate.unwrap(), point) && close(rate.low, low) && close(rate.high, high),
        "{rate:?}: expected {point} in [{low}, {high}]"
    );
}

/// Three installs on 1.0.0 and one on the built-in pack report through two nodes; the
/// first install reports again, to the other node, with more: its later counts replace
/// its earlier ones. Both nodes answer with the same sums, the hand-computed intervals,
/// and `days=1` leaves yesterday's report out.
async fn two_nodes_merge_and_a_later_report_replaces_the_earlier(env: Env) {
    let fx = &env.fx;
    let a = Packd::start(&env.backend, Some(&fx.config));
    let b = Packd::start(&env.backend, Some(&fx.config));
    let sha = publish_pack(&a, fx).await;
    let first: OutcomesView = view(&a, "").await.json().await.unwrap();
    assert!(first.rows.is_empty());
    let today = first.days.last().unwrap().clone();
    let yesterday = first.days[first.days.len() - 2].clone();
    let install = |n: u32| install_hash(PUBLIC_URL, "stable", &format!("install-{n}"));

    // Install 1: 100 calls with 50 errors, then (later, to the other node) 200 with 60.
    accepted(
        &a,
        &install(1),
        body(
            &today,
            &sha,
            "1.0.0",
            json!({"turns": 50, "tool_calls": 100, "tool_errors": 50, "model_errors": 3}),
        ),
    )
    .await;
    accepted(
        &b,
        &install(1),
        body(&today, &sha, "1.0.0", json!({"turns": 100, "tool_calls": 200, "tool_errors": 60, "model_errors": 3, "exec_runs": 5, "exec_failures": 1})),
    )
    .await;
    // Install 2, yesterday: 63 calls, 21 errors.
    accepted(
        &b,
        &install(2),
        body(&yesterday, &sha, "1.0.0", json!({"turns": 40, "tool_calls": 63, "tool_errors": 21, "input_tokens": 5000, "output_tokens": 700})),
    )
    .await;
    accepted(
        &a,
        &install(3),
        body(
            &today,
            "builtin",
            "0.0.0",
            json!({"turns": 30, "tool_calls": 10}),
        ),
    )
    .await;

    for server in [&a, &b] {
        let view = view_until(server, |v| {
            row(v, "1.0.0").is_some_and(|r| r.counts.tool_calls == 263) && v.rows.len() == 2
        })
        .await;
        let new = row(&view, "1.0.0").unwrap_or_else(|| panic!("{view:#?}"));
        assert_eq!(new.pack, sha);
        assert_eq!((new.installs, new.reports), (2, 2), "{new:?}");
        assert_eq!(
            (
                new.counts.turns,
                new.counts.input_tokens,
                new.counts.exec_runs
            ),
            (140, 5000, 5)
        );
        // 81 of 263 (Newcombe's example): 30.8 % in [25.5 %, 36.6 %].
        assert_rate(
            &new.rates.tool_error_rate,
            81,
            263,
            0.307_984_8,
            0.255_288_5,
            0.366_209_6,
        );
        assert_rate(
            &new.rates.model_error_rate,
            3,
            140,
            0.021_428_6,
            0.007_314_0,
            0.061_104_8,
        );
        assert_rate(
            &new.rates.exec_failure_rate,
            1,
            5,
            0.2,
            0.036_224_1,
            0.624_465_4,
        );
        assert_rate(&new.rates.fallback_rate, 0, 140, 0.0, 0.0, 0.026_706_2);
        let builtin = row(&view, "0.0.0").unwrap();
        assert_eq!(builtin.pack, "builtin");
        assert_eq!(builtin.rates.exec_failure_rate.rate, None);
        assert_eq!(
            view.rows[0].pack_version.to_string(),
            "1.0.0",
            "most turns first"
        );
        assert_eq!(view.days.len(), 7);
        assert!(!view.overflow);
    }
    // Only today: install 2's report of yesterday is left out.
    let today_only: OutcomesView = view(&b, "?days=1").await.json().await.unwrap();
    let new = row(&today_only, "1.0.0").unwrap();
    assert_eq!((new.counts.tool_calls, new.installs), (200, 1));

    // Each node wrote its own file; none holds an install hash.
    let stored: Vec<(String, Vec<u8>)> = match (&env.backend, env.s3) {
        (Backend::Disk(dir), _) => files_under(&dir.join("outcomes"))
            .into_iter()
            .map(|f| {
                (
                    f.clone(),
                    std::fs::read(dir.join("outcomes").join(&f)).unwrap(),
                )
            })
            .collect(),
        (Backend::S3 { url, .. }, Some(s3)) => s3
            .keys_under(url)
            .into_iter()
            .filter(|k| k.contains("/outcomes/"))
            .map(|k| {
                let key = k.split_once("/outcomes/").unwrap().1.to_string();
                let bytes = s3.read(url, &format!("outcomes/{key}")).unwrap();
                (key, bytes)
            })
            .collect(),
        _ => unreachable!(),
    };
    let keys: Vec<&String> = stored.iter().map(|s| &s.0).collect();
    assert_eq!(
        stored.len(),
        3,
        "a: today; b: today and yesterday: {keys:?}"
    );
    for (key, bytes) in &stored {
        let text = String::from_utf8_lossy(bytes);
        for n in 1..=3 {
            assert!(!text.contains(&install(n)), "{key} holds an install hash");
        }
    }
}

async fn error_code(response: reqwest::Response) -> (StatusCode, String) {
    let status = response.status();
    let body: Value = response.json().await.unwrap();
    (
        status,
        body["error"]["code"]
            .as_str()
            .unwrap_or_default()
            .to_string(),
    )
}

/// Every malformed report is refused with its code, and none is counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_report_over_the_cap_with_unknown_fields_or_impossible_counts_is_refused() {
    let Some(env) = setup(Kind::Disk, "") else {
        return;
    };
    let a = Packd::start(&env.backend, Some(&env.fx.config));
    let sha = publish_pack(&a, &env.fx).await;
    let today = view(&a, "")
        .await
        .json::<OutcomesView>()
        .await
        .unwrap()
        .days[6]
        .clone();
    let install = install_hash(PUBLIC_URL, "stable", "hostile");
    let good = body(&today, &sha, "1.0.0", json!({"turns": 4, "tool_calls": 2}));

    let mut padded = good.to_string();
    padded.insert_str(
        padded.len() - 1,
        &format!(",\"pad\":\"{}\"", "x".repeat(MAX_OUTCOME_BYTES)),
    );
    let r = post(&a, Some(&install), &padded).await;
    assert_eq!(
        error_code(r).await,
        (StatusCode::PAYLOAD_TOO_LARGE, "payload_too_large".into())
    );

    let mut cases: Vec<(&str, Value)> = Vec::new();
    let mut extra = good.clone();
    extra["prompt"] = "what the user asked".into();
    cases.push(("a field of text", extra));
    let mut extra_count = good.clone();
    extra_count["counts"]["last_tool"] = 1.into();
    cases.push(("an unknown count", extra_count));
    let mut over = good.clone();
    over["counts"]["tool_errors"] = 3.into();
    cases.push(("more errors than calls", over));
    let mut capped = good.clone();
    capped["counts"]["turns"] = (pack_protocol::outcomes::MAX_EVENTS + 1).into();
    cases.push(("a count over its cap", capped));
    let mut old = good.clone();
    old["day"] = "2020-01-01".into();
    cases.push(("a day long gone", old));
    let mut release = good.clone();
    release["client_version"] = "latest".into();
    cases.push(("a release that is not semver", release));
    for (what, bad) in cases {
        let r = post(&a, Some(&install), &bad.to_string()).await;
        assert_eq!(
            error_code(r).await,
            (StatusCode::BAD_REQUEST, "invalid_body".into()),
            "{what}"
        );
    }
    let r = post(&a, None, &good.to_string()).await;
    assert_eq!(
        error_code(r).await,
        (StatusCode::BAD_REQUEST, "invalid_body".into())
    );
    let mut other = good.clone();
    other["channel"] = "beta".into();
    let r = post(&a, Some(&install), &other.to_string()).await;
    assert_eq!(
        error_code(r).await,
        (StatusCode::UNPROCESSABLE_ENTITY, "channel_mismatch".into())
    );
    for days in ["?days=0", "?days=8"] {
        let r = view(&a, days).await;
        assert_eq!(
            error_code(r).await,
            (StatusCode::BAD_REQUEST, "invalid_body".into()),
            "{days}"
        );
    }

    // Then a good one: it alone is counted.
    accepted(&a, &install, good).await;
    let view: OutcomesView = view(&a, "").await.json().await.unwrap();
    assert_eq!(view.rows.len(), 1);
    assert_eq!((view.rows[0].counts.turns, view.rows[0].installs), (4, 1));
}
