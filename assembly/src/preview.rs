//! Every built-in agent's system prompt in every prompt mode, rendered from one snapshot with
//! a fixed sample context: what `packer diff` compares between two packs. The context is the
//! same on every machine and every day, so two renders differ only where the packs do.
//!
//! Each prompt is assembled by [`assemble()`] exactly as a turn is, with:
//!
//! - `mavis` and `plan` at the root of an interactive session; `explore`, `worker` and `verifier` as
//!   tasks delegated by `mavis` (task id `task-1`, the task text below), as `agent prompt`
//!   shows them;
//! - the command-line host profile and the default config (every tool the agent's ceiling
//!   allows; no memory);
//! - the machine of [`sample_environment`] (`/home/dev/project`, a git repository, Linux,
//!   bash, date 2026-01-01, model as given);
//! - a global and a project instruction file with the one-line texts of
//!   [`sample_instructions`], so the instructions preamble renders;
//! - only the pack's own skills, no custom agents and no MCP servers.

use std::path::PathBuf;

use pack_serving::Snapshot;

use crate::agents::{BUILTIN_AGENTS, ORCHESTRATOR, PLAN};
use crate::config::Config;
use crate::environment::{Environment, Locale};
use crate::instructions::{InstructionFile, Instructions};
use crate::session::SessionContext;
use crate::{AssembledPrompt, Occasion, Profile, PromptError, PromptMode, TurnRequest, assemble};

/// The model id the samples are rendered for when none is given: no model family matches
/// it, so the pack's default family template is used.
pub const SAMPLE_MODEL: &str = "default";

/// The task text of the sample delegated sessions.
pub const SAMPLE_TASK: &str =
    "Find where the retry limit is configured and report the file and line.";

/// The same machine every time.
pub fn sample_environment() -> Environment {
    Environment {
        cwd: PathBuf::from("/home/dev/project"),
        is_git_repo: true,
        platform: "linux".to_string(),
        shell: "/bin/bash".to_string(),
        os_version: "Debian GNU/Linux 12 (bookworm)".to_string(),
        date: "2026-01-01".to_string(),
        data_dir: PathBuf::from("/home/dev/.local/share/promptpack"),
        worktree_root: Some(PathBuf::from("/home/dev/project")),
        // The sample model is no provider's; the block names it alone.
        provider: None,
        locale: Locale {
            language: Some("en".to_string()),
            locale: Some("en_US.UTF-8".to_string()),
        },
    }
}

/// A global `AGENTS.md` and a project `AGENTS.md` of one line each.
pub fn sample_instructions() -> Instructions {
    Instructions {
        global: Some(InstructionFile {
            path: PathBuf::from("/home/dev/.local/share/promptpack/AGENTS.md"),
            text: "Answer in English.".to_string(),
            truncated_from: None,
        }),
        project: vec![InstructionFile {
            path: PathBuf::from("/home/dev/project/AGENTS.md"),
            text: "Run `make test` before you say a change is done.".to_string(),
            truncated_from: None,
        }],
        ..Instructions::default()
    }
}

/// One agent in one mode, rendered from one snapshot.
#[derive(Debug)]
pub struct SamplePrompt {
    pub agent: &'static str,
    pub mode: PromptMode,
    /// The prompt, or why this snapshot cannot render it.
    pub rendered: Result<AssembledPrompt, PromptError>,
}

/// The agents a preview renders: the delegable built-ins and the plan agent `/plan` switches to.
pub const PREVIEW_AGENTS: [&str; 5] = [
    BUILTIN_AGENTS[0],
    BUILTIN_AGENTS[1],
    BUILTIN_AGENTS[2],
    BUILTIN_AGENTS[3],
    PLAN,
];

/// Every agent of [`PREVIEW_AGENTS`] in every prompt mode, in that order, for `model`.
pub fn sample_prompts(snapshot: &Snapshot, model: &str) -> Vec<SamplePrompt> {
    let config = Config::default();
    let environment = sample_environment();
    let instructions = sample_instructions();
    let session = SessionContext {
        task_id: "task-1".to_string(),
        parent_agent: ORCHESTRATOR.to_string(),
        task: Some(SAMPLE_TASK.to_string()),
        files: Vec::new(),
        max_steps: None,
        handoff_bytes: None,
    };
    let mut prompts = Vec::with_capacity(PREVIEW_AGENTS.len() * PromptMode::ALL.len());
    for agent in PREVIEW_AGENTS {
        for mode in PromptMode::ALL {
            let request = TurnRequest {
                agent,
                mode,
                model,
                occasion: if agent == ORCHESTRATOR || agent == PLAN {
                    Occasion::Root
                } else {
                    Occasion::TaskChild
                },
                profile: Profile::Cli,
                interactive: true,
                config: &config,
                custom_agents: &[],
                frozen: None,
                environment: &environment,
                instructions: &instructions,
                memory: None,
                session: Some(&session),
                disk_skills: &[],
                mcp: None,
            };
            prompts.push(SamplePrompt {
                agent,
                mode,
                rendered: assemble(snapshot, &request),
            });
        }
    }
    prompts
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_builtin_pack_renders_every_sample_the_same_twice() {
        let snapshot = pack_serving::builtin::snapshot();
        let first = sample_prompts(&snapshot, SAMPLE_MODEL);
        let second = sample_prompts(&snapshot, SAMPLE_MODEL);
        assert_eq!(first.len(), PREVIEW_AGENTS.len() * PromptMode::ALL.len());
        for (a, b) in first.iter().zip(&second) {
            let a_text = &a.rendered.as_ref().unwrap().text;
            assert_eq!(a_text, &b.rendered.as_ref().unwrap().text);
            assert!(a_text.contains("Run `make test`"), "{}/{}", a.agent, a.mode);
            assert!(a_text.contains("/home/dev/project"));
        }
        let worker = first.iter().find(|p| p.agent == "worker").unwrap();
        assert!(
            worker.rendered.as_ref().unwrap().text.contains(SAMPLE_TASK),
            "delegated samples carry the task"
        );
    }
}
