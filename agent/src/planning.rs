//! Plan mode in the binary: `/plan` and `/build` in the interactive session, and
//! `agent exec --agent plan`.

use std::path::PathBuf;

use agent_runtime::permissions::{PermissionMode, Rule};
use agent_runtime::plan::{self, PlanState};

use crate::host::{Host, Session};

/// Why the plan file may be written in plan mode, as rule messages say it.
const WHY: &str = "the plan file of plan mode";

/// Plan mode of one session.
pub struct Planning {
    pub state: PlanState,
    pub file: PathBuf,
}

impl Planning {
    pub fn new(session: &Session) -> Planning {
        Planning {
            state: PlanState::default(),
            file: plan::plan_file(&session.header.cwd, &session.header.id),
        }
    }

    /// Turns plan mode on: the reminder for every turn, and the plan file writable when
    /// the session's mode allows writes in the workspace at all (in a `read-only` session
    /// writing the plan is asked about like any other write).
    pub fn enter(&self, host: &Host, session: &Session) {
        let policy = &session.tools.policy;
        if policy.mode() >= PermissionMode::Workspace {
            for tool in ["write", "edit"] {
                policy
                    .permissions()
                    .grant(Rule::runtime_path(tool, &self.file, WHY));
            }
        }
        let snapshot = host.packs.store().capture();
        self.state.enter(&snapshot, &self.file);
    }

    /// Turns plan mode off and returns the reminder that hands the plan to the build phase.
    pub fn leave(&self, host: &Host) -> String {
        self.state.leave();
        let snapshot = host.packs.store().capture();
        plan::build_reminder(&snapshot, &self.file)
    }
}
