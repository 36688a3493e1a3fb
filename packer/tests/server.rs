//! `packer publish`, `release` and `status` against a real `packd` process.

use crate::common;

use common::packd::{Env, TOKEN, json};
use common::{assert_fails, assert_ok, s, stderr, stdout};
use std::path::Path;
use std::process::{Command, Stdio};

use pack_format::EntryTarget;

#[test]
fn publish_is_new_then_idempotent_then_refuses_other_bytes_for_the_same_version() {
    let env = Env::start();
    let pack = env.build("1.0.0", "prompts-1.0.0.pack");

    let first = json(&env.publish(&pack));
    assert_eq!(first["name"], "prompts");
    assert_eq!(first["version"], "1.0.0");
    assert_eq!(first["created"], true);
    let sha256 = pack_format::sha256_hex(&std::fs::read(&pack).unwrap());
    assert_eq!(first["sha256"], sha256.as_str());

    let again = json(&env.publish(&pack));
    assert_eq!(again["created"], false);
    assert_eq!(again["sha256"], sha256.as_str());

    let human = env.packer(&["publish", s(&pack), "--server", &env.packd.url]);
    assert_ok(&human);
    assert!(
        stdout(&human).contains("already there"),
        "{}",
        stdout(&human)
    );

    // Once released, same name and version with new random bytes are refused.
    assert_ok(&env.release(&[
        "--new-channel",
        "--pack",
        "prompts",
        "--pin",
        "*=1.0.0",
        "--yes",
    ]));
    let rebuilt = env.build("1.0.0", "prompts-1.0.0-again.pack");
    let conflict = env.publish(&rebuilt);
    assert_fails(&conflict);
    let err = stderr(&conflict);
    assert!(err.contains("already on"), "{err}");
    assert!(err.contains("--version 1.0.1"), "{err}");
    assert!(err.contains("version_exists"), "{err}");
    assert!(conflict.stdout.is_empty());

    // Not a pack at all: refused locally, before any upload.
    let junk = env.path("junk.pack");
    std::fs::write(&junk, b"not a pack").unwrap();
    let refused = env.publish(&junk);
    assert_fails(&refused);
    assert!(
        stderr(&refused).contains("is not a sealed pack"),
        "{}",
        stderr(&refused)
    );
    let status = env.status();
    assert_eq!(status["packs"][0]["versions"].as_array().unwrap().len(), 1);
}

#[test]
fn pin_rollout_and_rollback_publish_signed_documents_that_status_shows() {
    let env = Env::start();
    let v1 = env.build("1.0.0", "prompts-1.0.0.pack");
    let v2 = env.build("1.1.0", "prompts-1.1.0.pack");
    assert_ok(&env.publish(&v1));
    assert_ok(&env.publish(&v2));

    // A new channel needs --new-channel and --pack.
    let no_pack = env.release(&["--new-channel", "--pin", "*=1.0.0", "--yes"]);
    assert_fails(&no_pack);
    assert!(stderr(&no_pack).contains("--pack"), "{}", stderr(&no_pack));

    // A version that was never uploaded is named, with what is there.
    let missing = env.release(&[
        "--new-channel",
        "--pack",
        "prompts",
        "--pin",
        "*=9.9.9",
        "--yes",
    ]);
    assert_fails(&missing);
    assert!(
        stderr(&missing).contains("1.0.0, 1.1.0"),
        "{}",
        stderr(&missing)
    );

    let pinned = json(&env.release(&[
        "--new-channel",
        "--pack",
        "prompts",
        "--pin",
        "*=1.0.0",
        "--yes",
    ]));
    assert_eq!(pinned["sequence"], 1);
    let live = env.live_document();
    assert_eq!(live.sequence, 1);
    assert_eq!(live.entries.len(), 1);
    let EntryTarget::Pack(target) = &live.entries[0].target else {
        panic!("expected a pack entry: {live:?}");
    };
    assert_eq!(target.version.to_string(), "1.0.0");
    assert_eq!(
        target.sha256,
        pack_format::sha256_hex(&std::fs::read(&v1).unwrap())
    );

    let status = env.status();
    let channel = &status["channels"][0];
    assert_eq!(channel["channel"], "stable");
    assert_eq!(channel["sequence"], 1);
    assert_eq!(channel["expired"], false);
    assert_eq!(channel["entries"][0]["clients"], "*");
    assert_eq!(channel["entries"][0]["version"], "1.0.0");
    let versions = &status["packs"][0]["versions"];
    assert_eq!(versions[0]["live_in"][0], "stable (*)");
    assert_eq!(versions[1]["live_in"].as_array().unwrap().len(), 0);

    // Staged rollout of 1.1.0: 10%, then 50% with the same salt.
    assert_ok(&env.release(&["--rollout", "*=1.1.0@10", "--yes"]));
    let ten = env.live_document();
    assert_eq!(ten.sequence, 2);
    assert_eq!(ten.entries.len(), 2);
    let rollout_10 = ten.entries[0].rollout.clone().expect("rollout entry first");
    assert_eq!(rollout_10.percent, 10);
    assert!(ten.entries[1].rollout.is_none());

    assert_ok(&env.release(&["--rollout", "*=1.1.0@50%", "--yes"]));
    let fifty = env.live_document();
    assert_eq!(fifty.sequence, 3);
    assert_eq!(fifty.entries.len(), 2);
    let rollout_50 = fifty.entries[0].rollout.clone().unwrap();
    assert_eq!(rollout_50.percent, 50);
    assert_eq!(rollout_50.salt, rollout_10.salt);
    let status = env.status();
    assert_eq!(
        status["channels"][0]["entries"][0]["rollout"]["percent"],
        50
    );
    assert_eq!(
        status["packs"][0]["versions"][1]["live_in"][0],
        "stable (* at 50%)"
    );

    // Emergency: everyone back to the built-in pack, at a higher sequence.
    assert_ok(&env.release(&["--rollback", "*=builtin", "--yes"]));
    let rolled_back = env.live_document();
    assert_eq!(rolled_back.sequence, 4);
    assert_eq!(rolled_back.entries.len(), 1);
    assert_eq!(rolled_back.entries[0].target, EntryTarget::Builtin);
    // The validity length of the earlier documents is kept.
    let validity = rolled_back.expires_at - rolled_back.issued_at;
    assert_eq!(validity, fifty.expires_at - fifty.issued_at);
    assert_eq!(
        env.status()["channels"][0]["entries"][0]["target"],
        "builtin"
    );
}

#[test]
fn release_refuses_without_confirmation_and_publish_without_a_token() {
    let env = Env::start();
    let v1 = env.build("1.0.0", "prompts-1.0.0.pack");
    assert_ok(&env.publish(&v1));

    // stdin is not a terminal and there is no --yes: nothing is published.
    let unconfirmed = env.release(&["--new-channel", "--pack", "prompts", "--pin", "*=1.0.0"]);
    assert_fails(&unconfirmed);
    let err = stderr(&unconfirmed);
    assert!(err.contains("not a terminal"), "{err}");
    assert!(err.contains("--yes"), "{err}");
    // The change was shown before refusing.
    assert!(err.contains("+ clients * -> pack 1.0.0"), "{err}");
    assert_eq!(env.status()["channels"].as_array().unwrap().len(), 0);

    // No token at all: refused before anything is sent.
    let none = env.packer_with_token(&["publish", s(&v1), "--server", &env.packd.url], None);
    assert_fails(&none);
    assert!(
        stderr(&none).contains("PROMPTPACK_TOKEN"),
        "{}",
        stderr(&none)
    );
}

#[test]
fn release_refuses_a_live_document_signed_by_an_untrusted_key() {
    let env = Env::start();
    let v1 = env.build("1.0.0", "prompts-1.0.0.pack");
    assert_ok(&env.publish(&v1));
    assert_ok(&env.release(&[
        "--new-channel",
        "--pack",
        "prompts",
        "--pin",
        "*=1.0.0",
        "--yes",
    ]));

    // Another publisher's key directory does not trust the live document's signer.
    let other = env.path("other-keys");
    assert_ok(&env.packer(&["keygen", "--dir", s(&other)]));
    let out = env.packer(&[
        "release",
        "stable",
        "--server",
        &env.packd.url,
        "--keys",
        s(&other),
        "--rollback",
        "*=builtin",
        "--yes",
    ]);
    assert_fails(&out);
    assert!(stderr(&out).contains("--trusted-key"), "{}", stderr(&out));
    assert_eq!(env.live_document().sequence, 1);
}

/// A TCP proxy in front of packd that runs `before_publish` once, just before forwarding
/// the first `PUT /v1/channels/...`: another publisher getting in first.
fn racing_proxy(upstream: &str, before_publish: impl FnOnce() + Send + 'static) -> String {
    use std::io::{Read, Write};
    use std::net::{TcpListener, TcpStream};
    use std::sync::{Arc, Mutex};

    let upstream = upstream
        .strip_prefix("http://")
        .expect("packd speaks http")
        .to_string();
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    type Hook = Box<dyn FnOnce() + Send>;
    let hook: Arc<Mutex<Option<Hook>>> = Arc::new(Mutex::new(Some(Box::new(before_publish))));
    std::thread::spawn(move || {
        for client in listener.incoming() {
            let Ok(mut client) = client else { return };
            let mut server = TcpStream::connect(&upstream).unwrap();
            let (mut client_read, mut server_write) =
                (client.try_clone().unwrap(), server.try_clone().unwrap());
            let hook = hook.clone();
            std::thread::spawn(move || {
                let mut buf = vec![0u8; 64 * 1024];
                loop {
                    let n = match client_read.read(&mut buf) {
                        Ok(0) | Err(_) => break,
                        Ok(n) => n,
                    };
                    if buf[..n].starts_with(b"PUT /v1/channels/")
                        && let Some(hook) = hook.lock().unwrap().take()
                    {
                        hook();
                    }
                    if server_write.write_all(&buf[..n]).is_err() {
                        break;
                    }
                }
                let _ = server_write.shutdown(std::net::Shutdown::Write);
            });
            std::thread::spawn(move || {
                let _ = std::io::copy(&mut server, &mut client);
                let _ = client.shutdown(std::net::Shutdown::Write);
            });
        }
    });
    url
}

#[test]
fn release_that_loses_a_race_says_so_and_publishes_nothing() {
    let env = std::sync::Arc::new(Env::start());
    let v1 = env.build("1.0.0", "prompts-1.0.0.pack");
    assert_ok(&env.publish(&v1));
    assert_ok(&env.release(&[
        "--new-channel",
        "--pack",
        "prompts",
        "--pin",
        "*=1.0.0",
        "--yes",
    ]));

    let other = env.clone();
    let proxy = racing_proxy(&env.packd.url, move || {
        // Straight to packd: sequence 2 goes live while the first run holds its own 2.
        assert_ok(&other.release(&["--rollback", "*=builtin", "--yes"]));
    });
    let keys = env.keys();
    let lost = env.packer(&[
        "release",
        "stable",
        "--server",
        &proxy,
        "--keys",
        s(&keys),
        "--rollout",
        "*=1.0.0@10",
        "--yes",
    ]);
    assert_fails(&lost);
    let err = stderr(&lost);
    assert!(
        err.contains("someone else released channel stable"),
        "{err}"
    );
    assert!(err.contains("Re-run"), "{err}");
    assert!(err.contains("stale_sequence"), "{err}");
    let live = env.live_document();
    assert_eq!(live.sequence, 2);
    assert_eq!(live.entries[0].target, EntryTarget::Builtin);
}

#[test]
fn release_at_the_sequence_limit_refuses_instead_of_wrapping() {
    let env = Env::start();
    // A channel already at the limit, signed with `packer channel`.
    let document = env.path("at-limit.json");
    let keys = env.keys();
    assert_ok(&env.packer(&[
        "channel",
        "--keys",
        s(&keys),
        "--channel",
        "stable",
        "--pack",
        "prompts",
        "--sequence",
        "9007199254740991",
        "--expires",
        "30d",
        "--entry",
        "*=builtin",
        "-o",
        s(&document),
    ]));
    // packd takes only the next sequence (live + 1), so the record is put into its data
    // directory as a publish would have left it after 2^53 − 1 releases.
    let text = std::fs::read_to_string(&document).unwrap();
    let record = serde_json::json!({
        "channel": "stable",
        "pack": "prompts",
        "sequence": 9_007_199_254_740_991u64,
        "sha256": pack_format::sha256_hex(text.as_bytes()),
        "key_id": "planted",
        "issued_at": "2026-01-01T00:00:00Z",
        "expires_at": "2099-01-01T00:00:00Z",
        "published_at": "2026-01-01T00:00:00Z",
        "document": text,
        "signature": std::fs::read_to_string(env.path("at-limit.json.minisig")).unwrap(),
    });
    let history = env.path("data/channels/stable/history");
    std::fs::create_dir_all(&history).unwrap();
    std::fs::write(
        history.join("00009007199254740991.json"),
        record.to_string(),
    )
    .unwrap();
    assert_eq!(env.live_document().sequence, 9_007_199_254_740_991);

    let refused = env.release(&["--rollback", "*=builtin", "--yes"]);
    assert_fails(&refused);
    let err = stderr(&refused);
    assert!(err.contains("is at sequence 9007199254740991"), "{err}");
    assert!(err.contains("new channel name"), "{err}");
    assert!(
        !err.contains("someone else released"),
        "a re-run cannot help: {err}"
    );
    // Nothing was published; the channel still serves its document.
    let live = env.live_document();
    assert_eq!(live.sequence, 9_007_199_254_740_991);
    assert_eq!(live.entries[0].target, EntryTarget::Builtin);
}

#[test]
fn the_next_step_publish_prints_works_on_a_new_channel() {
    let env = Env::start();
    let pack = env.build("1.0.0", "prompts-1.0.0.pack");
    let human = env.packer(&["publish", s(&pack), "--server", &env.packd.url]);
    assert_ok(&human);
    let out = stdout(&human);
    let next = out
        .lines()
        .find_map(|l| l.strip_prefix("next      "))
        .unwrap_or_else(|| panic!("no next line in {out}"));
    // The user fills in CHANNEL and DIR; the rest runs as printed.
    let command = next
        .replace("CHANNEL", "stable")
        .replace("DIR", s(&env.keys()))
        + " --yes";
    let run = Command::new("bash")
        .args(["-c", &command])
        .env(
            "PATH",
            format!(
                "{}:{}",
                Path::new(env!("CARGO_BIN_EXE_packer"))
                    .parent()
                    .unwrap()
                    .display(),
                std::env::var("PATH").unwrap_or_default()
            ),
        )
        .env("PROMPTPACK_TOKEN", TOKEN)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_ok(&run);
    assert_eq!(env.live_document().sequence, 1);
}

#[test]
fn every_release_says_when_it_expires_and_where_that_came_from() {
    let env = Env::start();
    for version in ["1.0.0", "1.1.0"] {
        let pack = env.build(version, &format!("prompts-{version}.pack"));
        assert_ok(&env.publish(&pack));
    }
    let keys = env.keys();
    let release = |extra: &[&str]| {
        let mut args = vec![
            "release",
            "stable",
            "--server",
            &env.packd.url,
            "--keys",
            s(&keys),
            "--yes",
        ];
        args.extend_from_slice(extra);
        let out = env.packer(&args);
        assert_ok(&out);
        let expires = pack_format::channel::format_time(env.live_document().expires_at);
        (stdout(&out), stderr(&out), expires)
    };

    // A new channel: 30 days, said to be the default.
    let (out, _, at) = release(&["--new-channel", "--pack", "prompts", "--pin", "*=1.0.0"]);
    assert!(
        out.contains(&format!(
            "\nexpires   {at} (in 30 days: 30 days, a new channel's validity without --expires)\n"
        )),
        "{out}"
    );

    // Under an hour is signed, with a warning that says what it means.
    let (out, err, at) = release(&["--expires", "5s"]);
    assert!(
        out.contains(&format!("\nexpires   {at} (in 5 seconds: --expires 5s)\n")),
        "{out}"
    );
    assert!(
        err.contains(&format!(
            "warning: --expires 5s: the document expires in 5 seconds ({at}); clients refuse it \
             after that and keep what they had until the next release, and a release without \
             --expires repeats the validity (an hour at least). Use an hour or more outside \
             tests\n"
        )),
        "{err}"
    );

    // The next release without --expires repeats it, raised to an hour, and says so.
    let (out, err, at) = release(&["--pin", "*=1.1.0"]);
    assert!(
        out.contains(&format!(
            "\nexpires   {at} (in 1 hour: no --expires: the live document's validity (5 seconds) \
             repeated, raised to the least a release repeats, 1 hour)\n"
        )),
        "{out}"
    );
    assert!(!err.contains("warning: --expires"), "{err}");
}
