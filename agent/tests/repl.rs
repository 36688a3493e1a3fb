//! The interactive session driven through a pseudo-terminal (python3's `pty`): answers
//! stream, tool calls show as they run, Ctrl-C stops the step and not the program, slash
//! commands work, and line history is saved.

use crate::model_server;

use std::process::Command;

use model_server::{ModelServer, Reply, openai_calls, openai_text};
use serde_json::json;

/// Runs `agent` on a pty, sending each step's input and waiting for its expected text.
const DRIVER: &str = r#"
import json, os, pty, select, sys, time
steps = json.loads(sys.argv[1])
pid, fd = pty.fork()
if pid == 0:
    os.execv(sys.argv[2], [sys.argv[2]])
seen = b""
def read_until(needle, timeout=20):
    global seen
    deadline = time.time() + timeout
    while needle.encode() not in seen:
        left = deadline - time.time()
        if left <= 0:
            sys.stdout.write(seen.decode(errors="replace"))
            sys.exit("timed out waiting for %r" % needle)
        ready, _, _ = select.select([fd], [], [], left)
        if ready:
            try:
                chunk = os.read(fd, 4096)
            except OSError:
                chunk = b""
            if not chunk:
                sys.stdout.write(seen.decode(errors="replace"))
                sys.exit("the program ended before %r" % needle)
            seen += chunk
for send, expect in steps:
    if send:
        os.write(fd, send.encode())
    if expect:
        read_until(expect)
_, status = os.waitpid(pid, 0)
sys.stdout.write(seen.decode(errors="replace"))
sys.exit(os.waitstatus_to_exitcode(status))
"#;

#[test]
fn interactive_session_through_a_pty() {
    let home = tempfile::tempdir().unwrap();
    let work = tempfile::tempdir().unwrap();
    std::fs::write(work.path().join("a.txt"), "x").unwrap();
    let stall = json!({"choices": [{"index": 0, "delta": {"content": "thinking..."}, "finish_reason": null}]});
    let server = ModelServer::start(vec![
        openai_text("Hi there, streamed."),
        openai_calls(&[("c1", "glob", json!({"pattern": "*.txt"}))]),
        openai_text("Found a.txt."),
        Reply::Stall(format!("data: {stall}\n\n")),
        openai_text("Still here after the interrupt."),
    ]);
    let steps = json!([
        ["", "commands: /init"],
        ["hello\r", "Hi there, streamed."],
        ["list the text files\r", "→ glob"],
        ["", "Found a.txt."],
        ["think hard\r", "thinking..."],
        ["\u{3}", "interrupted, saved"],
        ["are you there?\r", "Still here after the interrupt."],
        ["/agents\r", "verifier"],
        ["/packs\r", "serving: builtin"],
        ["/nope\r", "unknown command /nope"],
        ["/exit\r", "saved"],
    ]);
    let out = Command::new("python3")
        .arg("-c")
        .arg(DRIVER)
        .arg(steps.to_string())
        .arg(env!("CARGO_BIN_EXE_agent"))
        .current_dir(work.path())
        .env("AGENT_HOME", home.path())
        .env("AGENT_BASE_URL", server.openai_base())
        .env("AGENT_API", "openai")
        .env("AGENT_MODEL", "test-model")
        .env("TERM", "xterm")
        .env_remove("AGENT_API_KEY")
        .output()
        .unwrap();
    let screen = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}\n---\n{screen}",
        String::from_utf8_lossy(&out.stderr)
    );
    server.assert_clean();
    assert_eq!(server.remaining(), 0);
    // One conversation: the turn after the interrupt still carries the first exchange.
    let requests = server.requests();
    let last = requests.last().unwrap().body["messages"].to_string();
    assert!(
        last.contains("hello") && last.contains("Found a.txt."),
        "{last}"
    );
    let history = std::fs::read_to_string(home.path().join("history.txt")).unwrap();
    assert!(history.contains("list the text files"), "{history}");
}

#[test]
fn a_session_without_a_model_serves_the_commands_that_need_none() {
    let home = tempfile::tempdir().unwrap();
    let work = tempfile::tempdir().unwrap();
    let steps = json!([
        [
            "",
            "no model configured (`base_url` and `model` are not set"
        ],
        ["/agents\r", "verifier"],
        ["/prompt\r", "# Harness"],
        ["/packs\r", "serving: builtin"],
        [
            "hello\r",
            "a message needs a model: `base_url` and `model` are not set"
        ],
        ["/init\r", "/init needs a model"],
        ["/exit\r", "saved"],
    ]);
    let out = Command::new("python3")
        .arg("-c")
        .arg(DRIVER)
        .arg(steps.to_string())
        .arg(env!("CARGO_BIN_EXE_agent"))
        .current_dir(work.path())
        .env("AGENT_HOME", home.path())
        .env("TERM", "xterm")
        .env_remove("AGENT_BASE_URL")
        .env_remove("AGENT_MODEL")
        .env_remove("AGENT_API")
        .env_remove("AGENT_API_KEY")
        .output()
        .unwrap();
    let screen = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}\n---\n{screen}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        screen.contains("set AGENT_BASE_URL and AGENT_MODEL"),
        "{screen}"
    );
    // Nothing was written into the workspace by a refused /init.
    assert!(!work.path().join("AGENTS.md").exists());
}

/// `/mode`, `/agent` and `/model` switch the session from the next turn on and are kept in
/// the transcript; a slow first token shows a spinner with the elapsed time; Ctrl-C's
/// notice lands on its own line after a half-streamed answer.
#[test]
fn switching_mode_agent_and_model_mid_session_through_a_pty() {
    let home = tempfile::tempdir().unwrap();
    let work = tempfile::tempdir().unwrap();
    let text = |t: &str| match openai_text(t) {
        Reply::Sse(sse) => sse,
        _ => unreachable!(),
    };
    let partial = json!({"choices": [{"index": 0, "delta": {"content": "partial answer"}, "finish_reason": null}]});
    let server = ModelServer::start(vec![
        openai_text("Hi from tui."),
        openai_text("Hi from coding."),
        openai_text("Hi from worker."),
        Reply::Delayed {
            wait: std::time::Duration::from_millis(2500),
            sse: text("Finally, from the other model."),
        },
        Reply::Stall(format!("data: {partial}\n\n")),
    ]);
    let steps = json!([
        ["", "commands: /init"],
        ["hello\r", "Hi from tui."],
        ["/mode coding\r", "mode: coding (from the next turn)"],
        ["again\r", "Hi from coding."],
        [
            "/agent worker\r",
            "agent: worker · model test-model (from the next turn)"
        ],
        ["do the work\r", "Hi from worker."],
        [
            "/model other-model\r",
            "model: other-model (from the next turn)"
        ],
        ["slow one\r", "waiting for the model · 1s"],
        ["", "Finally, from the other model."],
        ["stream then stop\r", "partial answer"],
        ["\u{3}", "interrupted, saved"],
        ["/agent nobody\r", "unknown agent \"nobody\""],
        ["/exit\r", "saved"],
    ]);
    let out = Command::new("python3")
        .arg("-c")
        .arg(DRIVER)
        .arg(steps.to_string())
        .arg(env!("CARGO_BIN_EXE_agent"))
        .current_dir(work.path())
        .env("AGENT_HOME", home.path())
        .env("AGENT_BASE_URL", server.openai_base())
        .env("AGENT_API", "openai")
        .env("AGENT_MODEL", "test-model")
        .env("TERM", "xterm")
        .env_remove("AGENT_API_KEY")
        .output()
        .unwrap();
    let screen = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}\n---\n{screen}",
        String::from_utf8_lossy(&out.stderr)
    );
    server.assert_clean();
    let requests = server.requests();
    let system = |i: usize| model_server::system_of(&requests[i]);
    assert!(system(0).contains("You work in a terminal session next to the user"));
    assert!(
        system(1).contains("inside a desktop coding workspace"),
        "{}",
        system(1)
    );
    assert!(system(2).starts_with("You are `worker`") || system(2).contains("You are `worker`"));
    let tools = model_server::tools_of(&requests[2]);
    assert!(
        !tools.contains(&"task".to_string()),
        "a worker cannot delegate: {tools:?}"
    );
    assert!(
        requests[2].body["messages"]
            .to_string()
            .contains("switched this session to the agent `worker`"),
        "the model is told"
    );
    assert_eq!(requests[2].body["model"], "test-model");
    assert_eq!(requests[3].body["model"], "other-model");
    // The whole conversation carries across the switches.
    let last = requests[4].body["messages"].to_string();
    assert!(last.contains("Hi from tui.") && last.contains("Finally, from the other model."));
    // The interrupt notice is on a line of its own.
    assert!(
        screen.contains("\ninterrupted, saved") && !screen.contains("^Cinterrupted"),
        "{screen}"
    );

    let sessions: Vec<_> = std::fs::read_dir(home.path().join("sessions"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    let transcript = std::fs::read_to_string(&sessions[0]).unwrap();
    let steers: Vec<serde_json::Value> = transcript
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .filter(|r| r["kind"] == "steer")
        .collect();
    assert_eq!(steers.len(), 3, "{transcript}");
    assert_eq!(steers[0]["mode"], "coding");
    assert_eq!(steers[1]["agent"], "worker");
    assert_eq!(steers[2]["model"], "other-model");
    assert_eq!(steers[2]["after_turn"], 3);
}
