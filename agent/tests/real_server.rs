//! What a real server (llama.cpp's llama-server) exposed, replayed by the scripted server
//! through the real binary: a tool call cut off mid-arguments, a 5xx that says the request
//! is bad, an answer cut off by the length limit, and a task larger than the context.

use crate::model_server;

use model_server::{ModelServer, Reply, exec, openai_calls, openai_text};
use serde_json::{Value, json};

fn events(stdout: &[u8]) -> Vec<Value> {
    String::from_utf8_lossy(stdout)
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

fn session_id(stdout: &[u8]) -> String {
    events(stdout)
        .into_iter()
        .find(|e| e["type"] == "session_started")
        .unwrap()["session_id"]
        .as_str()
        .unwrap()
        .to_string()
}

/// A call whose arguments stop at `{"path":` because the answer hit the length limit, as
/// llama-server streams it.
fn cut_off_call() -> Reply {
    let call = json!({"choices": [{"index": 0, "delta": {"tool_calls": [{
        "index": 0, "id": "w1", "type": "function",
        "function": {"name": "write", "arguments": "{\"path\":"}
    }]}, "finish_reason": null}]});
    let done = json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "length"}],
        "usage": {"prompt_tokens": 100, "completion_tokens": 64}});
    Reply::Sse(format!("data: {call}\n\ndata: {done}\n\ndata: [DONE]\n\n"))
}

#[test]
fn a_tool_call_cut_off_mid_arguments_is_answered_and_never_sent_back_broken() {
    let home = tempfile::tempdir().unwrap();
    let work = tempfile::tempdir().unwrap();
    let server = ModelServer::start(vec![
        cut_off_call(),
        openai_text("I will write it in parts."),
    ]);
    let out = exec(
        &server,
        home.path(),
        work.path(),
        &[],
        &["write a big file"],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    server.assert_clean();
    let second = &server.requests()[1].body["messages"];
    let assistant = second
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["role"] == "assistant")
        .unwrap();
    assert_eq!(assistant["tool_calls"][0]["function"]["arguments"], "{}");
    let result = second
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["role"] == "tool")
        .unwrap()["content"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        result.contains("cut off by the output limit") && result.contains("{\"path\":"),
        "{result}"
    );
    assert!(!work.path().join("{").exists());
    let warnings: Vec<Value> = events(&out.stdout)
        .into_iter()
        .filter(|e| e["type"] == "warning")
        .collect();
    assert!(
        warnings[0]["message"]
            .as_str()
            .unwrap()
            .contains("cut off in the middle of a tool call"),
        "{warnings:?}"
    );
}

#[test]
fn a_session_stored_with_a_broken_call_resumes_with_its_arguments_replaced() {
    let home = tempfile::tempdir().unwrap();
    let work = tempfile::tempdir().unwrap();
    let server = ModelServer::start(vec![openai_text("first")]);
    let out = exec(&server, home.path(), work.path(), &[], &["hello"]);
    assert!(out.status.success());
    let id = session_id(&out.stdout);
    // What an older build stored: the partial arguments as they came.
    let file = home.path().join(format!("sessions/{id}.jsonl"));
    let mut text = std::fs::read_to_string(&file).unwrap();
    for record in [
        json!({"kind": "message", "message": {"role": "assistant", "content": "", "tool_calls": [
            {"id": "old1", "name": "write", "arguments": "{\"path\":"}]}}),
        json!({"kind": "message", "message": {"role": "tool", "call_id": "old1", "name": "write",
            "content": "invalid arguments", "is_error": true}}),
    ] {
        text.push_str(&format!("{record}\n"));
    }
    std::fs::write(&file, text).unwrap();
    server.push(openai_text("recovered"));
    let out = exec(
        &server,
        home.path(),
        work.path(),
        &[],
        &["--resume", &id, "go on"],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let messages = server.requests()[1].body["messages"].clone();
    let call = messages
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["role"] == "assistant" && m["tool_calls"].is_array())
        .unwrap();
    assert_eq!(call["tool_calls"][0]["function"]["arguments"], "{}");
}

#[test]
fn a_5xx_that_says_the_request_is_malformed_is_not_retried() {
    let home = tempfile::tempdir().unwrap();
    let work = tempfile::tempdir().unwrap();
    let body = json!({"error": {"code": 500, "type": "server_error",
        "message": "[json.exception.parse_error.101] parse error at line 1, column 9: syntax error while parsing value - unexpected end of input"}});
    let server = ModelServer::start(vec![
        Reply::Status {
            status: 500,
            retry_after: None,
            body: body.to_string(),
        },
        openai_text("a retry would have got this"),
    ]);
    let out = exec(&server, home.path(), work.path(), &[], &["hello"]);
    assert!(!out.status.success());
    assert_eq!(
        server.requests().len(),
        1,
        "no retry of a malformed request"
    );
    let error = events(&out.stdout)
        .into_iter()
        .find(|e| e["type"] == "error")
        .unwrap();
    let message = error["message"].as_str().unwrap();
    assert!(
        message.contains("answered 500") && message.contains("parse error"),
        "{message}"
    );
}

#[test]
fn an_answer_cut_off_by_the_length_limit_is_a_warning_and_a_reason() {
    let home = tempfile::tempdir().unwrap();
    let work = tempfile::tempdir().unwrap();
    let text = json!({"choices": [{"index": 0, "delta": {"content": "The three steps are: first"}, "finish_reason": null}]});
    let done = json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "length"}],
        "usage": {"prompt_tokens": 100, "completion_tokens": 64}});
    let server = ModelServer::start(vec![Reply::Sse(format!(
        "data: {text}\n\ndata: {done}\n\ndata: [DONE]\n\n"
    ))]);
    let out = exec(&server, home.path(), work.path(), &[], &["list the steps"]);
    assert_eq!(
        out.status.code(),
        Some(1),
        "an incomplete answer is not success"
    );
    let events = events(&out.stdout);
    let finished = events
        .iter()
        .find(|e| e["type"] == "session_finished")
        .unwrap();
    assert_eq!(finished["reason"], "cut_off");
    assert!(
        events.iter().any(
            |e| e["type"] == "warning" && e["message"].as_str().unwrap().contains("cut off at")
        )
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("raise `max_tokens`"), "{stderr}");

    // The readable output says it too.
    let server = ModelServer::start(vec![Reply::Sse(format!(
        "data: {text}\n\ndata: {done}\n\ndata: [DONE]\n\n"
    ))]);
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_agent"))
        .args(["exec", "list the steps"])
        .current_dir(work.path())
        .env("AGENT_HOME", home.path())
        .env("AGENT_BASE_URL", server.openai_base())
        .env("AGENT_MODEL", "m")
        .env_remove("AGENT_API")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("warning: the model's answer was cut off")
            && stderr.contains("cut off at the output limit · session"),
        "{stderr}"
    );
}

fn overflow(n_ctx: u64) -> Reply {
    Reply::Status {
        status: 400,
        retry_after: None,
        body: json!({"error": {"code": 400, "type": "exceed_context_size_error",
            "message": "the request exceeds the available context size, try increasing it",
            "n_prompt_tokens": 9000, "n_ctx": n_ctx}})
        .to_string(),
    }
}

#[test]
fn a_first_request_larger_than_the_context_says_what_to_do_instead_of_resume() {
    let home = tempfile::tempdir().unwrap();
    let work = tempfile::tempdir().unwrap();
    let server = ModelServer::start(vec![overflow(4096)]);
    let out = exec(&server, home.path(), work.path(), &[], &["a huge task"]);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("context of 4096 tokens"), "{stderr}");
    assert!(
        stderr.contains("--ctx-size") && stderr.contains("smaller task"),
        "{stderr}"
    );
    assert!(
        !stderr.contains("continue with `agent exec --resume"),
        "{stderr}"
    );
}

#[test]
fn a_history_that_outgrows_the_context_is_summarised_and_the_step_retried() {
    let home = tempfile::tempdir().unwrap();
    let work = tempfile::tempdir().unwrap();
    std::fs::write(work.path().join("a.txt"), "x").unwrap();
    let mut replies: Vec<Reply> = (0..4)
        .map(|i| openai_calls(&[(&format!("g{i}"), "glob", json!({"pattern": "*.txt"}))]))
        .collect();
    replies.push(openai_text("four globs done"));
    let server = ModelServer::start(replies);
    let out = exec(&server, home.path(), work.path(), &[], &["glob four times"]);
    assert!(out.status.success());
    let id = session_id(&out.stdout);
    for reply in [
        overflow(8192),
        openai_text("SUMMARY: globbed a.txt"),
        openai_text("done"),
    ] {
        server.push(reply);
    }
    let out = exec(
        &server,
        home.path(),
        work.path(),
        &[],
        &["--resume", &id, "and now?"],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    server.assert_clean();
    let retried = server.requests().last().unwrap().body["messages"].to_string();
    assert!(retried.contains("SUMMARY: globbed a.txt"), "{retried}");
    assert!(events(&out.stdout).iter().any(|e| {
        e["type"] == "warning"
            && e["message"]
                .as_str()
                .unwrap()
                .contains("outgrew the model's context of 8192")
    }));
}
