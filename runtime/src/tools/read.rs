//! `read`: a file's text as `LINE|content`, 1-indexed, a page at a time.

use serde::Deserialize;

use super::{ToolContext, ToolError, ToolResult, cut_middle};

#[derive(Deserialize)]
pub(super) struct Args {
    path: String,
    #[serde(default)]
    offset: Option<usize>,
    #[serde(default)]
    limit: Option<usize>,
}

/// Lines longer than this are shortened: minified files would otherwise eat the budget.
const MAX_LINE_CHARS: usize = 2000;

pub(super) fn run(context: &ToolContext, args: Args) -> ToolResult {
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
    Ok(cut_middle(&out, context.limits.read_bytes))
}
