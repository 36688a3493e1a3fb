//! Shared fixtures: a deterministic environment and a request builder.

#![allow(dead_code)]

use std::path::PathBuf;
use std::sync::Arc;

use agent_runtime::agents::AgentDefinition;
use agent_runtime::config::Config;
use agent_runtime::environment::{Environment, Locale};
use agent_runtime::instructions::Instructions;
use agent_runtime::session::SessionContext;
use agent_runtime::{
    AssembledPrompt, Occasion, Profile, PromptMode, TurnRequest, assemble, assemble_turn,
};
use pack_client::{PromptStore, Snapshot};

/// The same machine every time, so snapshots only change when the prompt does.
pub fn environment() -> Environment {
    Environment {
        cwd: PathBuf::from("/home/dev/project"),
        is_git_repo: true,
        platform: "linux".to_string(),
        shell: "/bin/bash".to_string(),
        os_version: "Debian GNU/Linux 12 (bookworm)".to_string(),
        date: "2026-03-14".to_string(),
        data_dir: PathBuf::from("/home/dev/.local/share/promptpack"),
        worktree_root: Some(PathBuf::from("/home/dev/project")),
        provider: Some("anthropic".to_string()),
        locale: Locale {
            language: Some("en".to_string()),
            locale: Some("en_US.UTF-8".to_string()),
        },
    }
}

pub fn builtin() -> Arc<Snapshot> {
    pack_client::builtin::snapshot()
}

/// One turn's inputs, owned, with sensible defaults.
pub struct Turn {
    pub agent: String,
    pub mode: PromptMode,
    pub model: String,
    pub occasion: Occasion,
    pub profile: Profile,
    pub interactive: bool,
    pub config: Config,
    pub custom_agents: Vec<AgentDefinition>,
    pub frozen: Option<AgentDefinition>,
    pub environment: Environment,
    pub instructions: Instructions,
    pub memory: Option<String>,
    pub session: SessionContext,
}

impl Turn {
    /// The agent as it normally runs: mavis at the root, the others as delegated tasks.
    pub fn new(agent: &str) -> Turn {
        Turn {
            agent: agent.to_string(),
            mode: PromptMode::Tui,
            model: "default".to_string(),
            occasion: if agent == "mavis" {
                Occasion::Root
            } else {
                Occasion::TaskChild
            },
            profile: Profile::Cli,
            interactive: true,
            config: Config::default(),
            custom_agents: Vec::new(),
            frozen: None,
            environment: environment(),
            instructions: Instructions::default(),
            memory: None,
            session: SessionContext {
                task_id: "task-7".to_string(),
                parent_agent: "mavis".to_string(),
                task: None,
                files: Vec::new(),
                max_steps: None,
                handoff_bytes: None,
            },
        }
    }

    pub fn request(&self) -> TurnRequest<'_> {
        TurnRequest {
            agent: &self.agent,
            mode: self.mode,
            model: &self.model,
            occasion: self.occasion,
            profile: self.profile,
            interactive: self.interactive,
            config: &self.config,
            custom_agents: &self.custom_agents,
            frozen: self.frozen.as_ref(),
            environment: &self.environment,
            instructions: &self.instructions,
            memory: self.memory.as_deref(),
            session: Some(&self.session),
            disk_skills: &[],
            mcp: None,
        }
    }

    /// Renders from the built-in pack.
    pub fn render(&self) -> AssembledPrompt {
        assemble(&builtin(), &self.request()).expect("the built-in pack renders")
    }

    /// Renders through a store that serves `current`.
    pub fn render_served(&self, current: Arc<Snapshot>) -> AssembledPrompt {
        let store = PromptStore::new(builtin());
        store.install(current);
        assemble_turn(&store, &self.request()).expect("served")
    }
}
