//! `packer guard`: the guard key a channel names freezes a running ramp at its percentage,
//! only the offline key resumes it (from where it was frozen), and a key the channel does not
//! delegate to is refused by packer and by packd, changing nothing.

use crate::common;

use common::packd::{Env, TOKEN, json};
use common::{assert_fails, assert_ok, s, stderr, stdout};
use pack_format::channel::SignedChannel;
use pack_format::guard::{GuardAction, guard_document};
use pack_format::{
    ChannelDocument, ChannelEntry, EntryTarget, PackRef, Ramp, Rollout, SigningKey, Stop, Watch,
    WatchAction,
};
use serde_json::Value;
use time::{Duration, OffsetDateTime};

/// A channel `stable` pinned to 1.0.0 naming the guard key in `guard/`, with 1.1.0 uploaded.
fn guarded_channel(env: &Env) {
    let guard = env.path("guard");
    assert_ok(&env.packer(&["keygen", "--guard", "--dir", s(&guard)]));
    assert_ok(&env.publish(&env.build("1.0.0", "prompts-1.0.0.pack")));
    let guard_pub = guard.join("guard.pub");
    assert_ok(&env.release(&[
        "--new-channel",
        "--pack",
        "prompts",
        "--pin",
        "*=1.0.0",
        "--guard-key",
        s(&guard_pub),
        "--yes",
    ]));
    assert_ok(&env.publish(&env.build("1.1.0", "prompts-1.1.0.pack")));
}

fn now() -> OffsetDateTime {
    OffsetDateTime::now_utc().replace_nanosecond(0).unwrap()
}

/// PUTs a signed document to packd: the status and the JSON answer.
fn put(env: &Env, signed: &SignedChannel) -> (u16, Value) {
    let body = serde_json::json!({
        "document": String::from_utf8(signed.document.clone()).unwrap(),
        "signature": signed.signature,
    });
    let response = reqwest::blocking::Client::new()
        .put(format!("{}/v1/channels/stable", env.packd.url))
        .bearer_auth(TOKEN)
        .json(&body)
        .send()
        .unwrap();
    let status = response.status().as_u16();
    (status, response.json().unwrap_or(Value::Null))
}

/// The live document's bytes and signature, as packd serves them.
fn live_signed(env: &Env) -> SignedChannel {
    let get = |path: &str| {
        let response = reqwest::blocking::get(format!("{}{path}", env.packd.url)).unwrap();
        assert!(response.status().is_success(), "GET {path}: {response:?}");
        response.bytes().unwrap().to_vec()
    };
    SignedChannel {
        document: get("/v1/channels/stable"),
        signature: String::from_utf8(get("/v1/channels/stable/signature")).unwrap(),
    }
}

/// Signs with the offline key in `keys/` and publishes, as `packer release` would, a ramp
/// of 1.1.0 to every client that started 90 minutes ago (1% then 5%, 25%, 100% hourly), so
/// it stands at 5% now: `packer release --ramp` itself starts its ramps when it signs.
fn ramp_started_90_minutes_ago(env: &Env) -> ChannelDocument {
    let live = env.live_document();
    let now = now();
    let (first, ramp) = Ramp::parse("1,5,25,100%/1h", now - Duration::minutes(90)).unwrap();
    let target = EntryTarget::Pack(released_pack(env, "1.1.0"));
    let mut doc = live.clone();
    doc.sequence += 1;
    doc.issued_at = now;
    doc.expires_at = now + Duration::days(30);
    doc.entries.insert(
        0,
        ChannelEntry {
            clients: semver::VersionReq::STAR,
            target,
            rollout: Some(Rollout {
                percent: first,
                salt: "prompts@1.1.0".to_string(),
                ramp: Some(ramp),
                watch: Some(Watch {
                    metrics: vec!["tool_error_rate".to_string()],
                    action: WatchAction::Freeze,
                }),
            }),
        },
    );
    let key = SigningKey::load(&env.keys().join("signing.key"), None).unwrap();
    let (status, answer) = put(env, &doc.sign(&key).unwrap());
    assert_eq!(status, 201, "{answer}");
    doc
}

/// The record of pack `version` on packd, as a channel entry names it.
fn released_pack(env: &Env, version: &str) -> PackRef {
    let list: Value = reqwest::blocking::get(format!("{}/v1/packs/prompts", env.packd.url))
        .unwrap()
        .json()
        .unwrap();
    let record = list["versions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["version"] == version)
        .unwrap_or_else(|| panic!("{version} is on packd: {list}"));
    PackRef {
        version: semver::Version::parse(version).unwrap(),
        sha256: record["sha256"].as_str().unwrap().to_string(),
        size: record["size"].as_u64().unwrap(),
        schema: u32::try_from(record["schema"].as_u64().unwrap()).unwrap(),
    }
}

/// `packer guard ACTION stable` with the guard key at `key`, trusting `keys/signing.pub`.
fn guard(env: &Env, action: &str, key: &str, extra: &[&str]) -> std::process::Output {
    let keys = env.keys();
    let key = env.path(key);
    let mut args = vec![
        "--json",
        "guard",
        action,
        "stable",
        "--server",
        &env.packd.url,
        "--guard-key",
        s(&key),
        "--keys",
        s(&keys),
    ];
    args.extend_from_slice(extra);
    env.packer(&args)
}

#[test]
fn a_freeze_holds_the_ramp_and_the_offline_key_resumes_it_from_there() {
    let env = Env::start();
    guarded_channel(&env);
    let base = ramp_started_90_minutes_ago(&env);
    let base_rollout = base.entries[0].rollout.clone().unwrap();

    // Status reads the ramp at the current time: 5%, the next step 25% in half an hour.
    let status = env.status();
    let rollout = &status["channels"][0]["entries"][0]["rollout"];
    assert_eq!(rollout["percent"], 1, "{rollout}");
    assert_eq!(rollout["percent_now"], 5, "{rollout}");

    let frozen = guard(&env, "freeze", "guard/guard.key", &["--clients", "*"]);
    let answer = json(&frozen);
    assert_eq!(answer["change"]["action"], "freeze", "{answer}");
    assert_eq!(answer["change"]["percent"], 5, "{answer}");
    assert_eq!(answer["restricts_sequence"], base.sequence);

    // What clients fetch now is a stop order restricting the document the offline key
    // signed: entry 0 held at 5% (verified, it reads as that document with the stop).
    let held = env.live_document();
    assert_eq!(held.sequence, base.sequence + 1);
    assert_eq!(
        held.entries, base.entries,
        "the entries the offline key signed"
    );
    assert_eq!(
        held.restricts.as_ref().unwrap().stops,
        [Stop::Hold {
            entry: 0,
            percent: 5
        }]
    );
    assert_eq!(
        base_rollout.percent_at(held.issued_at + Duration::days(3)),
        100
    );

    let status = env.status();
    let channel = &status["channels"][0];
    assert_eq!(channel["restricts_sequence"], base.sequence, "{channel}");
    assert_eq!(channel["guard_actions"][0]["action"], "freeze");
    assert_eq!(channel["entries"][0]["rollout"]["percent_now"], 5);
    let human = env.packer(&["status", "--server", &env.packd.url]);
    let text = stdout(&human);
    assert!(
        text.contains(&format!(
            "stop order: signed by the guard key, restricting sequence {}",
            base.sequence
        )),
        "{text}"
    );
    assert!(
        text.contains(
            "froze entry 0 (clients *): 1.1.0 held at 5%, the installs above it to 1.0.0"
        ),
        "{text}"
    );
    assert!(
        text.contains("resuming takes the signing key: packer release stable --resume '*'"),
        "{text}"
    );

    // The guard key cannot resume: a guard document that widens is refused before publishing.
    let wider = {
        // The order as the guard signs it: no entries or guard key of its own.
        let mut doc = held.clone();
        doc.entries.clear();
        doc.guard = None;
        doc.sequence += 1;
        doc.restricts.as_mut().unwrap().stops[0] = Stop::Hold {
            entry: 0,
            percent: 25,
        };
        let guard_key = SigningKey::load(&env.path("guard/guard.key"), None).unwrap();
        doc.sign(&guard_key).unwrap()
    };
    let (status, answer) = put(&env, &wider);
    assert_eq!(status, 422, "{answer}");
    assert_eq!(answer["error"]["code"], "invalid_document", "{answer}");
    assert!(
        answer["error"]["message"]
            .as_str()
            .unwrap()
            .contains("holds entry 0 at 25% where its rollout stood at 5%"),
        "{answer}"
    );
    assert_eq!(env.live_document(), held);

    // Resumed a second or more after the freeze, so the shift is visible.
    while now() <= held.issued_at {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let resumed = env.release(&["--resume", "*", "--yes"]);
    assert_ok(&resumed);
    let err = stderr(&resumed);
    assert!(err.contains("ramp: 5% now, 25% at"), "{err}");
    let doc = env.live_document();
    assert_eq!(doc.sequence, held.sequence + 1);
    assert!(doc.restricts.is_none(), "signed with the offline key again");
    assert_eq!(doc.guard, base.guard, "the guard key stays named");
    let rollout = doc.entries[0].rollout.clone().unwrap();
    let ramp = rollout.ramp.clone().expect("the ramp is back");
    let base_ramp = base_rollout.ramp.clone().unwrap();
    let stood_frozen = doc.issued_at - held.issued_at;
    assert!(stood_frozen >= Duration::seconds(1));
    assert_eq!(ramp.start, base_ramp.start + stood_frozen);
    assert_eq!(ramp.steps, base_ramp.steps);
    assert_eq!(rollout.percent, base_rollout.percent);
    assert_eq!(rollout.salt, base_rollout.salt);
    assert_eq!(rollout.watch, base_rollout.watch);
    // It continues from 5% now; the next step lands as late as the freeze lasted.
    assert_eq!(rollout.percent_at(doc.issued_at), 5);
    assert_eq!(
        ramp.landings()[1],
        (base_ramp.landings()[1].0 + stood_frozen, 25)
    );

    // Nothing is frozen any more.
    let again = env.release(&["--resume", "*", "--yes"]);
    assert_fails(&again);
    assert!(
        stderr(&again).contains("not a stop order of the guard: no guard froze anything"),
        "{}",
        stderr(&again)
    );
    assert_eq!(env.live_document().sequence, doc.sequence);
}

#[test]
fn a_guard_key_the_channel_did_not_delegate_to_is_refused_and_nothing_changes() {
    let env = Env::start();
    guarded_channel(&env);
    let base = ramp_started_90_minutes_ago(&env);
    let other = env.path("other");
    assert_ok(&env.packer(&["keygen", "--guard", "--dir", s(&other)]));

    let refused = guard(&env, "freeze", "other/guard.key", &["--entry", "0"]);
    assert_fails(&refused);
    let err = stderr(&refused);
    assert!(
        err.contains("would be refused by clients; nothing was published"),
        "{err}"
    );
    assert!(err.contains("delegates to"), "{err}");
    assert_eq!(env.live_document(), base);

    // The same document sent to packd directly: refused there too.
    let live = live_signed(&env);
    let document = guard_document(&live, &base, 0, GuardAction::Freeze, now()).unwrap();
    let key = SigningKey::load(&other.join("guard.key"), None).unwrap();
    let (status, answer) = put(&env, &document.sign(&key).unwrap());
    assert_eq!(status, 422, "{answer}");
    assert_eq!(answer["error"]["code"], "invalid_signature", "{answer}");
    assert_eq!(env.live_document(), base);
    assert!(env.status()["channels"][0]["restricts_sequence"].is_null());

    // The delegated key rolls the entry back to what it replaced.
    let rolled = json(&guard(
        &env,
        "rollback",
        "guard/guard.key",
        &["--entry", "0"],
    ));
    assert_eq!(rolled["change"]["from"], "1.1.0", "{rolled}");
    assert_eq!(rolled["change"]["to"], "1.0.0", "{rolled}");
    // After a rollback there is nothing to resume: the hint starts the rollout again.
    assert_eq!(
        rolled["undo"],
        "starting again takes the signing key: packer release stable --ramp '*=1.1.0@1%..100%/72h'",
        "{rolled}"
    );
    let doc = env.live_document();
    assert_eq!(
        doc.restricts.as_ref().unwrap().stops,
        [Stop::Revert { entry: 0 }]
    );
    let resume = env.release(&["--resume", "*", "--yes"]);
    assert_fails(&resume);
    assert!(
        stderr(&resume).contains("there is no rollout to resume"),
        "{}",
        stderr(&resume)
    );
}
