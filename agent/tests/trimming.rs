//! Cheap trimming before compaction: when a session nears its context, old tool outputs
//! keep their start and end, with a line saying what was cut, and a summary is written
//! only when that does not make room. The session ends with an answer, not an error.

use crate::model_server;

use model_server::{ModelServer, exec, openai_calls_with_usage, openai_text};
use serde_json::{Value, json};

const MARKER: &str = "cut from the middle of this old tool output";

/// The tool results a recorded request sends, in order.
fn results(request: &model_server::Recorded) -> Vec<String> {
    request.body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| m["content"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn old_tool_outputs_are_trimmed_before_a_summary() {
    let home = tempfile::tempdir().unwrap();
    let work = tempfile::tempdir().unwrap();
    // Six files of about 16 KB, each read once.
    for i in 1..=6 {
        let text: String = (1..=260)
            .map(|n| format!("file {i} line {n:03}: the quick brown fox jumps over it\n"))
            .collect();
        std::fs::write(work.path().join(format!("f{i}.txt")), text).unwrap();
    }
    let read = |i: usize, tokens: u64| {
        let id = format!("c{i}");
        let path = work.path().join(format!("f{i}.txt"));
        openai_calls_with_usage(&[(&id, "read", json!({ "path": path }))], tokens)
    };
    // A 50,000-token context: compaction starts at 50,000 - 8,192 - 3,125 = 38,683.
    let server = ModelServer::start(vec![
        read(1, 1_000),
        read(2, 1_000),
        read(3, 1_000),
        read(4, 1_000),
        // Past the start: trimming f1 and f2's outputs makes room.
        read(5, 40_000),
        // Far past it: trimming f3's output is not enough, so a summary follows.
        read(6, 60_000),
        openai_text("SUMMARY: read f1 to f6."),
        openai_text("Done."),
    ]);
    let out = exec(
        &server,
        home.path(),
        work.path(),
        &[("AGENT_CONTEXT_TOKENS", "50000")],
        &["Read the six files"],
    );
    assert!(
        out.status.success(),
        "stderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    server.assert_clean();
    assert_eq!(server.remaining(), 0);
    let requests = server.requests();

    // Step 6 went out trimmed, with no summary: the two oldest outputs keep their first
    // and last lines and say what was cut; the recent ones are whole.
    let sixth = results(&requests[5]);
    assert_eq!(sixth.len(), 5);
    for (i, output) in sixth.iter().enumerate() {
        let file = i + 1;
        assert!(
            output.starts_with(&format!("1|file {file} line 001:")),
            "{output}"
        );
        assert!(
            output.contains(&format!("260|file {file} line 260:")),
            "the end is kept: {output}"
        );
        assert_eq!(output.contains(MARKER), file <= 2, "output of f{file}");
    }
    let trimmed = &sixth[0];
    assert!(trimmed.len() < 3_000, "{} bytes", trimmed.len());
    assert!(!trimmed.contains("line 130:"), "the middle is cut");

    // Then the summary, and the answer after it.
    assert!(
        requests[6].body["messages"][0]["content"]
            .as_str()
            .unwrap()
            .starts_with("You condense the earlier part")
    );
    let events: Vec<Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let kinds: Vec<(&str, Option<u64>)> = events
        .iter()
        .filter(|e| e["type"] == "trimmed" || e["type"] == "compacted")
        .map(|e| (e["type"].as_str().unwrap(), e["outputs"].as_u64()))
        .collect();
    assert_eq!(
        kinds,
        [
            ("trimmed", Some(2)),
            ("trimmed", Some(1)),
            ("compacted", None)
        ]
    );
    let finished = events.last().unwrap();
    assert_eq!(finished["reason"], "done");
}
