//! The Landlock sandbox `bash` runs in, through the real `agent exec`: a command cannot
//! write outside the workspace (nor anything it starts), writes inside succeed, read-only
//! writes nowhere, the network is off unless allowed, and leaving the sandbox needs an
//! allow rule. Without a sandbox the agent says so once and refuses commands it cannot
//! confine. A sandboxed command has no controlling terminal, so it cannot type into the
//! user's shell.
//!
//! These tests need a kernel with Landlock (ABI 4 or later for the network ones); on one
//! without, the first test fails and says so, rather than passing while proving nothing.

use crate::model_server;
use crate::pty;

use std::path::Path;
use std::process::Output;

use model_server::{ModelServer, exec, openai_calls, openai_text, outside_tmp};
use serde_json::{Value, json};

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

/// Runs `commands` (one model step each) with `HOME` outside the workspace and `/tmp`.
fn run_commands(
    home: &Path,
    work: &Path,
    env: &[(&str, &str)],
    args: &[&str],
    replies: Vec<model_server::Reply>,
) -> Output {
    let mut replies = replies;
    replies.push(openai_text("done"));
    let server = ModelServer::start(replies);
    let home_str = home.to_str().unwrap();
    let mut env = env.to_vec();
    env.push(("HOME", home_str));
    let mut all = args.to_vec();
    all.push("run the commands");
    let out = exec(&server, home, work, &env, &all);
    server.assert_clean();
    out
}

#[test]
fn the_machine_has_landlock() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_agent"))
        .args(["sandbox-exec", "--probe"])
        .output()
        .unwrap();
    let probe: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(
        probe["abi"].as_u64().unwrap_or(0) >= 4,
        "these tests need Landlock ABI 4+ (file-system and TCP rules): {probe}"
    );
}

#[test]
fn a_command_cannot_write_outside_the_workspace() {
    let home = outside_tmp();
    let work = tempfile::tempdir().unwrap();
    let out = run_commands(
        home.path(),
        work.path(),
        &[],
        &[],
        vec![
            bash("b1", "bash -c 'echo x > $HOME/outside'"),
            // What the command starts is confined too, however it is started.
            bash(
                "b2",
                "python3 -c \"open('$HOME/by-python', 'w').write('x')\"",
            ),
            bash("b3", "echo y > inside.txt && cat inside.txt"),
        ],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let results = results(&out);
    let (_, first) = &results[0];
    assert!(first.starts_with("exit code: 1\n"), "{first}");
    assert!(first.contains("Permission denied"), "{first}");
    assert!(!home.path().join("outside").exists());
    assert!(results[1].1.contains("PermissionError"), "{}", results[1].1);
    assert!(!home.path().join("by-python").exists());
    // Inside the workspace the same kind of write works.
    assert!(
        results[2].1.starts_with("exit code: 0\n"),
        "{}",
        results[2].1
    );
    assert_eq!(
        std::fs::read_to_string(work.path().join("inside.txt")).unwrap(),
        "y\n"
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("sandbox: Landlock ABI"), "{stderr}");
}

#[test]
fn background_commands_are_sandboxed_too() {
    let home = outside_tmp();
    let work = tempfile::tempdir().unwrap();
    let out = run_commands(
        home.path(),
        work.path(),
        &[],
        &[],
        vec![
            openai_calls(&[(
                "b1",
                "bash",
                json!({"command": "echo x > $HOME/bg; echo exit=$?", "run_in_background": true}),
            )]),
            openai_calls(&[(
                "b2",
                "task_output",
                json!({"task_id": "bg-1", "wait": true, "timeout_ms": 5000}),
            )]),
        ],
    );
    let results = results(&out);
    assert!(
        results[1].1.contains("Permission denied"),
        "{}",
        results[1].1
    );
    assert!(!home.path().join("bg").exists());
}

#[test]
fn read_only_commands_write_nowhere() {
    let home = outside_tmp();
    let work = tempfile::tempdir().unwrap();
    let out = run_commands(
        home.path(),
        work.path(),
        &[],
        &["--permissions", "read-only"],
        vec![
            bash("b1", "ls; echo y > inside.txt"),
            bash("b2", "echo y > /tmp/ro-$$"),
        ],
    );
    let results = results(&out);
    assert!(
        results[0].1.contains("Permission denied"),
        "{}",
        results[0].1
    );
    assert!(!work.path().join("inside.txt").exists());
    assert!(
        results[1].1.contains("Permission denied"),
        "{}",
        results[1].1
    );
}

#[test]
fn the_network_is_off_unless_allowed() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let connect = format!("exec 3<>/dev/tcp/127.0.0.1/{port} && echo connected");
    let home = outside_tmp();
    let work = tempfile::tempdir().unwrap();
    let out = run_commands(
        home.path(),
        work.path(),
        &[],
        &[],
        vec![bash("b1", &connect)],
    );
    let off = &results(&out)[0].1;
    assert!(!off.contains("connected"), "{off}");
    assert!(off.contains("Permission denied"), "{off}");

    std::fs::write(
        home.path().join("config.toml"),
        "[permissions]\nnetwork = true\n",
    )
    .unwrap();
    let out = run_commands(
        home.path(),
        work.path(),
        &[],
        &[],
        vec![bash("b1", &connect)],
    );
    let on = &results(&out)[0].1;
    assert!(on.contains("connected"), "{on}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("network on"), "{stderr}");
}

/// Leaving the sandbox is refused under `never` unless an allow rule covers the exact
/// simple command; a compound command never matches an allow rule.
#[test]
fn leaving_the_sandbox_needs_a_rule() {
    let home = outside_tmp();
    let work = tempfile::tempdir().unwrap();
    let marker = home.path().join("marker");
    let touch = format!("touch {}", marker.display());
    let escape = |id: &str, command: &str| {
        openai_calls(&[(
            id,
            "bash",
            json!({"command": command, "outside_sandbox": true, "reason": "needs the home directory"}),
        )])
    };
    let out = run_commands(
        home.path(),
        work.path(),
        &[],
        &[],
        vec![escape("b1", &touch)],
    );
    let refused = &results(&out)[0];
    assert!(refused.0, "{}", refused.1);
    assert!(refused.1.contains("outside the sandbox"), "{}", refused.1);
    assert!(
        refused.1.contains(&format!("bash: {touch}")),
        "{}",
        refused.1
    );
    assert!(!marker.exists());

    std::fs::write(
        home.path().join("config.toml"),
        "[permissions]\nallow = [\"bash: touch *\"]\n",
    )
    .unwrap();
    let sneaky = format!("{touch}; touch {}-2", marker.display());
    let out = run_commands(
        home.path(),
        work.path(),
        &[],
        &[],
        vec![escape("b1", &sneaky), escape("b2", &touch)],
    );
    let results = results(&out);
    assert!(
        results[0].0,
        "a compound command matched an allow rule: {}",
        results[0].1
    );
    assert!(!results[1].0, "{}", results[1].1);
    assert!(marker.exists());
    assert!(!home.path().join("marker-2").exists());
}

#[test]
fn without_a_sandbox_commands_need_approval_and_the_session_says_so_once() {
    let home = outside_tmp();
    let work = tempfile::tempdir().unwrap();
    let out = run_commands(
        home.path(),
        work.path(),
        &[("AGENT_SANDBOX", "off")],
        &[],
        vec![
            bash("b1", "echo hi"),
            openai_calls(&[("t1", "task", json!({"agent": "worker", "task": "run echo"}))]),
            bash("c1", "echo from the helper"),
            openai_text("the helper could not run it"),
        ],
    );
    let results = results(&out);
    assert!(results[0].0, "{}", results[0].1);
    assert!(
        results[0]
            .1
            .contains("commands cannot be sandboxed on this machine"),
        "{}",
        results[0].1
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        stderr.matches("commands cannot be sandboxed here").count(),
        1,
        "{stderr}"
    );
}

/// The launcher starts a new session, so a sandboxed command has no controlling terminal:
/// it cannot open `/dev/tty` and push keystrokes into the user's shell with `TIOCSTI`
/// (the class of CVE-2017-5226). Run on a real pseudo-terminal, as a user would.
#[test]
fn a_sandboxed_command_cannot_open_the_terminal() {
    let home = outside_tmp();
    let work = tempfile::tempdir().unwrap();
    let server = ModelServer::start(vec![
        // `$((6*7))` so the marker appears only if the command printed it.
        bash("b1", "exec 3</dev/tty && echo \"tty-open-$((6*7))\""),
        openai_text("all finished"),
    ]);
    let home_str = home.path().to_str().unwrap();
    let base = server.openai_base();
    let out = pty::drive(
        &json!([["", "all finished"]]),
        work.path(),
        &[
            ("AGENT_HOME", home_str),
            ("HOME", home_str),
            ("AGENT_BASE_URL", &base),
            ("AGENT_API", "openai"),
            ("AGENT_MODEL", "test-model"),
        ],
        &["exec", "--json", "open the terminal"],
    );
    let screen = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{screen}");
    server.assert_clean();
    let result = screen
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l.trim()).ok())
        .find(|e| e["type"] == "tool_call_completed")
        .unwrap_or_else(|| panic!("no tool result: {screen}"));
    let output = result["output"].as_str().unwrap();
    assert!(!output.contains("tty-open-42"), "{output}");
    assert!(
        output.contains("/dev/tty: No such device or address"),
        "{output}"
    );
}

/// The launcher's new session is also the command's process group, so a timeout still
/// kills everything the command started.
#[test]
fn a_timeout_kills_the_sandboxed_command_and_its_children() {
    let home = outside_tmp();
    let work = tempfile::tempdir().unwrap();
    let out = run_commands(
        home.path(),
        work.path(),
        &[],
        &[],
        vec![openai_calls(&[(
            "b1",
            "bash",
            json!({"command": "sleep 300 & echo $! > child.pid; sleep 300", "timeout_ms": 1000}),
        )])],
    );
    let result = &results(&out)[0].1;
    assert!(result.contains("timed out"), "{result}");
    let pid = std::fs::read_to_string(work.path().join("child.pid")).unwrap();
    let proc_dir = Path::new("/proc").join(pid.trim());
    model_server::wait_for("the background sleep to be killed", || {
        // Gone, or a zombie waiting for its new parent to reap it.
        std::fs::read_to_string(proc_dir.join("stat")).map_or(true, |stat| stat.contains(") Z "))
    });
}
