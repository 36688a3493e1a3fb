//! `agent trust`: let a workspace's rules file allow things, as the file is now.
//!
//! Records the workspace in `trusted_workspaces` (unless it is below an entry already) and
//! the SHA-256 of `.agents/permissions.toml` under `[permissions.trusted_rules]` in
//! config.toml. From the next session on, the file's allow rules count while it hashes the
//! same; any change, by a command, a `git pull` or a person, waits for `agent trust` again.

use std::io::Write as _;
use std::path::PathBuf;

use agent_runtime::data_dir::DataDir;
use agent_runtime::permissions::RuleContext;
use agent_runtime::permissions::config::{self, WORKSPACE_RULES};
use agent_runtime::permissions::trust;
use anyhow::Context as _;

#[derive(clap::Args)]
pub struct TrustArgs {
    /// The workspace (default: the current directory).
    dir: Option<PathBuf>,
}

pub fn trust(args: TrustArgs) -> anyhow::Result<()> {
    let data_dir = DataDir::locate()?;
    let workspace = match args.dir {
        Some(dir) => dir,
        None => std::env::current_dir().context("reading the current directory")?,
    };
    let context = RuleContext {
        workspace: std::path::absolute(&workspace)
            .with_context(|| format!("finding {}", workspace.display()))?,
        home: crate::safety::home(),
    };
    let Some(file) = config::read_workspace_file(&context, &crate::safety::known_tools())
        .map_err(|e| anyhow::anyhow!("{e}; fix it before trusting it"))?
    else {
        anyhow::bail!(
            "{} does not exist: nothing to trust (a workspace's allow and deny rules live there)",
            context.workspace.join(WORKSPACE_RULES).display()
        );
    };
    let config_path = data_dir.config_file();
    let fail = |e: String| anyhow::anyhow!("{}: {e}", config_path.display());
    crate::edit_config(&data_dir, |text| {
        let updated = trust::record(text, &context, &file.sha256).map_err(fail)?;
        // Refuse to save a file the runtime could not read back.
        config::section(&updated).map_err(fail)?;
        Ok(updated)
    })?;

    let mut out = std::io::stdout().lock();
    writeln!(
        out,
        "trusted {} as it is now (SHA-256 {}); from the next session its allow rules count until the file changes:",
        file.path.display(),
        file.sha256
    )?;
    if file.allow.is_empty() {
        writeln!(out, "  (no allow rules)")?;
    }
    for rule in &file.allow {
        writeln!(out, "  allow `{}`", rule.text)?;
    }
    for rule in &file.deny {
        writeln!(out, "  deny `{}`", rule.text)?;
    }
    writeln!(out, "recorded in {}", config_path.display())?;
    Ok(())
}
