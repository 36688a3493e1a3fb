//! `packd`: serve packs and channel documents; hash and mint tokens.

// `unwrap` and `expect` are for tests: shipped code says what failed (STYLE.md, "Weight").
#![deny(clippy::unwrap_used, clippy::expect_used)]
#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]
#![allow(clippy::print_stdout, clippy::print_stderr)] // the binary owns the terminal

use std::io::{IsTerminal as _, Read, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;
use clap::{Parser, Subcommand};
use pack_server::auth::{hash_token, new_token};
use pack_server::{Overrides, Server, Settings};

#[derive(Parser)]
#[command(
    name = "packd",
    version,
    about = "Hosts sealed prompt packs and signed channel documents"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the server. With no flags: 127.0.0.1:8470, data in ./packd-data.
    Serve {
        /// Address to listen on (HOST:PORT; port 0 picks a free one).
        #[arg(long, env = "PACKD_LISTEN")]
        listen: Option<String>,
        /// Directory for data on local disk.
        #[arg(long, env = "PACKD_DATA_DIR", conflicts_with = "storage")]
        data_dir: Option<PathBuf>,
        /// TOML config file (tokens, publisher keys, limits).
        #[arg(long, env = "PACKD_CONFIG")]
        config: Option<PathBuf>,
        /// S3-compatible storage, s3://bucket/prefix (endpoint and credentials from AWS_* variables).
        #[arg(long, env = "PACKD_STORAGE")]
        storage: Option<String>,
        /// Written once packd listens and its storage took the start-up write probe: the URL
        /// it serves on, one line. Replaced whole (never seen half-written); removed on a
        /// clean exit (SIGTERM, SIGINT). Scripts wait for it instead of sleeping.
        #[arg(long, value_name = "PATH", env = "PACKD_READY_FILE")]
        ready_file: Option<PathBuf>,
    },
    /// Read a token from stdin and print the SHA-256 to put in the config.
    HashToken,
    /// Token management.
    Token {
        #[command(subcommand)]
        command: TokenCommand,
    },
}

#[derive(Subcommand)]
enum TokenCommand {
    /// Print a fresh random token and its config entry.
    New {
        /// Scopes to grant: publish, read.
        #[arg(long = "scope", default_value = "publish")]
        scopes: Vec<String>,
        /// Label for the config entry.
        #[arg(long, default_value = "publisher")]
        name: String,
    },
}

fn main() -> ExitCode {
    // One `error:` line, as packer prints, never anyhow's `Debug` report: that repeats
    // every cause and adds a backtrace whenever RUST_BACKTRACE is set.
    match run(Cli::parse()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!(
                "error: {}",
                pack_protocol::error_text::report(error.as_ref())
            );
            ExitCode::FAILURE
        }
    }
}

fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Serve {
            listen,
            data_dir,
            config,
            storage,
            ready_file,
        } => serve(
            config,
            Overrides {
                listen,
                data_dir,
                storage,
            },
            ready_file,
        ),
        Command::HashToken => {
            let mut token = String::new();
            std::io::stdin()
                .take(64 * 1024)
                .read_to_string(&mut token)
                .context("reading the token from stdin")?;
            anyhow::ensure!(!token.trim().is_empty(), "no token on stdin");
            println!("{}", hash_token(&token));
            Ok(())
        }
        Command::Token {
            command: TokenCommand::New { scopes, name },
        } => {
            for scope in &scopes {
                anyhow::ensure!(
                    scope == "publish" || scope == "read",
                    "unknown scope {scope:?}: expected publish or read"
                );
            }
            let token = new_token();
            let scopes = scopes
                .iter()
                .map(|s| format!("{s:?}"))
                .collect::<Vec<_>>()
                .join(", ");
            println!("{token}");
            println!();
            println!("# add to the packd config; the token itself is not stored:");
            println!("[[tokens]]");
            println!("name = {name:?}");
            println!("sha256 = \"{}\"", hash_token(&token));
            println!("scopes = [{scopes}]");
            Ok(())
        }
    }
}

fn serve(
    config: Option<PathBuf>,
    overrides: Overrides,
    ready_file: Option<PathBuf>,
) -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_max_level(log_level())
        .with_ansi(colour_stderr())
        .init();
    let settings =
        Settings::load(config.as_deref(), overrides).context("loading the configuration")?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    // One left by a packd that was killed says nothing about this one.
    if let Some(path) = &ready_file {
        remove_ready_file(path)?;
    }
    runtime.block_on(async move {
        let keys = settings.trusted_keys.ids().join(", ");
        let server = Server::bind(settings).await.context("starting packd")?;
        let addr = server.local_addr().context("reading the bound address")?;
        tracing::info!(%addr, storage = server.storage(), publisher_keys = keys, "packd started");
        if keys.is_empty() {
            tracing::warn!(
                "publishing is disabled: no publisher_keys in the config, so every release \
                 is refused (503 publishing_disabled); see server/README.md"
            );
        }
        // Tests and scripts read this line to find the port.
        println!("listening on http://{addr}");
        std::io::stdout().flush().ok();
        if let Some(path) = &ready_file {
            write_ready_file(path, &format!("http://{addr}\n"))?;
        }
        server.run(shutdown_signal()).await;
        if let Some(path) = &ready_file {
            remove_ready_file(path)?;
        }
        Ok(())
    })
}

/// Writes `--ready-file` whole (see [`pack_format::atomic`]), so a script that sees the file
/// never reads it half-written, and whoever waits for it can read it.
fn write_ready_file(path: &Path, text: &str) -> anyhow::Result<()> {
    pack_format::atomic::write(path, text.as_bytes())
        .with_context(|| format!("writing the ready file {}", path.display()))
}

fn remove_ready_file(path: &Path) -> anyhow::Result<()> {
    match std::fs::remove_file(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e).with_context(|| format!("removing the ready file {}", path.display())),
    }
}

/// Colour only for a person at a terminal who has not asked for none (<https://no-color.org>).
fn colour_stderr() -> bool {
    std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
}

/// `PACKD_LOG=debug|info|warn|error` (default info).
fn log_level() -> tracing::Level {
    match std::env::var("PACKD_LOG").as_deref() {
        Ok("trace") => tracing::Level::TRACE,
        Ok("debug") => tracing::Level::DEBUG,
        Ok("warn") => tracing::Level::WARN,
        Ok("error") => tracing::Level::ERROR,
        Ok(_) | Err(_) => tracing::Level::INFO,
    }
}

async fn shutdown_signal() {
    let ctrl_c = async {
        if tokio::signal::ctrl_c().await.is_err() {
            std::future::pending::<()>().await;
        }
    };
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        () = ctrl_c => tracing::info!("SIGINT received"),
        () = term => tracing::info!("SIGTERM received"),
    }
}
