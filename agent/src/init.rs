//! `agent init [DIR]` and `/init`: run the `init` skill to write the workspace's
//! `AGENTS.md`. An existing file is never replaced without the user's say: skip it (the
//! default), replace it after moving it to `AGENTS.md.bak.<unix-time>`, or let the agent
//! write a proposal that is shown as a diff while the file stays as it is.

use std::io::{BufRead, IsTerminal, Write};
use std::path::{Path, PathBuf};

use agent_runtime::agent_loop::Event;
use agent_runtime::provider::Message;
use agent_runtime::skills;
use agent_runtime::tools::Protected;
use agent_runtime::transcript::{Record, SessionHeader, Transcript};
use anyhow::{Context as _, bail};

use crate::exec::Printer;
use crate::host::Host;

/// What to do with an `AGENTS.md` that is already there.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Existing {
    /// Leave it untouched.
    Skip,
    /// Move it to `AGENTS.md.bak.<unix-time>` and write a new one.
    Backup,
    /// Write a proposal and show it as a unified diff; the file is not changed.
    Diff,
}

/// Asks on the terminal; anything but a clear choice (or no terminal) is "skip".
fn ask(path: &Path) -> Existing {
    if !std::io::stdin().is_terminal() {
        return Existing::Skip;
    }
    let mut err = std::io::stderr();
    let _ = write!(
        err,
        "{} exists. [s]kip (default), [b]ackup and replace, or show a [d]iff? ",
        path.display()
    );
    let _ = err.flush();
    let mut line = String::new();
    if std::io::stdin().lock().read_line(&mut line).is_err() {
        return Existing::Skip;
    }
    match line.trim().to_lowercase().as_str() {
        "b" | "backup" | "o" | "overwrite" => Existing::Backup,
        "d" | "diff" => Existing::Diff,
        _ => Existing::Skip,
    }
}

/// Runs the init skill in `dir`. Prints the agent's work like `agent exec`.
pub async fn run(
    host: &Host,
    dir: &Path,
    choice: Option<Existing>,
    max_steps: u32,
) -> anyhow::Result<()> {
    let dir = std::path::absolute(dir).with_context(|| format!("resolving {}", dir.display()))?;
    if !dir.is_dir() {
        bail!("{} is not a directory", dir.display());
    }
    let target = dir.join("AGENTS.md");
    let mut err = std::io::stderr();
    let mut protected = None;
    let mut situation = format!("No AGENTS.md exists yet: write {}.", target.display());
    let mut proposal: Option<PathBuf> = None;
    if target.exists() {
        match choice.unwrap_or_else(|| ask(&target)) {
            Existing::Skip => {
                writeln!(
                    err,
                    "{} exists; left as it is (choose --existing backup or diff to change it)",
                    target.display()
                )?;
                return Ok(());
            }
            Existing::Backup => {
                let stamp = time::OffsetDateTime::now_utc().unix_timestamp();
                let backup = dir.join(format!("AGENTS.md.bak.{stamp}"));
                std::fs::rename(&target, &backup)
                    .with_context(|| format!("moving {} aside", target.display()))?;
                writeln!(err, "backed up the existing file to {}", backup.display())?;
                situation = format!(
                    "The user chose to replace the existing AGENTS.md; it was moved to {}. Read it for anything worth keeping, then write the new {}.",
                    backup.display(),
                    target.display()
                );
            }
            Existing::Diff => {
                let divert = host
                    .data_dir
                    .root()
                    .join("init")
                    .join(format!("AGENTS.md.proposed.{}", std::process::id()));
                std::fs::create_dir_all(divert.parent().unwrap_or(&dir))?;
                let _ = std::fs::remove_file(&divert);
                protected = Some(Protected {
                    path: target.clone(),
                    divert_to: divert.clone(),
                });
                proposal = Some(divert);
                situation = format!(
                    "An AGENTS.md exists and the user asked to see a diff. Read {}, then write your complete proposed version to that same path with `write`: the runtime keeps the file as it is and shows the user the difference.",
                    target.display()
                );
            }
        }
    }

    let snapshot = host.packs.store().capture();
    let (disk, _) = skills::from_disk(host.data_dir.root(), &dir);
    let all = skills::merge(skills::from_pack(&snapshot)?, &disk, None);
    let Some(skill) = all.iter().find(|s| s.name == "init") else {
        let names: Vec<&str> = all.iter().map(|s| s.name.as_str()).collect();
        bail!(
            "the pack has no `init` skill; available skills: {}",
            names.join(", ")
        );
    };
    let task = format!(
        "/init\n\n<skill name=\"init\">\n{}\n</skill>\n\nWorkspace: {}\n{situation}",
        skills::expand(skill).trim(),
        dir.display()
    );

    let header = SessionHeader {
        id: Transcript::new_id(),
        created_at: time::OffsetDateTime::now_utc()
            .format(&time::format_description::well_known::Rfc3339)?,
        agent: agent_runtime::agents::ORCHESTRATOR.to_string(),
        mode: agent_runtime::PromptMode::default(),
        provider: host.settings.id.clone(),
        model: host.settings.model.clone(),
        cwd: dir.clone(),
    };
    let mut transcript = Transcript::create(&host.data_dir.sessions_dir(), &header)?;
    let user = Message::User { content: task };
    transcript.append(&Record::Message {
        message: user.clone(),
    })?;
    let mut messages = vec![user];
    let session = host.session(header, &[], protected)?;
    let mut agent_loop = session.agent_loop(host, max_steps, std::io::stdin().is_terminal());
    let (_cancel_tx, cancel_rx) = tokio::sync::watch::channel(false);
    let mut printer = Printer::new(false);
    let outcome = agent_loop
        .run(
            &mut messages,
            &mut transcript,
            0,
            cancel_rx,
            &mut |e: Event| printer.event(e),
        )
        .await;
    session.tools.tasks.stop_all();
    outcome?;

    if let Some(proposal) = proposal {
        let Ok(proposed) = std::fs::read_to_string(&proposal) else {
            writeln!(
                err,
                "the agent wrote no proposal; {} is unchanged",
                target.display()
            )?;
            return Ok(());
        };
        let current = std::fs::read_to_string(&target).unwrap_or_default();
        let diff = similar::TextDiff::from_lines(&current, &proposed);
        let mut out = std::io::stdout().lock();
        write!(
            out,
            "{}",
            diff.unified_diff()
                .context_radius(3)
                .header("AGENTS.md", "AGENTS.md (proposed)")
        )?;
        let _ = std::fs::remove_file(&proposal);
        writeln!(
            err,
            "{} is unchanged; copy the parts you want from the diff above",
            target.display()
        )?;
    }
    Ok(())
}
