//! The sandbox `bash` runs in: Landlock on Linux.
//!
//! Landlock restricts the process that asks and everything it starts afterwards, and it
//! must be asked from inside the process before the command runs. The usual way, a
//! `pre_exec` hook between fork and exec, needs `unsafe` code, which this workspace
//! denies. So the `agent` binary itself is the launcher: `agent sandbox-exec --write DIR
//! … -- /bin/bash -c CMD` starts a new session, so the command has no controlling terminal
//! (it cannot type into the user's shell with TIOCSTI), restricts itself (a fresh,
//! single-threaded process), then replaces itself with the shell through a plain `exec`.
//! The restriction survives the exec and is inherited by every child; nothing can lift it.
//!
//! The ruleset: read and execute everywhere; write, create, remove, rename and truncate
//! only below the writable directories (none in `read-only`) and on `/dev/null`-like
//! devices; no device drivers' ioctls on other devices (ABI 5); no TCP bind or connect
//! unless the network is allowed (Landlock ABI 4); no signals to processes outside the
//! sandbox and, without network, no abstract UNIX sockets outside it (ABI 6). Landlock does
//! not filter UDP or other socket families: with the network off, DNS still resolves, but
//! no TCP connection can be made.
//!
//! Only ABI 3 and later count as confining files: before it `truncate(2)` is not mediated,
//! so a command in the read-only sandbox could still empty any file the user owns. On such
//! a kernel commands are treated as unsandboxed (asked about or refused), and the launcher
//! refuses to run one.
//!
//! At session start the host runs `agent sandbox-exec --probe`, which restricts itself
//! and reports what the kernel enforced; [`Sandbox`] records it. `AGENT_LANDLOCK_ABI_MAX`
//! makes both the probe and the launcher act as on a kernel offering at most that ABI.

use std::path::{Path, PathBuf};
use std::process::Stdio;

use serde::{Deserialize, Serialize};

/// What a sandboxed command may do: write below these directories (none: read-only), and
/// reach the network or not. The permissions decide it per call
/// ([`crate::permissions::Permit`]); the launcher enforces it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SandboxSpec {
    pub writable: Vec<PathBuf>,
    pub network: bool,
}

/// The hidden subcommand of the `agent` binary that launches a command in the sandbox.
pub const SUBCOMMAND: &str = "sandbox-exec";
/// Set to `off` to treat this machine as having no sandbox (commands are then asked about
/// or refused like any other call outside the mode).
pub const SWITCH_ENV: &str = "AGENT_SANDBOX";
/// The exit code of a command the launcher could not sandbox (it never runs unconfined).
pub const LAUNCH_FAILED: i32 = 126;
/// Lowers the Landlock ABI the agent uses, as if the kernel were older: a knob for tests
/// and diagnosis that never raises the ABI above what the kernel offers.
pub const ABI_MAX_ENV: &str = "AGENT_LANDLOCK_ABI_MAX";
/// The newest Landlock ABI this code was written and tested against; newer kernels get
/// nothing this code has not vetted.
pub const NEWEST_ABI: u8 = 7;
/// The oldest ABI that confines files: before ABI 3 `truncate(2)` is not mediated.
pub const MIN_FILE_ABI: u8 = 3;

/// What each Landlock ABI adds to the sandbox, for `agent doctor` (docs/SAFETY.md has the
/// same table).
pub const ABI_LEVELS: [(u8, &str); 7] = [
    (
        1,
        "reads anywhere; writes, creation, removal and renames only below the writable directories",
    ),
    (2, "links and renames into another directory"),
    (3, "truncate(2); from here on commands count as confined"),
    (4, "TCP bind and connect: the network can be off"),
    (5, "device drivers' ioctls on device files"),
    (
        6,
        "signals and abstract UNIX sockets stay inside the sandbox",
    ),
    (7, "audit logging of denials; nothing new is enforced"),
];

/// The highest ABI the probe and the launcher use: [`NEWEST_ABI`], lowered by
/// `AGENT_LANDLOCK_ABI_MAX`. A value that is not a number is an error, never ignored: the
/// caller then has no sandbox, which means more questions, never fewer.
pub fn abi_ceiling() -> Result<u8, SandboxError> {
    let value = match std::env::var(ABI_MAX_ENV) {
        Err(std::env::VarError::NotPresent) => return Ok(NEWEST_ABI),
        Err(std::env::VarError::NotUnicode(value)) => value.to_string_lossy().into_owned(),
        Ok(value) if value.trim().is_empty() => return Ok(NEWEST_ABI),
        Ok(value) => value,
    };
    value
        .trim()
        .parse::<u8>()
        .map(|max| max.min(NEWEST_ABI))
        .map_err(|_| SandboxError::BadAbiMax(value))
}

/// What this machine can enforce, found once per session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Sandbox {
    Landlock {
        /// The `agent` binary, which re-executes itself as the launcher.
        launcher: PathBuf,
        /// The Landlock ABI the kernel offers.
        abi: u8,
    },
    Unavailable {
        reason: String,
    },
}

/// What `agent sandbox-exec --probe` prints: one JSON line.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Probe {
    /// 0 when Landlock is missing.
    pub abi: u8,
    /// Why Landlock is not usable, when it is not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

impl Sandbox {
    /// Runs the probe through `launcher` (the `agent` binary). Honours `AGENT_SANDBOX=off`.
    pub fn detect(launcher: &Path) -> Sandbox {
        if std::env::var(SWITCH_ENV).is_ok_and(|v| v == "off") {
            return Sandbox::Unavailable {
                reason: format!("switched off by {SWITCH_ENV}=off"),
            };
        }
        if !cfg!(target_os = "linux") {
            return Sandbox::Unavailable {
                reason: "Landlock is Linux-only".to_string(),
            };
        }
        let output = std::process::Command::new(launcher)
            .args([SUBCOMMAND, "--probe"])
            .stdin(Stdio::null())
            .stderr(Stdio::null())
            .output();
        let output = match output {
            Ok(output) => output,
            Err(e) => {
                return Sandbox::Unavailable {
                    reason: format!(
                        "cannot run the sandbox launcher {}: {e}",
                        launcher.display()
                    ),
                };
            }
        };
        let text = String::from_utf8_lossy(&output.stdout);
        match serde_json::from_str::<Probe>(text.trim()) {
            Ok(Probe { abi, .. }) if abi > 0 => Sandbox::Landlock {
                launcher: launcher.to_path_buf(),
                abi,
            },
            Ok(Probe { reason, .. }) => Sandbox::Unavailable {
                reason: reason.unwrap_or_else(|| "Landlock is not available".to_string()),
            },
            Err(_) => Sandbox::Unavailable {
                reason: format!(
                    "the sandbox probe failed ({}): {}",
                    output.status,
                    text.trim()
                ),
            },
        }
    }

    /// Can keep commands from changing files outside their directories (ABI 3+: before
    /// it, `truncate(2)` is not mediated).
    pub fn confines_files(&self) -> bool {
        matches!(self, Sandbox::Landlock { abi, .. } if *abi >= MIN_FILE_ABI)
    }

    /// Can keep commands off the network (TCP rules arrived in Landlock ABI 4).
    pub fn confines_network(&self) -> bool {
        self.confines_files() && matches!(self, Sandbox::Landlock { abi, .. } if *abi >= 4)
    }

    /// One line for messages and `agent doctor`.
    pub fn describe(&self) -> String {
        match self {
            Sandbox::Landlock { abi, .. } if *abi < MIN_FILE_ABI => format!(
                "Landlock ABI {abi}: no file confinement (truncate(2) is not mediated before ABI {MIN_FILE_ABI})"
            ),
            Sandbox::Landlock { abi, .. } => {
                let ioctl = if *abi >= 5 {
                    ""
                } else {
                    ", no device-ioctl rules before ABI 5"
                };
                let net = if *abi >= 4 {
                    "TCP rules"
                } else {
                    "no network rules before ABI 4"
                };
                format!("Landlock ABI {abi}: file-system rules{ioctl}, {net}")
            }
            Sandbox::Unavailable { reason } => format!("no sandbox: {reason}"),
        }
    }

    /// The process that runs `program args…` in the sandbox `spec` describes.
    pub fn command(
        &self,
        spec: &SandboxSpec,
        program: &str,
        args: &[&str],
    ) -> Result<tokio::process::Command, String> {
        let Sandbox::Landlock { launcher, .. } = self else {
            return Err(self.describe());
        };
        if !self.confines_files() {
            return Err(self.describe());
        }
        let mut command = tokio::process::Command::new(launcher);
        command.arg(SUBCOMMAND);
        for dir in &spec.writable {
            command.arg("--write").arg(dir);
        }
        if spec.network {
            command.arg("--network");
        }
        command.arg("--").arg(program).args(args);
        Ok(command)
    }
}

/// Why the launcher could not confine itself.
#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    #[error("Landlock is not available on this kernel ({0})")]
    Unsupported(String),
    #[error(
        "{ABI_MAX_ENV}={0:?} is not a Landlock ABI number; set a number to lower the ABI, or unset it"
    )]
    BadAbiMax(String),
    #[error(
        "Landlock ABI {abi} cannot confine files: truncate(2) is not mediated before ABI {MIN_FILE_ABI}"
    )]
    NoFileConfinement { abi: u8 },
    #[error(
        "the network cannot be switched off on this kernel (Landlock ABI {abi}; TCP rules need ABI 4)"
    )]
    NoNetworkRules { abi: u8 },
    #[error("setting up the Landlock ruleset failed: {0}")]
    Ruleset(String),
}

/// What the launcher enforced on itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Enforced {
    pub abi: u8,
}
