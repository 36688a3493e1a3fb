//! `agent prompt` prints the system prompt a session sends: the same instruction files,
//! skills on disk, workspace notes and model, byte for byte.

use crate::model_server;

use std::path::Path;
use std::process::Command;

use model_server::{ModelServer, exec, openai_calls, openai_text, system_of};
use serde_json::json;

fn skill(dir: &Path, name: &str, description: &str) {
    let dir = dir.join(name);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("SKILL.md"),
        format!("---\nname: {name}\ndescription: {description}\n---\nSteps.\n"),
    )
    .unwrap();
}

/// `agent prompt` with the provider environment `exec` gets.
fn agent_prompt(server: &ModelServer, home: &Path, work: &Path, args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_agent"))
        .arg("prompt")
        .args(args)
        .current_dir(work)
        .env("AGENT_HOME", home)
        .env("AGENT_BASE_URL", server.openai_base())
        .env("AGENT_API", "openai")
        .env("AGENT_MODEL", "test-model")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn agent_prompt_is_the_prompt_the_session_sent_notes_and_skills_included() {
    let home = tempfile::tempdir().unwrap();
    let work = tempfile::tempdir().unwrap();
    std::fs::write(work.path().join("AGENTS.md"), "Project rule.\n").unwrap();
    skill(&home.path().join("skills"), "deploy", "Ships the build.");
    skill(
        &work.path().join(".agents/skills"),
        "lint",
        "Runs the linters.",
    );
    let server = ModelServer::start(vec![
        openai_calls(&[(
            "n1",
            "record_note",
            json!({"content": "The tests need REDIS_URL set.", "category": "build"}),
        )]),
        openai_text("Noted."),
    ]);
    let out = exec(&server, home.path(), work.path(), &[], &["remember it"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let sent = system_of(&server.requests()[1]);
    assert!(sent.contains("The tests need REDIS_URL set."), "{sent}");

    let printed = agent_prompt(&server, home.path(), work.path(), &["--non-interactive"]);
    for part in [
        "Project rule.",
        "# Memory",
        "- (build) The tests need REDIS_URL set.",
        "deploy",
        "lint",
        "\nModel: openai/test-model\n",
    ] {
        assert!(printed.contains(part), "{part:?} missing from:\n{printed}");
    }
    assert_eq!(printed, sent, "agent prompt prints what the session sent");
}
