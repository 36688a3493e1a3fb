//! `todowrite`: the session's task list, replaced whole on every call.

use std::sync::PoisonError;

use schemars::JsonSchema;
use serde::Deserialize;

use super::{Call, Gate, Tool, ToolContext, ToolResult, blocking};
use crate::capabilities::ToolId;
use crate::permissions::Access;
use crate::todo_list::{TodoItem, TodoStatus};

#[derive(Deserialize, JsonSchema)]
pub(super) struct Args {
    /// The whole task list, replacing the previous one.
    items: Vec<TodoItem>,
}

pub(super) struct TodoWrite;

impl Tool for TodoWrite {
    type Args = Args;

    fn name(&self) -> &'static str {
        "todowrite"
    }

    fn gate(&self) -> Gate {
        Gate::Tool(ToolId::Todowrite)
    }

    fn read_only(&self) -> bool {
        false
    }

    fn access(&self, _context: &ToolContext, _args: &Args) -> Access {
        Access::Own
    }

    async fn run(&self, call: Call<'_>, args: Args) -> ToolResult {
        blocking(call.context, move |context| run(context, args)).await
    }

    fn replay(&self, context: &ToolContext, args: Args) {
        *context.todos.lock().unwrap_or_else(PoisonError::into_inner) = args.items;
    }
}

fn run(context: &ToolContext, args: Args) -> ToolResult {
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
    *context.todos.lock().unwrap_or_else(PoisonError::into_inner) = args.items;
    Ok(out)
}
