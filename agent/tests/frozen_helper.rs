//! A built-in helper's definition is frozen when its task session starts: its core
//! template and the pack it came from are saved with the session, and the session renders
//! from them after the pack changed, saying so in its prompt metadata.

use crate::common;
use crate::model_server;

use std::path::Path;
use std::process::{Command, Output};
use std::sync::Arc;

use agent_runtime::agent_loop::{AgentLoop, LoopState};
use agent_runtime::agents::{AgentDefinition, CorePrompt};
use agent_runtime::assemble_turn;
use agent_runtime::permissions::Policy;
use agent_runtime::provider::{Api, Message, Provider, ProviderSettings};
use agent_runtime::session::TaskSession;
use agent_runtime::tools::ToolContext;
use agent_runtime::transcript::{Record, SessionHeader, Transcript};
use model_server::{ModelServer, exec, openai_calls, openai_text, system_of};
use pack_client::snapshot::SnapshotMeta;
use pack_client::{PromptStore, Snapshot, Source};
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

/// The built-in pack's files as a remote pack of another version, with the explore
/// template replaced.
fn refreshed_pack() -> Arc<Snapshot> {
    let builtin = common::builtin();
    let files: Vec<(String, Vec<u8>)> = builtin
        .keys()
        .into_iter()
        .map(|key| {
            let bytes = match key {
                "agents/explore/system.hbs" => b"You explore, CHANGED TEMPLATE.\n".to_vec(),
                _ => builtin.get(key).unwrap().to_vec(),
            };
            (key.to_string(), bytes)
        })
        .collect();
    let meta = SnapshotMeta {
        name: "team".to_string(),
        version: semver::Version::new(3, 0, 0),
        sequence: 9,
        source: Source::Remote,
        sha256: "cd".repeat(32),
        schema: 1,
    };
    Arc::new(Snapshot::new(meta, files).unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_session_resumed_after_a_refresh_runs_and_records_its_frozen_template() {
    let work = tempfile::tempdir().unwrap();
    let sessions = work.path().join("sessions");
    let builtin = common::builtin();
    let mut turn = common::Turn::new("explore");
    let definition = AgentDefinition::builtin("explore", &builtin)
        .unwrap()
        .unwrap()
        .frozen(turn.mode, &builtin);
    TaskSession {
        id: "p.task-1".to_string(),
        mode: turn.mode,
        agent: definition,
        context: turn.session.clone(),
    }
    .save(&sessions)
    .unwrap();

    // A refresh installs another pack; then the task session is resumed.
    let store = PromptStore::new(builtin.clone());
    store.install(refreshed_pack());
    let task = TaskSession::load(&sessions, "p.task-1").unwrap();
    turn.frozen = Some(task.resume(turn.mode).unwrap().clone());
    let server = ModelServer::start(vec![openai_text("Still no files.")]);
    let provider = Provider::new(ProviderSettings::for_tests(
        Api::OpenAi,
        &server.openai_base(),
    ))
    .unwrap();
    let header = SessionHeader {
        id: "p.task-1".into(),
        created_at: "2026-12-01T00:00:00Z".into(),
        agent: "explore".into(),
        mode: turn.mode,
        provider: "test".into(),
        model: "test-model".into(),
        cwd: work.path().to_path_buf(),
    };
    let mut transcript = Transcript::create(&sessions, &header).unwrap();
    let mut agent_loop = AgentLoop {
        store: &store,
        request: turn.request(),
        provider: &provider,
        tools: Arc::new(ToolContext::new(
            work.path().to_path_buf(),
            Policy::unrestricted(work.path().to_path_buf()),
        )),
        max_steps: 5,
        session_id: header.id.clone(),
        context_limit: None,
        state: LoopState::default(),
        live: None,
    };
    let mut messages = vec![Message::User {
        content: "look again".into(),
    }];
    let (_cancel_tx, cancel) = tokio::sync::watch::channel(false);
    agent_loop
        .run(&mut messages, &mut transcript, 0, cancel, &mut |_| {})
        .await
        .unwrap();

    let system = system_of(&server.requests()[0]);
    assert!(
        system.contains("You are `explore`") && !system.contains("CHANGED TEMPLATE"),
        "{system}"
    );
    let text = std::fs::read_to_string(transcript.file_path()).unwrap();
    let prompt = text
        .lines()
        .filter_map(|l| serde_json::from_str::<Record>(l).ok())
        .find_map(|record| match record {
            Record::Turn { prompt, .. } => Some(prompt),
            _ => None,
        })
        .unwrap();
    assert_eq!(
        prompt.pack.name, "team",
        "the rest came from the current pack"
    );
    let frozen = prompt
        .frozen
        .expect("the metadata says the core was frozen");
    assert_eq!(frozen.key, "agents/explore/system.hbs");
    assert_eq!(frozen.pack.name, builtin.meta().name);
    assert_eq!(frozen.pack.version, builtin.meta().version.to_string());
    assert_eq!(frozen.pack.sha256, builtin.meta().sha256);
}

#[test]
fn a_frozen_template_the_current_schema_does_not_fit_says_to_start_a_new_session() {
    let builtin = common::builtin();
    let mut turn = common::Turn::new("explore");
    let mut definition = AgentDefinition::builtin("explore", &builtin)
        .unwrap()
        .unwrap()
        .frozen(turn.mode, &builtin);
    let CorePrompt::Frozen { template, .. } = &mut definition.core else {
        panic!("explore's core is frozen: {:?}", definition.core);
    };
    *template = "You explore {{no_such_variable}}.\n".to_string();
    turn.frozen = Some(definition);
    let store = PromptStore::new(builtin);
    let err = assemble_turn(&store, &turn.request()).unwrap_err();
    let message = err.to_string();
    assert!(
        message.contains("agents/explore/system.hbs")
            && message.contains("no_such_variable")
            && message.contains("Start a new session"),
        "{message}"
    );
}
