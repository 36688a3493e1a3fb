//! MCP servers: the tools of configured Model Context Protocol servers, offered to the
//! model as `mcp__<server>__<tool>` next to the built-in ones.
//!
//! A session starts every enabled server in the background ([`McpServers::spawn`]); the
//! loop waits for the ones still starting before its first model call, each at most its
//! `startup_timeout_secs`. A server that fails to start is reported and skipped. A server
//! that stops later (its process exits, its connection drops) takes its tools with it:
//! they are no longer offered, a call in flight returns an error, and the model gets a
//! reminder saying so — the session goes on.
//!
//! Everything a server sends is untrusted: its instructions, tool names, descriptions and
//! schemas, and its results. Each is held to a limit ([`Limits`]) before the model sees it,
//! and its instructions are data passed into the prompt template, never compiled.

use std::collections::{HashMap, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use rmcp::model::{
    CallToolRequestParams, CallToolResult, ClientCapabilities, ClientConfig, ContentBlock,
    Implementation, ResourceContents,
};
use rmcp::service::{Peer, RoleClient, RunningService, RunningServiceCancellationToken};
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::{StreamableHttpClientTransport, TokioChildProcess};
use rmcp::{ServiceError, ServiceExt as _};
use serde::Serialize;
use serde_json::Value;
use tokio::io::AsyncBufReadExt as _;
use tokio::sync::watch;

pub use prompt_assembly::config::mcp::{
    DEFAULT_STARTUP_TIMEOUT, DEFAULT_TOOL_TIMEOUT, McpServerConfig, Transport,
};

use crate::context::{McpInstructions, McpServerEntry};
use crate::output::{ToolOutput, cut_middle};
use crate::provider::ToolSpec;

/// The prefix of every MCP tool name the model sees.
pub const PREFIX: &str = prompt_assembly::capabilities::MCP_PREFIX;
/// The longest tool name both wire formats accept.
const MAX_NAME_LEN: usize = 64;

/// Caps on what a server can put in front of the model.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Tools taken from one server; the rest are dropped with a warning.
    pub tools_per_server: usize,
    /// A tool description longer than this is cut.
    pub description_bytes: usize,
    /// A tool whose input schema is larger than this (as JSON) is not offered.
    pub schema_bytes: usize,
    /// Server instructions longer than this are cut.
    pub instructions_bytes: usize,
    /// A tool result longer than this is cut in the middle.
    pub result_bytes: usize,
    /// Lines of a stdio server's stderr kept to explain a failure.
    pub stderr_lines: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            tools_per_server: 128,
            description_bytes: 4096,
            schema_bytes: 32 * 1024,
            instructions_bytes: 8 * 1024,
            result_bytes: 50_000,
            stderr_lines: 20,
        }
    }
}

/// Where a server stands.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "state", content = "reason", rename_all = "snake_case")]
pub enum ServerState {
    /// `enabled = false` in its table.
    Disabled,
    Starting,
    Ready,
    /// It never became ready.
    Failed(String),
    /// It was ready and then stopped.
    Exited(String),
}

impl std::fmt::Display for ServerState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ServerState::Disabled => f.write_str("disabled"),
            ServerState::Starting => f.write_str("starting"),
            ServerState::Ready => f.write_str("ready"),
            ServerState::Failed(reason) => write!(f, "failed: {reason}"),
            ServerState::Exited(reason) => write!(f, "exited: {reason}"),
        }
    }
}

/// One tool of a server, as offered to the model.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct McpTool {
    /// `mcp__<server>__<tool>`, made safe for both wire formats.
    pub exposed: String,
    /// The server's own name for it.
    pub name: String,
    pub description: String,
    pub schema: Value,
    /// The server says the tool changes nothing (`readOnlyHint`).
    pub read_only: bool,
}

/// A ready server's connection and what it offered.
struct Live {
    peer: Peer<RoleClient>,
    tools: Vec<McpTool>,
    instructions: Option<String>,
}

struct Server {
    config: McpServerConfig,
    status: Mutex<Status>,
    /// The last lines the server wrote to stderr.
    stderr: Arc<Mutex<VecDeque<String>>>,
    /// Set before the session closes the connection itself, so that is not reported as
    /// the server stopping.
    closing: AtomicBool,
}

enum Status {
    Disabled,
    Starting,
    Ready {
        live: Arc<Live>,
        /// Taken when the session closes the connection.
        stop: Option<RunningServiceCancellationToken>,
    },
    Failed(String),
    Exited {
        reason: String,
        tools: Vec<McpTool>,
    },
}

impl Server {
    fn lock(&self) -> std::sync::MutexGuard<'_, Status> {
        self.status.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn live(&self) -> Option<Arc<Live>> {
        match &*self.lock() {
            Status::Ready { live, .. } => Some(live.clone()),
            Status::Disabled | Status::Starting | Status::Failed(_) | Status::Exited { .. } => None,
        }
    }

    /// The end of the server's stderr, for an error message.
    fn stderr_tail(&self) -> String {
        let lines = self.stderr.lock().unwrap_or_else(PoisonError::into_inner);
        if lines.is_empty() {
            return String::new();
        }
        let shown: Vec<&str> = lines.iter().map(String::as_str).collect();
        format!("; its stderr ended with: {}", shown.join(" | "))
    }
}

/// What `agent mcp list` shows of one server.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ServerReport {
    pub name: String,
    pub transport: String,
    #[serde(flatten)]
    pub state: ServerState,
    pub instructions: Option<String>,
    pub tools: Vec<McpTool>,
}

/// The MCP servers of one session, shared by the session and its helpers.
pub struct McpServers {
    servers: Vec<Arc<Server>>,
    /// What the model should hear (a server stopped). Append-only: each loop keeps its own
    /// position, so a helper and its parent both hear it.
    notices: Mutex<Vec<String>>,
    /// Servers still starting.
    starting: watch::Sender<usize>,
    /// Servers connected and not yet closed.
    connected: watch::Sender<usize>,
    limits: Limits,
}

impl std::fmt::Debug for McpServers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<&str> = self
            .servers
            .iter()
            .map(|s| s.config.name.as_str())
            .collect();
        f.debug_struct("McpServers")
            .field("servers", &names)
            .finish_non_exhaustive()
    }
}

impl McpInstructions for McpServers {
    fn prompt_entries(&self, allowed: &dyn Fn(&str) -> bool) -> Vec<McpServerEntry> {
        self.servers
            .iter()
            .filter_map(|server| {
                let live = server.live()?;
                let instructions = live.instructions.as_deref()?.trim();
                if instructions.is_empty() || !live.tools.iter().any(|t| allowed(&t.exposed)) {
                    return None;
                }
                Some(McpServerEntry {
                    name: server.config.name.clone(),
                    instructions: instructions.to_string(),
                })
            })
            .collect()
    }
}

impl McpServers {
    /// Starts every enabled server in the background on `runtime`; stdio servers run in
    /// `cwd` unless their table names another directory.
    pub fn spawn(
        configs: &[McpServerConfig],
        cwd: &Path,
        runtime: &tokio::runtime::Handle,
    ) -> Arc<McpServers> {
        McpServers::spawn_with(configs, cwd, runtime, Limits::default())
    }

    pub fn spawn_with(
        configs: &[McpServerConfig],
        cwd: &Path,
        runtime: &tokio::runtime::Handle,
        limits: Limits,
    ) -> Arc<McpServers> {
        let servers: Vec<Arc<Server>> = configs
            .iter()
            .map(|config| {
                Arc::new(Server {
                    config: config.clone(),
                    status: Mutex::new(if config.enabled {
                        Status::Starting
                    } else {
                        Status::Disabled
                    }),
                    stderr: Arc::new(Mutex::new(VecDeque::new())),
                    closing: AtomicBool::new(false),
                })
            })
            .collect();
        let starting = servers.iter().filter(|s| s.config.enabled).count();
        let mcp = Arc::new(McpServers {
            servers,
            notices: Mutex::new(Vec::new()),
            starting: watch::Sender::new(starting),
            connected: watch::Sender::new(0),
            limits,
        });
        for server in &mcp.servers {
            if server.config.enabled {
                runtime.spawn(run_server(mcp.clone(), server.clone(), cwd.to_path_buf()));
            }
        }
        mcp
    }

    /// Whether any server is configured at all.
    pub fn is_empty(&self) -> bool {
        self.servers.is_empty()
    }

    /// Waits until no server is still starting (each gives up after its start-up timeout).
    pub async fn wait_started(&self) {
        let mut rx = self.starting.subscribe();
        let _ = rx.wait_for(|n| *n == 0).await;
    }

    /// Every server, in name order.
    pub fn report(&self) -> Vec<ServerReport> {
        self.servers
            .iter()
            .map(|server| {
                let (state, instructions, tools) = match &*server.lock() {
                    Status::Disabled => (ServerState::Disabled, None, Vec::new()),
                    Status::Starting => (ServerState::Starting, None, Vec::new()),
                    Status::Ready { live, .. } => (
                        ServerState::Ready,
                        live.instructions.clone(),
                        live.tools.clone(),
                    ),
                    Status::Failed(reason) => {
                        (ServerState::Failed(reason.clone()), None, Vec::new())
                    }
                    Status::Exited { reason, tools } => {
                        (ServerState::Exited(reason.clone()), None, tools.clone())
                    }
                };
                ServerReport {
                    name: server.config.name.clone(),
                    transport: server.config.describe(),
                    state,
                    instructions,
                    tools,
                }
            })
            .collect()
    }

    /// The tools of every ready server, in server order. Which of them an agent is offered
    /// is the toolbox's decision, with the built-in tools' (`tools::Toolbox::new`).
    pub fn tools(&self) -> Vec<McpToolHandle> {
        let mut out = Vec::new();
        for server in &self.servers {
            let Some(live) = server.live() else {
                continue;
            };
            for index in 0..live.tools.len() {
                out.push(McpToolHandle {
                    server: server.clone(),
                    live: live.clone(),
                    index,
                    result_bytes: self.limits.result_bytes,
                });
            }
        }
        out
    }

    /// Notices added since `seen`, which is moved past them.
    pub fn notices_since(&self, seen: &mut usize) -> Vec<String> {
        let notices = self.notices.lock().unwrap_or_else(PoisonError::into_inner);
        let new = notices.get(*seen..).unwrap_or_default().to_vec();
        *seen = notices.len();
        new
    }

    /// Closes every connection and waits (a few seconds at most) for them to close;
    /// stdio servers are asked to exit: stdin closed, then SIGTERM, then killed.
    pub async fn shutdown(&self) {
        for server in &self.servers {
            server.closing.store(true, Ordering::SeqCst);
            if let Status::Ready { stop, .. } = &mut *server.lock()
                && let Some(stop) = stop.take()
            {
                stop.cancel();
            }
        }
        let mut rx = self.connected.subscribe();
        let _ = tokio::time::timeout(Duration::from_secs(8), rx.wait_for(|n| *n == 0)).await;
    }

    fn notice(&self, text: String) {
        self.notices
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(text);
    }

    fn started_one(&self) {
        self.starting.send_modify(|n| *n = n.saturating_sub(1));
    }
}

/// Starts one server, marks it ready or failed, then watches it until it stops.
async fn run_server(mcp: Arc<McpServers>, server: Arc<Server>, cwd: PathBuf) {
    let timeout = server.config.startup_timeout;
    let name = server.config.name.clone();
    let started = tokio::time::timeout(timeout, connect(&server, &cwd, &mcp.limits)).await;
    let (running, tools, instructions) = match started {
        Ok(Ok(connected)) => connected,
        Ok(Err(reason)) => {
            let reason = format!("{reason}{}", server.stderr_tail());
            tracing::warn!("MCP server {name} did not start: {reason}");
            *server.lock() = Status::Failed(reason);
            mcp.started_one();
            return;
        }
        Err(_) => {
            // Dropping the half-started connection kills a stdio server's process.
            let reason = format!(
                "did not start within {}s (startup_timeout_secs){}",
                timeout.as_secs(),
                server.stderr_tail()
            );
            tracing::warn!("MCP server {name} {reason}");
            *server.lock() = Status::Failed(reason);
            mcp.started_one();
            return;
        }
    };
    let live = Arc::new(Live {
        peer: running.peer().clone(),
        tools,
        instructions,
    });
    *server.lock() = Status::Ready {
        live: live.clone(),
        stop: Some(running.cancellation_token()),
    };
    mcp.connected.send_modify(|n| *n += 1);
    mcp.started_one();
    tracing::debug!(server = %name, tools = live.tools.len(), "MCP server ready");

    let quit = running.waiting().await;
    mcp.connected.send_modify(|n| *n = n.saturating_sub(1));
    if server.closing.load(Ordering::SeqCst) {
        return;
    }
    let how = match quit {
        Ok(rmcp::service::QuitReason::Closed) => "its connection closed".to_string(),
        Ok(rmcp::service::QuitReason::Cancelled) => "it was stopped".to_string(),
        Ok(rmcp::service::QuitReason::JoinError(e)) | Err(e) => format!("it crashed: {e}"),
        Ok(_) => "its connection ended".to_string(),
    };
    let reason = format!("{how}{}", server.stderr_tail());
    tracing::warn!("MCP server {name} stopped: {reason}");
    let names: Vec<&str> = live.tools.iter().map(|t| t.exposed.as_str()).collect();
    mcp.notice(format!(
        "The MCP server `{name}` stopped ({how}). Its tools are gone for the rest of this session: {}. Do not call them; do the task another way or tell the user it needs that server.",
        if names.is_empty() {
            "(it had none)".to_string()
        } else {
            names.join(", ")
        }
    ));
    *server.lock() = Status::Exited {
        reason,
        tools: live.tools.clone(),
    };
}

type Connected = (
    RunningService<RoleClient, ClientConfig>,
    Vec<McpTool>,
    Option<String>,
);

/// Connects, shakes hands and lists the tools.
async fn connect(server: &Server, cwd: &Path, limits: &Limits) -> Result<Connected, String> {
    let config = &server.config;
    let client = ClientConfig::new(
        ClientCapabilities::default(),
        Implementation::new("promptpack-agent", env!("CARGO_PKG_VERSION")),
    );
    let running = match &config.transport {
        Transport::Stdio {
            command,
            args,
            env,
            cwd: dir,
        } => {
            let mut process = tokio::process::Command::new(command);
            process
                .args(args)
                .envs(env)
                .current_dir(dir.as_deref().unwrap_or(cwd));
            let (child, stderr) = TokioChildProcess::builder(process)
                .stderr(std::process::Stdio::piped())
                .spawn()
                .map_err(|e| format!("cannot run `{command}`: {e}"))?;
            if let Some(stderr) = stderr {
                let lines = server.stderr.clone();
                let keep = limits.stderr_lines;
                let name = config.name.clone();
                tokio::spawn(async move {
                    let mut reader = tokio::io::BufReader::new(stderr).lines();
                    while let Ok(Some(mut line)) = reader.next_line().await {
                        tracing::debug!(server = %name, "stderr: {line}");
                        crate::provider::truncate_utf8(&mut line, 300);
                        let mut lines = lines.lock().unwrap_or_else(PoisonError::into_inner);
                        if lines.len() == keep {
                            lines.pop_front();
                        }
                        lines.push_back(line);
                    }
                });
            }
            client
                .serve(child)
                .await
                .map_err(|e| format!("the MCP handshake failed: {e}"))?
        }
        Transport::Http {
            url,
            headers,
            bearer_token_env,
        } => {
            let mut custom = HashMap::new();
            for (name, value) in headers {
                let name = reqwest::header::HeaderName::from_bytes(name.as_bytes())
                    .map_err(|e| format!("header {name:?}: {e}"))?;
                let value = reqwest::header::HeaderValue::from_str(value)
                    .map_err(|e| format!("header {name}: {e}"))?;
                custom.insert(name, value);
            }
            let mut transport_config =
                StreamableHttpClientTransportConfig::with_uri(url.as_str()).custom_headers(custom);
            if let Some(var) = bearer_token_env {
                let token = std::env::var(var)
                    .ok()
                    .filter(|t| !t.trim().is_empty())
                    .ok_or_else(|| {
                        format!("bearer_token_env names {var}, which is not set in the environment")
                    })?;
                transport_config = transport_config.auth_header(token);
            }
            let http = reqwest::Client::builder()
                .connect_timeout(Duration::from_secs(10))
                .build()
                .map_err(|e| e.to_string())?;
            let transport = StreamableHttpClientTransport::with_client(http, transport_config);
            client
                .serve(transport)
                .await
                .map_err(|e| format!("cannot connect to {url}: {e}"))?
        }
    };
    let instructions = running
        .peer_info()
        .and_then(|info| info.instructions.clone())
        .map(|mut text| {
            if text.len() > limits.instructions_bytes {
                crate::provider::truncate_utf8(&mut text, limits.instructions_bytes);
                text.push_str("\n[instructions cut: the server sent more than the limit]");
            }
            text
        });
    let listed = running
        .list_all_tools()
        .await
        .map_err(|e| format!("listing its tools failed: {e}"))?;
    let tools = offered_tools(config, listed, limits);
    Ok((running, tools, instructions))
}

/// The server's tools this session offers, named `mcp__<server>__<tool>`.
fn offered_tools(
    config: &McpServerConfig,
    listed: Vec<rmcp::model::Tool>,
    limits: &Limits,
) -> Vec<McpTool> {
    let mut tools: Vec<McpTool> = Vec::new();
    for tool in listed {
        let name = tool.name.to_string();
        if !config.offers(&name) {
            continue;
        }
        if tools.len() == limits.tools_per_server {
            tracing::warn!(
                "MCP server {} offers more than {} tools; the rest are left out",
                config.name,
                limits.tools_per_server
            );
            break;
        }
        let schema = Value::Object((*tool.input_schema).clone());
        if schema.to_string().len() > limits.schema_bytes {
            tracing::warn!(
                "MCP tool {name} of {}: its input schema is over {} bytes; not offered",
                config.name,
                limits.schema_bytes
            );
            continue;
        }
        let mut description = tool
            .description
            .as_deref()
            .or(tool.title.as_deref())
            .unwrap_or("")
            .trim()
            .to_string();
        crate::provider::truncate_utf8(&mut description, limits.description_bytes);
        let exposed = unique(exposed_name(&config.name, &name), &tools);
        tools.push(McpTool {
            exposed,
            name,
            description,
            schema,
            read_only: tool
                .annotations
                .as_ref()
                .and_then(|a| a.read_only_hint)
                .unwrap_or(false),
        });
    }
    tools
}

/// `mcp__<server>__<tool>` with anything outside `[A-Za-z0-9_-]` replaced by `_`, and,
/// past 64 characters, cut with a short hash of the full name so it stays unique.
pub fn exposed_name(server: &str, tool: &str) -> String {
    let clean: String = format!("{PREFIX}{server}__{tool}")
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect();
    if clean.len() <= MAX_NAME_LEN {
        return clean;
    }
    let hash = pack_format::sha256_hex(format!("{server}\0{tool}").as_bytes());
    format!("{}_{}", &clean[..MAX_NAME_LEN - 9], &hash[..8])
}

/// `name`, or `name` with a number added if an earlier tool already took it.
fn unique(name: String, taken: &[McpTool]) -> String {
    if !taken.iter().any(|t| t.exposed == name) {
        return name;
    }
    (2..)
        .map(|n| {
            let suffix = format!("_{n}");
            let keep = name.len().min(MAX_NAME_LEN - suffix.len());
            format!("{}{suffix}", &name[..keep])
        })
        .find(|candidate| !taken.iter().any(|t| &t.exposed == candidate))
        .unwrap_or(name)
}

/// One MCP tool, with the connection that runs it: what the toolbox holds as a handler
/// next to the built-in tools.
#[derive(Clone)]
pub struct McpToolHandle {
    server: Arc<Server>,
    live: Arc<Live>,
    index: usize,
    result_bytes: usize,
}

impl std::fmt::Debug for McpToolHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.tool().exposed)
    }
}

impl McpToolHandle {
    pub fn tool(&self) -> &McpTool {
        &self.live.tools[self.index]
    }

    pub fn spec(&self) -> ToolSpec {
        let tool = self.tool();
        ToolSpec {
            name: tool.exposed.clone(),
            description: tool.description.clone(),
            parameters: tool.schema.clone(),
        }
    }

    /// Calls the tool with the model's arguments, once the toolbox's permission check let
    /// the call through. Never fails the run: every problem is a result the model reads.
    pub async fn call(&self, arguments: &str, mut cancel: watch::Receiver<bool>) -> ToolOutput {
        let tool = self.tool();
        let server = &self.server.config.name;
        let arguments = match parse_arguments(arguments) {
            Ok(arguments) => arguments,
            Err(reason) => {
                return ToolOutput::error(format!(
                    "invalid arguments for {}: {reason}. Expected a JSON object matching: {}",
                    tool.exposed, tool.schema
                ));
            }
        };
        if self.server.live().is_none() {
            return ToolOutput::error(format!(
                "the MCP server `{server}` is not running any more, so {} is gone; do the task another way",
                tool.exposed
            ));
        }
        let mut params = CallToolRequestParams::new(tool.name.clone());
        if let Some(arguments) = arguments {
            params = params.with_arguments(arguments);
        }
        let timeout = self.server.config.tool_timeout;
        let call = tokio::time::timeout(timeout, self.live.peer.call_tool(params));
        // Dropping the request (timeout or interrupt) sends the server a cancellation.
        let answer = tokio::select! {
            answer = call => answer,
            _ = cancel.wait_for(|c| *c) => {
                return ToolOutput::error(format!("{} was cancelled: the user interrupted the run", tool.exposed));
            }
        };
        match answer {
            Err(_) => ToolOutput::error(format!(
                "{} did not answer within {}s (tool_timeout_secs of [mcp_servers.{server}]); the call was cancelled. Try a smaller request or go on without it.",
                tool.exposed,
                timeout.as_secs()
            )),
            Ok(Ok(result)) => render(result, self.result_bytes),
            Ok(Err(ServiceError::McpError(e))) => {
                ToolOutput::error(format!("{} failed: {}", tool.exposed, e.message))
            }
            Ok(Err(ServiceError::TransportClosed | ServiceError::TransportSend(_))) => {
                ToolOutput::error(format!(
                    "the MCP server `{server}` stopped during the call to {}; its tools are gone. Do the task another way or tell the user it needs that server.",
                    tool.exposed
                ))
            }
            Ok(Err(e)) => ToolOutput::error(format!("{} failed: {e}", tool.exposed)),
        }
    }
}

/// The model's arguments as a JSON object; empty text means none.
fn parse_arguments(text: &str) -> Result<Option<serde_json::Map<String, Value>>, String> {
    if text.trim().is_empty() {
        return Ok(None);
    }
    match serde_json::from_str::<Value>(text) {
        Ok(Value::Object(map)) => Ok(Some(map)),
        Ok(other) => Err(format!("expected a JSON object, found {other}")),
        Err(e) => Err(e.to_string()),
    }
}

/// A tool result as text for the model. Binary content is described, not sent.
fn render(result: CallToolResult, limit: usize) -> ToolOutput {
    let mut parts: Vec<String> = Vec::new();
    for block in &result.content {
        match block {
            ContentBlock::Text(text) => parts.push(text.text.clone()),
            ContentBlock::Image(image) => parts.push(format!(
                "[image {} of {} base64 bytes: images are not passed on]",
                image.mime_type,
                image.data.len()
            )),
            ContentBlock::Audio(audio) => parts.push(format!(
                "[audio {} of {} base64 bytes: audio is not passed on]",
                audio.mime_type,
                audio.data.len()
            )),
            ContentBlock::Resource(resource) => match &resource.resource {
                ResourceContents::TextResourceContents { uri, text, .. } => {
                    parts.push(format!("[resource {uri}]\n{text}"))
                }
                ResourceContents::BlobResourceContents {
                    uri,
                    mime_type,
                    blob,
                    ..
                } => parts.push(format!(
                    "[binary resource {uri} ({}, {} base64 bytes): not passed on]",
                    mime_type.as_deref().unwrap_or("unknown type"),
                    blob.len()
                )),
                _ => parts.push("[a resource of a kind this agent does not know]".to_string()),
            },
            ContentBlock::ResourceLink(link) => parts.push(format!(
                "[resource link {}]",
                serde_json::to_value(link)
                    .ok()
                    .and_then(|v| v.get("uri").and_then(Value::as_str).map(str::to_string))
                    .unwrap_or_default()
            )),
            // The content union may grow; say what came rather than drop it silently.
            other => parts.push(format!(
                "[{} content: not passed on]",
                serde_json::to_value(other)
                    .ok()
                    .and_then(|v| v.get("type").and_then(Value::as_str).map(str::to_string))
                    .unwrap_or_else(|| "unknown".to_string())
            )),
        }
    }
    if parts.is_empty()
        && let Some(structured) = &result.structured_content
    {
        parts.push(structured.to_string());
    }
    let text = if parts.is_empty() {
        "(the tool returned nothing)".to_string()
    } else {
        cut_middle(&parts.join("\n"), limit)
    };
    ToolOutput {
        content: text,
        is_error: result.is_error.unwrap_or(false),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exposed_names_are_safe_and_bounded() {
        assert_eq!(
            exposed_name("time", "get_current_time"),
            "mcp__time__get_current_time"
        );
        assert_eq!(exposed_name("e", "get-env"), "mcp__e__get-env");
        assert_eq!(exposed_name("e", "a.b/c d"), "mcp__e__a_b_c_d");
        let long = exposed_name("server", &"x".repeat(100));
        assert_eq!(long.len(), MAX_NAME_LEN);
        assert_ne!(long, exposed_name("server", &"x".repeat(101)));
    }

    #[test]
    fn arguments_must_be_an_object() {
        assert_eq!(parse_arguments(" ").unwrap(), None);
        assert!(parse_arguments("{\"a\":1}").unwrap().is_some());
        assert!(
            parse_arguments("[1]")
                .unwrap_err()
                .contains("expected a JSON object")
        );
        assert!(parse_arguments("{\"path\":").is_err());
    }
}
