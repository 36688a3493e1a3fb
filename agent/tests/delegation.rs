//! Delegation round trip: mavis hands a question to `explore`, which tries to delegate in
//! turn and is refused, then answers `ROLE_MISMATCH`; mavis then asks `verifier`, whose
//! `VERDICT:` comes back parsed. Each child talks to the model with its own context.

use crate::model_server;

use model_server::{ModelServer, exec, openai_calls, openai_text, system_of, tools_of};
use serde_json::json;

#[test]
fn delegation_round_trip_with_a_refused_grandchild() {
    let home = tempfile::tempdir().unwrap();
    let work = tempfile::tempdir().unwrap();
    let server = ModelServer::start(vec![
        // mavis writes a file, then delegates.
        openai_calls(&[(
            "m1",
            "write",
            json!({"path": work.path().join("notes.md"), "content": "draft\n"}),
        )]),
        openai_calls(&[(
            "m2",
            "task",
            json!({"agent": "explore", "task": "Add a changelog entry for the draft."}),
        )]),
        // explore tries to start a worker of its own.
        openai_calls(&[(
            "e1",
            "task",
            json!({"agent": "worker", "task": "write the changelog"}),
        )]),
        openai_text("ROLE_MISMATCH\nThe task needs a file written; send it to worker."),
        // mavis asks for a check instead.
        openai_calls(&[(
            "m3",
            "task",
            json!({"agent": "verifier", "task": "Check that notes.md exists."}),
        )]),
        openai_text("- notes.md exists: pass\n\nVERDICT: PASS"),
        openai_calls(&[("m4", "task", json!({"agent": "nobody", "task": "x"}))]),
        openai_text("Done: the draft is checked."),
    ]);
    let out = exec(&server, home.path(), work.path(), &[], &["Draft notes"]);
    assert!(
        out.status.success(),
        "stderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    server.assert_clean();
    assert_eq!(server.remaining(), 0);
    let requests = server.requests();
    assert_eq!(requests.len(), 8);

    // mavis may delegate; the child may not.
    assert!(tools_of(&requests[0]).contains(&"task".to_string()));
    let child = &requests[2];
    assert!(!tools_of(child).contains(&"task".to_string()));
    let system = system_of(child);
    assert!(system.contains("You are `explore`"), "{system}");
    assert!(system.contains("## Delegated Task Contract"), "{system}");
    assert!(system.contains("# Session Context"), "{system}");
    assert!(system.contains("Task:\nAdd a changelog entry for the draft."));
    // The files the parent produced so far are named.
    let notes = work.path().join("notes.md");
    assert!(
        system.contains(&format!("- {}", notes.display())),
        "{system}"
    );
    // Its own context: only the task, nothing of the parent's conversation.
    let messages = child.body["messages"].as_array().unwrap();
    assert_eq!(messages.len(), 2);
    assert_eq!(
        messages[1]["content"],
        "Add a changelog entry for the draft."
    );

    // The grandchild was refused, with what to do instead.
    let refused = requests[3].body["messages"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .clone();
    assert_eq!(refused["role"], "tool");
    let text = refused["content"].as_str().unwrap();
    assert!(text.contains("cannot start agents of its own"), "{text}");

    // The parent got the handoff, ROLE_MISMATCH surfaced.
    let last = |i: usize| {
        requests[i].body["messages"]
            .as_array()
            .unwrap()
            .last()
            .unwrap()["content"]
            .as_str()
            .unwrap()
            .to_string()
    };
    let handoff = last(4);
    assert!(
        handoff.starts_with("<handoff agent=\"explore\""),
        "{handoff}"
    );
    assert!(handoff.contains("status=\"role_mismatch\""), "{handoff}");
    assert!(handoff.contains("refused this task as outside its role"));
    let verdict = last(6);
    assert!(
        verdict.contains("status=\"completed\" verdict=\"PASS\""),
        "{verdict}"
    );
    assert!(system_of(&requests[5]).contains("You are `verifier`"));
    let unknown = last(7);
    assert!(
        unknown.contains("the agents you can hand tasks to are: explore, worker, verifier"),
        "{unknown}"
    );

    // Each child keeps its own transcript next to the parent's.
    let events: Vec<serde_json::Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let id = events[0]["session_id"].as_str().unwrap();
    let sessions = home.path().join("sessions");
    for n in [1, 2] {
        let child = sessions.join(format!("{id}.task-{n}.jsonl"));
        assert!(child.exists(), "{}", child.display());
    }
    let child = std::fs::read_to_string(sessions.join(format!("{id}.task-1.jsonl"))).unwrap();
    assert!(child.contains("\"agent\":\"explore\""));
}
