//! `agent` with no arguments: an interactive session. Line editing and history come from
//! rustyline; answers stream as they arrive and tool calls show as they run. Ctrl-C during
//! a step stops that step (the session stays); at the prompt it clears the line.

use std::io::Write;
use std::path::Path;
use std::sync::Arc;

use agent_runtime::Occasion;
use agent_runtime::agent_loop::{AgentLoop, Event, LoopState};
use agent_runtime::agents::{AgentDefinition, BUILTIN_AGENTS, ORCHESTRATOR, canonical_name};
use agent_runtime::provider::{Message, Provider};
use agent_runtime::transcript::{Record, SessionHeader, Transcript};
use agent_runtime::{PromptMode, assemble_turn};
use anyhow::Context as _;
use rustyline::ExternalPrinter;
use rustyline::error::ReadlineError;

use crate::exec::Printer;
use crate::host::{Host, Session};
use crate::safety::TerminalApprover;

const HELP: &str = "commands: /init  /agents  /agent NAME  /mode MODE  /model ID  /prompt  /packs  /compact  /plan  /build  /permissions  /exit";

/// What the user steered the session to: it holds from the next turn on.
struct Steer {
    agent: String,
    mode: PromptMode,
    occasion: Occasion,
    /// A `/model` choice; it beats the agent's own model.
    model: Option<String>,
    provider: Arc<Provider>,
}

impl Steer {
    /// The session's loop, steered; `state` carries over from turn to turn.
    fn agent_loop<'a>(
        &'a self,
        session: &'a Session,
        host: &'a Host,
        max_steps: u32,
        state: LoopState,
    ) -> AgentLoop<'a> {
        let mut agent_loop = session.agent_loop(host, max_steps, true);
        agent_loop.request.agent = &self.agent;
        agent_loop.request.mode = self.mode;
        agent_loop.request.occasion = self.occasion;
        agent_loop.request.model = &self.provider.settings().model;
        agent_loop.provider = &self.provider;
        agent_loop.state = state;
        agent_loop
    }

    fn record(&self, transcript: &mut Transcript, after_turn: u32) -> anyhow::Result<()> {
        transcript.append(&Record::Steer {
            after_turn,
            agent: self.agent.clone(),
            mode: self.mode,
            model: self.provider.settings().model.clone(),
        })?;
        Ok(())
    }
}

pub fn repl(
    host: Host,
    approver: Arc<TerminalApprover>,
    mode: PromptMode,
    max_steps: u32,
) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    // The session's MCP servers start on this runtime.
    let _runtime_context = runtime.enter();
    let cwd = std::env::current_dir().context("reading the current directory")?;
    // A session the user keeps open watches the channel (the six-hour schedule is the
    // floor); each turn captures whatever snapshot is current then.
    let _schedule = runtime.block_on(host.packs.start_schedule());
    let header = SessionHeader {
        id: Transcript::new_id(),
        created_at: time::OffsetDateTime::now_utc()
            .format(&time::format_description::well_known::Rfc3339)?,
        agent: agent_runtime::agents::ORCHESTRATOR.to_string(),
        mode,
        provider: host.settings.id.clone(),
        model: host.settings.model.clone(),
        cwd: cwd.clone(),
    };
    let mut transcript = Transcript::create(&host.data_dir.sessions_dir(), &header)?;
    let session_id = header.id.clone();
    let session = host.session(header, &[], None)?;
    let mut steer = Steer {
        agent: session.header.agent.clone(),
        mode,
        occasion: session.occasion,
        model: None,
        provider: session.provider.clone(),
    };
    let mut state = LoopState::default();
    let planning = crate::planning::Planning::new(&session);
    state.reminders.register(planning.state.reminder_provider());
    // The agent to go back to on /build.
    let mut building = steer.agent.clone();
    let mut messages: Vec<Message> = Vec::new();
    let mut turns = 0;
    let mut printer = Printer::interactive();

    let mut editor = rustyline::DefaultEditor::new()?;
    let history = host.data_dir.root().join("history.txt");
    let _ = editor.load_history(&history);
    let snapshot = host.packs.store().capture();
    // A pack that changes while the session is open is announced above the prompt line.
    let _announcer = match editor.create_external_printer() {
        Ok(printer) => Some(runtime.spawn(announce_changes(
            host.packs.store().clone(),
            snapshot.clone(),
            printer,
        ))),
        Err(e) => {
            tracing::debug!("no announcements of pack changes: {e}");
            None
        }
    };
    let mut out = std::io::stdout();
    writeln!(
        out,
        "promptpack agent · {} · pack {} {} ({}) · session {session_id}\n{HELP}",
        host.settings.model,
        snapshot.meta().name,
        snapshot.meta().version,
        snapshot.meta().source
    )?;
    if let Some(reason) = &host.no_model {
        writeln!(
            out,
            "no model configured ({reason}).\n/agents, /prompt and /packs work; to talk to the \
             agent, set AGENT_BASE_URL and AGENT_MODEL, or a [providers.<id>] table in {}, and \
             start again.",
            host.data_dir.config_file().display()
        )?;
    }
    // What needs a model is refused, with the reason, rather than sent to a placeholder.
    let needs_model = |out: &mut std::io::Stdout, what: &str| -> std::io::Result<bool> {
        match &host.no_model {
            Some(reason) => {
                writeln!(out, "{what} needs a model: {reason}")?;
                Ok(true)
            }
            None => Ok(false),
        }
    };

    loop {
        let line = match editor.readline("› ") {
            Ok(line) => line,
            Err(ReadlineError::Interrupted) => continue,
            Err(ReadlineError::Eof) => break,
            Err(e) => return Err(e.into()),
        };
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        let _ = editor.add_history_entry(line);
        if let Some(command) = line.strip_prefix('/') {
            let mut words = command.split_whitespace();
            match words.next().unwrap_or("") {
                "exit" | "quit" => break,
                "agents" => writeln!(out, "{}", agents(&host, &session))?,
                "packs" => write!(out, "{}", host.packs.describe())?,
                "permissions" => write!(
                    out,
                    "{}",
                    crate::safety::describe_session(session.tools.policy.permissions())
                )?,
                "prompt" => {
                    let agent_loop =
                        steer.agent_loop(&session, &host, max_steps, LoopState::default());
                    match assemble_turn(host.packs.store(), &agent_loop.request) {
                        Ok(prompt) => writeln!(out, "{}", prompt.text)?,
                        Err(e) => writeln!(out, "cannot build the prompt: {e}")?,
                    }
                }
                "agent" => match words.next() {
                    None => writeln!(out, "agent: {}; switch with /agent NAME", steer.agent)?,
                    Some(name) if name == agent_runtime::agents::PLAN => writeln!(
                        out,
                        "plan mode has its own switch: /plan, and /build to leave it"
                    )?,
                    Some(name) => {
                        let name = canonical_name(name).to_string();
                        let known = BUILTIN_AGENTS.contains(&name.as_str())
                            || session.custom_agents.iter().any(|a| a.name == name);
                        if !known {
                            writeln!(out, "unknown agent {name:?}; /agents lists them")?;
                            continue;
                        }
                        steer.occasion =
                            if BUILTIN_AGENTS.contains(&name.as_str()) && name != ORCHESTRATOR {
                                Occasion::TaskChild
                            } else {
                                Occasion::Root
                            };
                        steer.provider = match &steer.model {
                            Some(model) => Arc::new(host.provider.with_model(model)),
                            None => host.provider_for(&name, None, &session.roster),
                        };
                        steer.agent = name;
                        steer.record(&mut transcript, turns)?;
                        state.reminders.notify(format!(
                            "The user switched this session to the agent `{}`: from now on you work as that agent, with its prompt and tools.",
                            steer.agent
                        ));
                        writeln!(
                            out,
                            "agent: {} · model {} (from the next turn)",
                            steer.agent,
                            steer.provider.settings().model
                        )?;
                    }
                },
                "mode" => match words.next().map(str::parse::<PromptMode>) {
                    None => writeln!(
                        out,
                        "mode: {}; switch with /mode tui|coding|work",
                        steer.mode
                    )?,
                    Some(Err(e)) => writeln!(out, "{e}")?,
                    Some(Ok(mode)) => {
                        steer.mode = mode;
                        steer.record(&mut transcript, turns)?;
                        let note = if steer.agent == ORCHESTRATOR {
                            String::new()
                        } else {
                            format!(
                                "; only {ORCHESTRATOR} has modes, so it applies once you switch back"
                            )
                        };
                        writeln!(out, "mode: {mode} (from the next turn{note})")?;
                    }
                },
                "model" => match words.next() {
                    None => writeln!(
                        out,
                        "model: {}; switch with /model ID",
                        steer.provider.settings().model
                    )?,
                    Some(model) => {
                        steer.model = Some(model.to_string());
                        steer.provider = Arc::new(host.provider.with_model(model));
                        steer.record(&mut transcript, turns)?;
                        writeln!(out, "model: {model} (from the next turn)")?;
                    }
                },
                "compact" => {
                    if needs_model(&mut out, "/compact")? {
                        continue;
                    }
                    let mut agent_loop =
                        steer.agent_loop(&session, &host, max_steps, std::mem::take(&mut state));
                    let result = runtime.block_on(agent_loop.compact(
                        &messages,
                        &mut transcript,
                        &mut |e| printer.event(e),
                    ));
                    state = std::mem::take(&mut agent_loop.state);
                    match result {
                        Ok(true) => {}
                        Ok(false) => writeln!(out, "nothing to compact yet")?,
                        Err(e) => writeln!(out, "compaction failed: {e}")?,
                    }
                }
                "plan" => {
                    if planning.state.active() {
                        writeln!(out, "already in plan mode; /build carries out the plan")?;
                        continue;
                    }
                    planning.enter(&host, &session);
                    building = steer.agent.clone();
                    steer.agent = agent_runtime::agents::PLAN.to_string();
                    steer.occasion = Occasion::Root;
                    steer.record(&mut transcript, turns)?;
                    writeln!(
                        out,
                        "plan mode: read-only, the plan goes to {}; /build when it is ready",
                        planning.file.display()
                    )?;
                }
                "build" => {
                    if !planning.state.active() {
                        writeln!(out, "not in plan mode; /plan starts it")?;
                        continue;
                    }
                    let reminder = planning.leave(&host);
                    state.reminders.notify(reminder);
                    steer.agent = std::mem::take(&mut building);
                    steer.occasion = if BUILTIN_AGENTS.contains(&steer.agent.as_str())
                        && steer.agent != ORCHESTRATOR
                    {
                        Occasion::TaskChild
                    } else {
                        Occasion::Root
                    };
                    steer.record(&mut transcript, turns)?;
                    writeln!(
                        out,
                        "build mode ({} permissions): the model gets the plan from {}",
                        session.tools.policy.mode(),
                        planning.file.display()
                    )?;
                }
                "init" => {
                    if needs_model(&mut out, "/init")? {
                        continue;
                    }
                    let dir = words.next().map_or(cwd.as_path(), Path::new);
                    if let Err(e) = runtime.block_on(crate::init::run(&host, dir, None, max_steps))
                    {
                        writeln!(out, "init failed: {e:#}")?;
                    }
                }
                other => writeln!(out, "unknown command /{other}; {HELP}")?,
            }
            continue;
        }

        if needs_model(&mut out, "a message")? {
            continue;
        }
        let user = Message::User {
            content: line.to_string(),
        };
        transcript.append(&Record::Message {
            message: user.clone(),
        })?;
        messages.push(user);
        let mut agent_loop =
            steer.agent_loop(&session, &host, max_steps, std::mem::take(&mut state));
        let result = runtime.block_on(async {
            let (cancel_tx, cancel_rx) = tokio::sync::watch::channel(false);
            // Ctrl-C at a question stops the step too.
            approver.arm(cancel_tx.clone());
            // Ctrl-C stops this step only; the listener goes away with the step.
            let listener = tokio::spawn(async move {
                if tokio::signal::ctrl_c().await.is_ok() {
                    let _ = cancel_tx.send(true);
                }
            });
            let result = agent_loop
                .run(
                    &mut messages,
                    &mut transcript,
                    turns,
                    cancel_rx,
                    &mut |e: Event| printer.event(e),
                )
                .await;
            listener.abort();
            result
        });
        state = std::mem::take(&mut agent_loop.state);
        match result {
            Ok(outcome) => turns = outcome.turns,
            Err(e) => writeln!(out, "error: {e}")?,
        }
    }
    let _ = editor.save_history(&history);
    session.tools.tasks.stop_all();
    if let Some(mcp) = &session.tools.mcp {
        runtime.block_on(mcp.shutdown());
    }
    writeln!(out, "session {session_id} saved")?;
    Ok(())
}

/// Prints `pack now NAME VERSION (SOURCE)` whenever the served snapshot changes (a refresh
/// the watch or the schedule started installed another pack).
async fn announce_changes(
    store: std::sync::Arc<pack_client::PromptStore>,
    mut shown: std::sync::Arc<pack_client::Snapshot>,
    mut printer: impl ExternalPrinter,
) {
    let mut ticks = tokio::time::interval(std::time::Duration::from_millis(250));
    loop {
        ticks.tick().await;
        let now = store.capture();
        if now.sha256() == shown.sha256() {
            continue;
        }
        let meta = now.meta();
        let line = format!("pack now {} {} ({})", meta.name, meta.version, meta.source);
        if printer.print(line).is_err() {
            return;
        }
        shown = now;
    }
}

fn agents(host: &Host, session: &Session) -> String {
    let snapshot = host.packs.store().capture();
    let mut out = String::new();
    for name in BUILTIN_AGENTS.iter().chain([&agent_runtime::agents::PLAN]) {
        let description = match AgentDefinition::builtin(name, &snapshot) {
            Some(Ok(def)) if !def.description.is_empty() => def.description,
            _ => "talks to you and delegates to the others".to_string(),
        };
        out.push_str(&format!("{name:<10} {description}\n"));
    }
    for agent in session.custom_agents.iter() {
        out.push_str(&format!(
            "{:<10} {} (custom)\n",
            agent.name, agent.description
        ));
    }
    for note in &session.roster.notes {
        out.push_str(&format!("note: {note}\n"));
    }
    out.trim_end().to_string()
}
