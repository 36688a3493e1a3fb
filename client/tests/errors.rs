//! What a person sees when `pack-client` fails: the cause once (a refused connection says
//! "Connection refused", not reqwest's "error sending request for url"), a missing key file
//! by the path tried, no backtrace even with `RUST_BACKTRACE=1`, no colour codes in a pipe.

use crate::ports;

use std::path::Path;
use std::process::{Command, Output};

fn pack_client(dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_pack-client"))
        .args(["--cache", "cache", "--config", "client.toml"])
        .args(args)
        .current_dir(dir)
        .env("RUST_BACKTRACE", "1")
        .env_remove("NO_COLOR")
        .output()
        .unwrap()
}

#[test]
fn a_refused_connection_is_reported_once_with_its_cause() {
    let dir = tempfile::tempdir().unwrap();
    let port = ports::unassigned_port();
    std::fs::write(
        dir.path().join("client.toml"),
        format!("[updates]\nserver = \"http://127.0.0.1:{port}\"\nattempts = 1\n"),
    )
    .unwrap();
    let out = pack_client(dir.path(), &["refresh"]);
    // 3: the refresh failed, the previous pack still serves (docs/CLIENT.md, "Exit codes").
    assert_eq!(out.status.code(), Some(3));
    assert_eq!(
        String::from_utf8_lossy(&out.stderr),
        format!(
            "refresh failed: request to http://127.0.0.1:{port}/v1/channels/stable failed: \
             Connection refused (os error 111)\nstill serving builtin 0.0.0 (builtin)\n"
        )
    );

    // Scripts reading `--json` get the same reason.
    let json = pack_client(dir.path(), &["--json", "refresh"]);
    let doc: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    assert_eq!(
        doc["error"],
        format!(
            "request to http://127.0.0.1:{port}/v1/channels/stable failed: \
             Connection refused (os error 111)"
        )
    );
}

#[test]
fn a_missing_key_file_names_the_path_tried_and_how_it_resolved() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("client.toml"),
        "[updates]\nserver = \"http://127.0.0.1:1\"\ntrusted_keys = [\"keys/signing.pub\"]\n",
    )
    .unwrap();
    let out = pack_client(dir.path(), &["status"]);
    assert_eq!(out.status.code(), Some(1));
    let base = std::path::absolute(dir.path()).unwrap();
    assert_eq!(
        String::from_utf8_lossy(&out.stderr),
        format!(
            "error: config client.toml: trusted key \"keys/signing.pub\": key file \
             {}/keys/signing.pub: no such file (relative key paths resolve against {})\n",
            base.display(),
            base.display()
        )
    );
}

#[test]
fn an_inline_key_that_is_not_a_key_still_says_so() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("client.toml"),
        "[updates]\nserver = \"http://127.0.0.1:1\"\n\
         trusted_keys = [\"RWQAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA\"]\n",
    )
    .unwrap();
    let out = pack_client(dir.path(), &["status"]);
    assert_eq!(out.status.code(), Some(1));
    let text = String::from_utf8_lossy(&out.stderr);
    assert!(
        text.starts_with("error: config client.toml: trusted key \"RWQ")
            && text.contains("not a minisign public key"),
        "{text}"
    );
    assert!(!text.contains("no such file"), "{text}");
}
