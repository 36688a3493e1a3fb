//! How far an agent may reach without asking: an agent's ceiling caps it, and the runtime's
//! permissions enforce it.

use std::fmt;

use serde::{Deserialize, Serialize};

/// How far the agent may reach without asking.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum PermissionMode {
    /// Reads anywhere; no writes; commands run in a sandbox that can write nowhere.
    ReadOnly,
    /// Writes under the workspace and the temp directories; commands run in a sandbox
    /// that can write only there.
    Workspace,
    /// No limits and no sandbox.
    Full,
}

impl PermissionMode {
    pub const ALL: [PermissionMode; 3] = [
        PermissionMode::ReadOnly,
        PermissionMode::Workspace,
        PermissionMode::Full,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            PermissionMode::ReadOnly => "read-only",
            PermissionMode::Workspace => "workspace",
            PermissionMode::Full => "full",
        }
    }
}

impl fmt::Display for PermissionMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for PermissionMode {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        PermissionMode::ALL
            .into_iter()
            .find(|m| m.as_str() == s)
            .ok_or_else(|| {
                format!("unknown permission mode {s:?}; expected read-only, workspace or full")
            })
    }
}
