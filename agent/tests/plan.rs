//! Plan mode through the real binary: the `plan` agent reads and writes only its plan
//! file, a reminder tells the model what it may do, and on `/build` the next reminder
//! says what it may do now and hands over the plan from the file.

use crate::model_server;
use crate::pty;

use model_server::{ModelServer, Reply, exec, openai_calls, openai_text};
use serde_json::{Value, json};

/// The plan file the runtime named in the conversation.
fn plan_path(body: &Value) -> String {
    let text = body["messages"].to_string();
    let start = text
        .find("Plan file: ")
        .expect("the plan reminder names the file")
        + 11;
    let rest = &text[start..];
    rest[..rest.find(" (").unwrap()].to_string()
}

fn write_plan(body: &Value) -> Reply {
    openai_calls(&[(
        "p1",
        "write",
        json!({"path": plan_path(body), "content": "1. add feature.txt\n2. check it\n"}),
    )])
}

fn results(stdout: &[u8]) -> Vec<(bool, String)> {
    String::from_utf8_lossy(stdout)
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

#[test]
fn the_plan_agent_writes_only_its_plan() {
    let home = tempfile::tempdir().unwrap();
    let work = tempfile::tempdir().unwrap();
    let server = ModelServer::start(vec![
        Reply::FromRequest(write_plan),
        openai_calls(&[(
            "w1",
            "write",
            json!({"path": work.path().join("feature.txt"), "content": "x\n"}),
        )]),
        openai_calls(&[("b1", "bash", json!({"command": "echo y > inside.txt"}))]),
        openai_text("The plan is written."),
    ]);
    let out = exec(
        &server,
        home.path(),
        work.path(),
        &[],
        &["--agent", "plan", "plan it"],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    server.assert_clean();
    let requests = server.requests();
    let first = requests[0].body["messages"].to_string();
    assert!(first.contains("Plan mode is on"), "{first}");
    let plan = plan_path(&requests[0].body);
    assert!(plan.starts_with(&work.path().join(".agents/plans").display().to_string()));
    assert_eq!(
        std::fs::read_to_string(&plan).unwrap(),
        "1. add feature.txt\n2. check it\n"
    );
    let results = results(&out.stdout);
    assert!(!results[0].0, "{}", results[0].1);
    // Anything else is outside the plan agent's read-only ceiling.
    assert!(results[1].0, "{}", results[1].1);
    assert!(
        results[1].1.contains("this agent's ceiling is `read-only`"),
        "{}",
        results[1].1
    );
    assert!(!work.path().join("feature.txt").exists());
    assert!(
        results[2].1.contains("Permission denied"),
        "{}",
        results[2].1
    );
    assert!(!work.path().join("inside.txt").exists());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("plan mode: the plan goes to"), "{stderr}");
}

#[test]
fn plan_then_build_in_the_interactive_session() {
    let home = tempfile::tempdir().unwrap();
    let work = tempfile::tempdir().unwrap();
    let feature = work.path().join("feature.txt");
    let server = ModelServer::start(vec![
        Reply::FromRequest(write_plan),
        openai_text("Plan ready; switch with /build."),
        openai_calls(&[("w1", "write", json!({"path": feature, "content": "done\n"}))]),
        openai_text("Built as planned."),
    ]);
    let steps = json!([
        ["", "commands: /init"],
        ["/build\r", "not in plan mode"],
        ["/plan\r", "plan mode: read-only"],
        ["plan the feature\r", "Plan ready"],
        ["/build\r", "build mode (workspace permissions)"],
        ["go ahead\r", "Built as planned."],
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
    assert!(out.status.success(), "{screen}");
    server.assert_clean();
    assert_eq!(server.remaining(), 0);
    let requests = server.requests();
    let planning = requests[0].body["messages"].to_string();
    assert!(planning.contains("Plan mode is on"), "{planning}");
    // Building: told what it may do now, and given the plan from the file.
    let building = requests[2].body["messages"].as_array().unwrap();
    let reminder = building
        .iter()
        .rev()
        .filter_map(|m| m["content"].as_str())
        .find(|c| c.contains("Plan mode is over"))
        .expect("the build reminder");
    assert!(
        reminder.contains("<plan>\n1. add feature.txt\n2. check it\n</plan>"),
        "{reminder}"
    );
    assert!(
        !building.last().unwrap()["content"]
            .to_string()
            .contains("Plan mode is on")
    );
    assert_eq!(std::fs::read_to_string(&feature).unwrap(), "done\n");
    // No question was needed: the plan file in plan mode, the workspace when building.
    assert!(!screen.contains("needs your approval"), "{screen}");
    // The transcript says which agent each turn ran as.
    let session = std::fs::read_dir(home.path().join("sessions"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|e| e == "jsonl"))
        .unwrap();
    let agents: Vec<String> = std::fs::read_to_string(session)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|r| r["kind"] == "turn")
        .map(|r| r["prompt"]["agent"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(agents, ["plan", "plan", "mavis", "mavis"]);
}
