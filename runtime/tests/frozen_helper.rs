//! A built-in helper's definition is frozen when its task session starts: its core
//! template and the pack it came from are saved with the session, and the session renders
//! from them after the pack changed, saying so in its prompt metadata.

mod model_server;

use std::path::Path;
use std::process::{Command, Output};

use model_server::{ModelServer, exec, openai_calls, openai_text, system_of};
use serde_json::{Value, json};

fn agent(home: &Path, cwd: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_agent"))
        .args(args)
        .current_dir(cwd)
        .env("AGENT_HOME", home)
        .output()
        .unwrap()
}

fn json_of(out: &Output) -> Value {
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), target).unwrap();
        }
    }
}

#[test]
fn a_builtin_helper_resumed_after_the_pack_changed_keeps_its_frozen_template() {
    let home = tempfile::tempdir().unwrap();
    let work = tempfile::tempdir().unwrap();
    let server = ModelServer::start(vec![
        openai_calls(&[(
            "d1",
            "task",
            json!({"agent": "explore", "task": "List the files."}),
        )]),
        openai_text("No files."),
        openai_text("The workspace is empty."),
    ]);
    let out = exec(&server, home.path(), work.path(), &[], &["what is here?"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(system_of(&server.requests()[1]).contains("You are `explore`"));
    let parent = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find(|e| e["type"] == "session_started")
        .unwrap()["session_id"]
        .as_str()
        .unwrap()
        .to_string();
    let task_id = format!("{parent}.task-1");

    // The pack the helper started from.
    let builtin = json_of(&agent(home.path(), work.path(), &["prompt", "--json"]));
    let builtin = &builtin["metadata"]["pack"];
    assert_eq!(builtin["source"], "builtin");

    // Another pack whose explore template says something else.
    let team = home.path().join("team");
    copy_dir(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("../packs/builtin"),
        &team,
    );
    std::fs::write(
        team.join("agents/explore/system.hbs"),
        "You explore, CHANGED TEMPLATE.\n",
    )
    .unwrap();
    let team = team.to_str().unwrap();
    let fresh = json_of(&agent(
        home.path(),
        work.path(),
        &["prompt", "--json", "--agent", "explore", "--pack", team],
    ));
    assert!(
        fresh["prompt"]
            .as_str()
            .unwrap()
            .contains("CHANGED TEMPLATE"),
        "a new explore session renders the other pack's template"
    );

    let resumed = json_of(&agent(
        home.path(),
        work.path(),
        &["prompt", "--json", "--session", &task_id, "--pack", team],
    ));
    let prompt = resumed["prompt"].as_str().unwrap();
    assert!(
        prompt.contains("You are `explore`") && !prompt.contains("CHANGED TEMPLATE"),
        "{prompt}"
    );
    assert!(prompt.contains("List the files."), "{prompt}");
    let metadata = &resumed["metadata"];
    assert_eq!(metadata["pack"]["name"], "team", "the rest of the prompt");
    let frozen = &metadata["frozen"];
    assert_eq!(frozen["key"], "agents/explore/system.hbs");
    assert_eq!(frozen["pack"]["name"], builtin["name"]);
    assert_eq!(frozen["pack"]["version"], builtin["version"]);
    assert_eq!(frozen["pack"]["sha256"], builtin["sha256"]);
}
