//! Prompt modes: which variant of the orchestrator's system template a session uses.

use serde::{Deserialize, Serialize};

/// The orchestrator's prompt variant. Subagents have one template for every mode.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PromptMode {
    /// The terminal session (the default).
    #[default]
    Tui,
    /// Software engineering in a desktop workspace.
    Coding,
    /// General work that ends in delivered artifacts.
    Work,
}

impl PromptMode {
    pub const ALL: [PromptMode; 3] = [PromptMode::Tui, PromptMode::Coding, PromptMode::Work];

    pub fn as_str(self) -> &'static str {
        match self {
            PromptMode::Tui => "tui",
            PromptMode::Coding => "coding",
            PromptMode::Work => "work",
        }
    }
}

impl std::fmt::Display for PromptMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for PromptMode {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        PromptMode::ALL
            .into_iter()
            .find(|mode| mode.as_str() == s)
            .ok_or_else(|| format!("unknown prompt mode {s:?}; expected tui, coding or work"))
    }
}
