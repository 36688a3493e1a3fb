//! Approvals in the interactive session, through a pseudo-terminal: a call outside the
//! mode shows the exact diff or command and waits; "allow once" runs it once, "allow for
//! this session" runs it and its repeats without asking again, and "deny" sends the
//! user's reason to the model.

use crate::model_server;
use crate::pty;

use model_server::{ModelServer, openai_calls, openai_text, outside_tmp};
use serde_json::json;

#[test]
fn once_for_the_session_and_denied_with_a_reason() {
    let home = tempfile::tempdir().unwrap();
    let work = tempfile::tempdir().unwrap();
    // Outside the workspace and the temp directories.
    let outside = outside_tmp();
    let once = outside.path().join("once.txt");
    let denied = outside.path().join("denied.txt");
    let marker = outside.path().join("marker");
    let touch = format!("touch {}", marker.display());
    let escape = |id: &str| {
        openai_calls(&[(
            id,
            "bash",
            json!({"command": touch, "outside_sandbox": true, "reason": "the marker lives outside"}),
        )])
    };
    let server = ModelServer::start(vec![
        openai_calls(&[("w1", "write", json!({"path": once, "content": "hello\n"}))]),
        escape("b1"),
        escape("b2"),
        openai_calls(&[("w2", "write", json!({"path": denied, "content": "no\n"}))]),
        openai_text("All done."),
    ]);
    let steps = json!([
        ["", "commands: /init"],
        ["do it\r", "+hello"],
        ["", "allow write once.txt? [o/s/d]"],
        ["o\r", &format!("$ {touch}")],
        ["", "the model says: the marker lives outside"],
        ["", "allow bash touch"],
        ["s\r", "allowed by you for this session"],
        ["", "allow write denied.txt? [o/s/d]"],
        ["d\r", "reason for the model"],
        ["keep it in the workspace\r", "All done."],
        [
            "/permissions\r",
            &format!("allowed for this session: `bash: {touch}` (allowed by you for this session)")
        ],
        ["/exit\r", "saved"],
    ]);
    let out = pty::drive(
        &steps,
        work.path(),
        &[
            ("AGENT_HOME", home.path().to_str().unwrap()),
            ("AGENT_BASE_URL", &server.openai_base()),
            ("AGENT_API", "openai"),
            ("AGENT_MODEL", "test-model"),
        ],
        &[],
    );
    let screen = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}\n---\n{screen}",
        String::from_utf8_lossy(&out.stderr)
    );
    server.assert_clean();
    assert_eq!(server.remaining(), 0);
    // Asked three times: the repeat of the command allowed for the session was not asked.
    assert_eq!(screen.matches("needs your approval").count(), 3, "{screen}");
    assert_eq!(std::fs::read_to_string(&once).unwrap(), "hello\n");
    assert!(marker.exists());
    assert!(!denied.exists());
    // The model read the user's reason as the result of the denied call.
    let last = server.requests().last().unwrap().body["messages"].to_string();
    assert!(last.contains("the user denied this call"), "{last}");
    assert!(
        last.contains("Their reason: keep it in the workspace"),
        "{last}"
    );
}

/// `agent exec --approval ask` asks at the terminal the same way; without a terminal it
/// refuses to start rather than wait for an answer nobody can give.
#[test]
fn exec_asks_only_when_told_to_and_only_at_a_terminal() {
    let home = tempfile::tempdir().unwrap();
    let work = tempfile::tempdir().unwrap();
    let outside = outside_tmp();
    let target = outside.path().join("asked.txt");
    let server = ModelServer::start(vec![
        openai_calls(&[("w1", "write", json!({"path": target, "content": "yes\n"}))]),
        openai_text("Written after asking."),
    ]);
    let env = [
        ("AGENT_HOME", home.path().to_str().unwrap()),
        ("AGENT_BASE_URL", &server.openai_base()),
        ("AGENT_API", "openai"),
        ("AGENT_MODEL", "test-model"),
    ];
    let steps = json!([
        ["", "allow write asked.txt? [o/s/d]"],
        ["o\r", "Written after asking."],
    ]);
    let out = pty::drive(
        &steps,
        work.path(),
        &env,
        &["exec", "--approval", "ask", "write it"],
    );
    let screen = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{screen}");
    assert_eq!(std::fs::read_to_string(&target).unwrap(), "yes\n");

    let out = std::process::Command::new(env!("CARGO_BIN_EXE_agent"))
        .args(["exec", "--approval", "ask", "write it"])
        .current_dir(work.path())
        .envs(env)
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains("--approval ask needs a terminal"),
        "{stderr}"
    );
    assert_eq!(server.remaining(), 0);
}
