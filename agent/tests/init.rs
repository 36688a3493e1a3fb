//! `agent init`: runs the `init` skill; an existing AGENTS.md is skipped by default,
//! replaced only after a timestamped backup, or left alone while the proposal is shown as
//! a diff.

use crate::model_server;

use std::path::Path;
use std::process::{Command, Output};

use model_server::{ModelServer, openai_calls, openai_text};
use serde_json::json;

fn init(server: &ModelServer, home: &Path, dir: &Path, existing: Option<&str>) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_agent"));
    cmd.arg("init").arg(dir);
    if let Some(choice) = existing {
        cmd.args(["--existing", choice]);
    }
    cmd.env("AGENT_HOME", home)
        .env("AGENT_BASE_URL", server.openai_base())
        .env("AGENT_API", "openai")
        .env("AGENT_MODEL", "test-model")
        .env_remove("AGENT_API_KEY")
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap()
}

fn writes_agents_md(dir: &Path, text: &str) -> ModelServer {
    ModelServer::start(vec![
        openai_calls(&[(
            "c1",
            "write",
            json!({"path": dir.join("AGENTS.md"), "content": text}),
        )]),
        openai_text("Wrote AGENTS.md."),
    ])
}

fn ok(out: &Output) -> String {
    assert!(
        out.status.success(),
        "stderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn a_new_file_is_written_by_the_init_skill() {
    let home = tempfile::tempdir().unwrap();
    let work = tempfile::tempdir().unwrap();
    let server = writes_agents_md(work.path(), "# Project\nRun `make`.\n");
    ok(&init(&server, home.path(), work.path(), None));
    server.assert_clean();
    let first = server.requests()[0].body["messages"][1]["content"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        first.starts_with("/init\n\n<skill name=\"init\">"),
        "{first}"
    );
    assert!(first.contains("No AGENTS.md exists yet"), "{first}");
    assert_eq!(
        std::fs::read_to_string(work.path().join("AGENTS.md")).unwrap(),
        "# Project\nRun `make`.\n"
    );
}

#[test]
fn an_existing_file_is_skipped_by_default() {
    let home = tempfile::tempdir().unwrap();
    let work = tempfile::tempdir().unwrap();
    std::fs::write(work.path().join("AGENTS.md"), "mine\n").unwrap();
    let server = writes_agents_md(work.path(), "theirs\n");
    // No terminal to ask on: the default applies, and the model is never called.
    let out = init(&server, home.path(), work.path(), None);
    ok(&out);
    assert!(String::from_utf8_lossy(&out.stderr).contains("left as it is"));
    assert!(server.requests().is_empty());
    assert_eq!(
        std::fs::read_to_string(work.path().join("AGENTS.md")).unwrap(),
        "mine\n"
    );
    ok(&init(&server, home.path(), work.path(), Some("skip")));
    assert!(server.requests().is_empty());
}

#[test]
fn backup_then_overwrite() {
    let home = tempfile::tempdir().unwrap();
    let work = tempfile::tempdir().unwrap();
    std::fs::write(work.path().join("AGENTS.md"), "mine\n").unwrap();
    let server = writes_agents_md(work.path(), "theirs\n");
    ok(&init(&server, home.path(), work.path(), Some("backup")));
    server.assert_clean();
    assert_eq!(
        std::fs::read_to_string(work.path().join("AGENTS.md")).unwrap(),
        "theirs\n"
    );
    let backups: Vec<_> = std::fs::read_dir(work.path())
        .unwrap()
        .flatten()
        .filter(|e| {
            e.file_name()
                .to_str()
                .is_some_and(|n| n.starts_with("AGENTS.md.bak.") && n[14..].parse::<i64>().is_ok())
        })
        .collect();
    assert_eq!(backups.len(), 1);
    assert_eq!(
        std::fs::read_to_string(backups[0].path()).unwrap(),
        "mine\n"
    );
}

#[test]
fn diff_shows_the_proposal_and_changes_nothing() {
    let home = tempfile::tempdir().unwrap();
    let work = tempfile::tempdir().unwrap();
    std::fs::write(work.path().join("AGENTS.md"), "# Rules\nmine\n").unwrap();
    let server = writes_agents_md(work.path(), "# Rules\ntheirs\n");
    let stdout = ok(&init(&server, home.path(), work.path(), Some("diff")));
    server.assert_clean();
    assert_eq!(
        std::fs::read_to_string(work.path().join("AGENTS.md")).unwrap(),
        "# Rules\nmine\n"
    );
    assert!(
        stdout.contains("--- AGENTS.md\n+++ AGENTS.md (proposed)\n"),
        "{stdout}"
    );
    assert!(stdout.contains("\n # Rules\n-mine\n+theirs\n"), "{stdout}");
    let requests = server.requests();
    let result = requests[1].body["messages"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()["content"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(result.starts_with("Saved as a proposal"), "{result}");
}
