//! `agent` with no arguments: an interactive session. Line editing and history come from
//! rustyline; answers stream as they arrive and tool calls show as they run. Ctrl-C during
//! a step stops that step (the session stays); at the prompt it clears the line.

use std::io::Write;
use std::path::Path;

use agent_runtime::agent_loop::Event;
use agent_runtime::agents::{AgentDefinition, BUILTIN_AGENTS};
use agent_runtime::provider::Message;
use agent_runtime::transcript::{Record, SessionHeader, Transcript};
use agent_runtime::{PromptMode, assemble_turn};
use anyhow::Context as _;
use rustyline::ExternalPrinter;
use rustyline::error::ReadlineError;

use crate::exec::Printer;
use crate::host::Host;

const HELP: &str = "commands: /init  /agents  /prompt  /packs  /compact  /exit";

pub fn repl(host: Host, mode: PromptMode, max_steps: u32) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("starting the async runtime")?;
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
    let session = host.session(header, &[], None);
    let mut agent_loop = session.agent_loop(&host, max_steps, true);
    let mut messages: Vec<Message> = Vec::new();
    let mut turns = 0;
    let mut printer = Printer::new(false);

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
                "agents" => writeln!(out, "{}", agents(&host))?,
                "packs" => write!(out, "{}", host.packs.describe())?,
                "prompt" => match assemble_turn(host.packs.store(), &agent_loop.request) {
                    Ok(prompt) => writeln!(out, "{}", prompt.text)?,
                    Err(e) => writeln!(out, "cannot build the prompt: {e}")?,
                },
                "compact" => {
                    if needs_model(&mut out, "/compact")? {
                        continue;
                    }
                    let result = runtime.block_on(agent_loop.compact(
                        &messages,
                        &mut transcript,
                        &mut |e| printer.event(e),
                    ));
                    match result {
                        Ok(true) => {}
                        Ok(false) => writeln!(out, "nothing to compact yet")?,
                        Err(e) => writeln!(out, "compaction failed: {e}")?,
                    }
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
        let result = runtime.block_on(async {
            let (cancel_tx, cancel_rx) = tokio::sync::watch::channel(false);
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
        match result {
            Ok(outcome) => turns = outcome.turns,
            Err(e) => writeln!(out, "error: {e}")?,
        }
    }
    let _ = editor.save_history(&history);
    session.tools.tasks.stop_all();
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

fn agents(host: &Host) -> String {
    let snapshot = host.packs.store().capture();
    let mut out = String::new();
    for name in BUILTIN_AGENTS {
        let description = match AgentDefinition::builtin(name, &snapshot) {
            Some(Ok(def)) if !def.description.is_empty() => def.description,
            _ => "talks to you and delegates to the others".to_string(),
        };
        out.push_str(&format!("{name:<10} {description}\n"));
    }
    for agent in host.custom_agents.iter() {
        out.push_str(&format!(
            "{:<10} {} (custom)\n",
            agent.name, agent.description
        ));
    }
    out.trim_end().to_string()
}
