//! One session's permissions and each agent's view of them: the settings, the rules the
//! user granted, and the check every tool call passes (the order is in [`super`]).

use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};

use crate::sandbox::Sandbox;

use super::rules::first;
use super::{
    Access, Answer, Approval, ApprovalRequest, Approver, Origin, PermissionMode, Permit, Rule,
    Rules,
};

/// The settings one session runs with.
#[derive(Debug, Clone)]
pub struct Settings {
    pub mode: PermissionMode,
    pub mode_origin: Origin,
    pub approval: Approval,
    pub approval_origin: Origin,
    /// Commands (and `web_fetch`) may use the network in `read-only` and `workspace`.
    pub network: bool,
    /// Writable in `workspace` mode besides the workspace: the temp directories and any
    /// `writable_roots` from the config.
    pub writable: Vec<PathBuf>,
    pub rules: Rules,
    /// Files no mode below `full` lets the agent change, e.g. the workspace's own rules.
    pub protected: Vec<PathBuf>,
}

impl Settings {
    /// No limits, for a caller that chooses to run tools unrestricted (tests, benchmarks).
    pub fn unrestricted() -> Settings {
        Settings {
            mode: PermissionMode::Full,
            mode_origin: Origin::Default("an unrestricted tool context"),
            approval: Approval::Never,
            approval_origin: Origin::Default("an unrestricted tool context"),
            network: true,
            writable: Vec::new(),
            rules: Rules::default(),
            protected: Vec::new(),
        }
    }
}

/// One session's permissions, shared by the agent and every helper it starts.
#[derive(Debug)]
pub struct Permissions {
    pub workspace: PathBuf,
    pub settings: Settings,
    pub sandbox: Sandbox,
    approver: Option<Arc<dyn Approver>>,
    /// Rules the user granted with "allow for this session".
    granted: Mutex<Vec<Rule>>,
    /// One question at a time, even when helpers ask at once.
    asking: tokio::sync::Mutex<()>,
}

impl Permissions {
    pub fn new(
        workspace: PathBuf,
        mut settings: Settings,
        sandbox: Sandbox,
        approver: Option<Arc<dyn Approver>>,
    ) -> Permissions {
        settings.rules.sort();
        Permissions {
            workspace,
            settings,
            sandbox,
            approver,
            granted: Mutex::new(Vec::new()),
            asking: tokio::sync::Mutex::new(()),
        }
    }

    /// Adds a rule for the rest of the session.
    pub fn grant(&self, rule: Rule) {
        let mut granted = self.granted.lock().unwrap_or_else(PoisonError::into_inner);
        if !granted.iter().any(|r| r.text == rule.text) {
            granted.push(rule);
        }
    }

    /// The rules granted for this session so far.
    pub fn granted(&self) -> Vec<Rule> {
        self.granted
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Whether calls outside the mode are asked about.
    pub fn asks(&self) -> bool {
        self.settings.approval == Approval::Ask && self.approver.is_some()
    }

    /// The directories a `workspace`-mode write may land in.
    pub fn writable_roots(&self) -> Vec<PathBuf> {
        let mut roots = vec![self.workspace.clone()];
        roots.extend(self.settings.writable.iter().cloned());
        roots
    }
}

/// One agent's permissions: the session's, at a mode no wider than its parent's.
#[derive(Debug, Clone)]
pub struct Policy {
    pub(super) shared: Arc<Permissions>,
    pub(super) mode: PermissionMode,
    /// Where this agent's mode comes from, for messages.
    pub(super) origin: String,
}

impl Policy {
    pub fn new(shared: Arc<Permissions>) -> Policy {
        let settings = &shared.settings;
        Policy {
            mode: settings.mode,
            origin: settings.mode_origin.to_string(),
            shared,
        }
    }

    /// Full access, nothing asked, no sandbox: only where a caller says so.
    pub fn unrestricted(workspace: PathBuf) -> Policy {
        Policy::new(Arc::new(Permissions::new(
            workspace,
            Settings::unrestricted(),
            Sandbox::Unavailable {
                reason: "no sandbox in an unrestricted tool context".to_string(),
            },
            None,
        )))
    }

    pub fn mode(&self) -> PermissionMode {
        self.mode
    }

    /// Where the mode was set, as messages say it.
    pub fn origin(&self) -> &str {
        &self.origin
    }

    pub fn permissions(&self) -> &Arc<Permissions> {
        &self.shared
    }

    /// This policy at most at `ceiling`; `why` says where the ceiling comes from.
    pub fn narrow(&self, ceiling: PermissionMode, why: &str) -> Policy {
        if ceiling >= self.mode {
            return self.clone();
        }
        Policy {
            shared: self.shared.clone(),
            mode: ceiling,
            origin: why.to_string(),
        }
    }

    /// The same policy for a helper started by `parent`.
    pub fn inherited(&self, parent: &str) -> Policy {
        Policy {
            shared: self.shared.clone(),
            mode: self.mode,
            origin: format!("inherited from {parent}, {}", self.origin),
        }
    }

    /// Decides one call. `preview` is asked for only when the user is asked.
    pub async fn check(
        &self,
        tool: &str,
        access: &Access,
        preview: &(dyn Fn() -> Option<String> + Sync),
    ) -> Result<Permit, String> {
        let shared = &self.shared;
        let granted = shared.granted();
        if let Some(rule) = first(&shared.settings.rules.deny, tool, access, true) {
            return Err(format!(
                "refused by the deny rule `{}` ({}). Deny rules win over everything else; do not retry this call, work around it or tell the user what you need.",
                rule.text, rule.origin
            ));
        }
        let why = match self.inside(access) {
            Ok(permit) => return Ok(permit),
            Err(why) => why,
        };
        // Outside the mode: a matching allow rule runs it outside the sandbox.
        let outside = Permit { sandbox: None };
        let allowed = first(&shared.settings.rules.allow, tool, access, false)
            .or_else(|| first(&granted, tool, access, false))
            .cloned();
        if let Some(rule) = allowed {
            if let Some(approver) = &shared.approver {
                approver.tell(&format!(
                    "{tool} allowed by the rule `{}` ({})",
                    rule.text, rule.origin
                ));
            }
            return Ok(outside);
        }
        let session_rule = Rule::exact(tool, access);
        let approver = match (&shared.approver, shared.settings.approval) {
            (Some(approver), Approval::Ask) => approver,
            (_, Approval::Never) | (None, Approval::Ask) => {
                return Err(format!(
                    "refused: {why}, and the approval policy is `never` ({}). Do not retry this call; do what you can within the mode, or tell the user what you need. To allow it, the user can add `{}` to `allow` under [permissions] in config.toml, or change the mode with --permissions.",
                    shared.settings.approval_origin, session_rule.text
                ));
            }
        };
        let request = ApprovalRequest {
            tool: tool.to_string(),
            subject: access.subject().unwrap_or_else(|| tool.to_string()),
            preview: preview(),
            why: why.clone(),
            reason: match access {
                Access::Command { reason, .. } => reason.clone(),
                _ => None,
            },
            session_rule: session_rule.text.clone(),
        };
        let _one_at_a_time = shared.asking.lock().await;
        // An answer given while this call waited may already cover it.
        if first(&shared.granted(), tool, access, false).is_some() {
            return Ok(outside);
        }
        match approver.ask(request).await {
            Answer::Once => Ok(outside),
            Answer::Session => {
                shared.grant(session_rule);
                Ok(outside)
            }
            Answer::Deny(reason) => {
                let reason = reason.trim();
                Err(if reason.is_empty() {
                    format!(
                        "the user denied this call ({why}) and gave no reason. Do not retry it; ask the user or take another way."
                    )
                } else {
                    format!("the user denied this call ({why}). Their reason: {reason}")
                })
            }
        }
    }
}
