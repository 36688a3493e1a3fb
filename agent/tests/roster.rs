//! The roster through the real binary: custom agents are named in the `task` schema and in
//! mavis's prompt, an agent's own `model` is used, seed-style agent files load, and a helper
//! is frozen: saved beside its transcript, shown by `agent prompt --session`, and resumed
//! from its frozen definition.

use crate::model_server;

use std::path::Path;
use std::process::Command;

use model_server::{ModelServer, exec, openai_calls, openai_text, system_of, tools_of};
use serde_json::{Value, json};

/// A Claude Code–style agent file: camelCase keys, a comma-separated tool list, `effort`.
const REVIEWER: &str = "---\nname: reviewer\ndescription: Reviews a diff and lists what is wrong with it.\nmodel: reviewer-model\ntools: read, grep, glob, bash\ndisallowedTools: [bash]\nmcpServers: []\neffort: high\ncolor: blue\n---\nORIGINAL BODY: you review diffs.\n";

fn home_with_reviewer() -> tempfile::TempDir {
    let home = tempfile::tempdir().unwrap();
    let dir = home.path().join("agents/reviewer");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("agent.md"), REVIEWER).unwrap();
    home
}

fn session_id(stdout: &[u8]) -> String {
    String::from_utf8_lossy(stdout)
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find(|e| e["type"] == "session_started")
        .unwrap()["session_id"]
        .as_str()
        .unwrap()
        .to_string()
}

#[test]
fn custom_agents_are_in_the_task_schema_and_in_the_orchestrators_prompt() {
    let home = home_with_reviewer();
    let work = tempfile::tempdir().unwrap();
    let server = ModelServer::start(vec![openai_text("hi")]);
    let out = exec(&server, home.path(), work.path(), &[], &["hello"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let request = &server.requests()[0];
    let task = request.body["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["function"]["name"] == "task")
        .unwrap();
    assert_eq!(
        task["function"]["parameters"]["properties"]["agent"]["enum"],
        json!(["explore", "worker", "verifier", "reviewer"])
    );
    let system = system_of(request);
    assert!(system.contains("# Custom Agents"), "{system}");
    assert!(
        system.contains("- `reviewer`: Reviews a diff and lists what is wrong with it."),
        "{system}"
    );
}

#[test]
fn a_helper_uses_its_own_model_is_frozen_and_resumes_from_its_frozen_definition() {
    let home = home_with_reviewer();
    let work = tempfile::tempdir().unwrap();
    let server = ModelServer::start(vec![
        openai_calls(&[(
            "d1",
            "task",
            json!({"agent": "reviewer", "task": "Review the last change."}),
        )]),
        openai_text("LGTM: nothing wrong."),
        openai_text("The reviewer found nothing."),
    ]);
    let out = exec(&server, home.path(), work.path(), &[], &["review please"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    server.assert_clean();
    let requests = server.requests();
    assert_eq!(requests[0].body["model"], "test-model");
    let helper = &requests[1];
    assert_eq!(
        helper.body["model"], "reviewer-model",
        "the agent's own model"
    );
    let system = system_of(helper);
    assert!(system.contains("ORIGINAL BODY"), "{system}");
    assert!(
        system.contains("Step limit: 30 model calls"),
        "the step limit is in the prompt: {system}"
    );
    // `disallowedTools: [bash]` narrowed the comma-separated list.
    let tools = tools_of(helper);
    assert!(tools.contains(&"read".to_string()) && !tools.contains(&"bash".to_string()));

    // Frozen beside its transcript.
    let parent = session_id(&out.stdout);
    let task_id = format!("{parent}.task-1");
    let sessions = home.path().join("sessions");
    assert!(sessions.join(format!("{task_id}.jsonl")).is_file());
    let frozen: Value = serde_json::from_str(
        &std::fs::read_to_string(sessions.join(format!("{task_id}.json"))).unwrap(),
    )
    .unwrap();
    assert_eq!(frozen["agent"]["name"], "reviewer");

    // The definition on disk changes; the helper's session does not.
    std::fs::write(
        home.path().join("agents/reviewer/agent.md"),
        REVIEWER.replace("ORIGINAL BODY", "CHANGED BODY"),
    )
    .unwrap();
    let prompt = Command::new(env!("CARGO_BIN_EXE_agent"))
        .args(["prompt", "--session", &task_id])
        .current_dir(work.path())
        .env("AGENT_HOME", home.path())
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&prompt.stdout);
    assert!(
        prompt.status.success(),
        "{}",
        String::from_utf8_lossy(&prompt.stderr)
    );
    assert!(
        text.contains("ORIGINAL BODY") && !text.contains("CHANGED BODY"),
        "{text}"
    );
    assert!(text.contains("Review the last change."), "{text}");

    server.push(openai_text("Still nothing wrong."));
    let out = exec(
        &server,
        home.path(),
        work.path(),
        &[],
        &["--resume", &task_id, "look again"],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let resumed = server.requests().pop().unwrap();
    assert_eq!(resumed.body["model"], "reviewer-model");
    let system = system_of(&resumed);
    assert!(
        system.contains("ORIGINAL BODY") && !system.contains("CHANGED BODY"),
        "{system}"
    );
    assert!(
        !tools_of(&resumed).contains(&"task".to_string()),
        "a resumed helper is still a task child"
    );
}

fn prompt_of(home: &Path, agent: &str) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_agent"))
        .args(["prompt", "--agent", agent])
        .env("AGENT_HOME", home)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn main_is_the_old_name_of_mavis() {
    let home = tempfile::tempdir().unwrap();
    assert_eq!(
        prompt_of(home.path(), "main"),
        prompt_of(home.path(), "mavis")
    );
}

#[test]
fn a_session_started_as_a_custom_agent_runs_on_its_model() {
    let home = home_with_reviewer();
    let work = tempfile::tempdir().unwrap();
    let server = ModelServer::start(vec![openai_text("reviewed")]);
    let out = exec(
        &server,
        home.path(),
        work.path(),
        &[],
        &["--agent", "reviewer", "review"],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(server.requests()[0].body["model"], "reviewer-model");
    let started = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find(|e| e["type"] == "session_started")
        .unwrap();
    assert_eq!(started["model"], "reviewer-model");
}

#[test]
fn the_environment_block_names_the_model_each_prompt_runs_on() {
    let home = home_with_reviewer();
    let work = tempfile::tempdir().unwrap();
    let server = ModelServer::start(vec![
        openai_calls(&[(
            "d1",
            "task",
            json!({"agent": "reviewer", "task": "Review the last change."}),
        )]),
        openai_text("Nothing wrong."),
        openai_text("The reviewer found nothing."),
    ]);
    let out = exec(&server, home.path(), work.path(), &[], &["review it"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let requests = server.requests();
    let parent = system_of(&requests[0]);
    assert!(parent.contains("\nModel: openai/test-model\n"), "{parent}");
    assert_eq!(requests[1].body["model"], "reviewer-model");
    let helper = system_of(&requests[1]);
    assert!(
        helper.contains("\nModel: openai/reviewer-model\n")
            && !helper.contains("Model: openai/test-model"),
        "{helper}"
    );
}

/// The `task` tool's `agent` choices in a recorded request.
fn task_choices(request: &model_server::Recorded) -> Vec<String> {
    request.body["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["function"]["name"] == "task")
        .unwrap()["function"]["parameters"]["properties"]["agent"]["enum"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap().to_string())
        .collect()
}

#[test]
fn workspace_agents_are_offered_only_in_a_trusted_workspace() {
    let home = tempfile::tempdir().unwrap();
    let work = tempfile::tempdir().unwrap();
    let dir = work.path().join(".agents/agents/linter");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("agent.md"),
        "---\ndescription: Runs the linters and reports.\nx-mavis:\n  icon: broom\n---\nYou run linters.\n",
    )
    .unwrap();
    let run = |env: &[(&str, &str)]| {
        let server = ModelServer::start(vec![openai_text("ok")]);
        let out = exec(&server, home.path(), work.path(), env, &["lint"]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let choices = task_choices(&server.requests()[0]);
        (choices, String::from_utf8_lossy(&out.stderr).into_owned())
    };

    let (choices, stderr) = run(&[]);
    assert!(!choices.contains(&"linter".to_string()), "{choices:?}");
    assert!(
        stderr.contains("not trusted") && stderr.contains(".agents/agents"),
        "{stderr}"
    );

    std::fs::write(
        home.path().join("config.toml"),
        format!(
            "[permissions]\ntrusted_workspaces = [{:?}]\n",
            work.path().display().to_string()
        ),
    )
    .unwrap();
    let (choices, stderr) = run(&[]);
    assert!(choices.contains(&"linter".to_string()), "{choices:?}");
    assert!(stderr.contains("`x-mavis` ignored"), "{stderr}");

    let (choices, _) = run(&[("OPENCODE_DISABLE_PROJECT_CONFIG", "1")]);
    assert!(!choices.contains(&"linter".to_string()), "{choices:?}");
}

#[test]
fn the_builtin_mirror_chooses_the_model_of_a_builtin_agent() {
    let home = tempfile::tempdir().unwrap();
    let work = tempfile::tempdir().unwrap();
    for (agent, model) in [("explore", "explore-model"), ("worker", "worker-model")] {
        let dir = home.path().join("agents/.builtin").join(agent);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(
            dir.join("agent.md"),
            format!("---\nname: {agent}\nmodel: {model}\n---\n"),
        )
        .unwrap();
    }
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
    let requests = server.requests();
    assert_eq!(
        requests[0].body["model"], "test-model",
        "mavis has no choice"
    );
    assert_eq!(requests[1].body["model"], "explore-model");
    assert!(system_of(&requests[1]).contains("\nModel: openai/explore-model\n"));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("`name` ignored"),
        "only the model of a built-in agent is read"
    );

    // A session started as a built-in agent runs on its chosen model too.
    let server = ModelServer::start(vec![openai_text("done")]);
    let out = exec(
        &server,
        home.path(),
        work.path(),
        &[],
        &["--agent", "worker", "do it"],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(server.requests()[0].body["model"], "worker-model");
}

#[test]
fn a_helper_compacts_its_history_like_the_parent() {
    let home = tempfile::tempdir().unwrap();
    let work = tempfile::tempdir().unwrap();
    let glob = |id: &str| openai_calls(&[(id, "glob", json!({"pattern": "*"}))]);
    let server = ModelServer::start(vec![
        openai_calls(&[(
            "d1",
            "task",
            json!({"agent": "explore", "task": "List the files, three times."}),
        )]),
        glob("h1"),
        glob("h2"),
        glob("h3"),
        openai_text("HELPER SUMMARY: listed the files three times."),
        openai_text("The workspace is empty."),
        openai_text("The helper says the workspace is empty."),
    ]);
    // A context so small that every history long enough to cut is compacted.
    let out = exec(
        &server,
        home.path(),
        work.path(),
        &[("AGENT_CONTEXT_TOKENS", "1")],
        &["what is in here?"],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    server.assert_clean();
    let requests = server.requests();
    assert!(
        system_of(&requests[4]).starts_with("You condense the earlier part"),
        "the helper's summariser call: {}",
        system_of(&requests[4])
    );
    assert!(
        requests[5].body["messages"]
            .to_string()
            .contains("HELPER SUMMARY"),
        "the helper goes on from its summary"
    );
}
