//! A background command: started with `run_in_background`, followed by id (an unknown id
//! lists the running ones), and its completion arrives as a `<notification>` block before
//! the next model call.

use crate::model_server;

use model_server::{ModelServer, exec, openai_calls, openai_text};
use serde_json::json;

fn last_messages(request: &model_server::Recorded, n: usize) -> Vec<serde_json::Value> {
    let messages = request.body["messages"].as_array().unwrap();
    messages[messages.len() - n..].to_vec()
}

/// What the tool call `id` returned, as `request` carries it.
fn result_of(request: &model_server::Recorded, id: &str) -> String {
    request.body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["role"] == "tool" && m["tool_call_id"] == id)
        .and_then(|m| m["content"].as_str())
        .unwrap_or_else(|| panic!("no result of {id}"))
        .to_string()
}

#[test]
fn background_completion_is_notified() {
    let home = tempfile::tempdir().unwrap();
    let work = tempfile::tempdir().unwrap();
    let server = ModelServer::start(vec![
        // It runs until a later step leaves `go`, so it is running at the queries however
        // slow the machine.
        openai_calls(&[(
            "c1",
            "bash",
            json!({"command": "until [ -e go ]; do sleep 0.05; done; echo finished-bg", "run_in_background": true}),
        )]),
        openai_calls(&[
            ("c2", "task_output", json!({"task_id": "bg-9"})),
            ("c3", "task_query", json!({})),
        ]),
        openai_calls(&[("c4", "bash", json!({"command": "touch go"}))]),
        // Waits for its output; then, with none left, for its end: once c6 returns, the task
        // has ended, so the next model call carries the notification at the latest.
        openai_calls(&[(
            "c5",
            "task_output",
            json!({"task_id": "bg-1", "wait": true}),
        )]),
        openai_calls(&[(
            "c6",
            "task_output",
            json!({"task_id": "bg-1", "wait": true}),
        )]),
        openai_text("The background job finished."),
    ]);
    let out = exec(&server, home.path(), work.path(), &[], &["Run the job"]);
    assert!(
        out.status.success(),
        "stderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    server.assert_clean();
    let requests = server.requests();
    assert_eq!(requests.len(), 6);

    let started = last_messages(&requests[1], 1);
    assert!(
        started[0]["content"]
            .as_str()
            .unwrap()
            .starts_with("started background task bg-1"),
        "{started:?}"
    );
    // An unknown id is an error that names the live tasks.
    let answers = last_messages(&requests[2], 2);
    assert_eq!(
        answers[0]["content"],
        "unknown task id \"bg-9\"; running tasks: bg-1"
    );
    assert!(
        answers[1]["content"]
            .as_str()
            .unwrap()
            .contains("bg-1: running")
    );
    assert!(
        !requests[2].body["messages"]
            .to_string()
            .contains("<notification>")
    );
    // The completion arrives as a notification after the step's tool results, in the first
    // model call after the task ended: after c4 let it go, and no later than after c6.
    let notified = (3..requests.len())
        .find(|&i| {
            requests[i].body["messages"]
                .to_string()
                .contains("<notification>")
        })
        .expect("no notification after the task ended");
    let after = last_messages(&requests[notified], 2);
    assert_eq!(after[0]["role"], "tool");
    assert_eq!(after[1]["role"], "user");
    let note = after[1]["content"].as_str().unwrap();
    assert!(note.starts_with("<notification>"), "{note}");
    assert!(
        note.contains("<task id=\"bg-1\" status=\"exited\" exit_code=\"0\">"),
        "{note}"
    );
    assert!(note.contains("finished-bg"), "{note}");
    // Once only.
    let later = requests[5].body["messages"].to_string();
    assert_eq!(later.matches("<notification>").count(), 1);
    // Waiting for output returns it; waiting again, with none left, returns at the end.
    assert!(
        result_of(&requests[4], "c5").contains("finished-bg"),
        "{}",
        result_of(&requests[4], "c5")
    );
    let end = result_of(&requests[5], "c6");
    assert!(end.starts_with("bg-1: exited with code 0"), "{end}");
}
