//! The sandbox is only as strong as the kernel's Landlock ABI. Before ABI 3 `truncate(2)`
//! is not mediated, so a "read-only" command could empty any file the user owns: below
//! ABI 3 the agent counts commands as unconfined and asks about (or refuses) each one, as
//! without Landlock. `AGENT_LANDLOCK_ABI_MAX` makes the agent act as on an older kernel,
//! and can only lower what the kernel offers.
//!
//! Like `sandbox.rs`, these need a kernel with Landlock ABI 4 or later.

use crate::model_server;

use std::path::Path;
use std::process::Output;

use model_server::{ModelServer, exec, openai_calls, openai_text, outside_tmp};
use serde_json::{Value, json};

const ABI_MAX: &str = "AGENT_LANDLOCK_ABI_MAX";

fn results(out: &Output) -> Vec<(bool, String)> {
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|e| e["type"] == "tool_call_completed")
        .map(|e| {
            (
                e["is_error"].as_bool().unwrap(),
                e["output"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

fn bash(id: &str, command: &str) -> model_server::Reply {
    openai_calls(&[(id, "bash", json!({"command": command}))])
}

/// One `agent exec` session with `HOME` outside the workspace and `/tmp`.
fn run(home: &Path, work: &Path, abi_max: &str, commands: &[&str]) -> Output {
    let mut replies: Vec<_> = commands
        .iter()
        .enumerate()
        .map(|(i, c)| bash(&format!("b{i}"), c))
        .collect();
    replies.push(openai_text("finished"));
    let server = ModelServer::start(replies);
    let out = exec(
        &server,
        home,
        work,
        &[("HOME", home.to_str().unwrap()), (ABI_MAX, abi_max)],
        &["run the commands"],
    );
    server.assert_clean();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn doctor(home: &Path, work: &Path, abi_max: &str) -> String {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_agent"))
        .arg("doctor")
        .current_dir(work)
        .env("AGENT_HOME", home)
        .env(ABI_MAX, abi_max)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn probe(abi_max: &str) -> Value {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_agent"))
        .args(["sandbox-exec", "--probe"])
        .env(ABI_MAX, abi_max)
        .output()
        .unwrap();
    serde_json::from_slice(&out.stdout).unwrap()
}

/// A file outside the workspace and the temp directories that no command should change.
fn victim(home: &Path) -> std::path::PathBuf {
    let victim = home.join("victim.txt");
    std::fs::write(&victim, "precious\n").unwrap();
    victim
}

#[test]
fn below_abi_3_commands_count_as_unconfined() {
    let home = outside_tmp();
    let work = tempfile::tempdir().unwrap();
    let victim = victim(home.path());

    let report = doctor(home.path(), work.path(), "2");
    assert!(report.contains("sandbox: Landlock ABI 2"), "{report}");
    assert!(report.contains("file confinement: no"), "{report}");
    assert!(report.contains("truncate(2)"), "{report}");

    // `agent exec` (approval `never`) refuses every command, as without Landlock.
    let out = run(home.path(), work.path(), "2", &["echo hello"]);
    let refused = &results(&out)[0];
    assert!(refused.0, "{}", refused.1);
    assert!(
        refused
            .1
            .contains("commands cannot be sandboxed on this machine (Landlock ABI 2"),
        "{}",
        refused.1
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("warning: commands cannot be sandboxed here"),
        "{stderr}"
    );

    // The launcher itself refuses to run a command it cannot confine.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_agent"))
        .args(["sandbox-exec", "--network", "--write"])
        .arg(work.path())
        .args(["--", "truncate", "-s", "0"])
        .arg(&victim)
        .env(ABI_MAX, "2")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(126), "{stderr}");
    assert!(stderr.contains("the command was not run"), "{stderr}");
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious\n");
}

#[test]
fn from_abi_3_commands_run_confined_and_cannot_truncate() {
    let home = outside_tmp();
    let work = tempfile::tempdir().unwrap();
    let victim = victim(home.path());

    let report = doctor(home.path(), work.path(), "3");
    assert!(report.contains("sandbox: Landlock ABI 3"), "{report}");
    assert!(report.contains("file confinement: yes"), "{report}");

    // ABI 3 has no TCP rules: with the network off, commands still need approval.
    let out = run(home.path(), work.path(), "3", &["echo hello"]);
    let refused = &results(&out)[0];
    assert!(
        refused.0 && refused.1.contains("network cannot be switched off"),
        "{}",
        refused.1
    );

    // With the network allowed they run in the sandbox, which mediates truncation.
    std::fs::write(
        home.path().join("config.toml"),
        "[permissions]\nnetwork = true\n",
    )
    .unwrap();
    let truncate = format!("truncate -s 0 {}", victim.display());
    let out = run(
        home.path(),
        work.path(),
        "3",
        &[&truncate, "echo y > inside.txt && cat inside.txt"],
    );
    let results = results(&out);
    assert!(
        results[0].1.starts_with("exit code: 1") && results[0].1.contains("Permission denied"),
        "{}",
        results[0].1
    );
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious\n");
    assert!(results[1].1.starts_with("exit code: 0"), "{}", results[1].1);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("sandbox: Landlock ABI 3"), "{stderr}");
}

/// The knob lowers, never raises; a value it cannot read means no sandbox (more
/// questions, never fewer).
#[test]
fn the_override_only_lowers() {
    let kernel = probe("")["abi"].as_u64().unwrap();
    assert!(kernel >= 4, "these tests need Landlock ABI 4+");
    assert_eq!(probe("99")["abi"].as_u64(), Some(kernel.min(7)));
    assert_eq!(probe("3")["abi"].as_u64(), Some(3));
    let garbled = probe("two");
    assert_eq!(garbled["abi"].as_u64(), Some(0), "{garbled}");
    assert!(
        garbled["reason"].as_str().unwrap().contains(ABI_MAX),
        "{garbled}"
    );
}
