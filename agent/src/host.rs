//! What `agent exec`, `agent init` and the interactive session share: the data directory,
//! config, model provider and pack client, and per session the tools, helpers, skills and
//! notes wired together.

use std::sync::Arc;

use agent_runtime::agent_loop::{AgentLoop, LoopState};
use agent_runtime::agents::{AgentDefinition, BUILTIN_AGENTS, ORCHESTRATOR};
use agent_runtime::config::Config;
use agent_runtime::context::McpInstructions;
use agent_runtime::data_dir::DataDir;
use agent_runtime::delegation::Subagents;
use agent_runtime::environment::Environment;
use agent_runtime::instructions::{Instructions, Sources, Switches};
use agent_runtime::live::LiveContext;
use agent_runtime::mcp::McpServers;
use agent_runtime::packs::Packs;
use agent_runtime::permissions::trust;
use agent_runtime::permissions::{Policy, RuleContext};
use agent_runtime::provider::{Api, Message, Provider, ProviderOverrides, ProviderSettings};
use agent_runtime::roster::Roster;
use agent_runtime::session::{SessionContext, TaskSession};
use agent_runtime::skills::Skill;
use agent_runtime::tools::{Protected, ToolContext, WebSettings, notes_file};
use agent_runtime::transcript::SessionHeader;
use agent_runtime::{Occasion, Profile, TurnRequest};

pub struct Host {
    pub data_dir: DataDir,
    pub config: Arc<Config>,
    pub settings: ProviderSettings,
    pub provider: Arc<Provider>,
    /// Why no model is configured, for an interactive session opened without one: it
    /// still serves /agents, /prompt and /packs, and refuses only what needs a model.
    pub no_model: Option<String>,
    pub packs: Packs,
    /// The data directory's agents; a session adds its workspace's.
    pub roster: Roster,
    /// What the entry point chose about permissions; each session builds its own from it.
    pub safety: crate::safety::Choice,
    /// The config file's text, for the permissions each session reads from it.
    pub config_text: String,
    pub web: WebSettings,
}

impl Host {
    pub fn open(overrides: &ProviderOverrides) -> anyhow::Result<Host> {
        Host::open_with(overrides, false)
    }

    /// For the interactive session: without a configured model it opens anyway, with the
    /// reason in [`Host::no_model`] and a provider that is never called.
    pub fn open_without_model(overrides: &ProviderOverrides) -> anyhow::Result<Host> {
        Host::open_with(overrides, true)
    }

    fn open_with(overrides: &ProviderOverrides, model_optional: bool) -> anyhow::Result<Host> {
        let data_dir = DataDir::locate()?;
        let config_text = crate::read_config(&data_dir)?;
        let config = Config::parse(&config_text)
            .map_err(|reason| anyhow::anyhow!("{}: {reason}", data_dir.config_file().display()))?;
        let resolved =
            ProviderSettings::resolve(&config_text, overrides, |name| std::env::var(name).ok());
        let (settings, no_model) = match resolved {
            Ok(settings) => (settings, None),
            Err(reason) if model_optional => {
                // Placeholder settings: the session checks `no_model` before any model call.
                let mut settings = ProviderSettings::for_tests(Api::OpenAi, "http://127.0.0.1:9");
                settings.id = "none".to_string();
                settings.model = "no model".to_string();
                (settings, Some(reason))
            }
            Err(reason) => anyhow::bail!("model provider: {reason}"),
        };
        // Files that cannot be loaded are logged as they are read.
        let roster = Roster::load(&data_dir.agents_dir());
        let packs = crate::open_packs_or_builtin(&data_dir, &config_text);
        let provider = Arc::new(Provider::new(settings.clone())?);
        let web = WebSettings::parse(&config_text)
            .map_err(|reason| anyhow::anyhow!("{}: {reason}", data_dir.config_file().display()))?;
        // A bad [permissions] table stops every command, not only the first session.
        agent_runtime::permissions::config::section(&config_text)
            .map_err(|reason| anyhow::anyhow!("{}: {reason}", data_dir.config_file().display()))?;
        Ok(Host {
            data_dir,
            config: Arc::new(config),
            settings,
            provider,
            no_model,
            packs,
            roster,
            safety: crate::safety::Choice::default(),
            config_text,
            web,
        })
    }

    /// Wires one session: its permissions, its tools (with helpers to delegate to,
    /// background tasks and notes), skills on disk, and what the prompt needs to know
    /// about the machine. Says once how the session's permissions stand.
    pub fn session(
        &self,
        header: SessionHeader,
        messages: &[Message],
        protected: Option<Protected>,
    ) -> anyhow::Result<Session> {
        let safety = crate::safety::session(
            &self.safety,
            &self.config_text,
            &self.data_dir.config_file(),
            &header.cwd,
        )?;
        crate::safety::announce(&safety, crate::colour_stderr());
        let policy = Policy::new(safety.permissions.clone());
        let roster = Arc::new(session_roster(&self.roster, &self.config_text, &header.cwd));
        for note in &roster.notes {
            eprintln!("note: {note}");
        }
        let custom_agents = Arc::new(roster.custom.clone());
        let environment = Arc::new(
            Environment::detect(&header.cwd, self.data_dir.root())
                .with_provider(&self.settings.provider_name()),
        );
        // Instruction files and skills are read now and again whenever they change; the
        // URLs among the configured ones are fetched now, once for the session.
        let notes = notes_file(self.data_dir.root(), &header.cwd);
        let sources = instruction_sources(&self.data_dir, &self.config, &self.web, &header.cwd);
        let live = LiveContext::new(sources.clone(), self.data_dir.root(), Some(&notes));
        let current = live.current();
        let (instructions, disk_skills) = (current.instructions, current.skills);
        for warning in &instructions.warnings {
            eprintln!("warning: {warning}");
        }
        // Helpers read the same files, as they are when each starts and at each of its
        // turns; the notes stay out, as helpers get no memory layer.
        let mut subagents = Subagents::new(
            self.packs.store().clone(),
            self.provider.clone(),
            self.config.clone(),
            custom_agents.clone(),
            environment.clone(),
            LiveContext::new(sources, self.data_dir.root(), None),
            self.data_dir.sessions_dir(),
            header.mode,
            header.cwd.clone(),
            header.id.clone(),
        );
        subagents.web = self.web.clone();
        subagents.builtin_models = roster.builtin_models.clone();
        subagents.outcomes = self.packs.outcomes().cloned();
        // MCP servers start in the background; the first model call waits for them.
        let mcp = match tokio::runtime::Handle::try_current() {
            Ok(runtime) if !self.config.mcp_servers.is_empty() => Some(McpServers::spawn(
                &self.config.mcp_servers,
                &header.cwd,
                &runtime,
            )),
            Ok(_) | Err(_) => None,
        };
        subagents.mcp = mcp.clone();
        let mut tools = ToolContext::new(header.cwd.clone(), policy)
            .with_web(self.web.clone())
            .with_instruction_files(self.config.instruction_files())
            .with_outcomes(self.packs.outcomes().cloned())
            .with_delegate(Arc::new(subagents))
            .with_notes(notes_file(self.data_dir.root(), &header.cwd));
        if let Some(protected) = protected {
            tools = tools.with_protected(protected);
        }
        if let Some(mcp) = mcp {
            tools = tools.with_mcp(mcp);
        }
        let tools = Arc::new(tools);
        for message in messages {
            if let Message::Assistant { tool_calls, .. } = message {
                for call in tool_calls {
                    tools.replay(call);
                }
            }
        }
        // A helper's session has its frozen definition beside its transcript: resumed, it
        // renders from that, as the task child it was.
        let task = self.task_session(&header.id);
        let agent = header.agent.as_str();
        let occasion =
            if task.is_some() || (BUILTIN_AGENTS.contains(&agent) && agent != ORCHESTRATOR) {
                Occasion::TaskChild
            } else {
                Occasion::Root
            };
        let (frozen, context) = match task {
            Some(task) => (Some(task.agent), task.context),
            None => (
                None,
                SessionContext {
                    task_id: header.id.clone(),
                    parent_agent: ORCHESTRATOR.to_string(),
                    task: None,
                    files: Vec::new(),
                    max_steps: None,
                    handoff_bytes: None,
                },
            ),
        };
        let provider = self.provider_for(&header.agent, frozen.as_ref(), &roster);
        Ok(Session {
            header,
            roster,
            custom_agents,
            environment,
            instructions,
            disk_skills,
            tools,
            context,
            occasion,
            frozen,
            provider,
            live,
        })
    }

    /// The frozen definition of a helper's session, if `id` is one.
    fn task_session(&self, id: &str) -> Option<TaskSession> {
        let sessions = self.data_dir.sessions_dir();
        if !TaskSession::path(&sessions, id).exists() {
            return None;
        }
        match TaskSession::load(&sessions, id) {
            Ok(task) => Some(task),
            Err(e) => {
                tracing::warn!("{e}; the session runs with the agent's current definition");
                None
            }
        }
    }

    /// The provider for `agent`: its own `model` (for a built-in agent, the user's choice
    /// in the `.builtin` mirror first) when there is one.
    pub fn provider_for(
        &self,
        agent: &str,
        frozen: Option<&AgentDefinition>,
        roster: &Roster,
    ) -> Arc<Provider> {
        let model = match frozen {
            Some(definition) => definition.model.clone(),
            None => match roster.builtin(agent, &self.packs.store().capture()) {
                Some(Ok(definition)) => definition.model,
                Some(Err(_)) => None,
                None => roster
                    .custom
                    .iter()
                    .find(|a| a.name == agent)
                    .and_then(|a| a.model.clone()),
            },
        };
        match model {
            Some(model) if model != self.settings.model => {
                Arc::new(self.provider.with_model(&model))
            }
            Some(_) | None => self.provider.clone(),
        }
    }
}

/// The agents of a session in `cwd`: the data directory's, and the workspace's
/// `.agents/agents/` when the workspace is trusted (listed under `trusted_workspaces`) and
/// the project switch does not leave the project out.
pub fn session_roster(base: &Roster, config_text: &str, cwd: &std::path::Path) -> Roster {
    if Switches::from_process().no_project {
        return base.clone();
    }
    let context = RuleContext {
        workspace: cwd.to_path_buf(),
        home: crate::safety::home(),
    };
    let trusted = agent_runtime::permissions::config::section(config_text)
        .is_ok_and(|section| trust::is_listed(&section, &context));
    base.with_workspace(cwd, trusted)
}

/// Where a session in `cwd` looks for instruction files: the data directory's AGENTS.md
/// (else `~/.claude/CLAUDE.md`), the project's files (`instruction_files`, per directory),
/// the config's `instructions`, under the switches in the environment. The URLs among the
/// `instructions` are fetched here, under `web`'s rules, and kept with the sources.
pub fn instruction_sources(
    data_dir: &DataDir,
    config: &Config,
    web: &WebSettings,
    cwd: &std::path::Path,
) -> Sources {
    let mut sources = Sources {
        global: data_dir.global_instructions(),
        home: crate::safety::home(),
        cwd: cwd.to_path_buf(),
        configured: config.instructions.clone(),
        names: config.instruction_files(),
        fetched: Default::default(),
        switches: Switches::from_process(),
    };
    sources.fetched = agent_runtime::instruction_urls::fetch_urls(web, &sources.urls());
    sources
}

pub struct Session {
    pub header: SessionHeader,
    /// The agents this session can use: the data directory's and a trusted workspace's.
    pub roster: Arc<Roster>,
    /// `roster.custom`, shared with the helpers.
    pub custom_agents: Arc<Vec<AgentDefinition>>,
    pub environment: Arc<Environment>,
    pub instructions: Arc<Instructions>,
    pub disk_skills: Arc<Vec<Skill>>,
    pub tools: Arc<ToolContext>,
    pub context: SessionContext,
    pub occasion: Occasion,
    /// A resumed helper's frozen definition.
    pub frozen: Option<AgentDefinition>,
    /// The model provider for this session's agent.
    pub provider: Arc<Provider>,
    pub live: LiveContext,
}

impl Session {
    pub fn agent_loop<'a>(
        &'a self,
        host: &'a Host,
        max_steps: u32,
        interactive: bool,
    ) -> AgentLoop<'a> {
        AgentLoop {
            store: host.packs.store(),
            request: TurnRequest {
                agent: &self.header.agent,
                mode: self.header.mode,
                model: &self.provider.settings().model,
                occasion: self.occasion,
                profile: Profile::Cli,
                interactive,
                config: &host.config,
                custom_agents: &self.custom_agents,
                frozen: self.frozen.as_ref(),
                environment: &self.environment,
                instructions: &self.instructions,
                memory: None,
                session: Some(&self.context),
                disk_skills: &self.disk_skills,
                mcp: self.tools.mcp.as_deref().map(|m| m as &dyn McpInstructions),
            },
            provider: &self.provider,
            tools: self.tools.clone(),
            max_steps,
            session_id: self.header.id.clone(),
            context_limit: Some(host.settings.context_tokens),
            state: LoopState::default(),
            live: Some(&self.live),
        }
    }
}
