//! `edit`: replace one unique piece of a file.
//!
//! Models copy text imperfectly — wrong line endings, lost indentation, line numbers from
//! `read` — so matching tries four levels, strictest first, and stops at the first level
//! with any match:
//! 1. exact;
//! 2. newline-normalised (CRLF and CR read as LF);
//! 3. whitespace-insensitive (all whitespace ignored on both sides);
//! 4. line by line (each line trimmed, `N|` prefixes from `read` dropped, blank lines at
//!    the ends ignored), re-indenting the replacement to the file's indentation.
//!
//! At that level the match must be unique (unless `replace_all`); several matches are an
//! error naming the lines. A CRLF file stays CRLF.

use std::ops::Range;

use schemars::JsonSchema;
use serde::Deserialize;

use super::{Call, Gate, Tool, ToolContext, ToolError, ToolResult, blocking};
use crate::capabilities::ToolId;
use crate::permissions::Access;

#[derive(Deserialize, JsonSchema)]
pub(super) struct Args {
    /// Absolute path of the file.
    path: String,
    /// The text to replace; must match exactly one place.
    old_text: String,
    /// The replacement.
    new_text: String,
    /// Replace every match instead of exactly one.
    #[serde(default)]
    replace_all: bool,
}

/// How the old text was found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MatchLevel {
    Exact,
    Newlines,
    Whitespace,
    Lines,
}

impl MatchLevel {
    fn note(self) -> &'static str {
        match self {
            MatchLevel::Exact => "",
            MatchLevel::Newlines => " (matched after normalising line endings)",
            MatchLevel::Whitespace => " (matched ignoring whitespace)",
            MatchLevel::Lines => " (matched line by line, ignoring indentation)",
        }
    }
}

/// A successful edit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EditOutcome {
    pub text: String,
    pub level: MatchLevel,
    pub replaced: usize,
    /// 1-indexed line of the first replacement in the new text.
    pub first_line: usize,
}

/// Applies one edit to `original`. Errors are written for the model.
pub fn apply_edit(
    original: &str,
    old: &str,
    new: &str,
    replace_all: bool,
) -> Result<EditOutcome, String> {
    if old.is_empty() {
        return Err("old_text is empty; to create or replace a whole file use write".into());
    }
    let crlf = original.contains("\r\n");
    let to_file_endings = |text: &str| {
        let lf = normalise(text);
        if crlf { lf.replace('\n', "\r\n") } else { lf }
    };

    let exact = find_all(original, old);
    if !exact.is_empty() {
        let replacement = if crlf {
            to_file_endings(new)
        } else {
            new.to_string()
        };
        let edits: Vec<(Range<usize>, String)> = exact
            .into_iter()
            .map(|r| (r, replacement.clone()))
            .collect();
        return finish(original, edits, replace_all, MatchLevel::Exact, |t| t);
    }

    let text = normalise(original);
    let old_n = normalise(old);
    let new_n = normalise(new);
    let back = |result: String| {
        if crlf {
            result.replace('\n', "\r\n")
        } else {
            result
        }
    };
    let found = find_all(&text, &old_n);
    if !found.is_empty() {
        let edits = found.into_iter().map(|r| (r, new_n.clone())).collect();
        return finish(&text, edits, replace_all, MatchLevel::Newlines, back);
    }
    let found = find_ignoring_whitespace(&text, &old_n);
    if !found.is_empty() {
        let edits = found.into_iter().map(|r| (r, new_n.clone())).collect();
        return finish(&text, edits, replace_all, MatchLevel::Whitespace, back);
    }
    let found = find_lines(&text, &old_n, &new_n);
    if !found.is_empty() {
        return finish(&text, found, replace_all, MatchLevel::Lines, back);
    }
    Err(not_found_hint(&text, &old_n))
}

fn finish(
    text: &str,
    mut edits: Vec<(Range<usize>, String)>,
    replace_all: bool,
    level: MatchLevel,
    back: impl Fn(String) -> String,
) -> Result<EditOutcome, String> {
    if edits.len() > 1 && !replace_all {
        let lines: Vec<String> = edits
            .iter()
            .take(20)
            .map(|(r, _)| line_of(text, r.start).to_string())
            .collect();
        return Err(format!(
            "old_text matches {} places{} (lines {}); include more surrounding lines so it matches exactly one, or set replace_all to change them all",
            edits.len(),
            level.note(),
            lines.join(", ")
        ));
    }
    let first_line = line_of(text, edits[0].0.start);
    let replaced = edits.len();
    let mut out = text.to_string();
    edits.sort_by_key(|(r, _)| std::cmp::Reverse(r.start));
    for (range, replacement) in edits {
        out.replace_range(range, &replacement);
    }
    Ok(EditOutcome {
        text: back(out),
        level,
        replaced,
        first_line,
    })
}

fn normalise(text: &str) -> String {
    text.replace("\r\n", "\n").replace('\r', "\n")
}

fn line_of(text: &str, byte: usize) -> usize {
    text[..byte].matches('\n').count() + 1
}

fn find_all(text: &str, needle: &str) -> Vec<Range<usize>> {
    text.match_indices(needle)
        .map(|(at, m)| at..at + m.len())
        .collect()
}

/// Matches with every whitespace character removed from both sides, mapped back to byte
/// ranges of `text` from the first to the last matched character.
fn find_ignoring_whitespace(text: &str, old: &str) -> Vec<Range<usize>> {
    let needle: String = old.chars().filter(|c| !c.is_whitespace()).collect();
    if needle.is_empty() {
        return Vec::new();
    }
    let mut squeezed = String::with_capacity(text.len());
    // For each byte of `squeezed`: where its character starts and ends in `text`.
    let mut starts = Vec::with_capacity(text.len());
    let mut ends = Vec::with_capacity(text.len());
    for (at, c) in text.char_indices() {
        if c.is_whitespace() {
            continue;
        }
        squeezed.push(c);
        for _ in 0..c.len_utf8() {
            starts.push(at);
            ends.push(at + c.len_utf8());
        }
    }
    squeezed
        .match_indices(&needle)
        .map(|(at, m)| starts[at]..ends[at + m.len() - 1])
        .collect()
}

/// Drops `N|` prefixes when every non-blank line has one (text copied from `read`).
pub(super) fn strip_line_numbers(text: &str) -> Option<String> {
    let prefix = |line: &str| {
        let t = line.trim_start();
        let digits = t.bytes().take_while(u8::is_ascii_digit).count();
        (digits > 0 && t[digits..].starts_with('|')).then(|| line.len() - t.len() + digits + 1)
    };
    let lines: Vec<&str> = text.lines().collect();
    if !lines
        .iter()
        .filter(|l| !l.trim().is_empty())
        .all(|l| prefix(l).is_some())
    {
        return None;
    }
    Some(
        lines
            .iter()
            .map(|l| prefix(l).map_or(*l, |n| &l[n..]))
            .collect::<Vec<_>>()
            .join("\n"),
    )
}

fn indent(line: &str) -> &str {
    &line[..line.len() - line.trim_start().len()]
}

/// Windows of whole lines equal to `old` line by line once trimmed. Each match comes with
/// its replacement: `new` with the indentation `old` had swapped for the file's.
fn find_lines(text: &str, old: &str, new: &str) -> Vec<(Range<usize>, String)> {
    let old = strip_line_numbers(old).unwrap_or_else(|| old.to_string());
    let new = strip_line_numbers(new).unwrap_or_else(|| new.to_string());
    let old_lines: Vec<&str> = {
        let all: Vec<&str> = old.lines().collect();
        let first = all.iter().position(|l| !l.trim().is_empty());
        let last = all.iter().rposition(|l| !l.trim().is_empty());
        match (first, last) {
            (Some(first), Some(last)) => all[first..=last].to_vec(),
            _ => return Vec::new(),
        }
    };
    // Byte range of every line of the file, without its newline.
    let mut lines: Vec<Range<usize>> = Vec::new();
    let mut start = 0;
    for line in text.split('\n') {
        lines.push(start..start + line.len());
        start += line.len() + 1;
    }
    let old_indent = indent(old_lines[0]);
    let mut out = Vec::new();
    let mut i = 0;
    while i + old_lines.len() <= lines.len() {
        let window = &lines[i..i + old_lines.len()];
        let same = window
            .iter()
            .zip(&old_lines)
            .all(|(range, old)| text[range.clone()].trim() == old.trim());
        if !same {
            i += 1;
            continue;
        }
        let file_indent = indent(&text[window[0].clone()]);
        let replacement: Vec<String> = new
            .lines()
            .map(|line| {
                if line.trim().is_empty() {
                    String::new()
                } else if let Some(rest) = line.strip_prefix(old_indent) {
                    format!("{file_indent}{rest}")
                } else {
                    line.to_string()
                }
            })
            .collect();
        out.push((
            window[0].start..window[window.len() - 1].end,
            replacement.join("\n"),
        ));
        i += old_lines.len();
    }
    out
}

/// The no-match error, with the lines where the first line of `old` appears, if any.
fn not_found_hint(text: &str, old: &str) -> String {
    let mut message = "old_text was not found, even ignoring line endings, whitespace and indentation; read the file again and copy the text exactly".to_string();
    let first = strip_line_numbers(old).unwrap_or_else(|| old.to_string());
    if let Some(first) = first.lines().map(str::trim).find(|l| !l.is_empty()) {
        let near: Vec<String> = text
            .lines()
            .enumerate()
            .filter(|(_, l)| l.contains(first))
            .take(5)
            .map(|(i, _)| (i + 1).to_string())
            .collect();
        if !near.is_empty() {
            message.push_str(&format!(
                ". Its first line appears on line {}, but the lines after it differ",
                near.join(", ")
            ));
        }
    }
    message
}

pub(super) struct Edit;

impl Tool for Edit {
    type Args = Args;

    fn name(&self) -> &'static str {
        "edit"
    }

    fn gate(&self) -> Gate {
        Gate::Tool(ToolId::Edit)
    }

    fn read_only(&self) -> bool {
        false
    }

    fn access(&self, context: &ToolContext, args: &Args) -> Access {
        Access::Write(context.resolve(&args.path))
    }

    fn preview(&self, context: &ToolContext, args: &Args) -> Option<String> {
        let path = context.resolve(&args.path);
        let current = std::fs::read_to_string(&path).ok()?;
        match apply_edit(&current, &args.old_text, &args.new_text, args.replace_all) {
            Ok(outcome) => Some(super::diff(&path, &current, &outcome.text)),
            Err(e) => Some(format!("(the edit does not apply as written: {e})")),
        }
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
    let shown = path.display();
    if context.protected.as_ref().is_some_and(|p| p.path == path) {
        return Err(ToolError::new(format!(
            "{shown} must not be changed in place in this run; write your whole proposed version with `write` and the user will see it as a diff"
        )));
    }
    if !path.is_file() {
        return Err(ToolError::new(format!(
            "{shown} does not exist or is not a file; use write to create a file"
        )));
    }
    if !context.was_read(&path) {
        return Err(ToolError::new(format!(
            "{shown} has not been read in this session; read it first so the edit is based on its current text"
        )));
    }
    let bytes =
        std::fs::read(&path).map_err(|e| ToolError::new(format!("cannot read {shown}: {e}")))?;
    let original = String::from_utf8(bytes)
        .map_err(|_| ToolError::new(format!("{shown} is not UTF-8 text; it cannot be edited")))?;
    let outcome = apply_edit(&original, &args.old_text, &args.new_text, args.replace_all)
        .map_err(|e| ToolError::new(format!("{shown}: {e}")))?;
    std::fs::write(&path, &outcome.text)
        .map_err(|e| ToolError::new(format!("cannot write {shown}: {e}")))?;
    context.mark_written(&path);
    // Show the changed region so the model can check it without another read.
    let lines: Vec<&str> = outcome.text.lines().collect();
    let from = outcome.first_line.saturating_sub(3);
    let to = (outcome.first_line + args.new_text.lines().count() + 2).min(lines.len());
    let mut snippet = String::new();
    for (i, line) in lines.iter().enumerate().take(to).skip(from) {
        snippet.push_str(&format!("{}|{line}\n", i + 1));
    }
    let plural = if outcome.replaced == 1 { "" } else { "s" };
    Ok(format!(
        "Edited {shown}: replaced {} occurrence{plural}{}.\n{snippet}",
        outcome.replaced,
        outcome.level.note()
    ))
}
