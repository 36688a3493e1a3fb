//! Reminders: short blocks the runtime adds to the conversation before a model call,
//! wrapped in `<system-reminder>` so the model can tell harness facts from user words.
//!
//! Named providers are asked before every step. Each sees what it injected last (when and
//! whether in full) and answers with the full text, a short one, or nothing, so a fact is
//! restated when it matters and not on every step. One-off notices go out once. At the
//! start of a turn, a change in the tool set is announced as tools added and removed.
//! Reminders mirror current state, so compaction may drop them: afterwards everything is
//! re-armed and the next step restates it in full.
//!
//! A provider may instead be *transient* ([`ReminderProvider::transient`]): its block is
//! added to every request while it has something to say, and never stored in the
//! conversation or the transcript. A state that holds for many turns (plan mode) is then
//! said once per request, not once more per turn, and a resumed session carries no copies.

use std::collections::BTreeMap;

use crate::todo_list::{TodoItem, TodoStatus};

/// The tag around every reminder.
pub const REMINDER_OPEN: &str = "<system-reminder>";
pub const REMINDER_CLOSE: &str = "</system-reminder>";

/// Whether a user message is a reminder (as opposed to something the user said).
pub fn is_reminder(content: &str) -> bool {
    content.starts_with(REMINDER_OPEN)
}

/// What a provider wants injected this step.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Injection {
    Full(String),
    Short(String),
}

/// What a provider injected last.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Injected {
    pub step: u64,
    pub full: bool,
    pub text: String,
}

/// What providers can look at.
#[derive(Debug)]
pub struct ReminderInput<'a> {
    /// The first step of a user turn, or the first step after compaction.
    pub new_turn: bool,
    /// Steps since the session started.
    pub step: u64,
    pub todos: &'a [TodoItem],
}

/// A named source of reminders.
pub trait ReminderProvider: Send + Sync + std::fmt::Debug {
    fn name(&self) -> &'static str;
    fn provide(&self, input: &ReminderInput<'_>, last: Option<&Injected>) -> Option<Injection>;
    /// Whether the block goes only into each request ([`Reminders::transient`]) rather
    /// than into the conversation ([`Reminders::before_step`]).
    fn transient(&self) -> bool {
        false
    }
}

/// Keeps the open items of the task list in view: in full at the start of a turn or when
/// it changed, briefly when it has not been mentioned for a while.
#[derive(Debug)]
pub struct TodoReminder {
    /// Steps without any mention before a short reminder.
    pub every: u64,
}

impl ReminderProvider for TodoReminder {
    fn name(&self) -> &'static str {
        "todo_list"
    }

    fn provide(&self, input: &ReminderInput<'_>, last: Option<&Injected>) -> Option<Injection> {
        let open: Vec<&TodoItem> = input
            .todos
            .iter()
            .filter(|t| t.status != TodoStatus::Done)
            .collect();
        if open.is_empty() {
            return None;
        }
        let mut full = String::from("Your task list has open items:\n");
        for item in input.todos {
            let mark = match item.status {
                TodoStatus::Pending => "[ ]",
                TodoStatus::InProgress => "[~]",
                TodoStatus::Done => "[x]",
            };
            full.push_str(&format!("{mark} {}\n", item.text));
        }
        full.push_str("Keep it current with todowrite as you work.");
        let changed = last.is_none_or(|l| l.full && l.text != full);
        if input.new_turn || changed {
            return Some(Injection::Full(full));
        }
        let last = last?;
        if input.step.saturating_sub(last.step) >= self.every {
            let doing = open
                .iter()
                .find(|t| t.status == TodoStatus::InProgress)
                .map_or(String::new(), |t| format!("; in progress: {}", t.text));
            return Some(Injection::Short(format!(
                "{} open task-list items{doing}.",
                open.len()
            )));
        }
        None
    }
}

/// The reminder service of one session.
#[derive(Debug)]
pub struct Reminders {
    providers: Vec<Box<dyn ReminderProvider>>,
    last: BTreeMap<&'static str, Injected>,
    notices: Vec<String>,
    /// The tools the model was last told about; `None` until the first turn.
    announced: Option<Vec<String>>,
    rearmed: bool,
    step: u64,
}

impl Default for Reminders {
    fn default() -> Self {
        Reminders {
            providers: vec![Box::new(TodoReminder { every: 5 })],
            last: BTreeMap::new(),
            notices: Vec::new(),
            announced: None,
            rearmed: false,
            step: 0,
        }
    }
}

impl Reminders {
    pub fn register(&mut self, provider: Box<dyn ReminderProvider>) {
        self.providers.push(provider);
    }

    /// A one-off notice, injected at the next step.
    pub fn notify(&mut self, text: impl Into<String>) {
        self.notices.push(text.into());
    }

    /// After compaction: forget what was injected, so the next step restates it all.
    pub fn rearm(&mut self) {
        self.last.clear();
        self.rearmed = true;
    }

    /// The reminder blocks for this step, each a complete `<system-reminder>` block.
    pub fn before_step(
        &mut self,
        first_step_of_turn: bool,
        todos: &[TodoItem],
        tools: &[&str],
    ) -> Vec<String> {
        self.step += 1;
        let new_turn = first_step_of_turn || std::mem::take(&mut self.rearmed);
        let mut blocks = Vec::new();
        if first_step_of_turn {
            let current: Vec<String> = tools.iter().map(|t| t.to_string()).collect();
            if let Some(before) = &self.announced {
                let added: Vec<&str> = current
                    .iter()
                    .filter(|t| !before.contains(t))
                    .map(String::as_str)
                    .collect();
                let removed: Vec<&str> = before
                    .iter()
                    .filter(|t| !current.contains(t))
                    .map(String::as_str)
                    .collect();
                if !added.is_empty() || !removed.is_empty() {
                    let mut text = String::from("Your tools changed since the last turn.");
                    if !added.is_empty() {
                        text.push_str(&format!(
                            "\n<tools_added>{}</tools_added>",
                            added.join(", ")
                        ));
                    }
                    if !removed.is_empty() {
                        text.push_str(&format!(
                            "\n<tools_removed>{}</tools_removed>",
                            removed.join(", ")
                        ));
                    }
                    blocks.push(text);
                }
            }
            self.announced = Some(current);
        }
        let input = ReminderInput {
            new_turn,
            step: self.step,
            todos,
        };
        for provider in self.providers.iter().filter(|p| !p.transient()) {
            let name = provider.name();
            let Some(injection) = provider.provide(&input, self.last.get(name)) else {
                continue;
            };
            let (full, text) = match injection {
                Injection::Full(text) => (true, text),
                Injection::Short(text) => (false, text),
            };
            blocks.push(text.clone());
            self.last.insert(
                name,
                Injected {
                    step: self.step,
                    full,
                    text,
                },
            );
        }
        blocks.append(&mut self.notices);
        blocks.into_iter().map(|text| wrap(&text)).collect()
    }

    /// The transient providers' blocks for the request about to be sent: each in full,
    /// for the caller to add to that request only.
    pub fn transient(&self, todos: &[TodoItem]) -> Vec<String> {
        let input = ReminderInput {
            new_turn: true,
            step: self.step,
            todos,
        };
        self.providers
            .iter()
            .filter(|p| p.transient())
            .filter_map(|p| p.provide(&input, None))
            .map(|injection| match injection {
                Injection::Full(text) | Injection::Short(text) => wrap(&text),
            })
            .collect()
    }
}

fn wrap(text: &str) -> String {
    format!("{REMINDER_OPEN}\n{}\n{REMINDER_CLOSE}", text.trim())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn todo(text: &str, status: TodoStatus) -> TodoItem {
        TodoItem {
            text: text.into(),
            status,
        }
    }

    #[test]
    fn full_then_quiet_then_short_then_full_after_rearm() {
        let mut r = Reminders::default();
        let todos = [
            todo("a", TodoStatus::InProgress),
            todo("b", TodoStatus::Pending),
        ];
        let first = r.before_step(true, &todos, &["read"]);
        assert_eq!(first.len(), 1);
        assert!(first[0].contains("[~] a") && first[0].starts_with(REMINDER_OPEN));
        for _ in 0..4 {
            assert!(r.before_step(false, &todos, &["read"]).is_empty());
        }
        let short = r.before_step(false, &todos, &["read"]);
        assert!(
            short[0].contains("2 open task-list items; in progress: a"),
            "{short:?}"
        );
        assert!(r.before_step(false, &todos, &["read"]).is_empty());
        r.rearm();
        assert!(r.before_step(false, &todos, &["read"])[0].contains("[ ] b"));
    }

    #[test]
    fn tool_changes_are_announced_at_the_start_of_a_turn() {
        let mut r = Reminders::default();
        assert!(r.before_step(true, &[], &["read", "bash"]).is_empty());
        assert!(r.before_step(false, &[], &["read"]).is_empty());
        let turn = r.before_step(true, &[], &["read", "skill"]);
        assert_eq!(turn.len(), 1);
        assert!(turn[0].contains("<tools_added>skill</tools_added>"));
        assert!(turn[0].contains("<tools_removed>bash</tools_removed>"));
        r.notify("pack updated");
        let next = r.before_step(false, &[], &["read", "skill"]);
        assert_eq!(next.len(), 1);
        assert!(next[0].contains("pack updated"));
        assert!(r.before_step(false, &[], &["read", "skill"]).is_empty());
    }
}
