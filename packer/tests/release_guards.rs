//! `packer release` stops before it shows or signs anything when the release could only go
//! wrong: a token packd does not take, a channel name packd does not have, a version
//! uploaded under another pack name.

use crate::common;

use common::packd::{Env, TOKEN};
use common::{assert_fails, assert_ok, s, stderr, stdout, write_required_templates};

/// `packer release CHANNEL --server URL --keys KEYS ARGS` with `token`.
fn release_on(env: &Env, channel: &str, args: &[&str], token: &str) -> std::process::Output {
    let keys = env.keys();
    let mut all = vec![
        "release",
        channel,
        "--server",
        &env.packd.url,
        "--keys",
        s(&keys),
    ];
    all.extend_from_slice(args);
    env.packer_with_token(&all, Some(token))
}

#[test]
fn a_token_packd_does_not_take_fails_before_the_diff_and_the_signature() {
    let env = Env::start();
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

    let wrong = release_on(&env, "stable", &["--pin", "*=1.1.0", "--yes"], "ppt_wrong");
    assert_fails(&wrong);
    let err = stderr(&wrong);
    assert!(
        err.contains("the token was refused before anything was signed or published"),
        "{err}"
    );
    assert!(
        err.contains(&format!("{} does not know this token", env.packd.url)),
        "{err}"
    );
    assert!(err.contains("missing or unknown bearer token"), "{err}");
    // Neither the change nor a signature: the run stopped at the token.
    assert!(!err.contains("entries (first match wins)"), "{err}");
    assert!(!err.contains("sequence 1 -> 2"), "{err}");
    assert!(wrong.stdout.is_empty(), "{}", stdout(&wrong));
    assert_eq!(env.live_document().sequence, 1);
}

#[test]
fn a_channel_name_packd_does_not_have_is_refused_with_the_names_it_has() {
    let env = Env::start();
    assert_ok(&env.publish(&env.build("1.0.0", "prompts-1.0.0.pack")));
    assert_ok(&env.release(&[
        "--new-channel",
        "--pack",
        "prompts",
        "--pin",
        "*=1.0.0",
        "--yes",
    ]));

    // A typo in a command copied with its --pack.
    let typo = release_on(
        &env,
        "stabel",
        &["--pack", "prompts", "--pin", "*=1.0.0", "--yes"],
        TOKEN,
    );
    assert_fails(&typo);
    let err = stderr(&typo);
    assert!(
        err.contains(&format!(
            "channel stabel does not exist on {} (channels there: stable (pack prompts))",
            env.packd.url
        )),
        "{err}"
    );
    assert!(err.contains("--new-channel"), "{err}");
    assert!(!err.contains("entries (first match wins)"), "{err}");
    let channels = env.status()["channels"].as_array().unwrap().clone();
    assert_eq!(channels.len(), 1, "{channels:?}");

    // --new-channel is for a new channel only.
    let exists = env.release(&["--new-channel", "--pin", "*=1.0.0", "--yes"]);
    assert_fails(&exists);
    assert!(
        stderr(&exists).contains("channel stable already exists"),
        "{}",
        stderr(&exists)
    );
    assert_eq!(env.live_document().sequence, 1);

    // With it, the new channel is made.
    assert_ok(&release_on(
        &env,
        "beta",
        &[
            "--new-channel",
            "--pack",
            "prompts",
            "--pin",
            "*=1.0.0",
            "--yes",
        ],
        TOKEN,
    ));
    assert_eq!(env.status()["channels"].as_array().unwrap().len(), 2);
}

#[test]
fn a_version_uploaded_under_another_pack_name_is_named() {
    let env = Env::start();
    assert_ok(&env.publish(&env.build("1.0.0", "prompts-1.0.0.pack")));
    assert_ok(&env.release(&[
        "--new-channel",
        "--pack",
        "prompts",
        "--pin",
        "*=1.0.0",
        "--yes",
    ]));

    // A copy of the pack directory, built without --name: the pack is named after it.
    let copy = env.path("mypack");
    write_required_templates(&copy);
    let out = env.path("dist/mypack-1.1.0.pack");
    let keys = env.keys();
    let built = env.packer(&[
        "build",
        s(&copy),
        "--version",
        "1.1.0",
        "--keys",
        s(&keys),
        "-o",
        s(&out),
    ]);
    assert_ok(&built);
    assert!(
        stdout(&built).contains(&format!(
            "name      mypack (from the directory name {}; pass --name NAME to choose)",
            s(&copy)
        )),
        "{}",
        stdout(&built)
    );
    assert_ok(&env.publish(&out));

    let refused = env.release(&["--pin", "*=1.1.0", "--yes"]);
    assert_fails(&refused);
    let err = stderr(&refused);
    assert!(
        err.contains(&format!(
            "pack prompts 1.1.0 is not on {} (versions there: 1.0.0); mypack 1.1.0 is, but channel stable serves pack prompts",
            env.packd.url
        )),
        "{err}"
    );
    assert!(err.contains("--name prompts --version 1.1.0"), "{err}");
    assert_eq!(env.live_document().sequence, 1);

    // On a new channel the pack name is the one given: the hint is the other name.
    let new_channel = release_on(
        &env,
        "beta",
        &[
            "--new-channel",
            "--pack",
            "prompts",
            "--pin",
            "*=1.1.0",
            "--yes",
        ],
        TOKEN,
    );
    assert_fails(&new_channel);
    let err = stderr(&new_channel);
    assert!(
        err.contains("mypack 1.1.0 is — did you mean --pack mypack?"),
        "{err}"
    );
    assert_eq!(env.status()["channels"].as_array().unwrap().len(), 1);
}
