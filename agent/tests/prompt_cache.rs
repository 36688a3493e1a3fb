//! Prompt caching over a ten-step session on both wire formats: every request repeats the
//! one before it as an exact prefix (in the order servers cache: tools, system, messages),
//! the Messages API requests carry their four breakpoints where the cache can use them,
//! and the cache reads and writes the server reports reach `agent exec --json` and the
//! summary line.
//!
//! `cargo test -p agent --test suite prompt_cache:: -- --nocapture` prints the per-step
//! figures BENCHMARKS.md quotes.

#![allow(clippy::print_stdout)] // the per-step figures, for BENCHMARKS.md

use crate::model_server;

use model_server::prompt_cache::{Block, anthropic_blocks, openai_blocks};
use model_server::{
    ModelServer, Recorded, Reply, anthropic_calls, anthropic_text, exec, openai_calls, openai_text,
};
use serde_json::{Value, json};

const STEPS: usize = 10;

/// Ten files of a few hundred bytes for the model to read, one a step.
fn workspace() -> tempfile::TempDir {
    let work = tempfile::tempdir().unwrap();
    for i in 1..=STEPS {
        let text: String = (1..=12)
            .map(|line| format!("fn step_{i}_line_{line}() -> u32 {{ {line} }}\n"))
            .collect();
        std::fs::write(work.path().join(format!("f{i}.rs")), text).unwrap();
    }
    work
}

/// Ten steps that each read one file, then an answer.
fn script(work: &std::path::Path, anthropic: bool) -> Vec<Reply> {
    let mut replies: Vec<Reply> = (1..=STEPS)
        .map(|i| {
            let id = format!("call_{i}");
            let args = json!({ "path": work.join(format!("f{i}.rs")) });
            if anthropic {
                anthropic_calls(&[(&id, "read", args)])
            } else {
                openai_calls(&[(&id, "read", args)])
            }
        })
        .collect();
    replies.push(if anthropic {
        anthropic_text("All ten files read.")
    } else {
        openai_text("All ten files read.")
    });
    replies
}

fn run(anthropic: bool) -> (ModelServer, Vec<Value>, tempfile::TempDir) {
    let home = tempfile::tempdir().unwrap();
    let work = workspace();
    let server = ModelServer::start(script(work.path(), anthropic)).with_prompt_cache();
    let addr = server.addr.clone();
    let env: Vec<(&str, &str)> = if anthropic {
        vec![("AGENT_API", "anthropic"), ("AGENT_BASE_URL", &addr)]
    } else {
        vec![]
    };
    let out = exec(
        &server,
        home.path(),
        work.path(),
        &env,
        &["Read f1.rs to f10.rs"],
    );
    assert!(
        out.status.success(),
        "stderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    server.assert_clean();
    assert_eq!(server.remaining(), 0);
    let events = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    (server, events, work)
}

/// A request as the server caches it, breakpoints left out: one block a line.
fn cache_order(blocks: &[Block]) -> String {
    blocks.iter().map(|b| format!("{}\n", b.text)).collect()
}

fn common_prefix(a: &str, b: &str) -> usize {
    a.bytes().zip(b.bytes()).take_while(|(x, y)| x == y).count()
}

/// Where a Messages API request carries its breakpoints, as paths into the body.
fn breakpoints(body: &Value) -> Vec<String> {
    let mut found = Vec::new();
    for (i, tool) in body["tools"].as_array().unwrap().iter().enumerate() {
        if tool.get("cache_control").is_some() {
            found.push(format!("tools[{i}]"));
        }
    }
    for (i, part) in body["system"].as_array().unwrap().iter().enumerate() {
        if part.get("cache_control").is_some() {
            found.push(format!("system[{i}]"));
        }
    }
    for (i, message) in body["messages"].as_array().unwrap().iter().enumerate() {
        for (j, part) in message["content"]
            .as_array()
            .into_iter()
            .flatten()
            .enumerate()
        {
            if part.get("cache_control").is_some() {
                found.push(format!("messages[{i}].content[{j}]"));
            }
        }
    }
    found
}

/// The path of a request's last content block.
fn last_block(body: &Value) -> String {
    let messages = body["messages"].as_array().unwrap();
    let i = messages.len() - 1;
    let j = messages[i]["content"].as_array().unwrap().len() - 1;
    format!("messages[{i}].content[{j}]")
}

fn usages(events: &[Value]) -> Vec<&Value> {
    events
        .iter()
        .filter(|e| e["type"] == "turn_completed")
        .map(|e| &e["usage"])
        .collect()
}

/// Prints one wire's figures, a row a request, in one piece so that the tests' tables do
/// not interleave (shown with `--nocapture`).
fn report(wire: &str, requests: &[Recorded], blocks: &[String], usages: &[&Value]) {
    let mut table = format!(
        "\n{wire}\n| step | bytes sent | prefix reused | share | input tokens | cache read | cache written | cached share |\n|---|---|---|---|---|---|---|---|\n"
    );
    let (mut input, mut read) = (0u64, 0u64);
    for (i, request) in requests.iter().enumerate() {
        let bytes = request.body.to_string().len();
        let reused = match i {
            0 => 0,
            _ => common_prefix(&blocks[i - 1], &blocks[i]),
        };
        let u = usages[i];
        let (total, cached) = (
            u["input_tokens"].as_u64().unwrap(),
            u["cache_read_tokens"].as_u64().unwrap(),
        );
        input += total;
        read += cached;
        table.push_str(&format!(
            "| {} | {bytes} | {reused} | {:.1} % | {total} | {cached} | {} | {:.1} % |\n",
            i + 1,
            100.0 * reused as f64 / blocks[i].len() as f64,
            u["cache_write_tokens"],
            100.0 * cached as f64 / total as f64,
        ));
    }
    table.push_str(&format!(
        "session: {input} input tokens, {read} read from the cache ({:.1} %)\n",
        100.0 * read as f64 / input as f64
    ));
    print!("{table}");
}

#[test]
fn anthropic_breakpoints_keep_a_ten_step_session_cached() {
    let (server, events, _work) = run(true);
    let requests = server.requests();
    assert_eq!(requests.len(), STEPS + 1);
    let blocks: Vec<String> = requests
        .iter()
        .map(|r| cache_order(&anthropic_blocks(&r.body)))
        .collect();

    for (i, request) in requests.iter().enumerate() {
        let body = &request.body;
        let tools = body["tools"].as_array().unwrap().len();
        // Tools, system, the end of the previous request, the end of this one: never more
        // than the four the API allows.
        let mut expected = vec![format!("tools[{}]", tools - 1), "system[0]".to_string()];
        if i > 0 {
            expected.push(last_block(&requests[i - 1].body));
        }
        expected.push(last_block(body));
        assert_eq!(breakpoints(body), expected, "request {i}");
        if i > 0 {
            // Everything the previous request sent, byte for byte, comes first.
            assert!(
                blocks[i].starts_with(&blocks[i - 1]),
                "request {i} does not repeat request {} as its prefix; they part at byte {}",
                i - 1,
                common_prefix(&blocks[i - 1], &blocks[i])
            );
        }
    }

    // The server read each request's predecessor whole from the cache, and wrote the
    // new part; the loop passed its numbers on.
    let counted_all = server.counted();
    let usages = usages(&events);
    assert_eq!(usages.len(), STEPS + 1);
    for (i, (usage, counted)) in usages.iter().zip(&counted_all).enumerate() {
        assert_eq!(usage["input_tokens"], counted.total, "request {i}");
        assert_eq!(usage["cache_read_tokens"], counted.read, "request {i}");
        assert_eq!(usage["cache_write_tokens"], counted.written, "request {i}");
        if i == 0 {
            assert_eq!(counted.read, 0);
            assert_eq!(
                counted.written, counted.total,
                "the first request is written whole"
            );
        } else {
            assert_eq!(counted.read, counted_all[i - 1].total, "request {i}");
            assert_eq!(counted.written, counted.total - counted.read);
        }
    }
    let finished = events.last().unwrap();
    assert_eq!(finished["type"], "session_finished");
    let read: u64 = counted_all.iter().map(|c| c.read).sum();
    let written: u64 = counted_all.iter().map(|c| c.written).sum();
    let total: u64 = counted_all.iter().map(|c| c.total).sum();
    assert_eq!(finished["usage"]["cache_read_tokens"], read);
    assert_eq!(finished["usage"]["cache_write_tokens"], written);
    assert_eq!(finished["usage"]["input_tokens"], total);
    assert!(
        read * 10 > total * 8,
        "only {read} of {total} input tokens were read from the cache"
    );
    report("anthropic", &requests, &blocks, &usages);
}

#[test]
fn openai_requests_repeat_the_last_one_as_their_prefix() {
    let (server, events, _work) = run(false);
    let requests = server.requests();
    assert_eq!(requests.len(), STEPS + 1);
    let blocks: Vec<String> = requests
        .iter()
        .map(|r| cache_order(&openai_blocks(&r.body)))
        .collect();
    for i in 1..requests.len() {
        assert!(
            blocks[i].starts_with(&blocks[i - 1]),
            "request {i} does not repeat request {} as its prefix; they part at byte {}",
            i - 1,
            common_prefix(&blocks[i - 1], &blocks[i])
        );
        // On the wire too: the body's messages come first, and the previous request's
        // are repeated exactly.
        let before = requests[i - 1].body.to_string();
        let now = requests[i].body.to_string();
        let end = before.find("],\"model\"").unwrap();
        assert!(now.starts_with(&before[..end]), "request {i}");
    }
    let usages = usages(&events);
    let counted = server.counted();
    for (i, (usage, now)) in usages.iter().zip(&counted).enumerate() {
        assert_eq!(usage["input_tokens"], now.total, "request {i}");
        assert_eq!(usage["cache_read_tokens"], now.read, "request {i}");
        if i > 0 {
            // Cached in steps of 128 tokens, up to the previous request's length.
            assert!(now.read + 128 > counted[i - 1].total, "request {i}");
        }
    }
    report("openai", &requests, &blocks, &usages);
}

#[test]
fn the_summary_line_reports_the_cache() {
    let home = tempfile::tempdir().unwrap();
    let work = workspace();
    let f1 = work.path().join("f1.rs");
    let server = ModelServer::start(vec![
        anthropic_calls(&[("c1", "read", json!({ "path": f1 }))]),
        anthropic_text("Read."),
    ])
    .with_prompt_cache();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_agent"))
        .args(["exec", "Read f1.rs"])
        .current_dir(work.path())
        .env("AGENT_HOME", home.path())
        .env("AGENT_BASE_URL", &server.addr)
        .env("AGENT_API", "anthropic")
        .env("AGENT_MODEL", "test-model")
        .env_remove("AGENT_API_KEY")
        .env_remove("AGENT_CONTEXT_TOKENS")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let counted = server.counted();
    let read: u64 = counted.iter().map(|c| c.read).sum();
    let written: u64 = counted.iter().map(|c| c.written).sum();
    assert!(read > 0, "{counted:?}");
    let summary = stderr.lines().rfind(|l| l.starts_with("done · ")).unwrap();
    assert!(
        summary.ends_with(&format!(
            " out tokens · cache: {read} read, {written} written"
        )),
        "{summary}"
    );
}
