//! `agent exec` end to end: the real binary against the scripted model server. The model
//! reads a file, edits it and runs a command; the file changes on disk, the session file
//! holds the whole exchange, and `--resume` continues it with the full history.

use crate::model_server;

use std::path::Path;
use std::process::{Command, Output};

use model_server::{ModelServer, Reply};
use serde_json::Value;

fn agent(home: &Path, cwd: &Path, base_url: &str, api: &str, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_agent"))
        .arg("exec")
        .args(args)
        .current_dir(cwd)
        .env("AGENT_HOME", home)
        .env("AGENT_BASE_URL", base_url)
        .env("AGENT_API", api)
        .env("AGENT_MODEL", "test-model")
        .env_remove("AGENT_API_KEY")
        .output()
        .unwrap()
}

fn events(output: &Output) -> Vec<Value> {
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect()
}

fn records(home: &Path, id: &str) -> Vec<Value> {
    let text = std::fs::read_to_string(home.join("sessions").join(format!("{id}.jsonl"))).unwrap();
    text.lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn of_kind<'a>(records: &'a [Value], kind: &str) -> Vec<&'a Value> {
    records.iter().filter(|r| r["kind"] == kind).collect()
}

fn read_edit_run_resume(api: &str) {
    let home = tempfile::tempdir().unwrap();
    let work = tempfile::tempdir().unwrap();
    let dir = work.path().to_str().unwrap();
    std::fs::write(work.path().join("greeting.txt"), "Hello, world\n").unwrap();
    std::fs::write(work.path().join("other.txt"), "unrelated\n").unwrap();
    let vars = [("DIR", dir)];
    let server = ModelServer::start(
        ["1_read_and_glob", "2_edit", "3_bash", "4_done"]
            .iter()
            .map(|step| Reply::fixture(&format!("{api}_{step}.sse"), &vars))
            .collect(),
    );
    let base = if api == "openai" {
        server.openai_base()
    } else {
        server.addr.clone()
    };

    let out = agent(
        home.path(),
        work.path(),
        &base,
        api,
        &["--json", "Change the greeting to promptpack"],
    );
    assert!(
        out.status.success(),
        "stderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    server.assert_clean();
    assert_eq!(server.remaining(), 0);
    assert_eq!(
        std::fs::read_to_string(work.path().join("greeting.txt")).unwrap(),
        "Hello, promptpack\n"
    );

    let events = events(&out);
    let kinds: Vec<&str> = events.iter().map(|e| e["type"].as_str().unwrap()).collect();
    assert_eq!(kinds[0], "session_started");
    assert_eq!(*kinds.last().unwrap(), "session_finished");
    assert_eq!(kinds.iter().filter(|k| **k == "turn_completed").count(), 4);
    let completed: Vec<&Value> = events
        .iter()
        .filter(|e| e["type"] == "tool_call_completed")
        .collect();
    let names: Vec<&str> = completed
        .iter()
        .map(|e| e["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["read", "glob", "edit", "bash"]);
    assert!(
        completed.iter().all(|e| e["is_error"] == false),
        "{completed:?}"
    );
    let bash = completed[3]["output"].as_str().unwrap();
    assert!(
        bash.starts_with("exit code: 0\n") && bash.contains("Hello, promptpack\nexit-ok"),
        "{bash}"
    );
    let usage = &events
        .iter()
        .find(|e| e["type"] == "turn_completed")
        .unwrap()["usage"];
    assert_eq!(usage["input_tokens"], 1890);
    let last_message = events
        .iter()
        .rfind(|e| e["type"] == "assistant_message")
        .unwrap();
    assert_eq!(
        last_message["text"],
        "The greeting now says \"Hello, promptpack\"."
    );

    // What the model saw: the read result with line numbers, then the edit's confirmation.
    let requests = server.requests();
    assert_eq!(requests.len(), 4);
    let second = requests[1].body.to_string();
    assert!(second.contains("1|Hello, world"), "{second}");
    let system = if api == "openai" {
        requests[0].body["messages"][0]["content"]
            .as_str()
            .unwrap()
            .to_string()
    } else {
        requests[0].body["system"][0]["text"]
            .as_str()
            .unwrap()
            .to_string()
    };
    assert!(system.contains("Mavis"), "the pack's prompt is sent");
    let tools: Vec<&str> = requests[0].body["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            t["function"]["name"]
                .as_str()
                .or(t["name"].as_str())
                .unwrap()
        })
        .collect();
    assert_eq!(
        tools,
        [
            "read",
            "write",
            "edit",
            "bash",
            "task_query",
            "task_output",
            "task_stop",
            "grep",
            "glob",
            "todowrite",
            "web_fetch",
            "skill",
            "task",
            "record_note",
            "recall_notes"
        ]
    );

    let id = events[0]["session_id"].as_str().unwrap().to_string();
    let stored = records(home.path(), &id);
    assert_eq!(stored[0]["kind"], "session");
    assert_eq!(of_kind(&stored, "turn").len(), 4);
    assert!(of_kind(&stored, "turn")[0]["prompt"]["prompt_sha256"].is_string());
    assert_eq!(of_kind(&stored, "usage").len(), 4);
    let messages = of_kind(&stored, "message");
    let roles: Vec<&str> = messages
        .iter()
        .map(|m| m["message"]["role"].as_str().unwrap())
        .collect();
    assert_eq!(
        roles,
        [
            "user",
            "assistant",
            "tool",
            "tool",
            "assistant",
            "tool",
            "assistant",
            "tool",
            "assistant"
        ]
    );

    // Resume: the next request carries the whole history and the new question.
    server.push(Reply::fixture(&format!("{api}_5_resumed.sse"), &[]));
    let out = agent(
        home.path(),
        work.path(),
        &base,
        api,
        &["--json", "--resume", &id, "Anything left?"],
    );
    assert!(
        out.status.success(),
        "stderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    server.assert_clean();
    let resumed = server.requests().pop().unwrap().body;
    let sent = resumed["messages"].as_array().unwrap();
    let last = sent.last().unwrap().to_string();
    assert!(last.contains("Anything left?"), "{last}");
    assert!(resumed.to_string().contains("Hello, promptpack"));
    if api == "openai" {
        assert_eq!(
            sent.len(),
            1 + 9 + 1,
            "system, the first run, the new question"
        );
    }
    let stored = records(home.path(), &id);
    assert_eq!(of_kind(&stored, "message").len(), 11);
    assert_eq!(of_kind(&stored, "turn").last().unwrap()["turn"], 5);
}

#[test]
fn openai_read_edit_run_and_resume() {
    read_edit_run_resume("openai");
}

#[test]
fn anthropic_read_edit_run_and_resume() {
    read_edit_run_resume("anthropic");
}

#[test]
fn readable_output_streams_the_answer_to_stdout() {
    let home = tempfile::tempdir().unwrap();
    let work = tempfile::tempdir().unwrap();
    let server = ModelServer::start(vec![Reply::fixture("openai_4_done.sse", &[])]);
    let out = agent(
        home.path(),
        work.path(),
        &server.openai_base(),
        "openai",
        &["Say something"],
    );
    assert!(out.status.success());
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "The greeting now says \"Hello, promptpack\".\n"
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("done · session"), "{stderr}");
}

#[test]
fn a_failing_server_is_reported_and_the_session_kept() {
    let home = tempfile::tempdir().unwrap();
    let work = tempfile::tempdir().unwrap();
    let server = ModelServer::start(vec![Reply::Status {
        status: 401,
        retry_after: None,
        body: r#"{"error":{"message":"invalid api key"}}"#.into(),
    }]);
    let out = agent(
        home.path(),
        work.path(),
        &server.openai_base(),
        "openai",
        &["--json", "hi"],
    );
    assert!(!out.status.success());
    let events = events(&out);
    let error = events.iter().find(|e| e["type"] == "error").unwrap();
    assert!(
        error["message"]
            .as_str()
            .unwrap()
            .contains("invalid api key")
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("--resume"), "{stderr}");
}

#[cfg(unix)]
#[test]
fn ctrl_c_stops_the_step_saves_the_session_and_resume_continues() {
    use std::io::BufRead;
    let home = tempfile::tempdir().unwrap();
    let work = tempfile::tempdir().unwrap();
    let server = ModelServer::start(vec![Reply::fixture("openai_sleep.sse", &[])]);
    let mut child = Command::new(env!("CARGO_BIN_EXE_agent"))
        .args(["exec", "--json", "Wait a while"])
        .current_dir(work.path())
        .env("AGENT_HOME", home.path())
        .env("AGENT_BASE_URL", server.openai_base())
        .env("AGENT_API", "openai")
        .env("AGENT_MODEL", "test-model")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let started = std::time::Instant::now();
    let mut lines = std::io::BufReader::new(child.stdout.take().unwrap()).lines();
    let mut session_id = String::new();
    for line in lines.by_ref() {
        let event: Value = serde_json::from_str(&line.unwrap()).unwrap();
        if event["type"] == "session_started" {
            session_id = event["session_id"].as_str().unwrap().to_string();
        }
        if event["type"] == "tool_call_started" {
            break;
        }
    }
    // Once the shell runs (its first command leaves a file), press Ctrl-C.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while !work.path().join("started").exists() {
        assert!(
            child.try_wait().unwrap().is_none(),
            "the agent exited before the shell started"
        );
        assert!(
            std::time::Instant::now() < deadline,
            "the shell never started"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    let rest: Vec<Value> = lines
        .map(|l| serde_json::from_str(&l.unwrap()).unwrap())
        .collect();
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(130));
    assert!(
        started.elapsed() < std::time::Duration::from_secs(20),
        "sleep 30 was stopped"
    );
    let done = rest
        .iter()
        .find(|e| e["type"] == "tool_call_completed")
        .unwrap();
    assert_eq!(done["is_error"], true);
    assert!(done["output"].as_str().unwrap().contains("interrupted"));
    assert_eq!(rest.last().unwrap()["reason"], "interrupted");

    let stored = records(home.path(), &session_id);
    assert_eq!(of_kind(&stored, "interrupted").len(), 1);
    let roles: Vec<&str> = of_kind(&stored, "message")
        .iter()
        .map(|m| m["message"]["role"].as_str().unwrap())
        .collect();
    assert_eq!(roles, ["user", "assistant", "tool"]);

    server.push(Reply::fixture("openai_5_resumed.sse", &[]));
    let out = agent(
        home.path(),
        work.path(),
        &server.openai_base(),
        "openai",
        &["--json", "--resume", &session_id, "Go on"],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    server.assert_clean();
}
