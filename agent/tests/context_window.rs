//! Room to answer: compaction starts where the context less the answer's reserve is
//! reached, not at the whole context, and the context is the server's word (an
//! OpenAI-compatible model list, llama.cpp's `/props`), else the config, else the model
//! family's default.

use crate::model_server;

use model_server::{
    ModelServer, Recorded, Reply, anthropic_calls_with_usage, anthropic_text, exec,
    openai_calls_with_usage, openai_text,
};
use serde_json::{Value, json};

/// The system prompt of a recorded request, on either wire.
fn system(request: &Recorded) -> String {
    let anthropic = request.body["system"][0]["text"].as_str();
    let openai = request.body["messages"][0]["content"].as_str();
    anthropic.or(openai).unwrap_or_default().to_string()
}

fn is_summariser(request: &Recorded) -> bool {
    system(request).starts_with("You condense the earlier part")
}

/// One `read` step a reported usage, then a summary, then the answer.
fn script(work: &std::path::Path, usages: &[u64], anthropic: bool) -> Vec<Reply> {
    let file = work.join("a.txt").display().to_string();
    let mut replies: Vec<Reply> = usages
        .iter()
        .enumerate()
        .map(|(i, &tokens)| {
            let id = format!("r{i}");
            let call = [(id.as_str(), "read", json!({ "path": file }))];
            if anthropic {
                anthropic_calls_with_usage(&call, tokens)
            } else {
                openai_calls_with_usage(&call, tokens)
            }
        })
        .collect();
    for text in ["SUMMARY: read a.txt a few times.", "Done."] {
        replies.push(if anthropic {
            anthropic_text(text)
        } else {
            openai_text(text)
        });
    }
    replies
}

/// Runs the script's session and returns the server once every reply was used.
fn session(server: &ModelServer, work: &std::path::Path, env: &[(&str, &str)]) -> Vec<Value> {
    let home = tempfile::tempdir().unwrap();
    let out = exec(server, home.path(), work, env, &["Read a.txt"]);
    assert!(
        out.status.success(),
        "stderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    server.assert_clean();
    assert_eq!(server.remaining(), 0, "replies left unused");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn workspace() -> tempfile::TempDir {
    let work = tempfile::tempdir().unwrap();
    std::fs::write(work.path().join("a.txt"), "alpha\n").unwrap();
    work
}

/// Which requests were the summariser's.
fn summaries(server: &ModelServer) -> Vec<usize> {
    let requests = server.requests();
    (0..requests.len())
        .filter(|&i| is_summariser(&requests[i]))
        .collect()
}

#[test]
fn compaction_starts_below_the_context_by_the_answers_reserve() {
    let work = workspace();
    // A 50,000-token context and answers of up to 4,000 tokens: compaction starts at
    // 50,000 - 4,000 - 3,125 (a sixteenth, for the estimate's error) = 42,875.
    let server = ModelServer::start(script(
        work.path(),
        &[1_000, 1_000, 1_000, 40_000, 44_000],
        false,
    ));
    let events = session(
        &server,
        work.path(),
        &[
            ("AGENT_CONTEXT_TOKENS", "50000"),
            ("AGENT_MAX_TOKENS", "4000"),
        ],
    );
    // 40,000 left room for an answer; 44,000 did not, though it is under the context.
    assert_eq!(summaries(&server), [5]);
    assert!(events.iter().any(|e| e["type"] == "compacted"));
}

#[test]
fn the_context_comes_from_the_servers_model_list() {
    let work = workspace();
    let server = ModelServer::start(script(
        work.path(),
        &[1_000, 1_000, 1_000, 1_000, 12_000],
        false,
    ));
    // vLLM's field. The server's word beats the configured 200,000.
    server.serve_get(
        "/v1/models",
        json!({"object": "list", "data": [
            {"id": "other", "max_model_len": 1_000_000},
            {"id": "test-model", "max_model_len": 16_384}
        ]}),
    );
    session(&server, work.path(), &[("AGENT_CONTEXT_TOKENS", "200000")]);
    // 16,384 - 4,096 (the default answer, a quarter of the context) - 1,024 = 11,264.
    assert_eq!(summaries(&server), [5]);
    assert_eq!(server.gets(), ["/v1/models"], "asked once, first");
}

#[test]
fn the_context_comes_from_llama_cpps_props() {
    let work = workspace();
    let server = ModelServer::start(script(
        work.path(),
        &[1_000, 1_000, 1_000, 1_000, 6_000],
        true,
    ));
    server.serve_get(
        "/props",
        json!({"default_generation_settings": {"n_ctx": 8192}, "total_slots": 1}),
    );
    let addr = server.addr.clone();
    session(
        &server,
        work.path(),
        &[("AGENT_API", "anthropic"), ("AGENT_BASE_URL", &addr)],
    );
    // 8,192 - 2,048 - 512 = 5,632.
    assert_eq!(summaries(&server), [5]);
    assert_eq!(server.gets(), ["/v1/models", "/props"]);
    // The answer's default limit follows the server's context too.
    for request in server.requests() {
        assert_eq!(request.body["max_tokens"], 2048);
    }
}

#[test]
fn the_context_comes_from_the_config_then_the_model_family() {
    // Nothing from the server. A llama model is given 8,192 tokens: 5,632 with the reserve.
    let work = workspace();
    let server = ModelServer::start(script(
        work.path(),
        &[1_000, 1_000, 1_000, 1_000, 6_000],
        false,
    ));
    session(
        &server,
        work.path(),
        &[("AGENT_MODEL", "llama-3-8b-instruct")],
    );
    assert_eq!(summaries(&server), [5]);

    // The config's 65,536 beats the family's: 6,000 is nowhere near it.
    let work = workspace();
    let mut replies = script(work.path(), &[1_000, 1_000, 1_000, 1_000, 6_000], false);
    replies.remove(5);
    let server = ModelServer::start(replies);
    session(
        &server,
        work.path(),
        &[
            ("AGENT_MODEL", "llama-3-8b-instruct"),
            ("AGENT_CONTEXT_TOKENS", "65536"),
        ],
    );
    assert_eq!(summaries(&server), Vec::<usize>::new());
}
