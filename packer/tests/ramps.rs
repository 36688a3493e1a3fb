//! `packer release --ramp`: the schedule is signed into the document once, `packer status`
//! reads it at the current time, and a release that could not run its ramp to the end (the
//! document expires first, or the guard told to watch does not exist) is refused before
//! anything is signed.

use crate::common;

use common::packd::{Env, json};
use common::{assert_fails, assert_ok, s, stderr, stdout};
use pack_format::channel::format_time;
use pack_format::{RampStep, TrustedKeys, WatchAction};
use time::Duration;

/// A channel `stable` pinned to 1.0.0, with 1.1.0 uploaded.
fn channel(env: &Env) {
    assert_ok(&env.publish(&env.build("1.0.0", "prompts-1.0.0.pack")));
    assert_ok(&env.release(&[
        "--new-channel",
        "--pack",
        "prompts",
        "--pin",
        "*=1.0.0",
        "--yes",
    ]));
    assert_ok(&env.publish(&env.build("1.1.0", "prompts-1.1.0.pack")));
}

/// A guard key pair in `guard/`; its key id.
fn guard_keys(env: &Env) -> String {
    let dir = env.path("guard");
    let out = json(&env.packer(&["--json", "keygen", "--guard", "--dir", s(&dir)]));
    out["guard_key_id"].as_str().unwrap().to_string()
}

#[test]
fn a_ramp_is_signed_into_the_document_and_status_reads_it_at_the_current_time() {
    let env = Env::start();
    channel(&env);
    let guard_id = guard_keys(&env);
    let guard_pub = env.path("guard/guard.pub");

    let out = env.release(&[
        "--ramp",
        "*=1.1.0@1,5,25,100%/24h",
        "--guard-key",
        s(&guard_pub),
        "--guard-watch",
        "tool_error_rate, fallback_rate",
        "--yes",
    ]);
    assert_ok(&out);
    let err = stderr(&out);
    let doc = env.live_document();
    let start = doc.issued_at;
    let at = |hours: i64| format_time(start + Duration::hours(hours));
    assert!(
        err.contains(&format!(
            "ramp: 1% now, 5% at {}, 25% at {}, 100% at {}",
            at(24),
            at(48),
            at(72)
        )),
        "the diff shows when each step lands:\n{err}"
    );
    assert!(
        err.contains(&format!("guard key none -> {guard_id}")),
        "{err}"
    );

    // The schedule is in the signed document, starting when it was signed.
    assert_eq!(doc.sequence, 2);
    assert_eq!(doc.guard.as_ref().unwrap().key_id().unwrap(), guard_id);
    assert!(doc.restricts.is_none());
    let rollout = doc.entries[0]
        .rollout
        .as_ref()
        .expect("a rollout entry first");
    assert_eq!(rollout.percent, 1);
    assert_eq!(rollout.salt, "prompts@1.1.0");
    let ramp = rollout.ramp.as_ref().expect("the ramp");
    assert_eq!(ramp.start, start);
    assert!(!ramp.linear);
    let step = |hours: u64, percent: u8| RampStep {
        after_seconds: hours * 3600,
        percent,
    };
    assert_eq!(ramp.steps, [step(24, 5), step(48, 25), step(72, 100)]);
    let watch = rollout.watch.as_ref().expect("what the guard watches");
    assert_eq!(watch.metrics, ["tool_error_rate", "fallback_rate"]);
    assert_eq!(watch.action, WatchAction::Freeze);
    assert!(doc.entries[1].rollout.is_none(), "{:?}", doc.entries);
    // Valid past the ramp's end by the usual validity (30 days for this channel).
    assert_eq!(
        doc.expires_at,
        start + Duration::hours(72) + Duration::days(30)
    );
    // Every client computes the same schedule from it.
    assert_eq!(rollout.percent_at(start + Duration::hours(30)), 5);
    assert_eq!(rollout.percent_at(start + Duration::hours(80)), 100);

    let status = env.status();
    let channel = &status["channels"][0];
    assert_eq!(channel["guard"]["key_id"], guard_id.as_str());
    assert!(channel["restricts_sequence"].is_null(), "{channel}");
    let json_rollout = &channel["entries"][0]["rollout"];
    assert_eq!(json_rollout["percent_now"], 1, "{json_rollout}");
    assert_eq!(json_rollout["ramp"]["start"], format_time(start));
    assert_eq!(json_rollout["ramp"]["steps"][1]["at"], at(48));
    assert_eq!(json_rollout["ramp"]["steps"][1]["percent"], 25);
    assert_eq!(json_rollout["ramp"]["steps"][1]["landed"], false);
    assert_eq!(json_rollout["watch"]["metrics"][1], "fallback_rate");
    assert_eq!(json_rollout["watch"]["action"], "freeze");

    let human = env.packer(&["status", "--server", &env.packd.url]);
    assert_ok(&human);
    let text = stdout(&human);
    assert!(text.contains(&format!("guard key {guard_id}")), "{text}");
    assert!(
        text.contains(&format!("(rollout ramp: 1% now, 5% at {}", at(24))),
        "{text}"
    );
}

#[test]
fn a_ramp_that_ends_after_the_document_expires_is_refused() {
    let env = Env::start();
    channel(&env);

    let out = env.release(&[
        "--ramp",
        "*=1.1.0@1,5,25,100%/24h",
        "--expires",
        "2d",
        "--yes",
    ]);
    assert_fails(&out);
    let err = stderr(&out);
    assert!(err.contains("the ramp of clients * ends at"), "{err}");
    assert!(err.contains("longer --expires, at least 3d"), "{err}");
    assert!(
        !err.contains("entries (first match wins)"),
        "nothing was shown to sign:\n{err}"
    );
    assert_eq!(env.live_document().sequence, 1);

    // Long enough: released.
    assert_ok(&env.release(&[
        "--ramp",
        "*=1.1.0@1,5,25,100%/24h",
        "--expires",
        "3d",
        "--yes",
    ]));
    assert_eq!(env.live_document().sequence, 2);
}

#[test]
fn guard_watch_without_a_guard_key_is_refused_before_anything_is_signed() {
    let env = Env::start();
    channel(&env);

    let out = env.release(&[
        "--ramp",
        "*=1.1.0@1%..100%/72h",
        "--guard-watch",
        "tool_error_rate",
        "--yes",
    ]);
    assert_fails(&out);
    let err = stderr(&out);
    assert!(
        err.contains("--guard-watch: channel stable names no guard key"),
        "{err}"
    );
    assert!(
        err.contains("--guard-key FILE"),
        "it says how to name one:\n{err}"
    );
    assert!(err.contains("Nothing was signed or published"), "{err}");
    assert!(!err.contains("entries (first match wins)"), "{err}");
    assert_eq!(env.live_document().sequence, 1);

    // A metric the guard does not compare is named with the ones it does.
    let out = env.release(&[
        "--ramp",
        "*=1.1.0@1%..100%/72h",
        "--guard-watch",
        "latency",
        "--yes",
    ]);
    assert_fails(&out);
    assert!(
        stderr(&out).contains(
            "\"latency\" is not a metric the guard compares; the metrics are tool_error_rate"
        ),
        "{}",
        stderr(&out)
    );

    // Removing the guard key while asking it to watch contradicts itself.
    let out = env.release(&[
        "--ramp",
        "*=1.1.0@1%..100%/72h",
        "--guard-watch",
        "tool_error_rate",
        "--no-guard",
        "--yes",
    ]);
    assert_fails(&out);
    assert_eq!(env.live_document().sequence, 1);

    // With a guard key named, a linear ramp goes out watched.
    guard_keys(&env);
    let guard_pub = env.path("guard/guard.pub");
    assert_ok(&env.release(&[
        "--ramp",
        "*=1.1.0@1%..100%/72h",
        "--guard-key",
        s(&guard_pub),
        "--guard-watch",
        "tool_error_rate",
        "--on-regression",
        "rollback",
        "--yes",
    ]));
    let doc = env.live_document();
    let rollout = doc.entries[0].rollout.as_ref().unwrap();
    assert!(rollout.ramp.as_ref().unwrap().linear);
    assert_eq!(
        rollout.watch.as_ref().unwrap().action,
        WatchAction::Rollback
    );
    // Halfway through: 1 + 99 / 2, rounded down.
    assert_eq!(rollout.percent_at(doc.issued_at + Duration::hours(36)), 50);
}

#[test]
fn the_guard_key_pair_is_written_beside_the_offline_keys_without_touching_them() {
    let env = Env::start();
    let keys = env.keys();
    let before: Vec<Vec<u8>> = ["signing.key", "signing.pub", "content.key"]
        .iter()
        .map(|name| std::fs::read(keys.join(name)).unwrap())
        .collect();
    let out = json(&env.packer(&["--json", "keygen", "--guard", "--dir", s(&keys)]));
    let after: Vec<Vec<u8>> = ["signing.key", "signing.pub", "content.key"]
        .iter()
        .map(|name| std::fs::read(keys.join(name)).unwrap())
        .collect();
    assert_eq!(before, after, "the offline key set is unchanged");

    // guard.pub is a minisign public key, not the signing key.
    let mut trusted = TrustedKeys::new();
    let id = trusted.add_file(&keys.join("guard.pub")).unwrap();
    assert_eq!(out["guard_key_id"], id.as_str());
    let mut signing = TrustedKeys::new();
    assert_ne!(signing.add_file(&keys.join("signing.pub")).unwrap(), id);
    assert!(keys.join("guard.key").exists());

    // A second run does not replace the guard key.
    let again = env.packer(&["keygen", "--guard", "--dir", s(&keys)]);
    assert_fails(&again);
    assert!(
        stderr(&again).contains("guard.key already exists"),
        "{}",
        stderr(&again)
    );
    let mut trusted = TrustedKeys::new();
    assert_eq!(trusted.add_file(&keys.join("guard.pub")).unwrap(), id);

    // Naming the signing key itself as the guard is refused.
    let signing_pub = keys.join("signing.pub");
    let out = env.release(&[
        "--new-channel",
        "--pack",
        "prompts",
        "--guard-key",
        s(&signing_pub),
        "--yes",
    ]);
    assert_fails(&out);
    assert!(
        stderr(&out).contains("is trusted as a signing key"),
        "{}",
        stderr(&out)
    );
}
