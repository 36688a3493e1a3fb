//! `agent`: the local agent runtime's command line.
//!
//! `agent prompt` prints the exact system prompt of one turn and its metadata; a publisher
//! runs it against a pack directory (`--pack`) to review the pack before release.
//! `agent exec` runs the agent loop against a model provider until the task is done.

// `unwrap` and `expect` are for tests: shipped code says what failed (STYLE.md, "Weight").
#![deny(clippy::unwrap_used, clippy::expect_used)]
#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]
// The binary owns the terminal: errors go to stderr.
#![allow(clippy::print_stderr)]

mod exec;
mod host;
mod init;
mod launcher;
mod mcp;
mod planning;
mod repl;
mod safety;
mod spinner;
mod trust;

use std::io::{IsTerminal as _, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use agent_runtime::agents::{self, BUILTIN_AGENTS, ORCHESTRATOR};
use agent_runtime::config::Config;
use agent_runtime::context::McpInstructions;
use agent_runtime::data_dir::DataDir;
use agent_runtime::environment::Environment;
use agent_runtime::live::LiveContext;
use agent_runtime::mcp::McpServers;
use agent_runtime::packs::Packs;
use agent_runtime::provider::{ProviderOverrides, ProviderSettings};
use agent_runtime::roster::Roster;
use agent_runtime::session::{SessionContext, TaskSession};
use agent_runtime::{Occasion, Profile, PromptMode, TurnRequest, assemble_turn};
use anyhow::{Context as _, bail};
use clap::{Parser, Subcommand};
use pack_client::snapshot::SnapshotMeta;
use pack_client::{Snapshot, Source};
use tracing_subscriber::filter::Targets;
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::util::SubscriberInitExt as _;

#[derive(Parser)]
#[command(name = "agent", version, about = "The promptpack local agent runtime")]
struct Cli {
    /// Without a command: an interactive session.
    #[command(subcommand)]
    command: Option<Command>,
    #[command(flatten)]
    provider: exec::ProviderArgs,
    /// The orchestrator's prompt mode for the interactive session.
    #[arg(long, value_name = "MODE", default_value = "tui")]
    prompt_mode: PromptMode,
    #[command(flatten)]
    permissions: safety::PermissionArgs,
}

#[derive(Subcommand)]
enum Command {
    /// Print the exact system prompt and metadata of one turn.
    Prompt(PromptArgs),
    /// Run the agent on a task: call the model, run its tools, repeat until it is done.
    Exec(exec::ExecArgs),
    /// Write or update the workspace's AGENTS.md with the `init` skill.
    Init(InitArgs),
    /// Prompt-pack updates: what is served, refresh now, pin a version.
    #[command(subcommand)]
    Packs(PacksCommand),
    /// MCP servers from the `[mcp_servers.<name>]` tables of config.toml.
    #[command(subcommand)]
    Mcp(McpCommand),
    /// What this machine supports (the sandbox) and the permissions the agent runs with.
    Doctor,
    /// Let this workspace's .agents/permissions.toml allow things, as the file is now
    /// (any later change to it waits for `agent trust` again).
    Trust(trust::TrustArgs),
    /// Runs a command in the Landlock sandbox (what `bash` starts).
    #[command(name = "sandbox-exec", hide = true)]
    SandboxExec(safety::SandboxExecArgs),
}

#[derive(Subcommand)]
enum McpCommand {
    /// Start every configured server and show its state and tools.
    List {
        /// Print the servers as JSON.
        #[arg(long)]
        json: bool,
    },
}

#[derive(clap::Args)]
struct InitArgs {
    /// The workspace (default: the current directory).
    dir: Option<PathBuf>,
    /// What to do with an existing AGENTS.md; asked on a terminal, else skip.
    #[arg(long, value_enum)]
    existing: Option<init::Existing>,
    #[command(flatten)]
    provider: exec::ProviderArgs,
    /// Stop after this many model calls.
    #[arg(long, default_value_t = 50)]
    max_steps: u32,
}

#[derive(Subcommand)]
enum PacksCommand {
    /// Which pack is served and how the last refresh went.
    Status {
        /// Print the client status as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Refresh from the configured server now (even with auto-update off).
    Refresh {
        /// Quietly, and only if no other process is refreshing: what `exec`, `prompt` and
        /// `init` start in the background when the last refresh is old.
        #[arg(long, hide = true)]
        background: bool,
    },
    /// Stay on this pack version; saved in the config file.
    Pin {
        #[arg(value_parser = |text: &str| pack_format::parse_version(text).map_err(|e| e.to_string()))]
        version: semver::Version,
    },
    /// Follow the channel again.
    Unpin,
    /// Clear bad-pack marks (all, or the given SHA-256s) so the next refresh tries those
    /// packs again; nothing else in the cache changes.
    ForgetBad { sha256: Vec<String> },
}

#[derive(clap::Args)]
struct PromptArgs {
    /// The agent: mavis, explore, worker, verifier or a custom agent.
    #[arg(long, default_value = ORCHESTRATOR)]
    agent: String,
    /// The orchestrator's prompt mode: tui, coding or work.
    #[arg(long, default_value = "tui")]
    mode: PromptMode,
    /// The model id, which picks the model-family notes and is named in the environment
    /// block. Default: the model a session would run the agent on (its own, else the
    /// configured one).
    #[arg(long)]
    model: Option<String>,
    /// The workspace root (default: the current directory).
    #[arg(long)]
    cwd: Option<PathBuf>,
    /// Print `{"prompt": ..., "metadata": ...}` instead of the prompt text.
    #[arg(long)]
    json: bool,
    /// Render from this unsealed pack directory instead of the built-in pack, as a remote
    /// pack would be (a failing template falls back to the built-in pack).
    #[arg(long, value_name = "DIR")]
    pack: Option<PathBuf>,
    /// Render a custom agent as a delegated task (built-in subagents always are).
    #[arg(long)]
    delegated: bool,
    /// Render an unattended run rather than a session the user watches.
    #[arg(long)]
    non_interactive: bool,
    /// Resume this task session: its frozen agent definition and mode are used.
    #[arg(long, value_name = "ID")]
    session: Option<String>,
    /// Start the configured MCP servers, as a session does, so their instructions are in
    /// the prompt (without it the prompt has no MCP block).
    #[arg(long)]
    mcp: bool,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    // The launcher restricts itself before anything else runs (no thread may start first).
    if let Some(Command::SandboxExec(args)) = cli.command {
        return safety::sandbox_exec(args);
    }
    // `packs refresh` prints its own failure; the pack client's warning for unattended
    // refreshes would only say it a second time.
    let client_level = match &cli.command {
        Some(Command::Packs(PacksCommand::Refresh { .. })) => tracing::Level::ERROR,
        Some(
            Command::Prompt(_)
            | Command::Exec(_)
            | Command::Init(_)
            | Command::Doctor
            | Command::Trust(_)
            | Command::SandboxExec(_)
            | Command::Mcp(_)
            | Command::Packs(
                PacksCommand::Status { .. }
                | PacksCommand::Pin { .. }
                | PacksCommand::Unpin
                | PacksCommand::ForgetBad { .. },
            ),
        )
        | None => tracing::Level::WARN,
    };
    // `mcp list` shows each server's failure in its listing; the log line would repeat it.
    let mcp_level = match &cli.command {
        Some(Command::Mcp(_)) => tracing::Level::ERROR,
        Some(_) | None => tracing::Level::WARN,
    };
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(colour_stderr())
        .with_target(false)
        .finish()
        .with(
            Targets::new()
                .with_default(tracing::Level::WARN)
                .with_target("pack_client::client", client_level)
                .with_target("agent_runtime::mcp", mcp_level),
        )
        .init();
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        // The refresh's error and what still serves are shown already (docs/CLIENT.md,
        // "Exit codes").
        Err(error) if error.is::<RefreshFailed>() => ExitCode::from(3),
        // The command has shown the error in its own words already.
        Err(error) if error.is::<Reported>() => ExitCode::FAILURE,
        Err(error) => {
            // One line, each cause once: never anyhow's `Debug` report, which repeats the
            // causes and adds a backtrace whenever RUST_BACKTRACE is set.
            eprintln!(
                "error: {}",
                pack_protocol::error_text::report(error.as_ref())
            );
            ExitCode::FAILURE
        }
    }
}

/// `agent packs refresh` failed and said so; the previous pack still serves (exit code 3,
/// as `pack-client refresh`).
#[derive(Debug, thiserror::Error)]
#[error("the refresh failed; the previous pack still serves")]
pub(crate) struct RefreshFailed;

/// A failure the command has already reported on stderr; `main` only sets the exit code.
#[derive(Debug, thiserror::Error)]
#[error("the error was reported above")]
pub(crate) struct Reported;

/// Colour only for a person at a terminal who has not asked for none (<https://no-color.org>).
pub(crate) fn colour_stderr() -> bool {
    std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
}

fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Some(Command::Prompt(args)) => prompt(args),
        Some(Command::Exec(args)) => exec::exec(args),
        Some(Command::Packs(command)) => packs(command),
        Some(Command::Doctor) => safety::doctor(&DataDir::locate()?),
        Some(Command::Trust(args)) => trust::trust(args),
        // Handled in `main`, before anything else starts.
        Some(Command::SandboxExec(_)) => Ok(()),
        Some(Command::Mcp(McpCommand::List { json })) => mcp::list(json),
        Some(Command::Init(args)) => {
            let host = host::Host::open(&args.provider.overrides())?;
            let _ = host.packs.refresh_in_background_if_due();
            let dir = match args.dir {
                Some(dir) => dir,
                None => std::env::current_dir()?,
            };
            tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()?
                .block_on(init::run(&host, &dir, args.existing, args.max_steps))
        }
        None => {
            let mut host = host::Host::open_without_model(&cli.provider.overrides())?;
            let approver = Arc::new(safety::TerminalApprover::default());
            host.safety = safety::Choice {
                kind: safety::Kind::Interactive,
                args: cli.permissions,
                approver: Some(approver.clone()),
            };
            repl::repl(host, approver, cli.prompt_mode, 50)
        }
    }
}

/// The configured pack client, or, when its `[updates]` settings are unusable (a trusted
/// key file missing or malformed), the built-in pack with the problem reported: the
/// compiled-in pack needs no key, and a broken update setting must not stop the agent from
/// working. `agent packs …` still refuses such settings outright.
pub(crate) fn open_packs_or_builtin(data_dir: &DataDir, config_text: &str) -> Packs {
    match Packs::open(data_dir, config_text) {
        Ok(packs) => packs,
        Err(error) => {
            tracing::warn!(
                "prompt pack updates are off for this run, serving the built-in pack: {}",
                pack_protocol::error_text::report(&error)
            );
            Packs::builtin()
        }
    }
}

/// The config file's text; a missing file is an empty config.
pub(crate) fn read_config(data_dir: &DataDir) -> anyhow::Result<String> {
    let path = data_dir.config_file();
    match std::fs::read_to_string(&path) {
        Ok(text) => Ok(text),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(String::new()),
        Err(e) => Err(e).with_context(|| format!("reading {}", path.display())),
    }
}

fn packs(command: PacksCommand) -> anyhow::Result<()> {
    let data_dir = DataDir::locate()?;
    let text = read_config(&data_dir)?;
    let mut out = std::io::stdout().lock();
    let pin = match command {
        PacksCommand::Status { json } => {
            let packs = Packs::open(&data_dir, &text)?;
            if json {
                let doc = match packs.client() {
                    Some(client) => serde_json::to_value(client.status())?,
                    None => serde_json::json!({
                        "serving": packs.store().capture().meta(),
                        "server": null,
                    }),
                };
                serde_json::to_writer_pretty(&mut out, &doc)?;
                writeln!(out)?;
            } else {
                out.write_all(packs.describe().as_bytes())?;
            }
            return Ok(());
        }
        PacksCommand::Refresh { background: true } => {
            let packs = Packs::open(&data_dir, &text)?;
            if let Some(client) = packs.client() {
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()?;
                // The outcome is in the cache's state for the next run to show. A refresh
                // sends waiting failure reports when it ends; one skipped because another
                // process refreshes does not, so they are sent here, with the outcome
                // counts of the days that are over.
                let _ = runtime.block_on(async {
                    let _ = client.refresh_if_idle().await;
                    let _ = client.send_reports().await;
                    pack_client::outcomes::send_due(client).await
                });
            }
            return Ok(());
        }
        PacksCommand::Refresh { background: false } => {
            let packs = Packs::open(&data_dir, &text)?;
            let Some(client) = packs.client() else {
                bail!(
                    "no update server configured: set `server` in the [updates] table of {}",
                    data_dir.config_file().display()
                );
            };
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            match runtime.block_on(client.refresh_now()) {
                Ok(outcome) => {
                    writeln!(out, "{outcome}")?;
                    out.write_all(packs.describe().as_bytes())?;
                    return Ok(());
                }
                Err(e) => {
                    eprintln!("refresh failed: {}", pack_protocol::error_text::report(&e));
                    out.write_all(packs.describe().as_bytes())?;
                    return Err(RefreshFailed.into());
                }
            }
        }
        PacksCommand::ForgetBad { sha256 } => {
            let packs = Packs::open(&data_dir, &text)?;
            let Some(client) = packs.client() else {
                bail!(
                    "no update server configured, so no pack was ever refused: see the [updates] table of {}",
                    data_dir.config_file().display()
                );
            };
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            let cleared = runtime.block_on(client.forget_bad(&sha256))?;
            if cleared.is_empty() {
                writeln!(out, "no bad-pack marks")?;
            }
            for sha in cleared {
                writeln!(out, "cleared {sha}: the next refresh tries it again")?;
            }
            return Ok(());
        }
        PacksCommand::Pin { version } => Some(version),
        PacksCommand::Unpin => None,
    };
    let path = edit_config(&data_dir, |text| {
        let updated = agent_runtime::packs::set_pin(&data_dir, text, pin.as_ref())?;
        // Refuse to save a file the runtime could not read back.
        agent_runtime::packs::client_config(&data_dir, &updated)?;
        Ok(updated)
    })?;
    match pin {
        Some(version) => writeln!(
            out,
            "pinned to pack version {version} in {}",
            path.display()
        )?,
        None => writeln!(out, "unpinned in {}", path.display())?,
    }
    Ok(())
}

/// Rewrites the config file with `edit` of its text, holding a lock (`config.toml.lock`
/// beside it) from the read to the rename: two processes editing at once each apply their
/// change to the other's result instead of writing over it. The new text is written whole
/// ([`agent_runtime::data_dir::write_whole`]). Returns the config file's path.
fn edit_config(
    data_dir: &DataDir,
    edit: impl FnOnce(&str) -> anyhow::Result<String>,
) -> anyhow::Result<PathBuf> {
    let root = data_dir.root();
    std::fs::create_dir_all(root).with_context(|| format!("creating {}", root.display()))?;
    let path = data_dir.config_file();
    let lock_path = path.with_extension("toml.lock");
    let lock = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&lock_path)
        .with_context(|| format!("opening {}", lock_path.display()))?;
    lock.lock()
        .with_context(|| format!("locking {}", lock_path.display()))?;
    let updated = edit(&read_config(data_dir)?)?;
    agent_runtime::data_dir::write_whole(&path, updated.as_bytes())
        .with_context(|| format!("writing {}", path.display()))?;
    // The lock is released when `lock` is closed.
    drop(lock);
    Ok(path)
}

fn prompt(args: PromptArgs) -> anyhow::Result<()> {
    let data_dir = DataDir::locate()?;
    let config_text = read_config(&data_dir)?;
    let config = Config::parse(&config_text)
        .map_err(|reason| anyhow::anyhow!("{}: {reason}", data_dir.config_file().display()))?;
    let packs = open_packs_or_builtin(&data_dir, &config_text);
    if let Some(note) = packs.refresh_in_background_if_due() {
        eprintln!("{note}");
    }
    let cwd = match args.cwd {
        Some(dir) => dir,
        None => std::env::current_dir().context("reading the current directory")?,
    };
    let cwd = std::path::absolute(&cwd).with_context(|| format!("resolving {}", cwd.display()))?;
    if !cwd.is_dir() {
        bail!("--cwd {} is not a directory", cwd.display());
    }
    let roster = host::session_roster(&Roster::load(&data_dir.agents_dir()), &config_text, &cwd);

    let session = match &args.session {
        Some(id) => Some(TaskSession::load(&data_dir.sessions_dir(), id)?),
        None => None,
    };
    let frozen = match &session {
        Some(session) => Some(session.resume(args.mode)?),
        None => None,
    };
    let agent = frozen.map_or(agents::canonical_name(&args.agent), |def| def.name.as_str());
    let occasion = if session.is_some()
        || args.delegated
        || (BUILTIN_AGENTS.contains(&agent) && agent != ORCHESTRATOR)
    {
        Occasion::TaskChild
    } else {
        Occasion::Root
    };
    let preview_session = SessionContext {
        task_id: "preview".to_string(),
        parent_agent: ORCHESTRATOR.to_string(),
        task: None,
        files: Vec::new(),
        max_steps: None,
        handoff_bytes: None,
    };
    let session_context = session.as_ref().map_or(&preview_session, |s| &s.context);

    let mut environment = Environment::detect(&cwd, data_dir.root());
    if let Ok(settings) =
        ProviderSettings::resolve(&config_text, &ProviderOverrides::default(), |name| {
            std::env::var(name).ok()
        })
    {
        environment = environment.with_provider(&settings.provider_name());
    }
    let web = agent_runtime::tools::WebSettings::parse(&config_text)
        .map_err(|reason| anyhow::anyhow!("{}: {reason}", data_dir.config_file().display()))?;
    // Instruction files (URLs fetched as a session fetches them), skills on disk and the
    // workspace's notes, read as a session reads them.
    let notes = agent_runtime::tools::notes_file(data_dir.root(), &cwd);
    let live = LiveContext::new(
        host::instruction_sources(&data_dir, &config, &web, &cwd),
        data_dir.root(),
        Some(&notes),
    )
    .current();
    // A pack from a directory is the developer's, not the channel's: its render failures
    // are neither counted against this device's packs nor reported.
    let local;
    let store: &pack_client::PromptStore = match &args.pack {
        Some(dir) => {
            local = pack_client::PromptStore::new(packs.store().builtin().clone());
            local.install(load_pack_dir(dir)?);
            &local
        }
        None => packs.store().as_ref(),
    };
    let model = match args.model {
        Some(model) => model,
        None => session_model(agent, frozen, &roster, store, &config_text),
    };
    // With --mcp the servers start as a session starts them, and the prompt waits for them.
    let mcp = if args.mcp && !config.mcp_servers.is_empty() {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .context("starting the async runtime")?;
        let servers = McpServers::spawn(&config.mcp_servers, &cwd, runtime.handle());
        runtime.block_on(servers.wait_started());
        Some((runtime, servers))
    } else {
        None
    };
    let request = TurnRequest {
        agent,
        mode: args.mode,
        model: &model,
        occasion,
        profile: Profile::Cli,
        interactive: !args.non_interactive,
        config: &config,
        custom_agents: &roster.custom,
        frozen,
        environment: &environment,
        instructions: &live.instructions,
        // A helper started by `task` gets no memory layer; a session does.
        memory: if args.delegated {
            None
        } else {
            live.memory.as_deref()
        },
        session: Some(session_context),
        disk_skills: &live.skills,
        mcp: mcp
            .as_ref()
            .map(|(_, servers)| &**servers as &dyn McpInstructions),
    };
    let prompt = assemble_turn(store, &request);
    if let Some((runtime, servers)) = &mcp {
        runtime.block_on(servers.shutdown());
    }
    let prompt = prompt?;
    packs.send_reports_in_background();

    let mut out = std::io::stdout().lock();
    if args.json {
        let doc = serde_json::json!({ "prompt": prompt.text, "metadata": prompt.metadata });
        serde_json::to_writer_pretty(&mut out, &doc)?;
        writeln!(out)?;
    } else {
        // The prompt goes to stdout byte for byte; the metadata to stderr, so redirecting
        // stdout captures exactly what the model would see.
        out.write_all(prompt.text.as_bytes())?;
        let meta = &prompt.metadata;
        let mut err = std::io::stderr().lock();
        writeln!(
            err,
            "--\nagent {} · mode {} · model {} · schema {}\npack {} {} ({}) sha256 {}\nprompt sha256 {}",
            meta.agent,
            meta.mode,
            meta.model,
            meta.schema_version,
            meta.pack.name,
            meta.pack.version,
            meta.pack.source,
            meta.pack.sha256,
            meta.prompt_sha256
        )?;
        for (key, sha) in &meta.templates {
            writeln!(err, "  {sha}  {key}")?;
        }
        if let Some(frozen) = &meta.frozen {
            writeln!(
                err,
                "  {}  {} (frozen from pack {} {} sha256 {})",
                frozen.sha256,
                frozen.key,
                frozen.pack.name,
                frozen.pack.version,
                frozen.pack.sha256
            )?;
        }
        if let Some(fallback) = &meta.fallback {
            writeln!(err, "FALLBACK: {fallback}")?;
        }
        for warning in &meta.warnings {
            writeln!(err, "warning: {warning}")?;
        }
    }
    Ok(())
}

/// The model a session would run `agent` on: a task session's frozen choice, the user's
/// choice for a built-in agent, a custom agent's own, else the configured model (`default`
/// when none is configured, as there is nothing to run).
fn session_model(
    agent: &str,
    frozen: Option<&agents::AgentDefinition>,
    roster: &Roster,
    store: &pack_client::PromptStore,
    config_text: &str,
) -> String {
    let own = match frozen {
        Some(definition) => definition.model.clone(),
        None => match roster.builtin(agent, &store.capture()) {
            Some(Ok(definition)) => definition.model,
            Some(Err(_)) => None,
            None => roster
                .custom
                .iter()
                .find(|a| a.name == agent)
                .and_then(|a| a.model.clone()),
        },
    };
    own.or_else(|| {
        ProviderSettings::resolve(config_text, &ProviderOverrides::default(), |name| {
            std::env::var(name).ok()
        })
        .ok()
        .map(|settings| settings.model)
    })
    .unwrap_or_else(|| "default".to_string())
}

/// An unsealed pack directory as a remote snapshot, for review before release. The
/// directory is read by the same reader `packer build` uses, under the same rules and
/// limits; every problem is listed.
fn load_pack_dir(dir: &Path) -> anyhow::Result<Arc<Snapshot>> {
    let payload = match pack_format::read_pack_dir(dir, &pack_format::Limits::DEFAULT, None) {
        Ok(payload) => payload,
        Err(pack_format::FormatError::PackDirectory { problems, .. }) => {
            let lines: Vec<String> = problems.iter().map(|p| format!("  {p}")).collect();
            anyhow::bail!(
                "pack directory {} has {} problem(s):\n{}",
                dir.display(),
                problems.len(),
                lines.join("\n")
            );
        }
        Err(other) => {
            return Err(other).with_context(|| format!("pack directory {}", dir.display()));
        }
    };
    let files: Vec<(String, Vec<u8>)> = payload.into_files().into_iter().collect();
    let mut digest_input = Vec::new();
    for (key, bytes) in &files {
        digest_input.extend_from_slice(key.as_bytes());
        digest_input.push(0);
        digest_input.extend_from_slice(bytes);
    }
    let name = dir
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or("pack")
        .to_string();
    let meta = SnapshotMeta {
        name,
        version: semver::Version::new(0, 0, 0),
        sequence: 0,
        source: Source::Remote,
        sha256: pack_format::sha256_hex(&digest_input),
        schema: 1,
    };
    let snapshot =
        Snapshot::new(meta, files).with_context(|| format!("pack directory {}", dir.display()))?;
    Ok(Arc::new(snapshot))
}
