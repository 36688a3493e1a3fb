//! The sandbox a command runs in: what it may write and whether it reaches the network.

use super::{PermissionMode, Policy};

/// A call allowed to run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Permit {
    /// Commands run in the sandbox (with these writable directories and network setting).
    pub sandbox: Option<SandboxSpec>,
}

pub use crate::sandbox::SandboxSpec;

impl Policy {
    /// The sandbox a command would run in under this mode, or why there is none.
    pub(super) fn sandbox_for_commands(&self) -> Result<SandboxSpec, String> {
        let shared = &self.shared;
        if !shared.sandbox.confines_files() {
            return Err(format!(
                "commands cannot be sandboxed on this machine ({})",
                shared.sandbox.describe()
            ));
        }
        let network = shared.settings.network;
        if !network && !shared.sandbox.confines_network() {
            return Err(format!(
                "the network cannot be switched off for commands on this machine ({}); \
                 set `network = true` under [permissions] to run them with the file-system \
                 sandbox alone",
                shared.sandbox.describe()
            ));
        }
        let writable = match self.mode {
            PermissionMode::ReadOnly => Vec::new(),
            PermissionMode::Workspace | PermissionMode::Full => shared.writable_roots(),
        };
        Ok(SandboxSpec { writable, network })
    }
}
