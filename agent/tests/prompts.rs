//! The rendered system prompt of every built-in agent in every prompt mode, as insta
//! snapshots: a template change shows up as a readable diff in review.

use crate::common;

use std::sync::Arc;

use agent_runtime::agents::{BUILTIN_AGENTS, PLAN};
use agent_runtime::permissions::Policy;
use agent_runtime::tools::{ToolContext, Toolbox};
use agent_runtime::{Occasion, PromptMode};
use common::Turn;

#[test]
fn every_agent_in_every_mode() {
    for agent in BUILTIN_AGENTS {
        for mode in PromptMode::ALL {
            let mut turn = Turn::new(agent);
            turn.mode = mode;
            let prompt = turn.render();
            assert_eq!(prompt.metadata.agent, agent);
            assert_eq!(prompt.metadata.mode, mode);
            assert_eq!(prompt.metadata.pack.source, "builtin");
            assert_eq!(prompt.metadata.schema_version, 1);
            assert!(prompt.metadata.fallback.is_none());
            insta::assert_snapshot!(format!("{agent}_{mode}"), prompt.text);
        }
    }
}

#[test]
fn metadata_hashes_every_template_used_and_the_prompt() {
    let prompt = Turn::new("mavis").render();
    let meta = &prompt.metadata;
    for key in [
        "shared/persona.hbs",
        "agents/mavis/tui.hbs",
        "shared/runtime_rules.hbs",
        "shared/context.hbs",
        "models/default.hbs",
        "shared/environment.md",
    ] {
        let sha = meta
            .templates
            .get(key)
            .unwrap_or_else(|| panic!("{key} hashed"));
        assert_eq!(sha.len(), 64, "{key}");
    }
    // Subagent templates were not used, so they are not listed.
    assert!(!meta.templates.contains_key("agents/worker/system.hbs"));
    assert_eq!(
        meta.prompt_sha256,
        pack_format::sha256_hex(prompt.text.as_bytes())
    );
}

#[test]
fn gates_and_verdict_are_in_the_subagent_prompts() {
    let explore = Turn::new("explore").render().text;
    assert!(explore.contains("`ROLE_MISMATCH`"), "{explore}");
    let verifier = Turn::new("verifier").render().text;
    assert!(verifier.contains("`ROLE_MISMATCH`"));
    assert!(verifier.contains("VERDICT: PASS"));
    assert!(verifier.contains("VERDICT: PARTIAL"));
    let worker = Turn::new("worker").render().text;
    assert!(!worker.contains("ROLE_MISMATCH"));
    for text in [&explore, &verifier, &worker] {
        assert!(text.contains("## Delegated Task Contract"));
        assert!(text.contains("# Session Context\n"));
        assert!(text.contains("Task id: task-7"));
    }
    // The orchestrator at the root gets no session context and no contract.
    let mavis = Turn::new("mavis").render().text;
    assert!(!mavis.contains("# Session Context"));
    assert!(!mavis.contains("Delegated Task Contract"));
}

#[test]
fn parts_come_in_the_documented_order() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("AGENTS.md"), "global rule").unwrap();
    std::fs::write(dir.path().join("CLAUDE.md"), "project rule").unwrap();
    let mut turn = Turn::new("worker");
    turn.instructions = agent_runtime::instructions::Instructions::read(
        &agent_runtime::instructions::Sources::new(&dir.path().join("AGENTS.md"), dir.path()),
    );
    turn.config = agent_runtime::config::Config::default();
    turn.memory = Some("remembered fact".to_string());
    // The command line's memory layer is the workspace's notes, which the host passes in.
    let text = turn.render().text;
    let order = [
        "You are `worker`",
        "# Model Notes",
        "# Ground Rules",
        "# Working Style",
        "# Surface",
        "## Delegated Task Contract",
        "# Instructions",
        "global rule",
        "project rule",
        "# Environment",
        "# Session Context",
        "# Memory",
        "remembered fact",
        "# Skills",
    ];
    let mut last = 0;
    for marker in order {
        let at = text[last..]
            .find(marker)
            .unwrap_or_else(|| panic!("{marker:?} missing or out of order in:\n{text}"));
        last += at;
    }
}

#[test]
fn model_family_is_the_first_substring_match_then_the_default() {
    let cases = [
        ("muse-spark", "models/muse.hbs"),
        // gpt-4 (gpt-4o, gpt-4.1 too), o1 and o3 come before every other GPT entry.
        ("GPT-4o", "models/persistent.hbs"),
        ("gpt-4.1-codex", "models/persistent.hbs"),
        ("o1-preview", "models/persistent.hbs"),
        ("o3-mini", "models/persistent.hbs"),
        ("gpt-6", "models/harness.hbs"),
        // "codex" comes before "gpt", so a codex model never gets the gpt notes; without
        // "gpt" in the id it is no GPT codex.
        ("gpt-5-codex", "models/codex.hbs"),
        ("codex-mini-latest", "models/default.hbs"),
        ("gpt-5", "models/gpt.hbs"),
        ("gemini-2.5-pro", "models/gemini.hbs"),
        ("claude-sonnet-4-5", "models/claude.hbs"),
        ("trinity-large", "models/trinity.hbs"),
        ("kimi-k2", "models/kimi.hbs"),
        ("moonshot-v1-128k", "models/kimi.hbs"),
        ("MiniMax-M2", "models/open-weights.hbs"),
        ("some-local-model", "models/default.hbs"),
    ];
    for (model, template) in cases {
        let mut turn = Turn::new("mavis");
        turn.model = model.to_string();
        let meta = turn.render().metadata;
        let models: Vec<&String> = meta
            .templates
            .keys()
            .filter(|k| k.starts_with("models/") && k.ends_with(".hbs"))
            .collect();
        assert_eq!(models, [template], "{model}");
    }
}

#[test]
fn the_environment_block_names_the_model_of_the_turn() {
    let mut turn = Turn::new("worker");
    turn.model = "reviewer-model".to_string();
    let text = turn.render().text;
    assert!(
        text.contains("\nModel: anthropic/reviewer-model\n"),
        "{text}"
    );
}

#[test]
fn a_custom_agent_with_its_own_prompt_gets_no_model_notes() {
    let home = tempfile::tempdir().unwrap();
    let dir = home.path().join("reviewer");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("agent.md"),
        "---\ndescription: Reviews diffs.\n---\nYou review diffs and nothing else.\n",
    )
    .unwrap();
    let (custom, errors) = agent_runtime::agents::load_custom_agents(home.path());
    assert!(errors.is_empty(), "{errors:?}");
    let mut turn = Turn::new("reviewer");
    turn.custom_agents = custom;
    turn.model = "gpt-4o".to_string();
    let prompt = turn.render();
    assert!(prompt.text.contains("You review diffs and nothing else."));
    assert!(!prompt.text.contains("# Model Notes"), "{}", prompt.text);
    assert!(
        !prompt
            .metadata
            .templates
            .keys()
            .any(|k| k.starts_with("models/")),
        "{:?}",
        prompt.metadata.templates
    );
    // The built-in prompts still get them.
    let mut worker = Turn::new("worker");
    worker.model = "gpt-4o".to_string();
    assert!(worker.render().text.contains("# Model Notes"));
}

#[test]
fn runtime_rules_land_under_their_headings() {
    let text = Turn::new("mavis").render().text;
    let harness = text.find("# Harness").unwrap();
    let judgment = text.find("# Judgment").unwrap();
    let reminder = text.find("<system-reminder>").unwrap();
    assert!(harness < reminder && reminder < judgment, "{text}");
    let style = text.find("## Response Style").unwrap();
    let language = text.find("Reply in the language").unwrap();
    let final_answer = text.find("## Final Answer").unwrap();
    assert!(style < language && language < final_answer);
}

#[test]
fn insert_rules_appends_missing_headings_and_skips_fenced_code() {
    let core = "# Intro\ntext\n```\n# Harness\n```\n\n# Other\nmore\n";
    let rules = "@@ # Harness\n- a rule\n@@ # Other\n- second\n";
    let out = agent_runtime::assemble::insert_rules(core, rules);
    assert_eq!(
        out,
        "# Intro\ntext\n```\n# Harness\n```\n\n# Other\nmore\n- second\n\n# Harness\n- a rule"
    );
}

/// A delegate that is never called: its presence is what offers `task` at the root.
#[derive(Debug)]
struct NoDelegate;

impl agent_runtime::tools::Delegate for NoDelegate {
    fn agents(&self) -> Vec<String> {
        Vec::new()
    }

    fn delegate<'a>(
        &'a self,
        _request: agent_runtime::tools::DelegateRequest,
        _cancel: tokio::sync::watch::Receiver<bool>,
    ) -> std::pin::Pin<
        Box<
            dyn std::future::Future<Output = Result<String, agent_runtime::tools::ToolError>>
                + Send
                + 'a,
        >,
    > {
        Box::pin(async { Err(agent_runtime::tools::ToolError("unused".to_string())) })
    }
}

/// The tool names a prompt mentions: every `name` in backticks, and every name that cannot
/// be an ordinary English word (`web_fetch`, `task_query`, `todowrite`) wherever it stands.
fn named_tools(text: &str) -> std::collections::BTreeSet<String> {
    let known: std::collections::BTreeSet<&str> = agent_runtime::ToolId::ALL
        .iter()
        .map(|t| t.as_str())
        .chain(agent_runtime::tools::registered())
        .collect();
    let word = regex::Regex::new(r"[A-Za-z_]+").unwrap();
    let mut named = std::collections::BTreeSet::new();
    for found in word.find_iter(text) {
        let name = found.as_str();
        if !known.contains(name) {
            continue;
        }
        let quoted = text[..found.start()].ends_with('`') && text[found.end()..].starts_with('`');
        if quoted || name.contains('_') || name == "todowrite" {
            named.insert(name.to_string());
        }
    }
    named
}

/// Every tool named anywhere the model reads at the start of a turn (the system prompt,
/// every offered tool's description, and plan mode's reminders for the plan agent) is a
/// tool it is offered: no text points the model at a tool it does not have.
#[test]
fn every_tool_a_prompt_names_is_offered() {
    let dir = tempfile::tempdir().unwrap();
    let unrestricted = || Policy::unrestricted(dir.path().to_path_buf());
    let snapshot = common::builtin();
    for agent in BUILTIN_AGENTS.iter().chain([&PLAN]) {
        for mode in PromptMode::ALL {
            for occasion in [Occasion::Root, Occasion::TaskChild] {
                let mut turn = Turn::new(agent);
                turn.mode = mode;
                turn.occasion = occasion;
                let prompt = turn.render();
                // The context the host builds: a root can delegate and keep notes, a
                // delegated child gets a plain one.
                let context = match occasion {
                    Occasion::Root => ToolContext::new(dir.path().to_path_buf(), unrestricted())
                        .with_delegate(Arc::new(NoDelegate))
                        .with_notes(dir.path().join("notes.json")),
                    Occasion::TaskChild => {
                        ToolContext::new(dir.path().to_path_buf(), unrestricted())
                    }
                };
                let toolbox = Toolbox::new(&prompt.capabilities, Arc::new(context));
                let offered = toolbox.names();
                let mut texts = vec![("the system prompt".to_string(), prompt.text.clone())];
                for spec in toolbox.specs(&snapshot).unwrap() {
                    texts.push((format!("the {} description", spec.name), spec.description));
                }
                if *agent == PLAN {
                    let plan = dir.path().join("plan.md");
                    texts.push((
                        "the plan reminder".to_string(),
                        agent_runtime::plan::plan_reminder(&snapshot, &plan),
                    ));
                    texts.push((
                        "the build reminder".to_string(),
                        agent_runtime::plan::build_reminder(&snapshot, &plan),
                    ));
                }
                for (source, text) in texts {
                    let missing: Vec<String> = named_tools(&text)
                        .into_iter()
                        .filter(|n| !offered.contains(&n.as_str()))
                        .collect();
                    assert!(
                        missing.is_empty(),
                        "{agent} {mode} {occasion:?}: {source} names {missing:?}, not offered (offered: {offered:?})"
                    );
                }
            }
        }
    }
}

/// Plan mode thinks with mavis's prompt: only its ceiling and its reminders differ.
#[test]
fn the_plan_agent_renders_mavis_prompt_under_a_read_only_ceiling() {
    for mode in PromptMode::ALL {
        let mut plan = Turn::new(PLAN);
        plan.mode = mode;
        plan.occasion = Occasion::Root;
        let mut mavis = Turn::new("mavis");
        mavis.mode = mode;
        let (plan, mavis) = (plan.render(), mavis.render());
        assert_eq!(plan.text, mavis.text, "{mode}");
        assert_eq!(plan.metadata.agent, PLAN);
        assert_eq!(
            plan.capabilities.permissions,
            Some(agent_runtime::permissions::PermissionMode::ReadOnly)
        );
        assert_eq!(mavis.capabilities.permissions, None);
    }
}

#[test]
fn the_tool_scan_sees_backticked_and_distinctive_names() {
    let named = named_tools("Use `grep`, then web_fetch; read the file; `sed` is not a tool.");
    let named: Vec<&str> = named.iter().map(String::as_str).collect();
    assert_eq!(named, ["grep", "web_fetch"]);
}
