//! `record_note` and `recall_notes`: short facts the agent keeps for later sessions in the
//! same workspace, in `<data_dir>/notes/<workspace key>.json`.

use std::path::{Path, PathBuf};

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{Call, Gate, Tool, ToolContext, ToolError, ToolResult, blocking};
use crate::permissions::Access;

/// Notes beyond this many are dropped oldest first, so the file stays small.
const MAX_NOTES: usize = 500;
const MAX_NOTE_BYTES: usize = 4000;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Note {
    pub at: String,
    pub category: String,
    pub content: String,
}

#[derive(Deserialize, JsonSchema)]
pub(super) struct RecordArgs {
    /// The fact to keep, in one or two sentences.
    content: String,
    /// A short label such as build, convention or decision (default general).
    #[serde(default)]
    category: Option<String>,
}

#[derive(Deserialize, JsonSchema)]
pub(super) struct RecallArgs {
    /// Only notes with this label.
    #[serde(default)]
    category: Option<String>,
}

pub(super) struct RecordNote;

impl Tool for RecordNote {
    type Args = RecordArgs;

    fn name(&self) -> &'static str {
        "record_note"
    }

    fn gate(&self) -> Gate {
        Gate::Notes
    }

    fn read_only(&self) -> bool {
        false
    }

    fn access(&self, _context: &ToolContext, _args: &RecordArgs) -> Access {
        Access::Own
    }

    async fn run(&self, call: Call<'_>, args: RecordArgs) -> ToolResult {
        let Some(file) = call.context.notes_file.clone() else {
            return Err(ToolError::new("notes are not available in this session"));
        };
        blocking(call.context, move |_| record(&file, args)).await
    }
}

pub(super) struct RecallNotes;

impl Tool for RecallNotes {
    type Args = RecallArgs;

    fn name(&self) -> &'static str {
        "recall_notes"
    }

    fn gate(&self) -> Gate {
        Gate::Notes
    }

    fn read_only(&self) -> bool {
        true
    }

    fn access(&self, _context: &ToolContext, _args: &RecallArgs) -> Access {
        Access::Own
    }

    async fn run(&self, call: Call<'_>, args: RecallArgs) -> ToolResult {
        let Some(file) = call.context.notes_file.clone() else {
            return Err(ToolError::new("notes are not available in this session"));
        };
        blocking(call.context, move |_| recall(&file, args)).await
    }
}

/// The notes file of `workspace`: one per workspace path.
pub fn notes_file(data_dir: &Path, workspace: &Path) -> PathBuf {
    let digest = pack_format::sha256_hex(workspace.as_os_str().as_encoded_bytes());
    data_dir
        .join("notes")
        .join(format!("{}.json", &digest[..16]))
}

pub fn load(file: &Path) -> Result<Vec<Note>, String> {
    match std::fs::read_to_string(file) {
        Ok(text) => serde_json::from_str(&text).map_err(|e| format!("{}: {e}", file.display())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Vec::new()),
        Err(e) => Err(format!("{}: {e}", file.display())),
    }
}

fn record(file: &Path, args: RecordArgs) -> ToolResult {
    let content = args.content.trim();
    if content.is_empty() {
        return Err(ToolError::new("content is empty"));
    }
    if content.len() > MAX_NOTE_BYTES {
        return Err(ToolError::new(format!(
            "a note holds at most {MAX_NOTE_BYTES} bytes; this one has {}. Keep notes to the key fact.",
            content.len()
        )));
    }
    let mut notes = load(file).map_err(ToolError::new)?;
    let category = args
        .category
        .map(|c| c.trim().to_string())
        .filter(|c| !c.is_empty())
        .unwrap_or_else(|| "general".to_string());
    notes.push(Note {
        at: time::OffsetDateTime::now_utc()
            .format(&time::format_description::well_known::Rfc3339)
            .unwrap_or_default(),
        category: category.clone(),
        content: content.to_string(),
    });
    if notes.len() > MAX_NOTES {
        notes.drain(..notes.len() - MAX_NOTES);
    }
    let fail = |e: std::io::Error| ToolError::new(format!("cannot save {}: {e}", file.display()));
    if let Some(parent) = file.parent() {
        std::fs::create_dir_all(parent).map_err(fail)?;
    }
    let text = serde_json::to_string_pretty(&notes).unwrap_or_default();
    crate::data_dir::write_whole(file, text.as_bytes()).map_err(fail)?;
    Ok(format!(
        "noted under {category} ({} notes kept)",
        notes.len()
    ))
}

fn recall(file: &Path, args: RecallArgs) -> ToolResult {
    let notes = load(file).map_err(ToolError::new)?;
    let wanted: Vec<&Note> = notes
        .iter()
        .filter(|n| args.category.as_ref().is_none_or(|c| &n.category == c))
        .collect();
    if wanted.is_empty() {
        let mut categories: Vec<&str> = notes.iter().map(|n| n.category.as_str()).collect();
        categories.sort();
        categories.dedup();
        return Ok(match (&args.category, categories.is_empty()) {
            (_, true) => "no notes recorded for this workspace yet".to_string(),
            (Some(c), false) => format!(
                "no notes in category {c:?}; categories with notes: {}",
                categories.join(", ")
            ),
            (None, false) => "no notes".to_string(),
        });
    }
    Ok(wanted
        .iter()
        .map(|n| format!("- [{}] {} ({})", n.category, n.content, n.at))
        .collect::<Vec<_>>()
        .join("\n"))
}
