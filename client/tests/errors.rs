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

#[test]
fn show_of_a_missing_key_points_to_dump_which_prints_every_file_as_sha256sum_does() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("client.toml"), "[updates]\n").unwrap();
    let out = pack_client(dir.path(), &["show", "shared/persona.md"]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        String::from_utf8_lossy(&out.stderr),
        "error: pack builtin 0.0.0 has no file \"shared/persona.md\"; `pack-client dump` lists \
         every file of the pack that serves\n"
    );

    let out = pack_client(dir.path(), &["dump"]);
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    let mut lines = text.lines();
    assert!(
        lines
            .next()
            .unwrap()
            .starts_with("pack builtin 0.0.0 (builtin, sequence 0, sha256 "),
        "{text}"
    );
    let persona = std::fs::read(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../packs/builtin/shared/persona.hbs"),
    )
    .unwrap();
    let line = format!("{}  shared/persona.hbs", pack_format::sha256_hex(&persona));
    assert!(lines.any(|l| l == line), "{text}");

    // --json is where the JSON is.
    let out = pack_client(dir.path(), &["--json", "dump"]);
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["meta"]["name"], "builtin");
}

#[test]
fn without_cache_the_platform_cache_directory_is_used_and_without_home_the_fix_is_named() {
    let home = tempfile::tempdir().unwrap();
    let run = |envs: &[(&str, &std::path::Path)]| {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_pack-client"));
        cmd.arg("status")
            .current_dir(home.path())
            .env_remove("PROMPTPACK_CACHE")
            .env_remove("PROMPTPACK_CONFIG")
            .env_remove("XDG_CACHE_HOME")
            .env_remove("HOME");
        for (name, value) in envs {
            cmd.env(name, value);
        }
        cmd.output().unwrap()
    };
    let out = run(&[("HOME", home.path())]);
    assert!(out.status.success(), "{out:?}");
    assert!(
        home.path()
            .join(".cache/promptpack/pack-client/install-id")
            .is_file()
    );
    let xdg = home.path().join("xdg");
    let out = run(&[("HOME", home.path()), ("XDG_CACHE_HOME", &xdg)]);
    assert!(out.status.success(), "{out:?}");
    assert!(xdg.join("promptpack/pack-client/install-id").is_file());

    let out = run(&[]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        String::from_utf8_lossy(&out.stderr),
        "error: no cache directory: HOME is not set (nor XDG_CACHE_HOME); give one with --cache \
         DIR or PROMPTPACK_CACHE\n"
    );
}
