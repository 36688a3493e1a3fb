//! Compaction: when the reported tokens pass the model's limit, older history is
//! summarised with the pack's compaction prompt. The recent messages stay, no tool call
//! is separated from its result, reminders are restated afterwards, and a second
//! compaction starts again from the original history, not from the first summary.

use crate::model_server;

use model_server::{
    ModelServer, exec, openai_calls, openai_calls_with_usage, openai_text, system_of,
};
use serde_json::{Value, json};

fn read(id: &str, file: &str) -> (String, String, Value) {
    (id.to_string(), "read".to_string(), json!({ "path": file }))
}

fn calls(list: &[(String, String, Value)], tokens: u64) -> model_server::Reply {
    let borrowed: Vec<(&str, &str, Value)> = list
        .iter()
        .map(|(a, b, c)| (a.as_str(), b.as_str(), c.clone()))
        .collect();
    openai_calls_with_usage(&borrowed, tokens)
}

fn messages(request: &model_server::Recorded) -> Vec<Value> {
    request.body["messages"].as_array().unwrap()[1..].to_vec()
}

#[test]
fn compaction_keeps_tool_pairs_and_rearms_reminders() {
    let home = tempfile::tempdir().unwrap();
    let work = tempfile::tempdir().unwrap();
    let w = work.path().display().to_string();
    let f = |name: &str| format!("{w}/{name}");
    let server = ModelServer::start(vec![
        openai_calls(&[(
            "c1",
            "todowrite",
            json!({"items": [
                {"text": "inspect", "status": "in_progress"},
                {"text": "fix", "status": "pending"}
            ]}),
        )]),
        calls(&[read("c2", &f("a.txt"))], 100),
        calls(&[read("c3", &f("b.txt")), read("c4", &f("c.txt"))], 100),
        // The server reports a context past the limit: the next step compacts first.
        calls(&[read("c5", &f("d.txt"))], 60_000),
        openai_text("SUMMARY-ONE: the agent planned and read a.txt to d.txt."),
        calls(&[read("c6", &f("e.txt"))], 60_000),
        openai_text("SUMMARY-TWO: planned, read a.txt to e.txt."),
        openai_text("Done."),
    ]);
    let out = exec(
        &server,
        home.path(),
        work.path(),
        &[("AGENT_CONTEXT_TOKENS", "50000")],
        &["Fix the bug"],
    );
    assert!(
        out.status.success(),
        "stderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    // No request ever carried a tool result without its call, or a call without result.
    server.assert_clean();
    assert_eq!(server.remaining(), 0);
    let requests = server.requests();

    // Before compaction the task list was restated once, as a reminder.
    let before = messages(&requests[3]);
    let reminders = |m: &[Value]| {
        m.iter()
            .filter(|m| {
                m["content"]
                    .as_str()
                    .is_some_and(|c| c.starts_with("<system-reminder>"))
            })
            .count()
    };
    assert_eq!(reminders(&before), 1);

    // The summariser: the pack's prompt, no tools, the history as text without reminders.
    let summariser = &requests[4];
    assert!(system_of(summariser).starts_with("You condense the earlier part"));
    assert!(summariser.body.get("tools").is_none());
    let input = messages(summariser)[0]["content"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(input.contains("USER:\nFix the bug"), "{input}");
    assert!(input.contains("TOOL CALL todowrite"), "{input}");
    assert!(!input.contains("system-reminder"), "{input}");

    // After: the summary first, then the recent messages whole, then the reminder again.
    let after = messages(&requests[5]);
    assert!(
        after[0]["content"]
            .as_str()
            .unwrap()
            .contains("SUMMARY-ONE"),
        "{after:?}"
    );
    assert_eq!(after[1]["role"], "assistant");
    assert_eq!(after[1]["tool_calls"][0]["id"], "c2");
    assert_eq!(after[2]["tool_call_id"], "c2");
    assert!(
        !serde_json::to_string(&after)
            .unwrap()
            .contains("Fix the bug")
    );
    assert_eq!(
        reminders(&after),
        1,
        "the old reminder went with the summary"
    );
    let rearmed = after.last().unwrap()["content"].as_str().unwrap();
    assert!(rearmed.starts_with("<system-reminder>"), "{rearmed}");
    assert!(rearmed.contains("[~] inspect") && rearmed.contains("[ ] fix"));

    // The second compaction summarises the original history again.
    let second = messages(&requests[6])[0]["content"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(second.contains("USER:\nFix the bug"), "{second}");
    assert!(!second.contains("SUMMARY-ONE"), "{second}");
    let last = messages(&requests[7]);
    assert!(last[0]["content"].as_str().unwrap().contains("SUMMARY-TWO"));
    assert_eq!(last[1]["tool_calls"][0]["id"], "c3");
    assert_eq!(last[1]["tool_calls"][1]["id"], "c4");

    // The events and the transcript record both compactions.
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(stdout.matches("\"type\":\"compacted\"").count(), 2);
    let id = stdout
        .lines()
        .next()
        .and_then(|l| serde_json::from_str::<Value>(l).ok())
        .unwrap()["session_id"]
        .as_str()
        .unwrap()
        .to_string();
    let transcript =
        std::fs::read_to_string(home.path().join("sessions").join(format!("{id}.jsonl"))).unwrap();
    assert!(transcript.contains("\"kind\":\"compaction\",\"covered\":4"));
    assert!(transcript.contains("\"kind\":\"compaction\",\"covered\":6"));
}
