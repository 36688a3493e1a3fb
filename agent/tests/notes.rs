//! Notes persist per workspace: recorded in one session, recalled in the next; another
//! workspace does not see them.

use crate::model_server;

use model_server::{ModelServer, exec, openai_calls, openai_text};
use serde_json::json;

fn last_tool_result(server: &ModelServer, request: usize) -> String {
    let requests = server.requests();
    let messages = requests[request].body["messages"].as_array().unwrap();
    messages.last().unwrap()["content"]
        .as_str()
        .unwrap()
        .to_string()
}

#[test]
fn notes_outlive_the_session_within_a_workspace() {
    let home = tempfile::tempdir().unwrap();
    let work = tempfile::tempdir().unwrap();
    let other = tempfile::tempdir().unwrap();
    let server = ModelServer::start(vec![
        openai_calls(&[(
            "c1",
            "record_note",
            json!({"content": "Tests run with `make check`.", "category": "build"}),
        )]),
        openai_text("Noted."),
    ]);
    assert!(
        exec(&server, home.path(), work.path(), &[], &["remember"])
            .status
            .success()
    );
    assert!(last_tool_result(&server, 1).starts_with("noted under build"));

    let server = ModelServer::start(vec![
        openai_calls(&[("c1", "recall_notes", json!({}))]),
        openai_text("ok"),
        openai_calls(&[("c1", "recall_notes", json!({}))]),
        openai_text("ok"),
    ]);
    assert!(
        exec(&server, home.path(), work.path(), &[], &["recall"])
            .status
            .success()
    );
    let recalled = last_tool_result(&server, 1);
    assert!(
        recalled.starts_with("- [build] Tests run with `make check`."),
        "{recalled}"
    );
    assert!(
        exec(&server, home.path(), other.path(), &[], &["recall"])
            .status
            .success()
    );
    assert_eq!(
        last_tool_result(&server, 3),
        "no notes recorded for this workspace yet"
    );
}
