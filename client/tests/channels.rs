//! One `pack-client` following several channels (`[[channels]]`): every channel its own
//! cache under `<cache>/channels/<name>`, `status` and `refresh` naming each, and the
//! commands that read one snapshot taking `--channel`.

use crate::ports;

use std::path::Path;
use std::process::{Command, Output};

fn pack_client(dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_pack-client"))
        .args(["--cache", "cache", "--config", "client.toml"])
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap()
}

#[test]
fn each_channel_is_named_and_one_snapshot_is_read_from_the_channel_given() {
    let dir = tempfile::tempdir().unwrap();
    let port = ports::unassigned_port();
    std::fs::write(
        dir.path().join("client.toml"),
        format!(
            "[updates]\nattempts = 1\n[targets.codex]\nuser_dir = \"home/.codex\"\n\
             [[channels]]\nname = \"org\"\nserver = \"http://127.0.0.1:{port}\"\nchannel = \"org\"\n\
             [[channels]]\nname = \"team-payments\"\nchannel = \"payments\"\n"
        ),
    )
    .unwrap();

    // The first start: every channel projected into the targets, none reported missing
    // (each channel's view is there by the time the status is taken).
    let out = pack_client(dir.path(), &["--json", "status"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    // (Both built-in packs ship `skills/init`: that refusal is the rule for a name two
    // channels ship, not a missing view.)
    for channel in doc["channels"].as_array().unwrap() {
        for refused in channel["targets"]["refused"].as_array().unwrap() {
            let reason = refused["reason"].as_str().unwrap();
            assert!(!reason.contains("not projected"), "{reason}");
            assert!(reason.contains("one channel only"), "{reason}");
        }
    }

    // `status` covers both, in order, each from its own cache.
    let out = pack_client(dir.path(), &["status"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let (org, team) = (text.find("[org]\n"), text.find("[team-payments]\n"));
    assert!(matches!((org, team), (Some(a), Some(b)) if a < b), "{text}");
    assert!(text.contains("channel   org (sequence 0)"), "{text}");
    assert!(text.contains("channel   payments (sequence 0)"), "{text}");
    for name in ["org", "team-payments"] {
        let cache = dir.path().join("cache/channels").join(name);
        assert!(cache.join("install-id").exists(), "{}", cache.display());
    }

    // `refresh`: the org's server refuses, the team has none; each said once, with its
    // name and its own cause, in order.
    let out = pack_client(dir.path(), &["refresh"]);
    assert_eq!(out.status.code(), Some(3));
    let stderr = String::from_utf8_lossy(&out.stderr);
    let org = stderr.find("org: refresh failed: request to http://127.0.0.1");
    let team = stderr.find("team-payments: refresh failed: no server configured");
    assert!(
        matches!((org, team), (Some(a), Some(b)) if a < b),
        "{stderr}"
    );
    assert_eq!(stderr.matches("Connection refused").count(), 1, "{stderr}");
    let json = pack_client(dir.path(), &["--json", "refresh"]);
    let doc: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    assert_eq!(doc["ok"], false);
    let names: Vec<&serde_json::Value> = doc["channels"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| &c["name"])
        .collect();
    assert_eq!(names, ["org", "team-payments"], "{doc}");
    assert_eq!(doc["channels"][0]["status"]["channel"], "org");

    // One snapshot: the channel must be named, and must exist.
    let out = pack_client(dir.path(), &["dump"]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("several channels (org, team-payments): name one with --channel NAME"),
        "{stderr}"
    );
    let out = pack_client(dir.path(), &["--channel", "team-payments", "dump"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).starts_with("pack builtin"));
    let out = pack_client(dir.path(), &["--channel", "sales", "dump"]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(
            "--channel sales: the config has no such channel; its channels: org, team-payments"
        ),
        "{stderr}"
    );
}
