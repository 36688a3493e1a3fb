//! `packer`: the publisher's tool. Generates keys, seals a directory of templates into a
//! pack (validating every template against the runtime's variable contract first), looks
//! inside packs, signs channel documents, and publishes packs and releases to packd.

// `unwrap` and `expect` are for tests: shipped code says what failed (STYLE.md, "Weight").
#![deny(clippy::unwrap_used, clippy::expect_used)]
#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]
// The binary owns the terminal: results go to stdout, progress and errors to stderr.
#![allow(clippy::print_stdout, clippy::print_stderr)]

/// `println!` for command output, except that a reader who went away (`packer inspect | head`)
/// ends the program quietly instead of panicking.
macro_rules! outln {
    () => {
        $crate::write_out(format_args!(""))
    };
    ($($arg:tt)*) => {
        $crate::write_out(format_args!($($arg)*))
    };
}

mod build;
mod channel;
mod check;
mod diff;
mod fsio;
mod guard;
mod keygen;
mod keys;
mod live;
mod outcomes;
mod publish;
mod read;
mod release;
mod remote;
mod status;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "packer",
    version,
    about = "Seal prompt templates into signed, encrypted promptpack packs",
    long_about = "Seal a directory of Handlebars prompt templates into an encrypted pack, look \
                  inside packs, and sign and publish the channel documents that tell clients which pack to use.\n\n\
                  Typical flow:\n  \
                  packer keygen --dir keys\n  \
                  packer build packs/builtin --version 1.0.0 --keys keys -o dist/builtin-1.0.0.pack\n  \
                  packer verify dist/builtin-1.0.0.pack --keys keys\n  \
                  packer diff dist/builtin-1.0.0.pack packs/builtin --keys keys   (what the next build changes)\n  \
                  packer channel --keys keys --channel stable --pack builtin --sequence 1 \
                  --expires 30d --entry '*=dist/builtin-1.0.0.pack' -o dist/channel.json\n\n\
                  With a packd server (token in PROMPTPACK_TOKEN):\n  \
                  packer publish dist/builtin-1.0.0.pack --server http://127.0.0.1:8470 --keys keys\n  \
                  packer release stable --server http://127.0.0.1:8470 --keys keys --new-channel --pack builtin --pin '*=1.0.0'\n  \
                  packer status --server http://127.0.0.1:8470"
)]
struct Cli {
    /// Print the result as JSON on stdout (progress and errors stay on stderr).
    #[arg(long, global = true)]
    json: bool,

    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Generate a signing key pair (minisign format) and a content key; with --guard, a
    /// guard key pair.
    Keygen(keygen::KeygenArgs),
    /// Validate every template and seal a directory into a pack.
    Build(build::BuildArgs),
    /// Show a pack's header, and with a content key its file list.
    Inspect(read::InspectArgs),
    /// Open a pack completely and check its templates against the contract.
    Verify(read::VerifyArgs),
    /// Open a pack and write its files into a new directory.
    Extract(read::ExtractArgs),
    /// Show what changes between two packs or pack directories: the files, and the system
    /// prompt of every agent in every mode. Exit 0 same, 1 different, 2 trouble.
    Diff(diff::DiffArgs),
    /// Write and sign a channel document (channel.json + channel.json.minisig).
    Channel(channel::ChannelArgs),
    /// Upload a sealed pack to packd.
    Publish(publish::PublishArgs),
    /// Pin, roll out, roll back: sign and publish the next document of a channel on packd.
    Release(release::ReleaseArgs),
    /// Freeze or roll back a channel's rollout with the guard key the channel names.
    Guard(guard::GuardArgs),
    /// Show what is live where on packd: channels, their entries, and the packs.
    Status(outcomes::StatusCommand),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        // diff(1)'s exit status: 0 same, 1 different, 2 trouble.
        Command::Diff(args) => {
            return match diff::run(&args, cli.json) {
                Ok(false) => ExitCode::SUCCESS,
                Ok(true) => ExitCode::from(1),
                Err(error) => {
                    eprintln!(
                        "error: {}",
                        pack_protocol::error_text::report(error.as_ref())
                    );
                    ExitCode::from(2)
                }
            };
        }
        Command::Keygen(args) => keygen::run(&args, cli.json),
        Command::Build(args) => build::run(&args, cli.json),
        Command::Inspect(args) => read::inspect(&args, cli.json),
        Command::Verify(args) => read::verify(&args, cli.json),
        Command::Extract(args) => read::extract(&args, cli.json),
        Command::Channel(args) => channel::run(&args, cli.json),
        Command::Publish(args) => publish::run(&args, cli.json),
        Command::Release(args) => release::run(&args, cli.json),
        Command::Guard(args) => guard::run(&args, cli.json),
        Command::Status(args) => outcomes::run(&args, cli.json),
    };
    match result {
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

/// Prints a JSON value on stdout, pretty, with a final newline.
fn print_json(value: &serde_json::Value) {
    // A `Value` always serialises.
    outln!(
        "{}",
        serde_json::to_string_pretty(value).unwrap_or_default()
    );
}

/// Parses a pack version for clap, saying which number is missing.
fn parse_version(text: &str) -> Result<semver::Version, String> {
    pack_format::parse_version(text).map_err(|e| e.to_string())
}

/// Says what a bare version means as a range: `1.4` is semver's `^1.4`, every 1.x from 1.4
/// on, where a publisher may well have meant 1.4.x only.
fn note_bare_range(text: &str, range: &semver::VersionReq) {
    if !text.starts_with(|c: char| c.is_ascii_digit()) {
        return;
    }
    let instead = if text.split('.').count() >= 3 {
        format!("for {text} only write '={text}'")
    } else {
        format!("for {text}.x only write '~{text}'")
    };
    eprintln!("note: range '{text}' means '{range}' (a caret range); {instead}");
}

/// A path as the user should see it in a message.
fn shown(path: &std::path::Path) -> String {
    path.display().to_string()
}

/// Common shape of `--keys DIR` plus extra `--content-key FILE` options.
#[derive(clap::Args, Debug, Clone)]
struct ContentKeyArgs {
    /// Extra content key file(s), in addition to KEYS/content.key. Repeatable.
    #[arg(long = "content-key", value_name = "FILE")]
    content_keys: Vec<PathBuf>,
}
