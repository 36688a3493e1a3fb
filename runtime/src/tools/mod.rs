//! The built-in tools the loop can run: schemas here, descriptions from the pack.
//!
//! A tool never stops the run. Whatever goes wrong — bad arguments, a missing file, an
//! ambiguous edit, an unknown tool — becomes a [`ToolOutput`] with `is_error` set and a
//! message that tells the model what it can do instead.

mod background;
mod bash;
mod edit;
mod notes;
mod read;
mod search;
mod text;
mod todo;
mod write;

use std::collections::BTreeSet;
use std::future::Future;
use std::path::{Component, Path, PathBuf};
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use pack_client::Snapshot;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use tokio::sync::watch;

use crate::capabilities::{Capabilities, ToolId};
use crate::error::PromptError;
use crate::provider::{ToolCall, ToolSpec};
use crate::skills::Skill;

pub use background::{TaskManager, TaskState};
pub use edit::{EditOutcome, MatchLevel, apply_edit};
pub use notes::{Note, notes_file};
pub use text::cut_middle;
pub use todo::{TodoItem, TodoStatus};

/// The capability-listed tools this runtime implements (`web_fetch` is not one of them).
pub const IMPLEMENTED: [ToolId; 11] = [
    ToolId::Read,
    ToolId::Write,
    ToolId::Edit,
    ToolId::Bash,
    ToolId::TaskQuery,
    ToolId::TaskOutput,
    ToolId::TaskStop,
    ToolId::Grep,
    ToolId::Glob,
    ToolId::Todowrite,
    ToolId::Skill,
];

/// A tool the model can call: one of the capability-listed tools, or one that follows a
/// feature rather than the tool list (`task` follows `delegation`; the note tools follow
/// `todowrite`, the other piece of bookkeeping an agent keeps for itself).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Tool {
    Builtin(ToolId),
    Task,
    RecordNote,
    RecallNotes,
}

impl Tool {
    pub fn name(self) -> &'static str {
        match self {
            Tool::Builtin(id) => id.as_str(),
            Tool::Task => "task",
            Tool::RecordNote => "record_note",
            Tool::RecallNotes => "recall_notes",
        }
    }

    pub fn parse(name: &str) -> Option<Tool> {
        match name {
            "task" => Some(Tool::Task),
            "record_note" => Some(Tool::RecordNote),
            "recall_notes" => Some(Tool::RecallNotes),
            other => ToolId::parse(other).ok().map(Tool::Builtin),
        }
    }
}

/// One delegated task, as the `task` tool received it.
#[derive(Debug, Clone)]
pub struct DelegateRequest {
    pub agent: String,
    pub task: String,
    /// Files the parent has written so far, for the child's session context.
    pub files: Vec<PathBuf>,
}

/// Runs a delegated task in a child agent and returns its handoff.
pub trait Delegate: Send + Sync + std::fmt::Debug {
    fn delegate<'a>(
        &'a self,
        request: DelegateRequest,
        cancel: watch::Receiver<bool>,
    ) -> Pin<Box<dyn Future<Output = Result<String, ToolError>> + Send + 'a>>;
}

/// A file the model may not change in place: writes go to `divert_to` instead, so the
/// runtime can show the user the proposal (`agent init` in diff mode).
#[derive(Debug, Clone)]
pub struct Protected {
    pub path: PathBuf,
    pub divert_to: PathBuf,
}

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
    /// Files written or edited in this session, for a delegated child's session context.
    written: Mutex<BTreeSet<PathBuf>>,
    todos: Mutex<Vec<TodoItem>>,
    pub tasks: Arc<TaskManager>,
    /// Starts child agents; `None` for a child, which cannot delegate.
    pub delegate: Option<Arc<dyn Delegate>>,
    /// Where `record_note` keeps this workspace's notes; `None` disables the note tools.
    pub notes_file: Option<PathBuf>,
    pub protected: Option<Protected>,
}

impl ToolContext {
    pub fn new(cwd: PathBuf) -> ToolContext {
        ToolContext {
            cwd,
            limits: ToolLimits::default(),
            read_files: Mutex::new(BTreeSet::new()),
            written: Mutex::new(BTreeSet::new()),
            todos: Mutex::new(Vec::new()),
            tasks: Arc::new(TaskManager::default()),
            delegate: None,
            notes_file: None,
            protected: None,
        }
    }

    pub fn with_delegate(mut self, delegate: Arc<dyn Delegate>) -> ToolContext {
        self.delegate = Some(delegate);
        self
    }

    pub fn with_notes(mut self, file: PathBuf) -> ToolContext {
        self.notes_file = Some(file);
        self
    }

    pub fn with_protected(mut self, protected: Protected) -> ToolContext {
        self.protected = Some(protected);
        self
    }

    pub fn mark_written(&self, path: &Path) {
        self.written.lock().unwrap().insert(path.to_path_buf());
    }

    pub fn written(&self) -> Vec<PathBuf> {
        self.written.lock().unwrap().iter().cloned().collect()
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
            ToolId::Read => {
                if let Some(path) = args.get("path").and_then(Value::as_str) {
                    self.mark_read(&self.resolve(path));
                }
            }
            ToolId::Write | ToolId::Edit => {
                if let Some(path) = args.get("path").and_then(Value::as_str) {
                    self.mark_read(&self.resolve(path));
                    self.mark_written(&self.resolve(path));
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
    offered: Vec<Tool>,
    context: Arc<ToolContext>,
    /// The skills of this turn (the catalog in the prompt), for the `skill` tool.
    skills: Arc<Vec<Skill>>,
}

impl Toolbox {
    /// Offers the implemented tools the agent's capabilities allow.
    pub fn new(capabilities: &Capabilities, context: Arc<ToolContext>) -> Toolbox {
        let mut offered: Vec<Tool> = IMPLEMENTED
            .into_iter()
            .filter(|t| capabilities.has(*t))
            .map(Tool::Builtin)
            .collect();
        if capabilities.features.delegation && context.delegate.is_some() {
            offered.push(Tool::Task);
        }
        if capabilities.has(ToolId::Todowrite) && context.notes_file.is_some() {
            offered.extend([Tool::RecordNote, Tool::RecallNotes]);
        }
        Toolbox {
            offered,
            context,
            skills: Arc::new(Vec::new()),
        }
    }

    pub fn with_skills(mut self, skills: Vec<Skill>) -> Toolbox {
        self.skills = Arc::new(skills);
        self
    }

    pub fn offered(&self) -> &[Tool] {
        &self.offered
    }

    /// The names of the offered tools, in order.
    pub fn names(&self) -> Vec<&'static str> {
        self.offered.iter().map(|t| t.name()).collect()
    }

    pub fn context(&self) -> &Arc<ToolContext> {
        &self.context
    }

    /// The tool definitions for one model call, descriptions read from `snapshot`
    /// (`tools/<name>.md`), so they come from the same pack as the system prompt.
    pub fn specs(&self, snapshot: &Snapshot) -> Result<Vec<ToolSpec>, PromptError> {
        self.offered
            .iter()
            .map(|tool| {
                let key = format!("tools/{}.md", tool.name());
                let bytes = snapshot.read(&key)?;
                let description = std::str::from_utf8(bytes)
                    .map_err(|_| PromptError::NotUtf8 { key: key.clone() })?;
                Ok(ToolSpec {
                    name: tool.name().to_string(),
                    description: description.trim().to_string(),
                    parameters: schema(*tool),
                })
            })
            .collect()
    }

    /// Whether the call only reads, so it may run alongside other reads.
    pub fn is_read_only(&self, call: &ToolCall) -> bool {
        matches!(
            Tool::parse(&call.name),
            Some(
                Tool::Builtin(
                    ToolId::Read | ToolId::Grep | ToolId::Glob | ToolId::TaskQuery | ToolId::Skill
                ) | Tool::RecallNotes
            )
        )
    }

    /// Runs one call. `cancel` turning true stops a running command.
    pub async fn run(&self, call: &ToolCall, cancel: watch::Receiver<bool>) -> ToolOutput {
        let tool = match Tool::parse(&call.name) {
            Some(tool) if self.offered.contains(&tool) => tool,
            Some(Tool::Task) => {
                return ToolOutput::error(format!(
                    "task is not available to you: a delegated agent cannot start agents of its own. Do the work yourself with the tools you have ({}) or report back why it cannot be done.",
                    self.names().join(", ")
                ));
            }
            Some(_) | None => {
                return ToolOutput::error(format!(
                    "unknown tool {:?}; the tools available are: {}",
                    call.name,
                    self.names().join(", ")
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
            Tool::Builtin(ToolId::Bash) => match parse::<bash::Args>(tool, &arguments) {
                Ok(args) if args.run_in_background => {
                    context.tasks.spawn(args.command(), &context.cwd)
                }
                Ok(args) => bash::run(&context, args, cancel).await,
                Err(e) => Err(e),
            },
            Tool::Builtin(ToolId::TaskQuery) => {
                parse(tool, &arguments).and_then(|args| context.tasks.query(args))
            }
            Tool::Builtin(ToolId::TaskOutput) => match parse(tool, &arguments) {
                Ok(args) => {
                    context
                        .tasks
                        .output(args, context.limits.bash_bytes / 2)
                        .await
                }
                Err(e) => Err(e),
            },
            Tool::Builtin(ToolId::TaskStop) => match parse(tool, &arguments) {
                Ok(args) => context.tasks.stop(args).await,
                Err(e) => Err(e),
            },
            Tool::Builtin(ToolId::Skill) => {
                parse::<SkillArgs>(tool, &arguments).and_then(|args| self.skill(&args.name))
            }
            Tool::Task => match parse::<TaskArgs>(tool, &arguments) {
                Ok(args) => match &context.delegate {
                    Some(delegate) => {
                        let request = DelegateRequest {
                            agent: args.agent,
                            task: args.task,
                            files: context.written(),
                        };
                        delegate.delegate(request, cancel).await
                    }
                    None => Err(ToolError::new("delegation is not available")),
                },
                Err(e) => Err(e),
            },
            Tool::RecordNote | Tool::RecallNotes => match &context.notes_file {
                Some(file) => {
                    let file = file.clone();
                    let run = move || match tool {
                        Tool::RecordNote => notes::record(&file, parse(tool, &arguments)?),
                        _ => notes::recall(&file, parse(tool, &arguments)?),
                    };
                    tokio::task::spawn_blocking(run)
                        .await
                        .unwrap_or_else(|e| Err(ToolError::new(format!("the tool crashed: {e}"))))
                }
                None => Err(ToolError::new("notes are not available in this session")),
            },
            Tool::Builtin(
                id @ (ToolId::Read
                | ToolId::Write
                | ToolId::Edit
                | ToolId::Grep
                | ToolId::Glob
                | ToolId::Todowrite),
            ) => {
                // File work is blocking; on the blocking pool, reads really do overlap.
                let task =
                    tokio::task::spawn_blocking(move || run_blocking(id, &context, &arguments));
                match task.await {
                    Ok(result) => result,
                    Err(e) => Err(ToolError::new(format!("the tool crashed: {e}"))),
                }
            }
            Tool::Builtin(ToolId::WebFetch) => Err(ToolError::new(format!(
                "web_fetch is not available here; the tools available are: {}",
                self.names().join(", ")
            ))),
        };
        match result {
            Ok(content) => ToolOutput::ok(content),
            Err(e) => ToolOutput::error(e.0),
        }
    }

    fn skill(&self, name: &str) -> ToolResult {
        match self.skills.iter().find(|s| s.name == name) {
            Some(skill) => {
                let location = match &skill.dir {
                    Some(dir) => format!(" (files in {})", dir.display()),
                    None => String::new(),
                };
                Ok(format!(
                    "<skill name=\"{}\"{location}>\n{}\n</skill>",
                    skill.name,
                    crate::skills::expand(skill).trim()
                ))
            }
            None => {
                let names: Vec<&str> = self.skills.iter().map(|s| s.name.as_str()).collect();
                Err(ToolError::new(if names.is_empty() {
                    format!("unknown skill {name:?}; no skills are available in this session")
                } else {
                    format!(
                        "unknown skill {name:?}; the available skills are: {}",
                        names.join(", ")
                    )
                }))
            }
        }
    }
}

#[derive(serde::Deserialize)]
struct SkillArgs {
    name: String,
}

#[derive(serde::Deserialize)]
struct TaskArgs {
    agent: String,
    task: String,
}

fn run_blocking(tool: ToolId, context: &ToolContext, arguments: &str) -> ToolResult {
    match tool {
        ToolId::Read => read::run(context, parse(Tool::Builtin(tool), arguments)?),
        ToolId::Write => write::run(context, parse(Tool::Builtin(tool), arguments)?),
        ToolId::Edit => edit::run(context, parse(Tool::Builtin(tool), arguments)?),
        ToolId::Grep => search::grep(context, parse(Tool::Builtin(tool), arguments)?),
        ToolId::Glob => search::glob(context, parse(Tool::Builtin(tool), arguments)?),
        ToolId::Todowrite => todo::run(context, parse(Tool::Builtin(tool), arguments)?),
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
fn parse<T: DeserializeOwned>(tool: Tool, arguments: &str) -> Result<T, ToolError> {
    serde_json::from_str(arguments).map_err(|e| {
        ToolError::new(format!(
            "invalid arguments for {}: {e}. Expected a JSON object matching: {}",
            tool.name(),
            schema(tool)
        ))
    })
}

/// JSON Schema of each tool's arguments.
pub fn schema(tool: Tool) -> Value {
    let tool = match tool {
        Tool::Builtin(id) => id,
        Tool::Task => {
            return json!({
                "type": "object",
                "properties": {
                    "agent": {"type": "string", "description": "The helper: explore, worker, verifier or a custom agent."},
                    "task": {"type": "string", "description": "The whole task, self-contained: goal, scope, known files, the answer you expect."}
                },
                "required": ["agent", "task"]
            });
        }
        Tool::RecordNote => {
            return json!({
                "type": "object",
                "properties": {
                    "content": {"type": "string", "description": "The fact to keep, in one or two sentences."},
                    "category": {"type": "string", "description": "A short label such as build, convention or decision (default general)."}
                },
                "required": ["content"]
            });
        }
        Tool::RecallNotes => {
            return json!({
                "type": "object",
                "properties": {
                    "category": {"type": "string", "description": "Only notes with this label."}
                }
            });
        }
    };
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
                "timeout_ms": {"type": "integer", "minimum": 1, "description": "Kill the command after this long (default 120000, at most 600000)."},
                "run_in_background": {"type": "boolean", "description": "Start the command and return at once with a task id."}
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
        ToolId::TaskQuery => json!({
            "type": "object",
            "properties": {
                "task_id": {"type": "string", "description": "One task; without it, every task of the session."}
            }
        }),
        ToolId::TaskOutput => json!({
            "type": "object",
            "properties": {
                "task_id": {"type": "string"},
                "wait": {"type": "boolean", "description": "Block until there is new output or the task ends."},
                "timeout_ms": {"type": "integer", "minimum": 1, "description": "Longest wait (default 30000)."}
            },
            "required": ["task_id"]
        }),
        ToolId::TaskStop => json!({
            "type": "object",
            "properties": {"task_id": {"type": "string"}},
            "required": ["task_id"]
        }),
        ToolId::Skill => json!({
            "type": "object",
            "properties": {"name": {"type": "string", "description": "A skill from the catalog in the system prompt."}},
            "required": ["name"]
        }),
        ToolId::WebFetch => json!({"type": "object"}),
    }
}
