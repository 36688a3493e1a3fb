//! `bash`: one command in a non-interactive shell, with a timeout and capped output.
//!
//! Below the `full` mode the command runs in the sandbox (see [`crate::sandbox`]) unless
//! the model asks to leave it and the user (or an allow rule) agrees.

use std::process::Stdio;
use std::time::Duration;

use schemars::JsonSchema;
use serde::Deserialize;
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::sync::watch;

use super::{Call, Gate, Tool, ToolContext, ToolError, ToolResult, cut_middle};
use crate::capabilities::ToolId;
use crate::permissions::{Access, Permit};

#[derive(Deserialize, JsonSchema)]
pub(super) struct Args {
    /// The shell command.
    command: String,
    /// Kill the command after this long (default 120000, at most 600000).
    #[serde(default)]
    #[schemars(range(min = 1))]
    timeout_ms: Option<u64>,
    /// Start the command and return at once with a task id.
    #[serde(default)]
    run_in_background: bool,
    /// Run outside the sandbox. Only when the sandbox stopped a command that must write
    /// outside the workspace or reach the network; the user is asked (or a rule decides).
    #[serde(default)]
    outside_sandbox: bool,
    /// Why the command must leave the sandbox; shown to the user.
    #[serde(default)]
    reason: Option<String>,
}

pub(super) struct Bash;

impl Tool for Bash {
    type Args = Args;

    fn name(&self) -> &'static str {
        "bash"
    }

    fn gate(&self) -> Gate {
        Gate::Tool(ToolId::Bash)
    }

    fn addenda(&self) -> &'static [(&'static str, &'static str)] {
        &[("task_output", "tools/bash_background.md")]
    }

    fn read_only(&self) -> bool {
        false
    }

    fn access(&self, _context: &ToolContext, args: &Args) -> Access {
        Access::Command {
            command: args.command.clone(),
            outside_sandbox: args.outside_sandbox,
            reason: args.reason.clone(),
        }
    }

    async fn run(&self, call: Call<'_>, args: Args) -> ToolResult {
        if args.command.trim().is_empty() {
            return Err(ToolError::new("command is empty"));
        }
        let command = shell_command(call.context, &call.permit, &args.command)?;
        if args.run_in_background {
            return call.context.tasks.spawn(command, &args.command);
        }
        run(call.context, command, args, call.cancel).await
    }
}

/// The shell running `script` in the working directory, in the sandbox the permit names.
pub(super) fn shell_command(
    context: &ToolContext,
    permit: &Permit,
    script: &str,
) -> Result<tokio::process::Command, ToolError> {
    let (program, flag) = shell();
    let mut command = match &permit.sandbox {
        None => {
            let mut command = tokio::process::Command::new(program);
            // Its own process group: Ctrl-C at the terminal reaches the agent, which
            // decides, and a timeout can kill the whole tree.
            #[cfg(unix)]
            command.process_group(0);
            command
        }
        // The launcher starts a new session (and so its own process group) itself; a
        // process group leader could not.
        Some(spec) => context
            .policy
            .permissions()
            .sandbox
            .command(spec, program, &[])
            .map_err(|e| ToolError::new(format!("cannot start the sandbox: {e}")))?,
    };
    command
        .arg(flag)
        .arg(script)
        .current_dir(&context.cwd)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    Ok(command)
}

/// Bytes kept per stream while the command runs; the rest is counted, not stored.
const KEEP_BYTES: usize = 4 * 1024 * 1024;

async fn drain(mut reader: impl AsyncRead + Unpin) -> (Vec<u8>, usize) {
    let mut kept = Vec::new();
    let mut dropped = 0;
    let mut buf = [0u8; 8192];
    loop {
        match reader.read(&mut buf).await {
            Ok(0) | Err(_) => return (kept, dropped),
            Ok(n) => {
                let room = KEEP_BYTES.saturating_sub(kept.len()).min(n);
                kept.extend_from_slice(&buf[..room]);
                dropped += n - room;
            }
        }
    }
}

pub(super) fn shell() -> (&'static str, &'static str) {
    if cfg!(windows) {
        ("cmd", "/C")
    } else if std::path::Path::new("/bin/bash").exists() {
        ("/bin/bash", "-c")
    } else {
        ("/bin/sh", "-c")
    }
}

/// Sends `signal` to the process group `pid` leads.
pub(super) fn kill_group(pid: Option<u32>, signal: &str) {
    #[cfg(unix)]
    if let Some(pid) = pid {
        let _ = std::process::Command::new("kill")
            .args([signal, "--", &format!("-{pid}")])
            .stderr(Stdio::null())
            .status();
    }
    #[cfg(not(unix))]
    let _ = (pid, signal);
}

/// Kills the command and everything it started: it leads its own process group.
fn kill_tree(child: &mut tokio::process::Child) {
    kill_group(child.id(), "-KILL");
    let _ = child.start_kill();
}

enum End {
    Exited(std::process::ExitStatus),
    TimedOut(Duration),
    Cancelled,
}

async fn run(
    context: &ToolContext,
    mut command: tokio::process::Command,
    args: Args,
    mut cancel: watch::Receiver<bool>,
) -> ToolResult {
    let limits = context.limits;
    let timeout = args
        .timeout_ms
        .map_or(limits.bash_timeout, Duration::from_millis)
        .min(limits.bash_max_timeout);
    let mut child = command
        .spawn()
        .map_err(|e| ToolError::new(format!("cannot start the shell: {e}")))?;
    let (Some(out), Some(err)) = (child.stdout.take(), child.stderr.take()) else {
        let _ = child.start_kill();
        return Err(ToolError::new("the shell's output is not piped"));
    };
    let stdout = tokio::spawn(drain(out));
    let stderr = tokio::spawn(drain(err));

    let end = tokio::select! {
        status = child.wait() => match status {
            Ok(status) => End::Exited(status),
            Err(e) => return Err(ToolError::new(format!("waiting for the command failed: {e}"))),
        },
        _ = tokio::time::sleep(timeout) => End::TimedOut(timeout),
        _ = cancel.wait_for(|c| *c) => End::Cancelled,
    };
    if !matches!(end, End::Exited(_)) {
        kill_tree(&mut child);
        let _ = child.wait().await;
    }
    // A background grandchild can hold the pipes open; do not wait for it forever.
    let collect = |task: tokio::task::JoinHandle<(Vec<u8>, usize)>| async move {
        match tokio::time::timeout(Duration::from_secs(2), task).await {
            Ok(Ok(out)) => out,
            Ok(Err(_)) | Err(_) => (Vec::new(), 0),
        }
    };
    let (out, out_dropped) = collect(stdout).await;
    let (err, err_dropped) = collect(stderr).await;

    let mut report = match end {
        End::Exited(status) => match status.code() {
            Some(code) => format!("exit code: {code}\n"),
            None => format!("exit code: none ({status})\n"),
        },
        End::TimedOut(after) => format!(
            "timed out after {} ms and was killed; pass a larger timeout_ms (at most {}) if it needs longer\n",
            after.as_millis(),
            limits.bash_max_timeout.as_millis()
        ),
        End::Cancelled => "stopped: the user interrupted the run\n".to_string(),
    };
    for (name, bytes, dropped) in [("stdout", out, out_dropped), ("stderr", err, err_dropped)] {
        if bytes.is_empty() {
            continue;
        }
        let mut text = String::from_utf8_lossy(&bytes).into_owned();
        if dropped > 0 {
            text.push_str(&format!("\n… [{dropped} more bytes not kept]\n"));
        }
        report.push_str(&format!(
            "{name}:\n{}",
            cut_middle(&text, limits.bash_bytes / 2)
        ));
        if !report.ends_with('\n') {
            report.push('\n');
        }
    }
    match end {
        End::Exited(_) => Ok(report),
        End::TimedOut(_) | End::Cancelled => Err(ToolError::new(report)),
    }
}
