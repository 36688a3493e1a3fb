//! Delegation: the `task` tool hands one task to a helper agent (`explore`, `worker`,
//! `verifier` or a custom agent). The child runs its own loop with its own conversation
//! and transcript, under its ceiling and the delegated-task contract, with a session
//! context naming the task and the files the parent has produced. It is a task child, so
//! it has no `task` tool itself. Its final message is the handoff the parent receives,
//! with `ROLE_MISMATCH` and `VERDICT:` lines recognised and called out, and its middle cut
//! past the helper's handoff limit, so one long report cannot crowd the parent's context.
//! Both the handoff limit and the step limit are the config's (`[agents.default]`,
//! `[agents.<name>]`, see [`Config::helper_limits`]), and both are stated in the helper's
//! prompt, so it can plan its work and size its report.

use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use pack_client::PromptStore;
use tokio::sync::watch;

use crate::TurnRequest;
use crate::agent_loop::{AgentLoop, Event, Finish};
use crate::agents::{AgentDefinition, BUILTIN_AGENTS, ORCHESTRATOR};
use crate::capabilities::{Occasion, Profile};
use crate::config::Config;
use crate::context::McpInstructions;
use crate::environment::Environment;
use crate::live::LiveContext;
use crate::mcp::McpServers;
use crate::mode::PromptMode;
use crate::provider::{Message, Provider};
use crate::session::{SessionContext, TaskSession};
use crate::tools::{Delegate, DelegateRequest, ToolContext, ToolError, WebSettings};
use crate::transcript::{Record, SessionHeader, Transcript};

/// The longest handoff a helper's final message makes when the config sets none, in bytes.
pub use crate::config::HELPER_HANDOFF_BYTES as MAX_HANDOFF_BYTES;

/// A verifier's conclusion.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Pass,
    Fail,
    Partial,
}

impl Verdict {
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Pass => "PASS",
            Verdict::Fail => "FAIL",
            Verdict::Partial => "PARTIAL",
        }
    }
}

/// What a child's final message says besides its text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Handoff {
    /// The child refused: the task needs something outside its role.
    pub role_mismatch: bool,
    pub verdict: Option<Verdict>,
}

/// Reads the markers the built-in subagent prompts ask for: `ROLE_MISMATCH` on the first
/// line, `VERDICT: PASS | FAIL | PARTIAL` on the last.
pub fn parse_handoff(text: &str) -> Handoff {
    let mut lines = text.lines().map(str::trim).filter(|l| !l.is_empty());
    let role_mismatch = lines
        .next()
        .is_some_and(|first| first.trim_matches(['*', '`']).starts_with("ROLE_MISMATCH"));
    let verdict = text
        .lines()
        .map(|l| l.trim().trim_matches(['*', '`']))
        .rfind(|l| !l.is_empty())
        .and_then(|last| last.strip_prefix("VERDICT:"))
        .and_then(|v| match v.trim().trim_matches(['*', '`', '.']) {
            "PASS" => Some(Verdict::Pass),
            "FAIL" => Some(Verdict::Fail),
            "PARTIAL" => Some(Verdict::Partial),
            _ => None,
        });
    Handoff {
        role_mismatch,
        verdict,
    }
}

/// Everything a child run needs, shared with the parent.
pub struct Subagents {
    pub store: Arc<PromptStore>,
    pub provider: Arc<Provider>,
    pub config: Arc<Config>,
    pub custom_agents: Arc<Vec<AgentDefinition>>,
    pub environment: Arc<Environment>,
    /// The parent's instruction files and skills, without the workspace's notes (helpers
    /// get no memory layer): a helper reads them as they are when it starts, and again
    /// before each of its model calls when one changed, as the parent does.
    pub live: LiveContext,
    pub sessions_dir: PathBuf,
    pub mode: PromptMode,
    pub cwd: PathBuf,
    /// The parent's session id; children are `<parent>.task-<n>`.
    pub parent_session: String,
    pub parent_agent: String,
    /// `web_fetch`'s limits, the same as the parent's.
    pub web: WebSettings,
    /// The parent's MCP servers: a helper may use their tools as its ceiling allows.
    pub mcp: Option<Arc<McpServers>>,
    /// The user's choice of model for built-in agents (`agents/.builtin/<name>/agent.md`).
    pub builtin_models: std::collections::BTreeMap<String, String>,
    /// Where the parent counts outcomes: a helper's turns count there too.
    pub outcomes: Option<Arc<crate::outcomes::OutcomeRecorder>>,
    pub(crate) next: AtomicU32,
}

impl Subagents {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        store: Arc<PromptStore>,
        provider: Arc<Provider>,
        config: Arc<Config>,
        custom_agents: Arc<Vec<AgentDefinition>>,
        environment: Arc<Environment>,
        live: LiveContext,
        sessions_dir: PathBuf,
        mode: PromptMode,
        cwd: PathBuf,
        parent_session: String,
    ) -> Subagents {
        Subagents {
            store,
            provider,
            config,
            custom_agents,
            environment,
            live,
            sessions_dir,
            mode,
            cwd,
            parent_session,
            parent_agent: ORCHESTRATOR.to_string(),
            web: WebSettings::default(),
            mcp: None,
            builtin_models: Default::default(),
            outcomes: None,
            next: AtomicU32::new(0),
        }
    }

    /// The helper's definition as it stands now, to be frozen: a built-in one from the
    /// current pack (on the user's choice of model, if any) with its core template taken
    /// out of that pack, or a custom one.
    fn definition(&self, agent: &str) -> Option<AgentDefinition> {
        let snapshot = self.store.capture();
        match AgentDefinition::builtin(agent, &snapshot) {
            Some(Ok(mut definition)) => {
                if let Some(model) = self.builtin_models.get(&definition.name) {
                    definition.model = Some(model.clone());
                }
                Some(definition.frozen(self.mode, &snapshot))
            }
            // A broken built-in definition in a remote pack: leave the lookup to the
            // prompt assembly, which falls back to the built-in pack wholesale.
            Some(Err(_)) => None,
            None => self.custom_agents.iter().find(|a| a.name == agent).cloned(),
        }
    }

    fn available(&self) -> Vec<String> {
        BUILTIN_AGENTS
            .iter()
            .filter(|a| **a != ORCHESTRATOR)
            .map(|a| a.to_string())
            .chain(self.custom_agents.iter().map(|a| a.name.clone()))
            .collect()
    }

    async fn run_child(
        &self,
        request: DelegateRequest,
        cancel: watch::Receiver<bool>,
    ) -> Result<String, ToolError> {
        let available = self.available();
        if !available.contains(&request.agent) {
            return Err(ToolError(format!(
                "cannot delegate to {:?}; the agents you can hand tasks to are: {}",
                request.agent,
                available.join(", ")
            )));
        }
        if request.task.trim().is_empty() {
            return Err(ToolError("the task text is empty".to_string()));
        }
        let n = self.next.fetch_add(1, Ordering::Relaxed) + 1;
        let task_id = format!("{}.task-{n}", self.parent_session);
        // The definition the helper starts with is frozen: saved beside its transcript and
        // rendered from, so a resumed helper behaves as it was asked to.
        let definition = self.definition(&request.agent);
        // An agent's own `model` is honoured; otherwise the session's model runs it.
        let provider = match definition.as_ref().and_then(|d| d.model.as_deref()) {
            Some(model) => Arc::new(self.provider.with_model(model)),
            None => self.provider.clone(),
        };
        let settings = provider.settings();
        let header = SessionHeader {
            id: task_id.clone(),
            created_at: time::OffsetDateTime::now_utc()
                .format(&time::format_description::well_known::Rfc3339)
                .unwrap_or_default(),
            agent: request.agent.clone(),
            mode: self.mode,
            provider: settings.id.clone(),
            model: settings.model.clone(),
            cwd: self.cwd.clone(),
        };
        let stop = |e: crate::error::RuntimeError| {
            ToolError(format!("the helper could not start its session: {e}"))
        };
        let mut transcript = Transcript::create(&self.sessions_dir, &header).map_err(stop)?;
        let user = Message::User {
            content: request.task.trim().to_string(),
        };
        transcript
            .append(&Record::Message {
                message: user.clone(),
            })
            .map_err(stop)?;
        let mut messages = vec![user];
        let limits = self
            .config
            .helper_limits(&request.agent, self.provider.context_tokens());
        let session = SessionContext {
            task_id: task_id.clone(),
            parent_agent: self.parent_agent.clone(),
            task: Some(request.task.trim().to_string()),
            files: request.files,
            max_steps: Some(limits.max_steps),
            handoff_bytes: Some(limits.handoff_bytes),
        };
        if let Some(definition) = &definition {
            TaskSession {
                id: task_id.clone(),
                mode: self.mode,
                agent: definition.clone(),
                context: session.clone(),
            }
            .save(&self.sessions_dir)
            .map_err(stop)?;
        }
        // No delegate: the child's toolbox has no `task` tool, whatever its ceiling says.
        // Its permissions are the parent's, narrowed further by its own ceiling.
        let mut tools = ToolContext::new(
            self.cwd.clone(),
            request.policy.inherited(&self.parent_agent),
        )
        .with_web(self.web.clone())
        .with_instruction_files(self.config.instruction_files())
        .with_outcomes(self.outcomes.clone());
        if let Some(mcp) = &self.mcp {
            tools = tools.with_mcp(mcp.clone());
        }
        let tools = Arc::new(tools);
        // The instruction files and skills as they are now; the loop reads them again
        // before each call when one changed.
        let current = self.live.current();
        let mut child = AgentLoop {
            store: &self.store,
            request: TurnRequest {
                agent: &request.agent,
                mode: self.mode,
                model: &settings.model,
                occasion: Occasion::TaskChild,
                profile: Profile::Cli,
                interactive: false,
                config: &self.config,
                custom_agents: &self.custom_agents,
                frozen: definition.as_ref(),
                environment: &self.environment,
                instructions: &current.instructions,
                memory: None,
                session: Some(&session),
                disk_skills: &current.skills,
                mcp: self.mcp.as_deref().map(|m| m as &dyn McpInstructions),
            },
            provider: &provider,
            tools: tools.clone(),
            max_steps: limits.max_steps,
            session_id: task_id.clone(),
            // Helpers compact like their parent.
            context_limit: Some(settings.context_tokens),
            state: Default::default(),
            live: Some(&self.live),
        };
        let agent = request.agent.clone();
        let mut sink = |event: Event| {
            if let Event::ToolCallStarted { name, .. } = &event {
                tracing::debug!(agent = %agent, tool = %name, "helper tool call");
            }
        };
        let outcome = child
            .run(&mut messages, &mut transcript, 0, cancel, &mut sink)
            .await;
        tools.tasks.stop_all();
        let outcome = outcome.map_err(|e| {
            ToolError(format!(
                "the {} helper stopped with an error: {e}; its session is {task_id}",
                request.agent
            ))
        })?;
        let text = messages
            .iter()
            .rev()
            .find_map(|m| match m {
                Message::Assistant { content, .. } if !content.trim().is_empty() => {
                    Some(content.trim().to_string())
                }
                _ => None,
            })
            .unwrap_or_default();
        let handoff = parse_handoff(&text);
        let status = match (outcome.finish, handoff.role_mismatch) {
            (_, true) => "role_mismatch",
            (Finish::Done, false) => "completed",
            (Finish::CutOff, false) => "cut_off",
            (Finish::StepLimit, false) => "step_limit",
            (Finish::Interrupted, false) => "interrupted",
        };
        let verdict = handoff
            .verdict
            .map(|v| format!(" verdict=\"{}\"", v.as_str()))
            .unwrap_or_default();
        // The markers were read from the whole message; the parent gets its ends.
        let limit = limits.handoff_bytes;
        let shown = crate::tools::cut_middle(&text, limit);
        let mut out = format!(
            "<handoff agent=\"{}\" task_id=\"{task_id}\" status=\"{status}\"{verdict}>\n{}\n</handoff>",
            request.agent,
            if text.is_empty() {
                "(the helper ended without a final message)"
            } else {
                &shown
            }
        );
        if text.len() > limit {
            out.push_str(&format!(
                "\nThe {} helper's final message was {} bytes, past the {limit} a handoff may take, so its middle was cut. If you need the part that is missing, hand a task that asks for just that part.",
                request.agent,
                text.len()
            ));
        }
        if handoff.role_mismatch {
            out.push_str(&format!(
                "\nThe {} helper refused this task as outside its role. Hand it to an agent that can do it (for changes: worker), or do it yourself.",
                request.agent
            ));
        }
        if let Some(verdict) = handoff.verdict {
            out.push_str(&format!("\nVerdict: {}", verdict.as_str()));
        }
        Ok(out)
    }
}

impl std::fmt::Debug for Subagents {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Subagents")
            .field("parent_session", &self.parent_session)
            .field("mode", &self.mode)
            .finish_non_exhaustive()
    }
}

impl Delegate for Subagents {
    fn agents(&self) -> Vec<String> {
        self.available()
    }

    fn delegate<'a>(
        &'a self,
        request: DelegateRequest,
        cancel: watch::Receiver<bool>,
    ) -> Pin<Box<dyn Future<Output = Result<String, ToolError>> + Send + 'a>> {
        Box::pin(self.run_child(request, cancel))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markers() {
        let h = parse_handoff("ROLE_MISMATCH\nThis needs a write; send it to worker.");
        assert!(h.role_mismatch);
        assert_eq!(h.verdict, None);
        let h = parse_handoff("- tests: pass\n- lint: pass\n\n**VERDICT: PASS**\n");
        assert!(!h.role_mismatch);
        assert_eq!(h.verdict, Some(Verdict::Pass));
        assert_eq!(parse_handoff("VERDICT: MAYBE").verdict, None);
        assert_eq!(parse_handoff("VERDICT: FAIL\nmore").verdict, None);
    }
}
