//! Plan mode: the `plan` agent thinks before anything changes.
//!
//! `plan` is mavis with a read-only ceiling: it reads, searches and runs commands in the
//! read-only sandbox, and writes one file, the session's plan
//! (`<workspace>/.agents/plans/<session id>.md`). While it is active, every request ends
//! with a reminder of what it may do, where the plan goes and whether that file exists yet
//! (looked up each time, not once at `/plan`); the reminder is transient, added to each
//! request and never stored, so copies do not pile up turn after turn. On the switch back
//! to building, a one-off reminder says what the model may now do and hands it the plan
//! from the file. The reminder texts come from the pack (`shared/plan_mode.md`,
//! `shared/build_switch.md`); the runtime adds the plan file's path and content.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};

use pack_client::Snapshot;

use crate::reminders::{Injected, Injection, ReminderInput, ReminderProvider};

/// The agent name of plan mode.
pub const PLAN_AGENT: &str = crate::agents::PLAN;
/// The reminder while planning.
pub const PLAN_REMINDER: &str = "shared/plan_mode.md";
/// The reminder on leaving plan mode.
pub const BUILD_REMINDER: &str = "shared/build_switch.md";
/// Where plans are kept, relative to the workspace.
pub const PLAN_DIR: &str = ".agents/plans";
/// Most of a plan file handed to the build phase in the reminder; the rest stays in the
/// file for the model to read.
pub const PLAN_MAX_BYTES: usize = 32 * 1024;

/// The plan file of a session.
pub fn plan_file(workspace: &Path, session_id: &str) -> PathBuf {
    workspace.join(PLAN_DIR).join(format!("{session_id}.md"))
}

/// A reminder text from the snapshot, or from the built-in pack when the snapshot has
/// none (an older pack).
fn text(snapshot: &Snapshot, key: &str) -> String {
    let read = |s: &Snapshot| {
        s.read(key)
            .ok()
            .and_then(|b| std::str::from_utf8(b).ok())
            .map(|t| t.trim().to_string())
    };
    read(snapshot)
        .or_else(|| read(&pack_client::builtin::snapshot()))
        .unwrap_or_default()
}

/// What the model is told while it plans, with the plan file as it is now.
pub fn plan_reminder(snapshot: &Snapshot, plan: &Path) -> String {
    reminder_text(&text(snapshot, PLAN_REMINDER), plan)
}

/// The pack's reminder and where the plan goes. Whether the file exists is looked up each
/// time: the model creates it during plan mode, and later turns must say so.
fn reminder_text(intro: &str, plan: &Path) -> String {
    let state = if plan.exists() {
        "it exists already: read it and improve it rather than starting over"
    } else {
        "it does not exist yet: create it with `write`"
    };
    format!("{intro}\n\nPlan file: {} ({state}).", plan.display())
}

/// What the model is told when building starts: what it may do now, and the plan.
pub fn build_reminder(snapshot: &Snapshot, plan: &Path) -> String {
    let intro = text(snapshot, BUILD_REMINDER);
    match std::fs::read(plan) {
        Ok(bytes) => {
            let full = String::from_utf8_lossy(&bytes);
            let mut end = full.len().min(PLAN_MAX_BYTES);
            while !full.is_char_boundary(end) {
                end -= 1;
            }
            let cut = if end < full.len() {
                format!(
                    "\n[the plan continues for {} more bytes: read the file for the rest]",
                    full.len() - end
                )
            } else {
                String::new()
            };
            format!(
                "{intro}\n\nThe plan, from {}:\n<plan>\n{}\n</plan>{cut}",
                plan.display(),
                full[..end].trim()
            )
        }
        Err(_) => format!(
            "{intro}\n\nNo plan was written to {}; work from the conversation.",
            plan.display()
        ),
    }
}

/// Whether plan mode is on, shared by the session and its reminder provider.
#[derive(Debug, Clone, Default)]
pub struct PlanState {
    inner: Arc<Mutex<Inner>>,
}

#[derive(Debug, Default)]
struct Inner {
    /// `None` when building.
    active: Option<Active>,
}

#[derive(Debug)]
struct Active {
    /// The pack's reminder text, as it was when plan mode started.
    intro: String,
    file: PathBuf,
}

impl PlanState {
    /// Turns plan mode on, with the reminder from `snapshot` and the plan file `plan`.
    pub fn enter(&self, snapshot: &Snapshot, plan: &Path) {
        self.inner
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .active = Some(Active {
            intro: text(snapshot, PLAN_REMINDER),
            file: plan.to_path_buf(),
        });
    }

    pub fn leave(&self) {
        self.inner
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .active = None;
    }

    pub fn active(&self) -> bool {
        self.inner
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .active
            .is_some()
    }

    /// The provider that states plan mode in every request while it is on.
    pub fn reminder_provider(&self) -> Box<dyn ReminderProvider> {
        Box::new(PlanReminder {
            state: self.clone(),
        })
    }
}

#[derive(Debug)]
struct PlanReminder {
    state: PlanState,
}

impl ReminderProvider for PlanReminder {
    fn name(&self) -> &'static str {
        "plan_mode"
    }

    fn provide(&self, _input: &ReminderInput<'_>, _last: Option<&Injected>) -> Option<Injection> {
        let inner = self
            .state
            .inner
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let active = inner.active.as_ref()?;
        Some(Injection::Full(reminder_text(&active.intro, &active.file)))
    }

    fn transient(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_reminder_is_in_every_request_and_never_stored() {
        let dir = tempfile::tempdir().unwrap();
        let snapshot = pack_client::builtin::snapshot();
        let state = PlanState::default();
        let mut reminders = crate::reminders::Reminders::default();
        reminders.register(state.reminder_provider());
        assert!(reminders.transient(&[]).is_empty());
        state.enter(&snapshot, &plan_file(dir.path(), "s1"));
        for first in [true, false, false, true] {
            assert!(
                reminders.before_step(first, &[], &[]).is_empty(),
                "nothing goes into the conversation"
            );
            let request = reminders.transient(&[]);
            assert!(
                request.len() == 1 && request[0].contains("Plan file: "),
                "{request:?}"
            );
        }
        state.leave();
        assert!(reminders.transient(&[]).is_empty());
    }

    #[test]
    fn a_later_request_says_the_plan_exists_once_it_was_written() {
        let dir = tempfile::tempdir().unwrap();
        let plan = plan_file(dir.path(), "s1");
        let state = PlanState::default();
        let mut reminders = crate::reminders::Reminders::default();
        reminders.register(state.reminder_provider());
        state.enter(&pack_client::builtin::snapshot(), &plan);
        let first = reminders.transient(&[]).join("\n");
        assert!(first.contains("does not exist yet"), "{first}");
        std::fs::create_dir_all(plan.parent().unwrap()).unwrap();
        std::fs::write(&plan, "1. read the code\n").unwrap();
        let next = reminders.transient(&[]).join("\n");
        assert!(
            next.contains("it exists already") && !next.contains("does not exist"),
            "{next}"
        );
    }

    #[test]
    fn the_build_phase_gets_the_plan() {
        let dir = tempfile::tempdir().unwrap();
        let plan = plan_file(dir.path(), "s1");
        let snapshot = pack_client::builtin::snapshot();
        assert!(build_reminder(&snapshot, &plan).contains("No plan was written"));
        std::fs::create_dir_all(plan.parent().unwrap()).unwrap();
        std::fs::write(&plan, "1. change a\n2. test b\n").unwrap();
        let text = build_reminder(&snapshot, &plan);
        assert!(
            text.contains("<plan>\n1. change a\n2. test b\n</plan>"),
            "{text}"
        );
        std::fs::write(&plan, "x".repeat(PLAN_MAX_BYTES + 10)).unwrap();
        assert!(build_reminder(&snapshot, &plan).contains("10 more bytes"));
    }
}
