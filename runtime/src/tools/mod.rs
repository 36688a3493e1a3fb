//! The tools the loop can run. A built-in tool is a [`Tool`] in its own file, listed once
//! in the registry, its schema derived from its arguments and its description from the
//! pack; the tools of MCP servers come from the servers ([`crate::mcp`]). A [`Toolbox`] holds both
//! kinds as one list of handlers, so listing, specs, lookup by name, the permission check
//! and results are one code path for both.
//!
//! A tool never stops the run. Whatever goes wrong — bad arguments, a missing file, an
//! ambiguous edit, an unknown tool — becomes a [`ToolOutput`] with `is_error` set and a
//! message that tells the model what it can do instead.
//!
//! Before a tool runs, the call passes the session's permissions once (see
//! [`crate::permissions`]): each handler says what the call touches ([`Tool::access`] for a
//! built-in tool), and the policy runs it, asks the user, or refuses it with the rule that
//! refused it.

mod background;
mod bash;
mod edit;
mod mcp;
mod notes;
mod read;
mod search;
mod skill;
mod task;
mod text;
mod todo;
mod web_fetch;
mod write;

use std::collections::BTreeSet;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use pack_client::Snapshot;
use schemars::JsonSchema;
use serde::de::DeserializeOwned;
use serde_json::Value;
use tokio::sync::watch;

use crate::capabilities::{Capabilities, ToolId};
use crate::error::PromptError;
use crate::mcp::{McpServers, McpToolHandle};
use crate::outcomes::OutcomeRecorder;
use crate::permissions::{Access, Permit, Policy};
use crate::provider::{ToolCall, ToolSpec};
use crate::skills::Skill;

pub use crate::output::{ToolOutput, cut_middle};
pub use crate::todo_list::{TodoItem, TodoStatus};
pub use background::{TaskManager, TaskState};
pub use edit::{EditOutcome, MatchLevel, apply_edit};
pub use notes::{Note, load as load_notes, notes_file};
use text::diff;
pub use web_fetch::{WebSettings, fetch_text};

/// Every tool the runtime implements, in the order they are offered. Adding a tool is one
/// [`Tool`] implementation in its own file plus its line here.
static REGISTRY: [&dyn Registered; 15] = [
    &read::Read,
    &write::Write,
    &edit::Edit,
    &bash::Bash,
    &background::TaskQuery,
    &background::TaskOutput,
    &background::TaskStop,
    &search::Grep,
    &search::Glob,
    &todo::TodoWrite,
    &web_fetch::WebFetch,
    &skill::SkillTool,
    &task::Task,
    &notes::RecordNote,
    &notes::RecallNotes,
];

/// When a tool is offered to an agent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Gate {
    /// The capability-listed tool with this id.
    Tool(ToolId),
    /// The `delegation` feature, and a context that can start children (a child cannot).
    Delegation,
    /// `todowrite`, the other piece of bookkeeping an agent keeps for itself, and a context
    /// with a notes file.
    Notes,
}

impl Gate {
    fn open(self, capabilities: &Capabilities, context: &ToolContext) -> bool {
        match self {
            Gate::Tool(id) => capabilities.has(id),
            Gate::Delegation => capabilities.features.delegation && context.delegate.is_some(),
            Gate::Notes => capabilities.has(ToolId::Todowrite) && context.notes_file.is_some(),
        }
    }
}

/// What a running tool may use.
pub struct Call<'a> {
    pub toolbox: &'a Toolbox,
    pub context: &'a Arc<ToolContext>,
    /// Turns true when the user interrupts; long-running tools stop.
    pub cancel: watch::Receiver<bool>,
    /// How the permissions let this call run (commands: in which sandbox).
    pub permit: Permit,
}

/// One tool the model can call. Its JSON schema is derived from `Args`, so the schema the
/// model sees and the parser that reads its arguments cannot drift apart.
pub trait Tool: Send + Sync + 'static {
    type Args: DeserializeOwned + JsonSchema + Send + Sync + 'static;

    fn name(&self) -> &'static str;

    /// The pack file with the description the model reads.
    fn description_key(&self) -> String {
        format!("tools/{}.md", self.name())
    }

    /// Pack files appended to the description when the named tool is offered too, so a
    /// description never points the model at a tool it does not have. An older pack
    /// without such a file simply goes without it.
    fn addenda(&self) -> &'static [(&'static str, &'static str)] {
        &[]
    }

    fn gate(&self) -> Gate;

    /// The call only reads, so it may run alongside other reads.
    fn read_only(&self) -> bool;

    /// What the call touches, for the permission check before it runs.
    fn access(&self, context: &ToolContext, args: &Self::Args) -> Access;

    /// What the call would change, shown when the user is asked (a diff for file edits).
    fn preview(&self, _context: &ToolContext, _args: &Self::Args) -> Option<String> {
        None
    }

    fn run(&self, call: Call<'_>, args: Self::Args) -> impl Future<Output = ToolResult> + Send;

    /// Replays a finished call from a stored session, so a resumed run knows which files
    /// were read and what the task list was.
    fn replay(&self, _context: &ToolContext, _args: Self::Args) {}
}

type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// A [`Tool`] with its `Args` erased, so the registry can hold every tool in one list.
trait Registered: Send + Sync {
    fn name(&self) -> &'static str;
    fn description_key(&self) -> String;
    fn addenda(&self) -> &'static [(&'static str, &'static str)];
    fn gate(&self) -> Gate;
    fn read_only(&self) -> bool;
    fn schema(&self) -> Value;
    fn prepare<'a>(&'a self, arguments: &str) -> Result<Box<dyn Prepared<'a> + 'a>, ToolError>;
    fn replay(&self, context: &ToolContext, arguments: &str);
}

impl<T: Tool> Registered for T {
    fn name(&self) -> &'static str {
        Tool::name(self)
    }

    fn description_key(&self) -> String {
        Tool::description_key(self)
    }

    fn addenda(&self) -> &'static [(&'static str, &'static str)] {
        Tool::addenda(self)
    }

    fn gate(&self) -> Gate {
        Tool::gate(self)
    }

    fn read_only(&self) -> bool {
        Tool::read_only(self)
    }

    fn schema(&self) -> Value {
        schema_of::<T::Args>()
    }

    fn prepare<'a>(&'a self, arguments: &str) -> Result<Box<dyn Prepared<'a> + 'a>, ToolError> {
        let arguments = if arguments.trim().is_empty() {
            "{}"
        } else {
            arguments
        };
        let args = parse::<T::Args>(Tool::name(self), arguments)?;
        Ok(Box::new(Parsed { tool: self, args }))
    }

    fn replay(&self, context: &ToolContext, arguments: &str) {
        // A call whose arguments did not parse failed when it ran and changed nothing.
        if let Ok(args) = serde_json::from_str(arguments) {
            Tool::replay(self, context, args);
        }
    }
}

/// A call whose arguments are read, waiting for the permission check.
trait Prepared<'a>: Send + Sync {
    /// What the call touches.
    fn access(&self, context: &ToolContext) -> Access;

    /// What the call would change, shown when the user is asked.
    fn preview(&self, context: &ToolContext) -> Option<String>;

    /// Runs the call the permissions let through.
    fn run(self: Box<Self>, call: Call<'a>) -> BoxFuture<'a, ToolOutput>;
}

/// A built-in tool's call, its arguments parsed.
struct Parsed<'a, T: Tool> {
    tool: &'a T,
    args: T::Args,
}

impl<'a, T: Tool> Prepared<'a> for Parsed<'a, T> {
    fn access(&self, context: &ToolContext) -> Access {
        self.tool.access(context, &self.args)
    }

    fn preview(&self, context: &ToolContext) -> Option<String> {
        self.tool.preview(context, &self.args)
    }

    fn run(self: Box<Self>, call: Call<'a>) -> BoxFuture<'a, ToolOutput> {
        let Parsed { tool, args } = *self;
        Box::pin(async move {
            match tool.run(call, args).await {
                Ok(content) => ToolOutput::ok(content),
                Err(e) => ToolOutput::error(e.0),
            }
        })
    }
}

/// One tool a toolbox offers: a built-in one from the registry, or one an MCP server
/// serves. Only what is inside differs; the toolbox treats both alike.
#[derive(Clone)]
enum Handler {
    Builtin(&'static dyn Registered),
    Mcp(McpToolHandle),
}

impl Handler {
    fn name(&self) -> &str {
        match self {
            Handler::Builtin(tool) => tool.name(),
            Handler::Mcp(tool) => &tool.tool().exposed,
        }
    }

    /// The call only reads, so it may run alongside other reads. A served tool is the
    /// server's word (`readOnlyHint`).
    fn read_only(&self) -> bool {
        match self {
            Handler::Builtin(tool) => tool.read_only(),
            Handler::Mcp(tool) => tool.tool().read_only,
        }
    }

    /// Whether the agent's capabilities offer it: a built-in tool's gate, the `tools`
    /// lists' MCP rules for a served one.
    fn offered(&self, capabilities: &Capabilities, context: &ToolContext) -> bool {
        match self {
            Handler::Builtin(tool) => tool.gate().open(capabilities, context),
            Handler::Mcp(tool) => capabilities.mcp.allows(&tool.tool().exposed),
        }
    }

    fn prepare<'a>(&'a self, arguments: &'a str) -> Result<Box<dyn Prepared<'a> + 'a>, ToolError> {
        match self {
            Handler::Builtin(tool) => tool.prepare(arguments),
            Handler::Mcp(tool) => Ok(Box::new(mcp::McpCall::new(tool, arguments))),
        }
    }
}

/// The names of every tool the runtime implements.
pub fn registered() -> impl Iterator<Item = &'static str> {
    REGISTRY.iter().map(|t| t.name())
}

/// Whether the runtime implements the capability-listed tool `id`: a prompt may only
/// mention a tool the model is offered, so an unimplemented one reads as off. Prompt
/// assembly reads the same fact from `capabilities::IMPLEMENTED`, which must agree.
pub fn implemented(id: ToolId) -> bool {
    REGISTRY.iter().any(|t| t.gate() == Gate::Tool(id))
}

/// The JSON Schema of a tool's arguments, as the model reads it.
fn schema_of<A: JsonSchema>() -> Value {
    let mut settings = schemars::generate::SchemaSettings::draft07();
    settings.meta_schema = None;
    settings.inline_subschemas = true;
    let mut schema = settings
        .into_generator()
        .into_root_schema_for::<A>()
        .to_value();
    if let Some(object) = schema.as_object_mut() {
        // The title is the Rust type name: noise to the model.
        object.remove("title");
    }
    drop_null(&mut schema);
    schema
}

/// `Option` fields come out as `"type": ["string", "null"]` with `"default": null`; models
/// should omit them rather than send null, so the schema says only the real type.
fn drop_null(value: &mut Value) {
    match value {
        Value::Object(map) => {
            if map.get("default") == Some(&Value::Null) {
                map.remove("default");
            }
            if let Some(Value::Array(types)) = map.get("type") {
                let kept: Vec<Value> = types
                    .iter()
                    .filter(|t| t.as_str() != Some("null"))
                    .cloned()
                    .collect();
                if let [only] = kept.as_slice() {
                    map.insert("type".to_string(), only.clone());
                }
            }
            map.values_mut().for_each(drop_null);
        }
        Value::Array(items) => items.iter_mut().for_each(drop_null),
        Value::Null | Value::Bool(_) | Value::Number(_) | Value::String(_) => {}
    }
}

/// Runs file work on the blocking pool, where reads really do overlap.
async fn blocking(
    context: &Arc<ToolContext>,
    run: impl FnOnce(&ToolContext) -> ToolResult + Send + 'static,
) -> ToolResult {
    let context = context.clone();
    tokio::task::spawn_blocking(move || run(&context))
        .await
        .unwrap_or_else(|e| Err(ToolError::new(format!("the tool crashed: {e}"))))
}

/// One delegated task, as the `task` tool received it.
#[derive(Debug, Clone)]
pub struct DelegateRequest {
    pub agent: String,
    pub task: String,
    /// Files the parent has written so far, for the child's session context.
    pub files: Vec<PathBuf>,
    /// The parent's permissions: the child runs with no more.
    pub policy: Policy,
}

/// Runs a delegated task in a child agent and returns its handoff.
pub trait Delegate: Send + Sync + std::fmt::Debug {
    /// The agents a task can be handed to: the `task` tool's schema lists them.
    fn agents(&self) -> Vec<String>;

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
///
/// Every lock here guards one insert, read or whole-value swap, so the data is consistent
/// even if a holder panicked: a poisoned lock is taken over (as the client and packd do)
/// rather than ending the session.
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
    /// Nested instruction files already shown to the model with a `read`.
    attached: Mutex<BTreeSet<PathBuf>>,
    /// The names of instruction files tried in each directory (`instruction_files`).
    pub instruction_files: Vec<String>,
    pub tasks: Arc<TaskManager>,
    /// Starts child agents; `None` for a child, which cannot delegate.
    pub delegate: Option<Arc<dyn Delegate>>,
    /// Where `record_note` keeps this workspace's notes; `None` disables the note tools.
    pub notes_file: Option<PathBuf>,
    pub protected: Option<Protected>,
    /// What calls may do without asking. Every context is built with one: an unrestricted
    /// policy is a choice its caller spells out ([`Policy::unrestricted`]), never a default.
    pub policy: Policy,
    /// `web_fetch`'s limits and the private addresses it may reach.
    pub web: WebSettings,
    /// The session's MCP servers, whose tools join the built-in ones in every toolbox.
    pub mcp: Option<Arc<McpServers>>,
    /// Where the loop counts how this session's turns went (`None`: not counted).
    pub outcomes: Option<Arc<OutcomeRecorder>>,
    /// Calls the permission policy refused so far, for the loop to count per turn.
    denials: AtomicU64,
}

impl ToolContext {
    pub fn new(cwd: PathBuf, policy: Policy) -> ToolContext {
        ToolContext {
            limits: ToolLimits::default(),
            read_files: Mutex::new(BTreeSet::new()),
            written: Mutex::new(BTreeSet::new()),
            todos: Mutex::new(Vec::new()),
            attached: Mutex::new(BTreeSet::new()),
            instruction_files: crate::instructions::sources::default_names(),
            tasks: Arc::new(TaskManager::default()),
            delegate: None,
            notes_file: None,
            protected: None,
            policy,
            web: WebSettings::default(),
            mcp: None,
            outcomes: None,
            denials: AtomicU64::new(0),
            cwd,
        }
    }

    pub fn with_outcomes(mut self, outcomes: Option<Arc<OutcomeRecorder>>) -> ToolContext {
        self.outcomes = outcomes;
        self
    }

    /// Counts a call the permission policy refused.
    pub fn note_denial(&self) {
        self.denials.fetch_add(1, Ordering::Relaxed);
    }

    /// Calls refused so far in this session.
    pub fn denials(&self) -> u64 {
        self.denials.load(Ordering::Relaxed)
    }

    pub fn with_instruction_files(mut self, names: Vec<String>) -> ToolContext {
        self.instruction_files = names;
        self
    }

    pub fn with_web(mut self, web: WebSettings) -> ToolContext {
        self.web = web;
        self
    }

    pub fn with_mcp(mut self, mcp: Arc<McpServers>) -> ToolContext {
        self.mcp = Some(mcp);
        self
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
        self.written
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(path.to_path_buf());
    }

    pub fn written(&self) -> Vec<PathBuf> {
        self.written
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .cloned()
            .collect()
    }

    pub fn with_limits(mut self, limits: ToolLimits) -> ToolContext {
        self.limits = limits;
        self
    }

    /// An absolute, lexically normalised path: relative ones are taken from the working
    /// directory, `.` and `..` are resolved without touching the disk.
    pub fn resolve(&self, path: &str) -> PathBuf {
        prompt_assembly::paths::normalise(&self.cwd.join(path))
    }

    pub fn mark_read(&self, path: &Path) {
        self.read_files
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(path.to_path_buf());
    }

    pub fn was_read(&self, path: &Path) -> bool {
        self.read_files
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .contains(path)
    }

    /// The instruction files of the directories between the workspace and `file` that
    /// the model has not seen yet, as reminders to add to a `read` result (OpenCode's
    /// nearby instructions): a subdirectory's conventions arrive when its code is read.
    pub fn attach_nested(&self, file: &Path) -> String {
        let mut attached = self.attached.lock().unwrap_or_else(PoisonError::into_inner);
        let mut out = String::new();
        let switches = crate::instructions::Switches::from_process();
        for found in crate::instructions::nested(&self.cwd, file, switches, &self.instruction_files)
        {
            // Reading the instruction file itself shows it already.
            if !attached.insert(found.path.clone()) || found.path == file {
                continue;
            }
            let dir = found.path.parent().unwrap_or(&self.cwd);
            out.push_str(&format!(
                "\n\n{}\nInstructions from {} (they apply to files under {}):\n{}\n{}",
                crate::reminders::REMINDER_OPEN,
                found.path.display(),
                dir.display(),
                found.text,
                crate::reminders::REMINDER_CLOSE
            ));
        }
        out
    }

    pub fn todos(&self) -> Vec<TodoItem> {
        self.todos
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Replays a finished call from a stored session, so a resumed run knows which files
    /// were read and what the task list was.
    pub fn replay(&self, call: &ToolCall) {
        if let Some(tool) = REGISTRY.iter().find(|t| t.name() == call.name) {
            tool.replay(self, &call.arguments);
        }
    }
}

/// The tools one agent is offered, built-in and served alike, and how to run them.
#[derive(Clone)]
pub struct Toolbox {
    /// Built-in tools in registry order, then the tools of MCP servers that are ready.
    offered: Vec<Handler>,
    context: Arc<ToolContext>,
    /// The context's policy, narrowed by this agent's ceiling.
    policy: Policy,
    /// The skills of this turn (the catalog in the prompt), for the `skill` tool.
    skills: Arc<Vec<Skill>>,
}

impl std::fmt::Debug for Toolbox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Toolbox")
            .field("offered", &self.names())
            .field("context", &self.context)
            .field("skills", &self.skills)
            .finish()
    }
}

impl Toolbox {
    /// Offers the tools the agent's capabilities allow: the implemented built-in ones, and
    /// those of the session's ready MCP servers.
    pub fn new(capabilities: &Capabilities, context: Arc<ToolContext>) -> Toolbox {
        let served = context
            .mcp
            .as_ref()
            .map(|mcp| mcp.tools())
            .unwrap_or_default();
        let offered = REGISTRY
            .into_iter()
            .map(Handler::Builtin)
            .chain(served.into_iter().map(Handler::Mcp))
            .filter(|tool| tool.offered(capabilities, &context))
            .collect();
        let policy = match capabilities.permissions {
            Some(ceiling) => context
                .policy
                .narrow(ceiling, &format!("this agent's ceiling is `{ceiling}`")),
            None => context.policy.clone(),
        };
        Toolbox {
            offered,
            policy,
            context,
            skills: Arc::new(Vec::new()),
        }
    }

    pub fn with_skills(mut self, skills: Vec<Skill>) -> Toolbox {
        self.skills = Arc::new(skills);
        self
    }

    /// The names of the offered tools, in order: built-in ones, then MCP ones.
    pub fn names(&self) -> Vec<&str> {
        self.offered.iter().map(Handler::name).collect()
    }

    pub fn context(&self) -> &Arc<ToolContext> {
        &self.context
    }

    /// The permissions this agent's calls run under.
    pub fn policy(&self) -> &Policy {
        &self.policy
    }

    pub fn skills(&self) -> &[Skill] {
        &self.skills
    }

    fn find(&self, name: &str) -> Option<&Handler> {
        self.offered.iter().find(|t| t.name() == name)
    }

    /// The tool definitions for one model call, descriptions read from `snapshot`, so they
    /// come from the same pack as the system prompt.
    pub fn specs(&self, snapshot: &Snapshot) -> Result<Vec<ToolSpec>, PromptError> {
        let names = self.names();
        let text = |key: &str, bytes: &[u8]| {
            std::str::from_utf8(bytes)
                .map(|t| t.trim().to_string())
                .map_err(|_| PromptError::NotUtf8 {
                    key: key.to_string(),
                })
        };
        self.offered
            .iter()
            .map(|tool| {
                let tool = match tool {
                    Handler::Builtin(tool) => tool,
                    // MCP tools describe themselves: the text is the server's.
                    Handler::Mcp(tool) => return Ok(tool.spec()),
                };
                let key = tool.description_key();
                let mut description = text(&key, snapshot.read(&key)?)?;
                for (needs, extra) in tool.addenda() {
                    if names.contains(needs)
                        && let Some(bytes) = snapshot.get(extra)
                    {
                        description.push('\n');
                        description.push_str(&text(extra, bytes)?);
                    }
                }
                let mut parameters = tool.schema();
                // The model learns the helpers' names from the schema, not by failing.
                if tool.gate() == Gate::Delegation
                    && let Some(delegate) = &self.context.delegate
                    && let Some(agent) = parameters.pointer_mut("/properties/agent")
                {
                    agent["enum"] = delegate.agents().into();
                }
                Ok(ToolSpec {
                    name: tool.name().to_string(),
                    description,
                    parameters,
                })
            })
            .collect()
    }

    /// Whether the call only reads, so it may run alongside other reads.
    pub fn is_read_only(&self, call: &ToolCall) -> bool {
        self.find(&call.name).is_some_and(Handler::read_only)
    }

    /// Runs one call: its arguments read, the one permission check, then the tool.
    /// `cancel` turning true stops a running command.
    pub async fn run(&self, call: &ToolCall, cancel: watch::Receiver<bool>) -> ToolOutput {
        let Some(tool) = self.find(&call.name) else {
            return ToolOutput::error(self.not_offered(&call.name));
        };
        let prepared = match tool.prepare(&call.arguments) {
            Ok(prepared) => prepared,
            Err(e) => return ToolOutput::error(e.0),
        };
        let access = prepared.access(&self.context);
        let preview = || prepared.preview(&self.context);
        let permit = match self.policy.check(tool.name(), &access, &preview).await {
            Ok(permit) => permit,
            Err(refused) => {
                self.context.note_denial();
                return ToolOutput::error(refused);
            }
        };
        prepared
            .run(Call {
                toolbox: self,
                context: &self.context,
                cancel,
                permit,
            })
            .await
    }

    /// Why a tool this agent is not offered cannot be called, with the ones it has.
    fn not_offered(&self, name: &str) -> String {
        let available = self.names().join(", ");
        if name.starts_with(crate::mcp::PREFIX) {
            format!(
                "{name} is not available: its MCP server is not running or this agent may not use it. The tools available are: {available}"
            )
        } else if name == Tool::name(&task::Task) {
            format!(
                "task is not available to you: a delegated agent cannot start agents of its own. Do the work yourself with the tools you have ({available}) or report back why it cannot be done."
            )
        } else {
            format!("unknown tool {name:?}; the tools available are: {available}")
        }
    }
}

/// Parses arguments; the error repeats the schema so the model can retry correctly.
fn parse<A: DeserializeOwned + JsonSchema>(name: &str, arguments: &str) -> Result<A, ToolError> {
    serde_json::from_str(arguments).map_err(|e| {
        ToolError::new(format!(
            "invalid arguments for {name}: {e}. Expected a JSON object matching: {}",
            schema_of::<A>()
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Prompt assembly cannot see the registry, so it keeps its own list of implemented
    /// tools; a tool added to one and not the other would be offered and not mentioned, or
    /// mentioned and not offered.
    #[test]
    fn the_prompt_names_exactly_the_implemented_tools() {
        for id in ToolId::ALL {
            assert_eq!(
                crate::capabilities::IMPLEMENTED.contains(&id),
                implemented(id),
                "{id:?}"
            );
        }
    }

    /// A panic while a lock is held (a tool thread crashing) leaves the session usable.
    #[test]
    fn a_poisoned_lock_does_not_end_the_session() {
        let context = Arc::new(ToolContext::new(
            PathBuf::from("/w"),
            Policy::unrestricted(PathBuf::from("/w")),
        ));
        let holder = context.clone();
        let crashed = std::thread::spawn(move || {
            let _held = holder.read_files.lock().unwrap();
            panic!("a tool crashed while holding the lock");
        })
        .join();
        assert!(crashed.is_err());
        assert!(context.read_files.is_poisoned());
        context.mark_read(Path::new("/w/a.rs"));
        assert!(context.was_read(Path::new("/w/a.rs")));
    }
}
