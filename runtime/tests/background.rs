//! A background command: started with `run_in_background`, followed by id (an unknown id
//! lists the running ones), and its completion arrives as a `<notification>` block before
//! the next model call.

mod model_server;

use model_server::{ModelServer, exec, openai_calls, openai_text};
use serde_json::json;

fn last_messages(request: &model_server::Recorded, n: usize) -> Vec<serde_json::Value> {
    let messages = request.body["messages"].as_array().unwrap();
    messages[messages.len() - n..].to_vec()
}

#[test]
fn background_completion_is_notified() {
    let home = tempfile::tempdir().unwrap();
    let work = tempfile::tempdir().unwrap();
    let server = ModelServer::start(vec![
        openai_calls(&[(
            "c1",
            "bash",
            json!({"command": "sleep 0.3; echo finished-bg", "run_in_background": true}),
        )]),
        openai_calls(&[
            ("c2", "task_output", json!({"task_id": "bg-9"})),
            ("c3", "task_query", json!({})),
        ]),
        openai_calls(&[("c4", "bash", json!({"command": "sleep 1"}))]),
        openai_calls(&[("c5", "task_output", json!({"task_id": "bg-1"}))]),
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
    assert_eq!(requests.len(), 5);

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
    // The completion arrives as a notification after the step's tool results.
    let after = last_messages(&requests[3], 2);
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
    let later = requests[4].body["messages"].to_string();
    assert_eq!(later.matches("<notification>").count(), 1);
    let output = last_messages(&requests[4], 1);
    assert!(
        output[0]["content"]
            .as_str()
            .unwrap()
            .contains("finished-bg")
    );
}
