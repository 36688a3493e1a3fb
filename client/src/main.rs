//! `pack-client`: drive a prompt-pack client from the command line — refresh, status, and
//! reading what a captured snapshot serves. The agent embeds the same library.

// `unwrap` and `expect` are for tests: shipped code says what failed (STYLE.md, "Weight").
#![deny(clippy::unwrap_used, clippy::expect_used)]
#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]
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
    /// Cache directory (installed packs and state) [default: the platform's cache directory:
    /// $XDG_CACHE_HOME/promptpack/pack-client, else ~/.cache/promptpack/pack-client;
    /// ~/Library/Caches/promptpack/pack-client on macOS]
    #[arg(long, env = "PROMPTPACK_CACHE")]
    cache: Option<PathBuf>,
    /// Client config file (TOML, `[updates]` table; `[[channels]]` for several channels).
    #[arg(long, env = "PROMPTPACK_CONFIG")]
    config: Option<PathBuf>,
    /// With a config of several channels: the one to act on (by its `[[channels]]` name).
    /// `refresh`, `status` and `run` cover every channel without it.
    #[arg(long, global = true)]
    channel: Option<String>,
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
    /// Every file of one captured snapshot with its SHA-256 (one capture, so never a mix), as
    /// `sha256sum` prints them; `--json` for one JSON object.
    Dump,
    /// Print a template of the pack the client serves, rendered under the strict contract
    /// (a variable the template reads but `--vars` lacks is an error).
    Render {
        /// The template's path in the pack, e.g. `shared/memory.hbs`.
        template: String,
        /// The variables: a JSON object, `@FILE` to read one from a file, or `-` for stdin.
        #[arg(long, value_name = "JSON", value_parser = parse_vars, default_value = "{}")]
        vars: serde_json::Value,
    },
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
    // `render` says itself when the built-in pack stood in, and the store's warning that it
    // would is wrong when the built-in pack fails too.
    let client_level = match cli.command {
        Command::Refresh | Command::Run | Command::Render { .. } => tracing::Level::ERROR,
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
                .with_target("pack_client", client_level)
                // The store (which serves the built-in pack when a pack fails) lives in
                // pack-serving; its warnings follow the same level.
                .with_target("pack_serving", client_level),
        )
        .init();
    match run(cli) {
        Ok(code) => code,
        Err(e) => {
            // One line, each cause once: no `Debug` report, so no backtrace either.
            eprintln!("error: {}", pack_protocol::error_text::report(e.as_ref()));
            ExitCode::FAILURE
        }
    }
}

/// The cache directory without `--cache`: the platform's cache directory, `promptpack/pack-client`
/// in it (`$XDG_CACHE_HOME`, else `~/.cache`; `~/Library/Caches` on macOS).
fn default_cache() -> Result<PathBuf> {
    const APP_DIR: &str = "promptpack/pack-client";
    let var = |name: &str| std::env::var_os(name).filter(|v| !v.is_empty());
    let home = var("HOME").map(PathBuf::from);
    let base = if cfg!(target_os = "macos") {
        home.map(|h| h.join("Library/Caches"))
    } else {
        // The XDG spec says a relative XDG_CACHE_HOME is invalid and must be ignored.
        var("XDG_CACHE_HOME")
            .map(PathBuf::from)
            .filter(|p| p.is_absolute())
            .or_else(|| home.map(|h| h.join(".cache")))
    };
    base.map(|b| b.join(APP_DIR)).context(
        "no cache directory: HOME is not set (nor XDG_CACHE_HOME); give one with --cache DIR \
         or PROMPTPACK_CACHE",
    )
}

/// Colour only for a person at a terminal who has not asked for none (https://no-color.org).
fn colour_stderr() -> bool {
    use std::io::IsTerminal as _;
    std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
}

fn run(cli: Cli) -> Result<ExitCode> {
    let cache = match &cli.cache {
        Some(dir) => dir.clone(),
        None => default_cache()?,
    };
    let mut configs = match &cli.config {
        Some(path) => ClientConfig::load_channels(path, cache, cli.client_version.clone())?,
        None => vec![ClientConfig::new(cache, cli.client_version.clone())],
    };
    if let Some(at) = test_now()? {
        for config in &mut configs {
            config.clock = pack_client::Clock::fixed(at);
        }
    }
    let several = configs.iter().any(|c| c.name.is_some());
    if let Some(name) = &cli.channel {
        let names: Vec<String> = configs.iter().map(|c| c.label().to_string()).collect();
        configs.retain(|c| c.label() == name);
        if configs.is_empty() {
            anyhow::bail!(
                "--channel {name}: the config has no such channel; its channels: {}",
                names.join(", ")
            );
        }
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    let clients = configs
        .into_iter()
        .map(Client::new)
        .collect::<Result<Vec<Client>, _>>()?;
    // Each client projects when it opens, in config order: on the first start a channel's
    // projection ran before the later channels' views existed. Once all are open, the
    // earlier ones project again, so their status does not report those views missing.
    if let Some((_, earlier)) = clients.split_last() {
        for client in earlier {
            client.sync_files();
        }
    }
    match cli.command {
        Command::Refresh if several => runtime.block_on(refresh_all(&clients, cli.json)),
        Command::Status if several => {
            let statuses: Vec<_> = clients.iter().map(Client::status).collect();
            if cli.json {
                outln!(
                    "{}",
                    serde_json::to_string_pretty(&serde_json::json!({"channels": statuses}))?
                );
            } else {
                for (i, status) in statuses.iter().enumerate() {
                    if i > 0 {
                        outln!("");
                    }
                    outln!("[{}]", status.name.as_deref().unwrap_or(&status.channel));
                    print_status(status);
                }
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Run => runtime.block_on(run_all(clients, cli.json, several)),
        command => {
            let [client] = <[Client; 1]>::try_from(clients).map_err(|clients| {
                let names: Vec<&str> = clients.iter().map(|c| c.config().label()).collect();
                anyhow::anyhow!(
                    "the config follows several channels ({}): name one with --channel NAME",
                    names.join(", ")
                )
            })?;
            run_one(&runtime, client, command, cli.json)
        }
    }
}

/// The commands that act on one channel's client.
fn run_one(
    runtime: &tokio::runtime::Runtime,
    client: Client,
    command: Command,
    json: bool,
) -> Result<ExitCode> {
    match command {
        Command::Refresh => {
            let result = runtime.block_on(client.refresh_now());
            let status = client.status();
            match result {
                Ok(outcome) => {
                    if json {
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
                    if json {
                        outln!(
                            "{}",
                            serde_json::to_string(
                                &serde_json::json!({"ok": false, "error": e.to_string(), "status": status})
                            )?
                        );
                    } else {
                        eprintln!("refresh failed: {}", pack_protocol::error_text::report(&e));
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
            if json {
                outln!("{}", serde_json::to_string_pretty(&status)?);
            } else {
                print_status(&status);
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::ForgetBad { sha256 } => {
            let cleared = runtime.block_on(client.forget_bad(&sha256))?;
            if json {
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
            let bytes = snapshot
                .read(&key)
                .map_err(|e| anyhow::anyhow!("{}", snapshot_error_text(&e, 0)))?;
            use std::io::Write;
            std::io::stdout().write_all(bytes)?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Render { template, vars } => render(&client, &template, &vars, json),
        Command::Dump => {
            let snapshot = client.store().capture();
            let files: Vec<(&str, String)> = snapshot
                .keys()
                .into_iter()
                .map(|k| {
                    (
                        k,
                        pack_format::sha256_hex(snapshot.get(k).unwrap_or_default()),
                    )
                })
                .collect();
            let last_error = client.status().last_error;
            if json {
                let files: Vec<serde_json::Value> = files
                    .iter()
                    .map(|(key, sha256)| serde_json::json!({"key": key, "sha256": sha256}))
                    .collect();
                outln!(
                    "{}",
                    serde_json::to_string(
                        &serde_json::json!({"meta": snapshot.meta(), "files": files, "last_error": last_error})
                    )?
                );
            } else {
                let meta = snapshot.meta();
                outln!(
                    "pack {} {} ({}, sequence {}, sha256 {})",
                    meta.name,
                    meta.version,
                    meta.source,
                    meta.sequence,
                    meta.sha256
                );
                if let Some(e) = &last_error {
                    outln!("last error: {e}");
                }
                // As sha256sum prints them, so `sha256sum -c` can check a copy of the files.
                for (key, sha256) in &files {
                    outln!("{sha256}  {key}");
                }
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Run => runtime.block_on(run_all(vec![client], json, false)),
    }
}

/// The text `status` prints for one channel.
fn print_status(status: &pack_client::ClientStatus) {
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
            "failed    {} ({}",
            when(Some(failure.at)),
            failure.summary(&when(status.last_success))
        );
    }
    if let Some(e) = &status.last_error {
        outln!("last error: {e}");
    }
    if let Some(files) = &status.files {
        outln!(
            "files     {} -> {}",
            files.link,
            files.dir.as_deref().unwrap_or("(nothing yet)")
        );
        if let Some(e) = &files.error {
            outln!("files     not updated: {e}");
        }
    }
    if let Some(targets) = &status.targets {
        for placed in &targets.placed {
            outln!(
                "target    {} {} ({}) {}",
                placed.agent,
                placed.path.display(),
                placed.kind,
                placed.from.join(", ")
            );
        }
        for refused in &targets.refused {
            outln!(
                "target    refused {}: {}",
                refused.path.display(),
                refused.reason
            );
        }
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
/// `refresh` of a config with several channels: each in order, each on its own (one
/// channel's failure changes nothing of another's), every outcome said with its channel's
/// name. Exit [`REFRESH_FAILED`] when any failed.
async fn refresh_all(clients: &[Client], json: bool) -> Result<ExitCode> {
    let mut all_ok = true;
    let mut each = Vec::new();
    for client in clients {
        let name = client.config().label();
        let result = client.refresh_now().await;
        let status = client.status();
        match result {
            Ok(outcome) => {
                if json {
                    each.push(serde_json::json!({"name": name, "ok": true, "outcome": outcome, "status": status}));
                } else {
                    outln!("{name}: {outcome}");
                    outln!(
                        "{name}: serving {} {} ({}, sha256 {}).",
                        status.serving.name,
                        status.serving.version,
                        status.serving.source,
                        status.serving.sha256
                    );
                }
            }
            Err(e) => {
                all_ok = false;
                if json {
                    each.push(serde_json::json!({"name": name, "ok": false, "error": e.to_string(), "status": status}));
                } else {
                    eprintln!(
                        "{name}: refresh failed: {}",
                        pack_protocol::error_text::report(&e)
                    );
                    eprintln!(
                        "{name}: still serving {} {} ({})",
                        status.serving.name, status.serving.version, status.serving.source
                    );
                }
            }
        }
    }
    if json {
        outln!(
            "{}",
            serde_json::to_string(&serde_json::json!({"ok": all_ok, "channels": each}))?
        );
    }
    Ok(if all_ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(REFRESH_FAILED)
    })
}

/// `run`: every channel's schedule and watch in this one process, each its own client, until
/// a signal. With several channels each line names its channel (`channel_name` in JSON).
async fn run_all(clients: Vec<Client>, json: bool, several: bool) -> Result<ExitCode> {
    // Listening from the start: a signal while the schedule starts is handled too.
    let stop = StopSignal::listen()?;
    let mut schedules = Vec::new();
    let mut loggers = Vec::new();
    for client in clients {
        let client = std::sync::Arc::new(client);
        let name = several.then(|| client.config().label().to_string());
        let log = ChannelLog { json, name };
        let serving = client.status();
        log.line(
            &serde_json::json!({
                "event": "serving",
                "name": serving.serving.name,
                "version": serving.serving.version.to_string(),
                "source": serving.serving.source,
                "sha256": serving.serving.sha256,
                "reason": serving.serving_reason,
                "files": serving.files,
            }),
            &format!(
                "serving {} {} ({}){}{}",
                serving.serving.name,
                serving.serving.version,
                serving.serving.source,
                serving
                    .serving_reason
                    .as_ref()
                    .map_or(String::new(), |r| format!(": {r}")),
                serving.files.as_ref().map_or(String::new(), |files| {
                    match (&files.dir, &files.error) {
                        (_, Some(error)) => format!("; {error}"),
                        (Some(dir), None) => format!("; file view {} -> {dir}", files.link),
                        (None, None) => String::new(),
                    }
                })
            ),
        );
        let mut events = client.events();
        let events_log = log.clone();
        loggers.push(tokio::spawn(async move {
            use tokio::sync::broadcast::error::RecvError;
            loop {
                match events.recv().await {
                    Ok(event) => events_log.line(
                        &serde_json::to_value(&event).unwrap_or_default(),
                        &event.to_string(),
                    ),
                    Err(RecvError::Lagged(missed)) => events_log.line(
                        &serde_json::json!({"event": "lagged", "missed": missed}),
                        &format!("{missed} events were not logged (logging fell behind)"),
                    ),
                    Err(RecvError::Closed) => break,
                }
            }
        }));
        let cron = pack_client::schedule::cron_for(client.install_id());
        let schedule = pack_client::schedule::start(client).await?;
        let watching = schedule.watching();
        log.line(
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
        schedules.push(schedule);
    }
    let signal = stop.wait().await;
    for schedule in schedules {
        schedule.shutdown().await?;
    }
    for logger in loggers {
        logger.abort();
    }
    log_line(
        json,
        &serde_json::json!({"event": "stopped", "signal": signal}),
        &format!("stopped: {signal}; the next start serves what is installed"),
    );
    Ok(ExitCode::SUCCESS)
}

/// How `run` logs one channel's lines: as [`log_line`], named by the channel when the config
/// has several.
#[derive(Clone)]
struct ChannelLog {
    json: bool,
    name: Option<String>,
}

impl ChannelLog {
    fn line(&self, value: &serde_json::Value, text: &str) {
        let Some(name) = &self.name else {
            return log_line(self.json, value, text);
        };
        let mut value = value.clone();
        if let Some(object) = value.as_object_mut() {
            // `channel` is taken: the watch's event names the server's channel with it.
            object.insert(
                "channel_name".to_string(),
                serde_json::Value::String(name.clone()),
            );
        }
        log_line(self.json, &value, &format!("{name}: {text}"));
    }
}

/// Ctrl-C (SIGINT) and, on Unix, SIGTERM, listened for from [`StopSignal::listen`] on.
struct StopSignal {
    #[cfg(unix)]
    interrupt: tokio::signal::unix::Signal,
    #[cfg(unix)]
    terminate: tokio::signal::unix::Signal,
}

impl StopSignal {
    fn listen() -> Result<StopSignal> {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{SignalKind, signal};
            Ok(StopSignal {
                interrupt: signal(SignalKind::interrupt()).context("listening for Ctrl-C")?,
                terminate: signal(SignalKind::terminate()).context("listening for SIGTERM")?,
            })
        }
        #[cfg(not(unix))]
        Ok(StopSignal {})
    }

    /// Waits for the first of them; says which came.
    async fn wait(mut self) -> &'static str {
        #[cfg(unix)]
        {
            tokio::select! {
                _ = self.interrupt.recv() => "interrupted (SIGINT)",
                _ = self.terminate.recv() => "terminated (SIGTERM)",
            }
        }
        #[cfg(not(unix))]
        {
            match tokio::signal::ctrl_c().await {
                Ok(()) => "interrupted (Ctrl-C)",
                Err(_) => "stopped (no signal handler)",
            }
        }
    }
}

/// `pack-client render`: the template rendered from one captured snapshot, through the
/// store's wholesale fallback (a remote pack that fails is replaced, for this render, by the
/// built-in one, as the agent's prompts are). Exit 1 when neither renders it.
fn render(
    client: &Client,
    template: &str,
    vars: &serde_json::Value,
    json: bool,
) -> Result<ExitCode> {
    let snapshot = client.store().capture();
    // A file that is not a template has nothing to render: say what prints it instead.
    if snapshot.get(template).is_some() && !snapshot.has_template(template) {
        let error = format!(
            "{template} in pack {} {} is not a template (only .hbs files render); `pack-client show {template}` prints it",
            snapshot.name(),
            snapshot.version()
        );
        return render_failed(json, "not_a_template", &error);
    }
    if let Err(e) = snapshot.check_vars(vars) {
        return render_failed(json, "contract", &format!("--vars: {e}"));
    }
    // When neither pack renders it, the serving pack's error is the one to show: the
    // built-in pack's attempt only confirms the request was at fault.
    let first = std::cell::RefCell::new(None);
    let rendered = client.store().serve_from(snapshot, |s| {
        let result = s.render(template, vars);
        if let Err(e) = &result {
            first
                .borrow_mut()
                .get_or_insert_with(|| (e.kind(), snapshot_error_text(e, s.meta().schema)));
        }
        result
    });
    match rendered {
        Ok(served) => {
            if json {
                outln!(
                    "{}",
                    serde_json::to_string(&serde_json::json!({
                        "ok": true,
                        "text": served.value,
                        "pack": served.snapshot.meta(),
                        "fallback": served.fallback,
                    }))?
                );
            } else {
                if let Some(reason) = &served.fallback {
                    eprintln!("note: {reason}");
                }
                use std::io::Write;
                match std::io::stdout().write_all(served.value.as_bytes()) {
                    Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => {}
                    other => other?,
                }
            }
            Ok(ExitCode::SUCCESS)
        }
        Err(e) => {
            let (kind, error) = first
                .into_inner()
                .unwrap_or_else(|| (e.kind(), snapshot_error_text(&e, 0)));
            render_failed(json, kind, &error)
        }
    }
}

/// A snapshot's error with what to do about it on this command line: the `--vars` that gives
/// a missing variable (and where the contract lists them all), `dump` for a missing file.
fn snapshot_error_text(error: &pack_client::snapshot::SnapshotError, schema: u32) -> String {
    use pack_client::snapshot::SnapshotError;
    match error {
        SnapshotError::Unset { variable, .. } => {
            let example = vars_example(schema, variable).map_or_else(
                || "--vars '{...}'".to_string(),
                |json| format!("--vars '{json}'"),
            );
            format!(
                "{error}; add it to --vars, as in {example} (contract/schema-{schema}.json in the promptpack \
                 source lists every variable a template may read, with its shape)"
            )
        }
        SnapshotError::Missing { .. } => {
            format!("{error}; `pack-client dump` lists every file of the pack that serves")
        }
        SnapshotError::Render { .. }
        | SnapshotError::UnknownSchema { .. }
        | SnapshotError::Invalid { .. }
        | SnapshotError::Incomplete { .. } => error.to_string(),
    }
}

/// The smallest `--vars` that gives `variable` (dotted) a value of its contract shape, such
/// as `{"tools":{"grep":true}}`; `None` when the contract of `schema` does not list it.
fn vars_example(schema: u32, variable: &str) -> Option<String> {
    use pack_contract::Shape;
    let contract = pack_contract::Contract::builtin(schema)?;
    let mut fields = contract.variables();
    let parts: Vec<&str> = variable.split('.').collect();
    let mut leaf = None;
    for (i, part) in parts.iter().enumerate() {
        let shape = fields.get(*part)?;
        match shape {
            Shape::Object(inner) if i + 1 < parts.len() => fields = inner,
            _ if i + 1 < parts.len() => return None,
            _ => leaf = Some(shape),
        }
    }
    let mut value = match leaf? {
        Shape::String => serde_json::json!("..."),
        Shape::Bool => serde_json::json!(true),
        Shape::Object(_) => serde_json::json!({}),
        Shape::List(_) => serde_json::json!([]),
    };
    for part in parts.iter().rev() {
        value = serde_json::json!({ *part: value });
    }
    Some(value.to_string())
}

fn render_failed(json: bool, kind: &str, error: &str) -> Result<ExitCode> {
    if json {
        outln!(
            "{}",
            serde_json::to_string(&serde_json::json!({"ok": false, "kind": kind, "error": error}))?
        );
    } else {
        eprintln!("error: {error}");
    }
    Ok(ExitCode::FAILURE)
}

/// Input `render --vars` accepts beyond this is refused (a prompt's variables are a few KB).
const MAX_VARS_LEN: u64 = 4 * 1024 * 1024;

/// `--vars`: JSON text, `@FILE` or `-` (stdin), which must hold one JSON object.
fn parse_vars(arg: &str) -> Result<serde_json::Value, String> {
    use std::io::Read as _;
    let (text, from) = if arg == "-" {
        let mut bytes = Vec::new();
        std::io::stdin()
            .take(MAX_VARS_LEN + 1)
            .read_to_end(&mut bytes)
            .map_err(|e| format!("reading stdin: {e}"))?;
        (bytes, "stdin".to_string())
    } else if let Some(path) = arg.strip_prefix('@') {
        let file = std::fs::File::open(path).map_err(|e| format!("{path}: {e}"))?;
        let mut bytes = Vec::new();
        file.take(MAX_VARS_LEN + 1)
            .read_to_end(&mut bytes)
            .map_err(|e| format!("{path}: {e}"))?;
        (bytes, path.to_string())
    } else {
        (arg.as_bytes().to_vec(), "the argument".to_string())
    };
    if text.len() as u64 > MAX_VARS_LEN {
        return Err(format!("{from} is over {MAX_VARS_LEN} bytes"));
    }
    let value: serde_json::Value = serde_json::from_slice(&text).map_err(|e| {
        format!("{from} is not JSON: {e} (expected an object such as '{{\"data_dir\": \"/tmp\"}}')")
    })?;
    if !value.is_object() {
        return Err(format!(
            "{from} must be a JSON object of variables, found {}",
            match value {
                serde_json::Value::Null => "null",
                serde_json::Value::Bool(_) => "a bool",
                serde_json::Value::Number(_) => "a number",
                serde_json::Value::String(_) => "a string",
                serde_json::Value::Array(_) => "an array",
                serde_json::Value::Object(_) => "an object",
            }
        ));
    }
    Ok(value)
}

/// Tests only (debug builds): with `PROMPTPACK_TEST_NOW=RFC3339` the client decides by that
/// time instead of the system clock (how far a signed ramp has grown, expiry, check times),
/// so that a test of a ramp moves the clock instead of waiting for it.
#[cfg(debug_assertions)]
fn test_now() -> Result<Option<time::OffsetDateTime>> {
    let Some(text) = std::env::var_os("PROMPTPACK_TEST_NOW") else {
        return Ok(None);
    };
    let text = text.to_string_lossy();
    time::OffsetDateTime::parse(&text, &time::format_description::well_known::Rfc3339)
        .map(Some)
        .with_context(|| format!("PROMPTPACK_TEST_NOW={text} is not an RFC 3339 time"))
}

#[cfg(not(debug_assertions))]
fn test_now() -> Result<Option<time::OffsetDateTime>> {
    Ok(None)
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
