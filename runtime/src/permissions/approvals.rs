//! What happens to a call outside the mode: the approval policy, and the question the
//! person at the terminal is asked.

use std::fmt;
use std::future::Future;
use std::pin::Pin;

use serde::{Deserialize, Serialize};

/// What happens to a call outside the mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Approval {
    /// Ask the user: allow once, allow for this session, or deny with a reason.
    Ask,
    /// Refuse it with a tool error that names the rule.
    Never,
}

impl Approval {
    pub fn as_str(self) -> &'static str {
        match self {
            Approval::Ask => "ask",
            Approval::Never => "never",
        }
    }
}

impl fmt::Display for Approval {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for Approval {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "ask" => Ok(Approval::Ask),
            "never" => Ok(Approval::Never),
            _ => Err(format!(
                "unknown approval policy {s:?}; expected ask or never"
            )),
        }
    }
}

/// What the user is asked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApprovalRequest {
    pub tool: String,
    /// The exact command, path or URL.
    pub subject: String,
    /// What the call would change, as a unified diff (`write`, `edit`).
    pub preview: Option<String>,
    /// Why the call is outside the mode.
    pub why: String,
    /// What the model says it needs this for.
    pub reason: Option<String>,
    /// The rule "allow for this session" adds.
    pub session_rule: String,
}

/// The user's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    Once,
    Session,
    /// Denied; the reason (possibly empty) goes to the model.
    Deny(String),
}

type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Asks the person at the terminal about a call outside the mode.
pub trait Approver: Send + Sync + fmt::Debug {
    fn ask(&self, request: ApprovalRequest) -> BoxFuture<'_, Answer>;

    /// Tells the user that a call outside the mode ran, and why it was allowed.
    fn tell(&self, _note: &str) {}
}
