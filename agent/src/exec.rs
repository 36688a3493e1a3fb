//! `agent exec`: one task, run to the end, printed as it happens.

use std::io::{IsTerminal, Read, Write};
use std::path::PathBuf;

use agent_runtime::PromptMode;
use agent_runtime::agent_loop::{Event, Finish, RunError};
use agent_runtime::agents::{ORCHESTRATOR, canonical_name};
use agent_runtime::provider::{Api, Message, ProviderError, ProviderOverrides};
use agent_runtime::transcript::{Record, SessionHeader, Transcript};
use anyhow::{Context as _, bail};

use crate::host::Host;

/// Which model to talk to.
#[derive(clap::Args, Debug, Default)]
pub struct ProviderArgs {
    /// The `[providers.<id>]` entry of config.toml to use.
    #[arg(long)]
    provider: Option<String>,
    /// openai or anthropic (overrides AGENT_API).
    #[arg(long)]
    api: Option<Api>,
    /// The model server's base URL (overrides AGENT_BASE_URL).
    #[arg(long)]
    base_url: Option<String>,
    /// The model id (overrides AGENT_MODEL).
    #[arg(long)]
    model: Option<String>,
}

impl ProviderArgs {
    pub fn overrides(&self) -> ProviderOverrides {
        ProviderOverrides {
            provider: self.provider.clone(),
            api: self.api,
            base_url: self.base_url.clone(),
            model: self.model.clone(),
        }
    }
}

#[derive(clap::Args)]
pub struct ExecArgs {
    /// The task. Read from stdin when absent.
    prompt: Vec<String>,
    /// Print one JSON event per line instead of readable output.
    #[arg(long)]
    json: bool,
    /// The orchestrator's prompt mode: tui, coding or work (default tui).
    #[arg(long, value_name = "MODE")]
    prompt_mode: Option<PromptMode>,
    /// The agent: mavis, explore, worker, verifier or a custom agent (default mavis).
    #[arg(long)]
    agent: Option<String>,
    /// Continue this stored session.
    #[arg(long, value_name = "ID")]
    resume: Option<String>,
    /// The `[providers.<id>]` entry of config.toml to use.
    #[arg(long)]
    provider: Option<String>,
    /// openai or anthropic (overrides AGENT_API).
    #[arg(long)]
    api: Option<Api>,
    /// The model server's base URL (overrides AGENT_BASE_URL).
    #[arg(long)]
    base_url: Option<String>,
    /// The model id (overrides AGENT_MODEL).
    #[arg(long)]
    model: Option<String>,
    /// Stop after this many model calls.
    #[arg(long, default_value_t = 50)]
    max_steps: u32,
    /// The workspace (default: the current directory; a resumed session keeps its own).
    #[arg(long)]
    cwd: Option<PathBuf>,
    #[command(flatten)]
    permissions: crate::safety::PermissionArgs,
}

pub fn exec(args: ExecArgs) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    runtime.block_on(run(args))
}

async fn run(args: ExecArgs) -> anyhow::Result<()> {
    let overrides = ProviderOverrides {
        provider: args.provider.clone(),
        api: args.api,
        base_url: args.base_url.clone(),
        model: args.model.clone(),
    };
    let mut host = Host::open(&overrides)?;
    // `prompt` says when no refresh ever succeeded; a run's output stays the model's.
    let _ = host.packs.refresh_in_background_if_due();
    if args.permissions.approval == Some(agent_runtime::permissions::Approval::Ask)
        && !std::io::stdin().is_terminal()
    {
        bail!(
            "--approval ask needs a terminal to ask on, and stdin is not one; use --approval never (the default for exec) or an allow rule under [permissions]"
        );
    }
    // Asks only under `--approval ask`; otherwise it only reports what a rule let through.
    let approver: std::sync::Arc<dyn agent_runtime::permissions::Approver> =
        std::sync::Arc::new(crate::safety::TerminalApprover::default());
    let approver = Some(approver);
    host.safety = crate::safety::Choice {
        kind: crate::safety::Kind::Unattended,
        args: args.permissions.clone(),
        approver,
    };
    let settings = &host.settings;
    let data_dir = &host.data_dir;

    let sessions = data_dir.sessions_dir();
    let (mut transcript, header, mut messages, turns, compaction) = match &args.resume {
        Some(id) => {
            let (transcript, stored) = Transcript::resume(&sessions, id)?;
            let header = stored.header;
            if let Some(agent) = &args.agent
                && canonical_name(agent) != header.agent
            {
                bail!(
                    "session {id} runs agent {}; it cannot continue as {agent}",
                    header.agent
                );
            }
            if let Some(mode) = args.prompt_mode
                && mode != header.mode
            {
                bail!(
                    "session {id} was started with prompt mode `{}`; it cannot be resumed with --prompt-mode {mode}",
                    header.mode
                );
            }
            (
                transcript,
                header,
                stored.messages,
                stored.turns,
                stored.compaction,
            )
        }
        None => {
            let cwd = match &args.cwd {
                Some(dir) => dir.clone(),
                None => std::env::current_dir().context("reading the current directory")?,
            };
            let cwd = std::path::absolute(&cwd)?;
            if !cwd.is_dir() {
                bail!("--cwd {} is not a directory", cwd.display());
            }
            let agent = args
                .agent
                .as_deref()
                .map_or(ORCHESTRATOR, canonical_name)
                .to_string();
            // The agent's own `model`, when it names one, is the session's model.
            let roster = crate::host::session_roster(&host.roster, &host.config_text, &cwd);
            let model = host
                .provider_for(&agent, None, &roster)
                .settings()
                .model
                .clone();
            let header = SessionHeader {
                id: Transcript::new_id(),
                created_at: time::OffsetDateTime::now_utc()
                    .format(&time::format_description::well_known::Rfc3339)?,
                agent,
                mode: args.prompt_mode.unwrap_or_default(),
                provider: settings.id.clone(),
                model,
                cwd,
            };
            let transcript = Transcript::create(&sessions, &header)?;
            (transcript, header, Vec::new(), 0, None)
        }
    };

    let task = if args.prompt.is_empty() {
        let mut text = String::new();
        if !std::io::stdin().is_terminal() {
            std::io::stdin().read_to_string(&mut text)?;
        }
        text
    } else {
        args.prompt.join(" ")
    };
    if task.trim().is_empty() {
        bail!("no task: pass it as an argument or on stdin");
    }
    let user = Message::User {
        content: task.trim_end().to_string(),
    };
    transcript.append(&Record::Message {
        message: user.clone(),
    })?;
    messages.push(user);

    let session = host.session(header.clone(), &messages, None)?;
    let mut agent_loop = session.agent_loop(&host, args.max_steps, false);
    let planning = crate::planning::Planning::new(&session);
    if header.agent == agent_runtime::agents::PLAN {
        agent_loop
            .state
            .reminders
            .register(planning.state.reminder_provider());
        planning.enter(&host, &session);
        eprintln!("plan mode: the plan goes to {}", planning.file.display());
    }
    agent_loop.state.compaction = compaction;

    // The first Ctrl-C ends the current step and saves; a second one leaves at once.
    let (cancel_tx, cancel_rx) = tokio::sync::watch::channel(false);
    tokio::spawn(async move {
        if tokio::signal::ctrl_c().await.is_ok() {
            let _ = cancel_tx.send(true);
            if tokio::signal::ctrl_c().await.is_ok() {
                std::process::exit(130);
            }
        }
    });

    let mut printer = Printer::new(args.json);
    printer.event(Event::SessionStarted {
        session_id: header.id.clone(),
        agent: header.agent.clone(),
        mode: header.mode.to_string(),
        model: session.provider.settings().model.clone(),
        resumed: args.resume.is_some(),
        transcript: transcript.file_path().display().to_string(),
    });
    let result = agent_loop
        .run(&mut messages, &mut transcript, turns, cancel_rx, &mut |e| {
            printer.event(e)
        })
        .await;
    if let Some(mcp) = &session.tools.mcp {
        mcp.shutdown().await;
    }
    // A template that failed to render during the run queued a report: send it now.
    host.packs.send_reports_in_background();
    if let Some(outcomes) = host.packs.outcomes() {
        let failed = !matches!(&result, Ok(outcome) if outcome.finish == Finish::Done);
        let current = pack_client::outcomes::PackKey::of(&host.packs.store().capture());
        outcomes.count_latest(
            &current,
            pack_client::outcomes::OutcomeCounts {
                exec_runs: 1,
                exec_failures: u64::from(failed),
                ..Default::default()
            },
        );
        pack_client::cache::off_async(|| outcomes.flush());
    }
    match result {
        Ok(outcome) => match outcome.finish {
            Finish::Done => Ok(()),
            Finish::CutOff => bail!(
                "the answer was cut off at the model's output limit; raise `max_tokens` in [providers.{}] or ask for less, and continue with `agent exec --resume {}`",
                settings.id,
                header.id
            ),
            Finish::StepLimit => bail!(
                "stopped after {} steps; continue with `agent exec --resume {}`",
                args.max_steps,
                header.id
            ),
            Finish::Interrupted => {
                session.tools.tasks.stop_all();
                std::process::exit(130);
            }
        },
        Err(e) => {
            // Said once, here: the error, then how to carry on. `main` only sets the exit code.
            printer.event(Event::Error {
                message: pack_protocol::error_text::report(&e),
            });
            eprintln!("{}", carry_on(&e, &header.id));
            Err(crate::Reported.into())
        }
    }
}

/// What to do after a failed run. Resuming cannot help a conversation that does not fit
/// the model: the same history fails the same way.
pub(crate) fn carry_on(error: &RunError, session: &str) -> String {
    match error {
        RunError::Provider(ProviderError::ContextOverflow { context_tokens, .. }) => {
            let context = context_tokens.map_or_else(
                || "the model's context".to_string(),
                |n| format!("the model's context of {n} tokens"),
            );
            format!(
                "session {session} saved, but it does not fit {context}, so resuming it as it is fails the same way. \
                 Start a new session with a smaller task (name the files to read instead of pasting them), \
                 give the model server a larger context (llama-server --ctx-size), \
                 or set `context_tokens` in [providers.<id>] (or AGENT_CONTEXT_TOKENS) to the server's context so older history is summarised before it overflows."
            )
        }
        RunError::Provider(_) | RunError::Prompt(_) | RunError::Session(_) => {
            format!("session {session} saved; continue with `agent exec --resume {session}`")
        }
    }
}

/// Writes events: JSON lines, or the assistant's text on stdout with tool activity on
/// stderr, so `agent exec … > answer.txt` captures just the answer.
pub(crate) struct Printer {
    json: bool,
    /// Text has been streamed since the last newline.
    mid_line: bool,
    /// Show a spinner while waiting for the model's first words.
    spin: bool,
    spinner: Option<crate::spinner::Spinner>,
}

impl Printer {
    pub(crate) fn new(json: bool) -> Printer {
        Printer {
            json,
            mid_line: false,
            spin: false,
            spinner: None,
        }
    }

    /// For a person at a terminal: readable output and a spinner while the model is
    /// silent.
    pub(crate) fn interactive() -> Printer {
        Printer {
            spin: std::io::stderr().is_terminal(),
            ..Printer::new(false)
        }
    }

    pub(crate) fn event(&mut self, event: Event) {
        // A closed stdout (`| head`) must not turn into a panic mid-session.
        let _ = self.write(event);
    }

    fn write(&mut self, event: Event) -> std::io::Result<()> {
        let mut out = std::io::stdout().lock();
        if self.json {
            if matches!(
                event,
                Event::TextDelta { .. } | Event::ReasoningDelta { .. }
            ) {
                return Ok(());
            }
            serde_json::to_writer(&mut out, &event)?;
            writeln!(out)?;
            return out.flush();
        }
        // Anything the loop shows means the wait is over; dropping the spinner wipes it.
        if !matches!(event, Event::ReasoningDelta { .. }) {
            self.spinner = None;
        }
        let mut err = std::io::stderr().lock();
        match event {
            Event::TextDelta { text } => {
                out.write_all(text.as_bytes())?;
                self.mid_line = !text.ends_with('\n');
                out.flush()?;
            }
            Event::ReasoningDelta { .. } | Event::AssistantMessage { .. } => {}
            Event::SessionStarted {
                session_id,
                agent,
                model,
                resumed,
                ..
            } => {
                let verb = if resumed { "resumed" } else { "session" };
                writeln!(err, "{verb} {session_id} · {agent} · {model}")?;
            }
            Event::TurnStarted { fallback, .. } => {
                if let Some(reason) = fallback {
                    writeln!(err, "warning: {reason}")?;
                }
                if self.spin {
                    drop(err);
                    self.spinner = Some(crate::spinner::Spinner::start());
                }
            }
            Event::ToolCallStarted {
                name, arguments, ..
            } => {
                if self.mid_line {
                    writeln!(out)?;
                    out.flush()?;
                    self.mid_line = false;
                }
                let mut shown: String = arguments.chars().take(160).collect();
                if shown.len() < arguments.len() {
                    shown.push('…');
                }
                writeln!(err, "→ {name} {shown}")?;
            }
            Event::ToolCallCompleted {
                is_error, output, ..
            } => {
                let first = output.lines().next().unwrap_or("");
                let first: String = first.chars().take(160).collect();
                let mark = if is_error { "✗" } else { "✓" };
                writeln!(err, "  {mark} {first}")?;
            }
            Event::TurnCompleted { .. } => {
                if self.mid_line {
                    writeln!(out)?;
                    out.flush()?;
                    self.mid_line = false;
                }
            }
            Event::Error { message } => {
                if self.mid_line {
                    writeln!(out)?;
                    out.flush()?;
                    self.mid_line = false;
                }
                writeln!(err, "error: {message}")?
            }
            Event::Warning { message } => {
                if self.mid_line {
                    writeln!(out)?;
                    out.flush()?;
                    self.mid_line = false;
                }
                writeln!(err, "warning: {message}")?
            }
            Event::Trimmed {
                outputs,
                saved_tokens,
            } => writeln!(
                err,
                "· trimmed {outputs} old tool output{}: about {saved_tokens} tokens less to send",
                if outputs == 1 { "" } else { "s" }
            )?,
            Event::Compacted { summarized, kept } => writeln!(
                err,
                "· compacted: {summarized} earlier messages summarised, {kept} kept"
            )?,
            Event::Notification { text } => {
                let first = text.lines().nth(1).unwrap_or("");
                writeln!(err, "· {first}")?
            }
            Event::SessionFinished {
                session_id,
                reason,
                turns,
                usage,
            } => {
                // An interrupt can land mid-answer: the notice goes on a line of its own.
                if self.mid_line {
                    writeln!(out)?;
                    out.flush()?;
                    self.mid_line = false;
                }
                let how = match reason {
                    Finish::Done => "done",
                    Finish::CutOff => "cut off at the output limit",
                    Finish::StepLimit => "step limit reached",
                    Finish::Interrupted => "interrupted, saved",
                };
                // The cache figures only when the server reported any: most local
                // servers say nothing about their cache.
                let cache = if usage.cache_read_tokens + usage.cache_write_tokens > 0 {
                    format!(
                        " · cache: {} read, {} written",
                        usage.cache_read_tokens, usage.cache_write_tokens
                    )
                } else {
                    String::new()
                };
                writeln!(
                    err,
                    "{how} · session {session_id} · {turns} turns · {} in / {} out tokens{cache}",
                    usage.input_tokens, usage.output_tokens
                )?;
            }
        }
        Ok(())
    }
}
