//! `todowrite`: the session's task list, replaced whole on every call.

use serde::{Deserialize, Serialize};

use super::{ToolContext, ToolResult};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TodoStatus {
    Pending,
    InProgress,
    Done,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TodoItem {
    pub text: String,
    pub status: TodoStatus,
}

#[derive(Deserialize)]
pub(super) struct Args {
    pub(super) items: Vec<TodoItem>,
}

pub(super) fn run(context: &ToolContext, args: Args) -> ToolResult {
    let mut out = String::new();
    for item in &args.items {
        let mark = match item.status {
            TodoStatus::Pending => "[ ]",
            TodoStatus::InProgress => "[~]",
            TodoStatus::Done => "[x]",
        };
        out.push_str(&format!("{mark} {}\n", item.text));
    }
    let in_progress = args
        .items
        .iter()
        .filter(|i| i.status == TodoStatus::InProgress)
        .count();
    if in_progress > 1 {
        out.push_str(&format!(
            "note: {in_progress} items are in_progress; keep exactly one in progress\n"
        ));
    }
    if args.items.is_empty() {
        out.push_str("(the task list is empty)\n");
    }
    *context.todos.lock().unwrap() = args.items;
    Ok(out)
}
