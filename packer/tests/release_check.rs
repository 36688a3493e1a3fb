//! `packer release` signs nothing that names a pack clients would refuse: every pack version
//! the new document names that the live one does not is downloaded and opened the way a
//! client opens it, before anything is shown, signed or published.

use crate::common;

use common::packd::Env;
use common::{assert_fails, assert_ok, s, stderr, stdout};
use std::path::PathBuf;

use pack_format::EntryTarget;

/// A pack of `prompts/` plus a template that does not fit the contract, built with
/// `--no-validate` and published without keys: what an older packer, or a hurried CI job,
/// leaves on packd.
fn publish_unchecked_broken_pack(env: &Env, version: &str) -> PathBuf {
    let bad_template = env.path("prompts/shared/bad.hbs");
    std::fs::create_dir_all(bad_template.parent().unwrap()).unwrap();
    std::fs::write(&bad_template, "{{nope}}\n").unwrap();
    let out = env.path(&format!("dist/broken-{version}.pack"));
    let keys = env.keys();
    let prompts = env.path("prompts");
    assert_ok(&env.packer(&[
        "build",
        s(&prompts),
        "--name",
        "prompts",
        "--version",
        version,
        "--keys",
        s(&keys),
        "--no-validate",
        "-o",
        s(&out),
    ]));
    std::fs::remove_file(&bad_template).unwrap();
    assert_ok(&env.publish(&out));
    out
}

#[test]
fn a_pack_that_fails_the_contract_is_not_released() {
    let env = Env::start();
    publish_unchecked_broken_pack(&env, "1.0.0");

    let refused = env.release(&[
        "--new-channel",
        "--pack",
        "prompts",
        "--pin",
        "*=1.0.0",
        "--yes",
    ]);
    assert_fails(&refused);
    let err = stderr(&refused);
    assert!(
        err.contains("shared/bad.hbs:1: unknown variable 'nope'"),
        "{err}"
    );
    assert!(
        err.contains("not releasing channel stable: nothing was signed or published"),
        "{err}"
    );
    assert!(
        err.contains("publish the fixed pack under the same version"),
        "{err}"
    );
    // Refused before the change is even shown.
    assert!(!err.contains("entries (first match wins)"), "{err}");
    assert!(refused.stdout.is_empty(), "{}", stdout(&refused));
    assert_eq!(env.status()["channels"].as_array().unwrap().len(), 0);

    // The version was not burned: the fix goes out under 1.0.0.
    let fixed = env.build("1.0.0", "prompts-1.0.0.pack");
    assert_ok(&env.publish(&fixed));
    assert_ok(&env.release(&[
        "--new-channel",
        "--pack",
        "prompts",
        "--pin",
        "*=1.0.0",
        "--yes",
    ]));
    let live = env.live_document();
    assert_eq!(live.sequence, 1);
    let EntryTarget::Pack(target) = &live.entries[0].target else {
        panic!("expected a pack entry: {live:?}");
    };
    assert_eq!(target.version.to_string(), "1.0.0");
}

#[test]
fn a_pack_sealed_for_a_content_key_clients_do_not_hold_is_not_released() {
    let env = Env::start();
    let good = env.build("1.0.0", "prompts-1.0.0.pack");
    assert_ok(&env.publish(&good));
    assert_ok(&env.release(&[
        "--new-channel",
        "--pack",
        "prompts",
        "--pin",
        "*=1.0.0",
        "--yes",
    ]));

    // 1.1.0 sealed with a second key set's content key, which the clients do not hold.
    let other = env.path("other-keys");
    assert_ok(&env.packer(&["keygen", "--dir", s(&other)]));
    let stray = env.path("dist/prompts-1.1.0.pack");
    let prompts = env.path("prompts");
    assert_ok(&env.packer(&[
        "build",
        s(&prompts),
        "--name",
        "prompts",
        "--version",
        "1.1.0",
        "--keys",
        s(&other),
        "-o",
        s(&stray),
    ]));
    assert_ok(&env.publish(&stray));

    let refused = env.release(&["--rollout", "*=1.1.0@10", "--yes"]);
    assert_fails(&refused);
    let err = stderr(&refused);
    assert!(
        err.contains(&format!(
            "pack prompts 1.1.0 on {} does not open with the content keys given",
            env.packd.url
        )),
        "{err}"
    );
    assert!(err.contains("no content key for this pack"), "{err}");
    assert!(err.contains("nothing was signed or published"), "{err}");
    let live = env.live_document();
    assert_eq!(live.sequence, 1);
    assert_eq!(live.entries.len(), 1);
}

#[test]
fn no_verify_releases_unchecked_and_says_so() {
    let env = Env::start();
    publish_unchecked_broken_pack(&env, "1.0.0");

    let released = env.release(&[
        "--new-channel",
        "--pack",
        "prompts",
        "--pin",
        "*=1.0.0",
        "--no-verify",
        "--yes",
    ]);
    assert_ok(&released);
    assert!(
        stderr(&released)
            .contains("warning: --no-verify: pack prompts 1.0.0 was not downloaded or opened"),
        "{}",
        stderr(&released)
    );
    assert_eq!(env.live_document().sequence, 1);

    // A release that names no new version opens nothing, so it needs no --no-verify.
    let dates = env.release(&["--expires", "10d", "--yes"]);
    assert_ok(&dates);
    let err = stderr(&dates);
    assert!(
        !err.contains("checked") && !err.contains("warning"),
        "{err}"
    );
    assert_eq!(env.live_document().sequence, 2);
}
