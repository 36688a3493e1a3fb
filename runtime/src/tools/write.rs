//! `write`: a whole file, creating missing parent directories.

use schemars::JsonSchema;
use serde::Deserialize;

use super::{Call, Gate, Tool, ToolContext, ToolError, ToolResult, blocking};
use crate::capabilities::ToolId;
use crate::permissions::Access;

#[derive(Deserialize, JsonSchema)]
pub(super) struct Args {
    /// Absolute path of the file.
    path: String,
    /// The whole new text of the file.
    content: String,
}

pub(super) struct Write;

impl Tool for Write {
    type Args = Args;

    fn name(&self) -> &'static str {
        "write"
    }

    fn gate(&self) -> Gate {
        Gate::Tool(ToolId::Write)
    }

    fn read_only(&self) -> bool {
        false
    }

    fn access(&self, context: &ToolContext, args: &Args) -> Access {
        Access::Write(context.resolve(&args.path))
    }

    fn preview(&self, context: &ToolContext, args: &Args) -> Option<String> {
        let path = context.resolve(&args.path);
        let current = std::fs::read_to_string(&path).unwrap_or_default();
        Some(super::diff(&path, &current, &args.content))
    }

    async fn run(&self, call: Call<'_>, args: Args) -> ToolResult {
        blocking(call.context, move |context| run(context, args)).await
    }

    fn replay(&self, context: &ToolContext, args: Args) {
        let path = context.resolve(&args.path);
        context.mark_read(&path);
        context.mark_written(&path);
    }
}

fn run(context: &ToolContext, args: Args) -> ToolResult {
    let path = context.resolve(&args.path);
    if let Some(protected) = &context.protected
        && protected.path == path
    {
        let target = &protected.divert_to;
        std::fs::write(target, &args.content)
            .map_err(|e| ToolError::new(format!("cannot save the proposal: {e}")))?;
        return Ok(format!(
            "Saved as a proposal: {} is left unchanged and the user will see your version as a diff against it.",
            path.display()
        ));
    }
    let shown = path.display();
    // `read` shows every line as `N|text`; small models copy those numbers into the file.
    // Text that has them on every line is almost surely such a copy, so it is refused
    // rather than written: nothing is lost, and the model can send it again without them.
    if args.content.lines().any(|l| !l.trim().is_empty())
        && super::edit::strip_line_numbers(&args.content).is_some()
    {
        return Err(ToolError::new(format!(
            "not written: every line of the content starts with a line-number prefix like `1|`, as `read` shows lines. Those numbers are not part of the file; send the content again without them. {shown} is unchanged."
        )));
    }
    let existed = path.exists();
    if path.is_dir() {
        return Err(ToolError::new(format!("{shown} is a directory")));
    }
    if existed && !context.was_read(&path) {
        return Err(ToolError::new(format!(
            "{shown} already exists and has not been read in this session; read it first so its current content is not lost by accident"
        )));
    }
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent)
            .map_err(|e| ToolError::new(format!("cannot create {}: {e}", parent.display())))?;
    }
    std::fs::write(&path, &args.content)
        .map_err(|e| ToolError::new(format!("cannot write {shown}: {e}")))?;
    context.mark_read(&path);
    context.mark_written(&path);
    let lines = args.content.lines().count();
    let verb = if existed { "Replaced" } else { "Created" };
    Ok(format!(
        "{verb} {shown} ({} bytes, {lines} lines)",
        args.content.len()
    ))
}
