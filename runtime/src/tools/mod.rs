//! The built-in tools the loop can run: schemas here, descriptions from the pack.
//!
//! A tool never stops the run. Whatever goes wrong — bad arguments, a missing file, an
//! ambiguous edit, an unknown tool — becomes a [`ToolOutput`] with `is_error` set and a
//! message that tells the model what it can do instead.

mod bash;
mod edit;
mod read;
mod search;
mod text;
mod todo;
mod write;

use std::collections::BTreeSet;
use std::path::{Component, Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use pack_client::Snapshot;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use tokio::sync::watch;

use crate::capabilities::{Capabilities, ToolId};
use crate::error::PromptError;
use crate::provider::{ToolCall, ToolSpec};

pub use edit::{EditOutcome, MatchLevel, apply_edit};
pub use text::cut_middle;
pub use todo::{TodoItem, TodoStatus};

/// The tools this runtime implements. Others the capability model knows (background
/// tasks, web fetch, skills) are never offered by `agent exec`.
pub const IMPLEMENTED: [ToolId; 7] = [
    ToolId::Read,
    ToolId::Write,
    ToolId::Edit,
    ToolId::Bash,
    ToolId::Grep,
    ToolId::Glob,
    ToolId::Todowrite,
];

/// Size caps on what tools hand back to the model.
#[derive(Debug, Clone, Copy)]
pub struct ToolLimits {
    /// Longest `read` result, in bytes, before it is cut in the middle.
    pub read_bytes: usize,
    /// Lines `read` returns when no `limit` is given.
    pub read_lines: usize,
    /// Longest `bash` output, in bytes, before it is cut in the middle.
    pub bash_bytes: usize,
    pub bash_timeout: Duration,
    pub bash_max_timeout: Duration,
    /// Most matches `grep` and files `glob` list.
    pub search_results: usize,
}

impl Default for ToolLimits {
    fn default() -> Self {
        ToolLimits {
            read_bytes: 50_000,
            read_lines: 2000,
            bash_bytes: 30_000,
            bash_timeout: Duration::from_secs(120),
            bash_max_timeout: Duration::from_secs(600),
            search_results: 200,
        }
    }
}

/// What a tool hands back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolOutput {
    pub content: String,
    /// The call failed; the content says why and what to do instead.
    pub is_error: bool,
}

impl ToolOutput {
    pub fn ok(content: impl Into<String>) -> ToolOutput {
        ToolOutput {
            content: content.into(),
            is_error: false,
        }
    }

    pub fn error(content: impl Into<String>) -> ToolOutput {
        ToolOutput {
            content: content.into(),
            is_error: true,
        }
    }
}

/// A failure the model should see and can act on.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ToolError(pub String);

impl ToolError {
    fn new(message: impl Into<String>) -> ToolError {
        ToolError(message.into())
    }
}

type ToolResult = Result<String, ToolError>;

/// State the tools share within one session.
#[derive(Debug)]
pub struct ToolContext {
    pub cwd: PathBuf,
    pub limits: ToolLimits,
    /// Files read (or written) in this session: `edit` and overwriting `write` require it,
    /// so a change is never based on text the model has not seen.
    read_files: Mutex<BTreeSet<PathBuf>>,
    todos: Mutex<Vec<TodoItem>>,
}

impl ToolContext {
    pub fn new(cwd: PathBuf) -> ToolContext {
        ToolContext {
            cwd,
            limits: ToolLimits::default(),
            read_files: Mutex::new(BTreeSet::new()),
            todos: Mutex::new(Vec::new()),
        }
    }

    pub fn with_limits(mut self, limits: ToolLimits) -> ToolContext {
        self.limits = limits;
        self
    }

    /// An absolute, lexically normalised path: relative ones are taken from the working
    /// directory, `.` and `..` are resolved without touching the disk.
    pub fn resolve(&self, path: &str) -> PathBuf {
        let joined = self.cwd.join(path);
        let mut out = PathBuf::new();
        for component in joined.components() {
            match component {
                Component::ParentDir => {
                    out.pop();
                }
                Component::CurDir => {}
                other => out.push(other),
            }
        }
        out
    }

    pub fn mark_read(&self, path: &Path) {
        self.read_files.lock().unwrap().insert(path.to_path_buf());
    }

    pub fn was_read(&self, path: &Path) -> bool {
        self.read_files.lock().unwrap().contains(path)
    }

    pub fn todos(&self) -> Vec<TodoItem> {
        self.todos.lock().unwrap().clone()
    }

    /// Replays a finished call from a stored session, so a resumed run knows which files
    /// were read and what the task list was.
    pub fn replay(&self, call: &ToolCall) {
        let Ok(tool) = ToolId::parse(&call.name) else {
            return;
        };
        let Ok(args) = serde_json::from_str::<Value>(&call.arguments) else {
            return;
        };
        match tool {
            ToolId::Read | ToolId::Write | ToolId::Edit => {
                if let Some(path) = args.get("path").and_then(Value::as_str) {
                    self.mark_read(&self.resolve(path));
                }
            }
            ToolId::Todowrite => {
                if let Ok(args) = serde_json::from_value::<todo::Args>(args) {
                    *self.todos.lock().unwrap() = args.items;
                }
            }
            ToolId::Bash
            | ToolId::Grep
            | ToolId::Glob
            | ToolId::TaskQuery
            | ToolId::TaskOutput
            | ToolId::TaskStop
            | ToolId::WebFetch
            | ToolId::Skill => {}
        }
    }
}

/// The tools one agent is offered, and how to run them.
#[derive(Debug, Clone)]
pub struct Toolbox {
    offered: Vec<ToolId>,
    context: Arc<ToolContext>,
}

impl Toolbox {
    /// Offers the implemented tools the agent's capabilities allow.
    pub fn new(capabilities: &Capabilities, context: Arc<ToolContext>) -> Toolbox {
        let offered = IMPLEMENTED
            .into_iter()
            .filter(|t| capabilities.has(*t))
            .collect();
        Toolbox { offered, context }
    }

    pub fn offered(&self) -> &[ToolId] {
        &self.offered
    }

    pub fn context(&self) -> &Arc<ToolContext> {
        &self.context
    }

    /// The tool definitions for one model call, descriptions read from `snapshot`
    /// (`tools/<id>.md`), so they come from the same pack as the system prompt.
    pub fn specs(&self, snapshot: &Snapshot) -> Result<Vec<ToolSpec>, PromptError> {
        self.offered
            .iter()
            .map(|tool| {
                let key = format!("tools/{}.md", tool.as_str());
                let bytes = snapshot.read(&key)?;
                let description = std::str::from_utf8(bytes)
                    .map_err(|_| PromptError::NotUtf8 { key: key.clone() })?;
                Ok(ToolSpec {
                    name: tool.as_str().to_string(),
                    description: description.trim().to_string(),
                    parameters: schema(*tool),
                })
            })
            .collect()
    }

    /// Whether the call only reads, so it may run alongside other reads.
    pub fn is_read_only(&self, call: &ToolCall) -> bool {
        matches!(
            ToolId::parse(&call.name),
            Ok(ToolId::Read | ToolId::Grep | ToolId::Glob)
        )
    }

    /// Runs one call. `cancel` turning true stops a running command.
    pub async fn run(&self, call: &ToolCall, cancel: watch::Receiver<bool>) -> ToolOutput {
        let tool = match ToolId::parse(&call.name) {
            Ok(tool) if self.offered.contains(&tool) => tool,
            Ok(_) | Err(_) => {
                return ToolOutput::error(format!(
                    "unknown tool {:?}; the tools available are: {}",
                    call.name,
                    self.names()
                ));
            }
        };
        let context = self.context.clone();
        let arguments = if call.arguments.trim().is_empty() {
            "{}".to_string()
        } else {
            call.arguments.clone()
        };
        let result = match tool {
            ToolId::Bash => match parse::<bash::Args>(tool, &arguments) {
                Ok(args) => bash::run(&context, args, cancel).await,
                Err(e) => Err(e),
            },
            ToolId::Read
            | ToolId::Write
            | ToolId::Edit
            | ToolId::Grep
            | ToolId::Glob
            | ToolId::Todowrite => {
                // File work is blocking; on the blocking pool, reads really do overlap.
                let task =
                    tokio::task::spawn_blocking(move || run_blocking(tool, &context, &arguments));
                match task.await {
                    Ok(result) => result,
                    Err(e) => Err(ToolError::new(format!("the tool crashed: {e}"))),
                }
            }
            ToolId::TaskQuery
            | ToolId::TaskOutput
            | ToolId::TaskStop
            | ToolId::WebFetch
            | ToolId::Skill => Err(ToolError::new(format!(
                "{} is not available here; the tools available are: {}",
                tool.as_str(),
                self.names()
            ))),
        };
        match result {
            Ok(content) => ToolOutput::ok(content),
            Err(e) => ToolOutput::error(e.0),
        }
    }

    fn names(&self) -> String {
        let names: Vec<&str> = self.offered.iter().map(|t| t.as_str()).collect();
        names.join(", ")
    }
}

fn run_blocking(tool: ToolId, context: &ToolContext, arguments: &str) -> ToolResult {
    match tool {
        ToolId::Read => read::run(context, parse(tool, arguments)?),
        ToolId::Write => write::run(context, parse(tool, arguments)?),
        ToolId::Edit => edit::run(context, parse(tool, arguments)?),
        ToolId::Grep => search::grep(context, parse(tool, arguments)?),
        ToolId::Glob => search::glob(context, parse(tool, arguments)?),
        ToolId::Todowrite => todo::run(context, parse(tool, arguments)?),
        ToolId::Bash
        | ToolId::TaskQuery
        | ToolId::TaskOutput
        | ToolId::TaskStop
        | ToolId::WebFetch
        | ToolId::Skill => Err(ToolError::new(format!(
            "{} does not run here",
            tool.as_str()
        ))),
    }
}

/// Parses arguments; the error repeats the schema so the model can retry correctly.
fn parse<T: DeserializeOwned>(tool: ToolId, arguments: &str) -> Result<T, ToolError> {
    serde_json::from_str(arguments).map_err(|e| {
        ToolError::new(format!(
            "invalid arguments for {}: {e}. Expected a JSON object matching: {}",
            tool.as_str(),
            schema(tool)
        ))
    })
}

/// JSON Schema of each tool's arguments.
pub fn schema(tool: ToolId) -> Value {
    match tool {
        ToolId::Read => json!({
            "type": "object",
            "properties": {
                "path": {"type": "string", "description": "Absolute path of the file."},
                "offset": {"type": "integer", "minimum": 1, "description": "First line to return, 1-indexed."},
                "limit": {"type": "integer", "minimum": 1, "description": "Most lines to return."}
            },
            "required": ["path"]
        }),
        ToolId::Write => json!({
            "type": "object",
            "properties": {
                "path": {"type": "string", "description": "Absolute path of the file."},
                "content": {"type": "string", "description": "The whole new text of the file."}
            },
            "required": ["path", "content"]
        }),
        ToolId::Edit => json!({
            "type": "object",
            "properties": {
                "path": {"type": "string", "description": "Absolute path of the file."},
                "old_text": {"type": "string", "description": "The text to replace; must match exactly one place."},
                "new_text": {"type": "string", "description": "The replacement."},
                "replace_all": {"type": "boolean", "description": "Replace every match instead of exactly one."}
            },
            "required": ["path", "old_text", "new_text"]
        }),
        ToolId::Bash => json!({
            "type": "object",
            "properties": {
                "command": {"type": "string", "description": "The shell command."},
                "timeout_ms": {"type": "integer", "minimum": 1, "description": "Kill the command after this long (default 120000, at most 600000)."}
            },
            "required": ["command"]
        }),
        ToolId::Grep => json!({
            "type": "object",
            "properties": {
                "pattern": {"type": "string", "description": "A regular expression."},
                "path": {"type": "string", "description": "Directory or file to search (default: the working directory)."},
                "include": {"type": "string", "description": "Only files whose path matches this glob, e.g. *.rs."}
            },
            "required": ["pattern"]
        }),
        ToolId::Glob => json!({
            "type": "object",
            "properties": {
                "pattern": {"type": "string", "description": "A glob such as src/**/*.rs; without a slash it matches file names at any depth."},
                "path": {"type": "string", "description": "Directory to search (default: the working directory)."}
            },
            "required": ["pattern"]
        }),
        ToolId::Todowrite => json!({
            "type": "object",
            "properties": {
                "items": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "properties": {
                            "text": {"type": "string"},
                            "status": {"type": "string", "enum": ["pending", "in_progress", "done"]}
                        },
                        "required": ["text", "status"]
                    }
                }
            },
            "required": ["items"]
        }),
        ToolId::TaskQuery
        | ToolId::TaskOutput
        | ToolId::TaskStop
        | ToolId::WebFetch
        | ToolId::Skill => json!({"type": "object"}),
    }
}
