//! A helper's handoff is capped: a final message past 97,500 bytes reaches the parent as
//! its start and end with the cut said, and the verdict on its last line still counts.

use crate::model_server;

use model_server::{ModelServer, exec, openai_calls, openai_text};
use serde_json::json;

#[test]
fn a_long_handoff_keeps_its_ends_within_the_cap() {
    let home = tempfile::tempdir().unwrap();
    let work = tempfile::tempdir().unwrap();
    let report: String = (0..3_000)
        .map(|n| format!("checked item {n:04}: fine, nothing to change here at all\n"))
        .collect::<String>()
        + "VERDICT: PASS";
    assert!(report.len() > 150_000);
    let server = ModelServer::start(vec![
        openai_calls(&[(
            "m1",
            "task",
            json!({"agent": "verifier", "task": "Check every item."}),
        )]),
        openai_text(&report),
        openai_text("All items pass."),
    ]);
    let out = exec(
        &server,
        home.path(),
        work.path(),
        &[("AGENT_CONTEXT_TOKENS", "200000")],
        &["Check the items"],
    );
    assert!(
        out.status.success(),
        "stderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    server.assert_clean();
    let requests = server.requests();
    let handoff = requests[2].body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["role"] == "tool")
        .unwrap()["content"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        handoff.len() < 97_500 + 1_000,
        "{} bytes reached the parent",
        handoff.len()
    );
    assert!(
        handoff.contains("checked item 0000: fine"),
        "the start is kept"
    );
    assert!(
        handoff.contains("checked item 2999: fine"),
        "the end is kept"
    );
    assert!(!handoff.contains("checked item 1500:"), "the middle is cut");
    assert!(handoff.contains("[cut: the original was"), "{handoff}");
    assert!(handoff.contains("so its middle was cut"), "{handoff}");
    // Read from the whole message before the cut.
    assert!(handoff.contains("verdict=\"PASS\""), "{handoff}");
}
