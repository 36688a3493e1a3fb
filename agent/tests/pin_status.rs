//! `agent packs status` says why a pinned version is not what is served, instead of
//! leaving the user to wonder why refreshes report `not_modified`.

use std::process::Command;

#[test]
fn a_pin_that_is_not_installed_says_what_is_served_instead() {
    let home = tempfile::tempdir().unwrap();
    std::fs::write(
        home.path().join("config.toml"),
        "[updates]\nserver = \"http://127.0.0.1:1\"\npin = \"1.3.0\"\n",
    )
    .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_agent"))
        .args(["packs", "status"])
        .env("AGENT_HOME", home.path())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let status = String::from_utf8_lossy(&out.stdout);
    assert!(
        status
            .contains("pin 1.3.0 is not installed; serving 0.0.0 until the channel offers 1.3.0\n"),
        "{status}"
    );
}

#[test]
fn pinning_a_version_without_its_patch_number_says_which_number_is_missing() {
    let home = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_agent"))
        .args(["packs", "pin", "1.2"])
        .env("AGENT_HOME", home.path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.starts_with(
            "error: invalid value '1.2' for '<VERSION>': malformed version: expected \
             MAJOR.MINOR.PATCH such as 1.2.0, found \"1.2\": the patch number is missing\n"
        ),
        "{err}"
    );
}
