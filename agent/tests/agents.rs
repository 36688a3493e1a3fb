//! Custom agents from the data directory, and task sessions that freeze their agent.

use crate::common;

use std::path::Path;

use agent_runtime::agents::{CorePrompt, load_custom_agents};
use agent_runtime::error::RuntimeError;
use agent_runtime::session::{SessionContext, TaskSession};
use agent_runtime::{Occasion, PromptMode, ToolId};
use common::Turn;

fn agent_file(dir: &Path, name: &str, text: &str) {
    std::fs::create_dir_all(dir.join(name)).unwrap();
    std::fs::write(dir.join(name).join("agent.md"), text).unwrap();
}

const REVIEWER: &str = "---
name: reviewer
description: Reviews diffs for style.
model: claude-sonnet-4
tools: [read, grep, bash]
disallowed_tools: [bash]
skills: []
---
You review diffs. Quote {{this}} literally.
";

#[test]
fn good_files_load_and_bad_ones_are_reported_by_file_and_field() {
    let dir = tempfile::tempdir().unwrap();
    agent_file(dir.path(), "reviewer", REVIEWER);
    agent_file(
        dir.path(),
        "typo",
        "---\ndescription: x\ncolour: blue\n---\nbody\n",
    );
    agent_file(
        dir.path(),
        "badtool",
        "---\ndescription: x\ntools: [read, teleport]\n---\nbody\n",
    );
    agent_file(dir.path(), "nodesc", "---\nname: nodesc\n---\nbody\n");
    agent_file(
        dir.path(),
        "worker",
        "---\ndescription: shadowing\n---\nbody\n",
    );
    agent_file(dir.path(), "plain", "no frontmatter here\n");
    agent_file(
        dir.path(),
        "huge",
        &format!("---\ndescription: x\n---\n{}", "x".repeat(1024 * 1024)),
    );
    let (agents, errors) = load_custom_agents(dir.path());

    assert_eq!(agents.len(), 1);
    let reviewer = &agents[0];
    assert_eq!(reviewer.name, "reviewer");
    assert_eq!(reviewer.model.as_deref(), Some("claude-sonnet-4"));
    let tools = reviewer.ceiling.as_ref().unwrap().tools.clone().unwrap();
    assert_eq!(
        tools.into_iter().collect::<Vec<_>>(),
        [ToolId::Read, ToolId::Grep]
    );

    let shown: Vec<String> = errors.iter().map(ToString::to_string).collect();
    let find = |dir_name: &str| {
        shown
            .iter()
            .find(|e| e.contains(&format!("/{dir_name}/agent.md")))
            .unwrap_or_else(|| panic!("no error for {dir_name}: {shown:#?}"))
            .clone()
    };
    assert!(find("typo").contains("field `colour`"), "{}", find("typo"));
    assert!(
        find("badtool").contains("field `tools`: unknown tool \"teleport\""),
        "{}",
        find("badtool")
    );
    assert!(
        find("nodesc").contains("field `description`"),
        "{}",
        find("nodesc")
    );
    assert!(
        find("worker").contains("field `name`"),
        "{}",
        find("worker")
    );
    assert!(find("plain").contains("frontmatter"), "{}", find("plain"));
    assert!(find("huge").contains("limit"), "{}", find("huge"));
    assert_eq!(errors.len(), 6);
}

#[test]
fn extension_keys_of_other_agents_are_ignored_with_a_note() {
    let dir = tempfile::tempdir().unwrap();
    agent_file(
        dir.path(),
        "writer",
        "---\ndescription: Writes release notes.\nx-mavis:\n  avatar: quill\n  surfaces: [desktop]\nx-team: docs\n---\nYou write release notes.\n",
    );
    agent_file(
        dir.path(),
        "typo",
        "---\ndescription: x\nx-ok: 1\ncolour: blue\n---\nbody\n",
    );
    let loaded = agent_runtime::agents::load_agents_dir(dir.path());
    let names: Vec<&str> = loaded.agents.iter().map(|a| a.name.as_str()).collect();
    assert_eq!(names, ["writer"]);
    assert_eq!(loaded.notes.len(), 1, "{:?}", loaded.notes);
    let note = &loaded.notes[0];
    assert!(
        note.contains("writer/agent.md") && note.contains("`x-mavis`") && note.contains("`x-team`"),
        "{note}"
    );
    // Only `x-` keys are let through: other unknown keys are still typos.
    assert_eq!(loaded.errors.len(), 1);
    assert!(
        loaded.errors[0].to_string().contains("field `colour`"),
        "{}",
        loaded.errors[0]
    );
}

#[test]
fn a_custom_agent_body_is_data_and_gets_the_delegated_contract_when_it_lacks_one() {
    let dir = tempfile::tempdir().unwrap();
    agent_file(dir.path(), "reviewer", REVIEWER);
    agent_file(
        dir.path(),
        "handoff",
        "---\ndescription: Has its own contract.\n---\nYou summarise.\n\n## Delegated Task Contract\nReply in one line.\n",
    );
    let (agents, errors) = load_custom_agents(dir.path());
    assert!(errors.is_empty(), "{errors:?}");

    let mut turn = Turn::new("reviewer");
    turn.custom_agents = agents;
    turn.occasion = Occasion::TaskChild;
    let text = turn.render().text;
    assert!(text.contains("Quote {{this}} literally."), "{text}");
    assert_eq!(text.matches("## Delegated Task Contract").count(), 1);
    assert!(
        !text.contains("# Skills"),
        "an empty skills list hides the catalog"
    );

    turn.agent = "handoff".to_string();
    let text = turn.render().text;
    assert_eq!(
        text.matches("## Delegated Task Contract").count(),
        1,
        "{text}"
    );
    assert!(text.contains("Reply in one line."));

    // At the root a custom agent has no contract at all.
    turn.agent = "reviewer".to_string();
    turn.occasion = Occasion::Root;
    assert!(!turn.render().text.contains("Delegated Task Contract"));
}

#[test]
fn unknown_agents_list_the_choices() {
    let turn = Turn::new("nobody");
    let err = agent_runtime::assemble(&common::builtin(), &turn.request()).unwrap_err();
    let err = err.to_string();
    assert!(
        err.contains("\"nobody\"") && err.contains("mavis, explore, worker, verifier"),
        "{err}"
    );
}

#[test]
fn a_task_session_freezes_its_agent_and_refuses_another_mode() {
    let data = tempfile::tempdir().unwrap();
    let agents_dir = data.path().join("agents");
    agent_file(&agents_dir, "reviewer", REVIEWER);
    let (agents, _) = load_custom_agents(&agents_dir);
    let session = TaskSession {
        id: "t-42".to_string(),
        mode: PromptMode::Coding,
        agent: agents[0].clone(),
        context: SessionContext {
            task_id: "t-42".to_string(),
            parent_agent: "mavis".to_string(),
            task: None,
            files: Vec::new(),
            max_steps: None,
            handoff_bytes: None,
        },
    };
    let sessions = data.path().join("sessions");
    session.save(&sessions).unwrap();

    // The file on disk changes after the session started; the session does not.
    agent_file(
        &agents_dir,
        "reviewer",
        &REVIEWER.replace("You review diffs.", "Changed."),
    );
    let loaded = TaskSession::load(&sessions, "t-42").unwrap();
    let frozen = loaded.resume(PromptMode::Coding).unwrap();
    let mut turn = Turn::new("reviewer");
    turn.mode = PromptMode::Coding;
    turn.frozen = Some(frozen.clone());
    turn.session = loaded.context.clone();
    let text = turn.render().text;
    assert!(text.contains("You review diffs."));
    assert!(!text.contains("Changed."));
    assert!(matches!(frozen.core, CorePrompt::Custom { .. }));

    let err = loaded.resume(PromptMode::Work).unwrap_err();
    assert!(matches!(err, RuntimeError::ModeMismatch { .. }));
    let message = err.to_string();
    assert!(message.contains("prompt mode `coding`"), "{message}");
    assert!(message.contains("--mode work"), "{message}");
    assert!(message.contains("Start a new session"), "{message}");
}
