//! `read`: a file's text as `LINE|content`, 1-indexed, a page at a time.

use schemars::JsonSchema;
use serde::Deserialize;

use super::{Call, Gate, Tool, ToolContext, ToolError, ToolResult, blocking, cut_middle};
use crate::capabilities::ToolId;
use crate::permissions::Access;

#[derive(Deserialize, JsonSchema)]
pub(super) struct Args {
    /// Absolute path of the file.
    path: String,
    /// First line to return, 1-indexed.
    #[serde(default)]
    #[schemars(range(min = 1))]
    offset: Option<usize>,
    /// Most lines to return.
    #[serde(default)]
    #[schemars(range(min = 1))]
    limit: Option<usize>,
}

pub(super) struct Read;

impl Tool for Read {
    type Args = Args;

    fn name(&self) -> &'static str {
        "read"
    }

    fn gate(&self) -> Gate {
        Gate::Tool(ToolId::Read)
    }

    fn read_only(&self) -> bool {
        true
    }

    fn access(&self, context: &ToolContext, args: &Args) -> Access {
        Access::Read(Some(context.resolve(&args.path)))
    }

    async fn run(&self, call: Call<'_>, args: Args) -> ToolResult {
        blocking(call.context, move |context| run(context, args)).await
    }

    fn replay(&self, context: &ToolContext, args: Args) {
        let path = context.resolve(&args.path);
        context.mark_read(&path);
        // Shown with that read already: not again.
        let _ = context.attach_nested(&path);
    }
}

/// Lines longer than this are shortened: minified files would otherwise eat the budget.
const MAX_LINE_CHARS: usize = 2000;

fn run(context: &ToolContext, args: Args) -> ToolResult {
    let path = context.resolve(&args.path);
    let shown = path.display();
    let meta = std::fs::metadata(&path).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => ToolError::new(format!(
            "{shown} does not exist; use glob to find the file you mean"
        )),
        _ => ToolError::new(format!("cannot read {shown}: {e}")),
    })?;
    if meta.is_dir() {
        return Err(ToolError::new(format!(
            "{shown} is a directory; list it with glob instead"
        )));
    }
    let bytes =
        std::fs::read(&path).map_err(|e| ToolError::new(format!("cannot read {shown}: {e}")))?;
    if bytes[..bytes.len().min(8192)].contains(&0) {
        return Err(ToolError::new(format!(
            "{shown} is a binary file ({} bytes); it cannot be shown as text",
            bytes.len()
        )));
    }
    context.mark_read(&path);
    let text = String::from_utf8_lossy(&bytes);
    if text.is_empty() {
        return Ok(format!("({shown} is empty)"));
    }
    let total = text.lines().count();
    let offset = args.offset.unwrap_or(1).max(1);
    if offset > total {
        return Err(ToolError::new(format!(
            "offset {offset} is past the end of {shown}, which has {total} lines"
        )));
    }
    let limit = args.limit.unwrap_or(context.limits.read_lines).max(1);
    let mut out = String::with_capacity(text.len().min(context.limits.read_bytes) + 64);
    let mut last = offset - 1;
    for (i, line) in text.lines().enumerate().skip(offset - 1).take(limit) {
        last = i + 1;
        out.push_str(&last.to_string());
        out.push('|');
        if line.chars().count() > MAX_LINE_CHARS {
            out.extend(line.chars().take(MAX_LINE_CHARS));
            out.push_str(" … [line shortened]");
        } else {
            out.push_str(line);
        }
        out.push('\n');
    }
    if last < total {
        out.push_str(&format!(
            "(lines {offset}-{last} of {total}; continue with offset={})\n",
            last + 1
        ));
    }
    let mut out = cut_middle(&out, context.limits.read_bytes);
    out.push_str(&context.attach_nested(&path));
    Ok(out)
}
