//! `pack-client`: drive a prompt-pack client from the command line — refresh, status, and
//! reading what a captured snapshot serves. The agent embeds the same library.

// The binary owns the terminal.
#![allow(clippy::print_stdout, clippy::print_stderr)]

use std::path::PathBuf;
use std::process::ExitCode;

/// `println!` for command output, except that a reader who went away
/// (`pack-client get KEY | head`) ends the program quietly instead of panicking.
macro_rules! outln {
    ($($arg:tt)*) => {
        write_out(format_args!($($arg)*))
    };
}

use anyhow::{Context, Result};
use clap::{Parser, Subcommand};
use pack_client::{Client, ClientConfig};
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::util::SubscriberInitExt as _;

#[derive(Parser)]
#[command(
    name = "pack-client",
    version,
    about = "Refresh and inspect a promptpack client cache"
)]
struct Cli {
    /// Cache directory (installed packs and state).
    #[arg(long, env = "PROMPTPACK_CACHE")]
    cache: PathBuf,
    /// Client config file (TOML, `[updates]` table).
    #[arg(long, env = "PROMPTPACK_CONFIG")]
    config: Option<PathBuf>,
    /// The client release to match channel entries against.
    #[arg(long, default_value = env!("CARGO_PKG_VERSION"))]
    client_version: semver::Version,
    /// Machine-readable output.
    #[arg(long, global = true)]
    json: bool,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Check the channel now and install what it selects for this client.
    Refresh,
    /// What the client serves and how the last refresh went.
    Status,
    /// Print one file of the snapshot the client serves.
    Show { key: String },
    /// Every file of one captured snapshot with its SHA-256 (one capture, so never a mix).
    Dump,
    /// Run the six-hour schedule and watch the channel, in the foreground until interrupted.
    Run,
    /// Clear bad-pack marks (all, or the given SHA-256s) so the next refresh tries those
    /// packs again. The rest of the state, the rollback high-water mark included, is kept.
    ForgetBad { sha256: Vec<String> },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    // `refresh` prints its own failure, and `run` logs one line per event: the library's
    // warnings for unattended refreshes would only say it a second time.
    let client_level = match cli.command {
        Command::Refresh | Command::Run => tracing::Level::ERROR,
        Command::Status | Command::Show { .. } | Command::Dump | Command::ForgetBad { .. } => {
            tracing::Level::WARN
        }
    };
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(colour_stderr())
        .finish()
        .with(
            tracing_subscriber::filter::Targets::new()
                .with_default(tracing::Level::WARN)
                .with_target("pack_client", client_level),
        )
        .init();
    match run(cli) {
        Ok(code) => code,
        Err(e) => {
            // One line, each cause once: no `Debug` report, so no backtrace either.
            eprintln!("error: {}", pack_format::error::report(e.as_ref()));
            ExitCode::FAILURE
        }
    }
}

/// Colour only for a person at a terminal who has not asked for none (https://no-color.org).
fn colour_stderr() -> bool {
    use std::io::IsTerminal as _;
    std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
}

fn run(cli: Cli) -> Result<ExitCode> {
    let config = match &cli.config {
        Some(path) => ClientConfig::load(path, cli.cache.clone(), cli.client_version.clone())?,
        None => ClientConfig::new(cli.cache.clone(), cli.client_version.clone()),
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    let client = Client::new(config)?;
    match cli.command {
        Command::Refresh => {
            let result = runtime.block_on(client.refresh_now());
            let status = client.status();
            match result {
                Ok(outcome) => {
                    if cli.json {
                        outln!(
                            "{}",
                            serde_json::to_string(
                                &serde_json::json!({"ok": true, "outcome": outcome, "status": status})
                            )?
                        );
                    } else {
                        outln!("{outcome}");
                        outln!(
                            "Serving {} {} ({}, sha256 {}).",
                            status.serving.name,
                            status.serving.version,
                            status.serving.source,
                            status.serving.sha256
                        );
                    }
                    Ok(ExitCode::SUCCESS)
                }
                Err(e) => {
                    if cli.json {
                        outln!(
                            "{}",
                            serde_json::to_string(
                                &serde_json::json!({"ok": false, "error": e.to_string(), "status": status})
                            )?
                        );
                    } else {
                        eprintln!("refresh failed: {}", pack_format::error::report(&e));
                        eprintln!(
                            "still serving {} {} ({})",
                            status.serving.name, status.serving.version, status.serving.source
                        );
                    }
                    Ok(ExitCode::from(REFRESH_FAILED))
                }
            }
        }
        Command::Status => {
            let status = client.status();
            if cli.json {
                outln!("{}", serde_json::to_string_pretty(&status)?);
            } else {
                outln!(
                    "serving   {} {} ({}, sequence {})",
                    status.serving.name,
                    status.serving.version,
                    status.serving.source,
                    status.serving.sequence
                );
                outln!("sha256    {}", status.serving.sha256);
                outln!(
                    "channel   {} (sequence {})",
                    status.channel,
                    status.sequence
                );
                outln!("release   {}", status.release);
                if let Some(reason) = &status.serving_reason {
                    outln!("why       {reason}");
                }
                outln!("checked   {}", when(status.last_check));
                outln!("succeeded {}", when(status.last_success));
                if let Some(failure) = &status.last_failure {
                    outln!(
                        "failed    {} ({}, release {}): {}",
                        when(Some(failure.at)),
                        failure.kind,
                        failure.release,
                        failure.message
                    );
                }
                if let Some(e) = &status.last_error {
                    outln!("last error: {e}");
                }
                for bad in &status.bad_packs {
                    outln!(
                        "refused   {} ({:?}): {}",
                        bad.sha256,
                        bad.reason,
                        bad.detail
                    );
                }
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::ForgetBad { sha256 } => {
            let cleared = runtime.block_on(client.forget_bad(&sha256))?;
            if cli.json {
                outln!(
                    "{}",
                    serde_json::to_string(&serde_json::json!({"cleared": cleared}))?
                );
            } else if cleared.is_empty() {
                outln!("no bad-pack marks");
            } else {
                for sha in &cleared {
                    outln!("cleared {sha}: the next refresh tries it again");
                }
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Show { key } => {
            let snapshot = client.store().capture();
            let bytes = snapshot.read(&key)?;
            use std::io::Write;
            std::io::stdout().write_all(bytes)?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Dump => {
            let snapshot = client.store().capture();
            let files: Vec<serde_json::Value> = snapshot
                .keys()
                .into_iter()
                .map(|k| serde_json::json!({"key": k, "sha256": pack_format::sha256_hex(snapshot.get(k).unwrap_or_default())}))
                .collect();
            outln!(
                "{}",
                serde_json::to_string(
                    &serde_json::json!({"meta": snapshot.meta(), "files": files, "last_error": client.status().last_error})
                )?
            );
            Ok(ExitCode::SUCCESS)
        }
        Command::Run => runtime.block_on(async {
            let client = std::sync::Arc::new(client);
            let serving = client.status();
            log_line(
                cli.json,
                &serde_json::json!({
                    "event": "serving",
                    "name": serving.serving.name,
                    "version": serving.serving.version.to_string(),
                    "source": serving.serving.source,
                    "sha256": serving.serving.sha256,
                    "reason": serving.serving_reason,
                }),
                &format!(
                    "serving {} {} ({}){}",
                    serving.serving.name,
                    serving.serving.version,
                    serving.serving.source,
                    serving
                        .serving_reason
                        .as_ref()
                        .map_or(String::new(), |r| format!(": {r}"))
                ),
            );
            let mut events = client.events();
            let json = cli.json;
            let logger = tokio::spawn(async move {
                use tokio::sync::broadcast::error::RecvError;
                loop {
                    match events.recv().await {
                        Ok(event) => log_line(
                            json,
                            &serde_json::to_value(&event).unwrap_or_default(),
                            &event.to_string(),
                        ),
                        Err(RecvError::Lagged(missed)) => log_line(
                            json,
                            &serde_json::json!({"event": "lagged", "missed": missed}),
                            &format!("{missed} events were not logged (logging fell behind)"),
                        ),
                        Err(RecvError::Closed) => break,
                    }
                }
            });
            let cron = pack_client::schedule::cron_for(client.install_id());
            let schedule = pack_client::schedule::start(client).await?;
            let watching = schedule.watching();
            log_line(
                json,
                &serde_json::json!({"event": "scheduled", "cron": cron, "watching": watching}),
                &format!(
                    "refreshing on '{cron}' (UTC){}",
                    if watching {
                        " and watching the channel"
                    } else {
                        "; not watching (no server, auto_update or watch off)"
                    }
                ),
            );
            tokio::signal::ctrl_c().await?;
            schedule.shutdown().await?;
            logger.abort();
            Ok(ExitCode::SUCCESS)
        }),
    }
}

/// `pack-client refresh`'s exit status when the refresh failed (the previous pack still
/// serves). 1 is any other error, 2 a usage error (docs/CLIENT.md, "Exit codes").
const REFRESH_FAILED: u8 = 3;

/// An RFC 3339 time, or `never`.
fn when(t: Option<time::OffsetDateTime>) -> String {
    t.and_then(|t| {
        t.format(&time::format_description::well_known::Rfc3339)
            .ok()
    })
    .unwrap_or_else(|| "never".to_string())
}

/// One line on stderr for `run`: the time and the text, or a JSON object with the time.
fn log_line(json: bool, value: &serde_json::Value, text: &str) {
    let now = when(Some(time::OffsetDateTime::now_utc()));
    if json {
        let mut value = value.clone();
        if let Some(object) = value.as_object_mut() {
            object.insert("at".to_string(), serde_json::Value::String(now));
        }
        eprintln!("{value}");
    } else {
        eprintln!("{now} {text}");
    }
}

/// Writes one line of output. A closed pipe means nobody reads any more: stop, successfully,
/// as `grep` or `ls` do (they die of SIGPIPE, which Rust programs ignore).
fn write_out(line: std::fmt::Arguments<'_>) {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    if let Err(error) = writeln!(out, "{line}").and_then(|()| out.flush()) {
        if error.kind() == std::io::ErrorKind::BrokenPipe {
            std::process::exit(0);
        }
        eprintln!("error: writing output: {error}");
        std::process::exit(1);
    }
}
