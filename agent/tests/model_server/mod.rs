//! A local model server that replays recorded SSE transcripts in the real wire formats and
//! checks the conversation the client sends back: every tool call it handed out must be
//! answered by exactly one tool result before the model speaks again.
//!
//! It runs on its own thread and runtime, so blocking tests (which run the `agent`
//! binary) and async tests can both use it.

#![allow(dead_code)]

pub mod prompt_cache;

use std::collections::{BTreeMap, VecDeque};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::Response;
use serde_json::Value;

/// One scripted answer.
#[derive(Debug, Clone)]
pub enum Reply {
    /// An SSE transcript sent as the response body.
    Sse(String),
    /// A plain error answer, e.g. 429 with `Retry-After`.
    Status {
        status: u16,
        retry_after: Option<String>,
        body: String,
    },
    /// Sends this much of a transcript and then nothing, never closing.
    Stall(String),
    /// An answer with any status, headers and body, for servers that misbehave.
    Raw {
        status: u16,
        headers: Vec<(String, String)>,
        body: Vec<u8>,
    },
    /// An error status whose body starts and then stalls, never closing.
    StatusStall { status: u16, body_start: String },
    /// A reply made from the request it answers (e.g. a path the runtime chose).
    FromRequest(fn(&Value) -> Reply),
    /// An SSE transcript sent only after a pause, as a slow server reading a long prompt.
    Delayed { wait: Duration, sse: String },
}

impl Reply {
    /// A transcript from `tests/fixtures/`, with every `{{KEY}}` replaced.
    pub fn fixture(name: &str, vars: &[(&str, &str)]) -> Reply {
        Reply::Sse(fixture(name, vars))
    }
}

/// A fresh directory outside the workspace and outside every temp directory `workspace` mode
/// may write (`/tmp` and the system temp directory): under cargo's target directory, unless
/// the checkout itself lives in a temp directory, then under `/var/tmp` or `$HOME`.
pub fn outside_tmp() -> tempfile::TempDir {
    let temp = [Path::new("/tmp").to_path_buf(), std::env::temp_dir()];
    let in_temp = |dir: &Path| {
        let dir = dir.canonicalize().unwrap_or_else(|_| dir.to_path_buf());
        temp.iter()
            .any(|t| dir.starts_with(t.canonicalize().unwrap_or_else(|_| t.clone())))
    };
    let candidates = [
        Some(std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR"))),
        Some(std::path::PathBuf::from("/var/tmp")),
        std::env::var_os("HOME").map(std::path::PathBuf::from),
    ];
    for dir in candidates.into_iter().flatten() {
        if dir.is_dir()
            && !in_temp(&dir)
            && let Ok(made) = tempfile::tempdir_in(&dir)
        {
            return made;
        }
    }
    panic!("no writable directory outside /tmp and the temp directory for this test");
}

pub fn fixture(name: &str, vars: &[(&str, &str)]) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name);
    let mut text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("fixture {}: {e}", path.display()));
    for (key, value) in vars {
        text = text.replace(&format!("{{{{{key}}}}}"), value);
    }
    text
}

#[derive(Default)]
struct Inner {
    replies: VecDeque<Reply>,
    /// Every request: path, headers of interest, JSON body.
    requests: Vec<Recorded>,
    violations: Vec<String>,
    /// Tool-call ids the last reply of each conversation handed out; that conversation's
    /// next request must answer them. Conversations are told apart by their first user
    /// message, because a delegated child talks to the model in between its parent's calls.
    handed_out: BTreeMap<String, Vec<String>>,
    /// When set, answers report input tokens read from and written to this cache.
    cache: Option<prompt_cache::PromptCache>,
    /// What the cache counted for each model request, in order.
    counted: Vec<prompt_cache::Counted>,
    /// JSON answered to `GET <path>` (a model list, llama.cpp's `/props`); any other GET
    /// is a 404.
    gets: BTreeMap<String, Value>,
    /// The paths of every GET, in order.
    get_log: Vec<String>,
}

#[derive(Debug, Clone)]
pub struct Recorded {
    pub path: String,
    pub authorization: Option<String>,
    pub body: Value,
}

#[derive(Clone)]
pub struct ModelServer {
    pub addr: String,
    inner: Arc<Mutex<Inner>>,
}

impl ModelServer {
    pub fn start(replies: Vec<Reply>) -> ModelServer {
        let inner = Arc::new(Mutex::new(Inner {
            replies: replies.into(),
            ..Default::default()
        }));
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let addr = format!("http://{}", listener.local_addr().unwrap());
        let state = inner.clone();
        std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            runtime.block_on(async move {
                let listener = tokio::net::TcpListener::from_std(listener).unwrap();
                let app = axum::Router::new()
                    .fallback(axum::routing::any(handle))
                    .with_state(state);
                axum::serve(listener, app).await.unwrap();
            });
        });
        ModelServer { addr, inner }
    }

    /// Base URL for `api = "openai"` (includes `/v1`).
    pub fn openai_base(&self) -> String {
        format!("{}/v1", self.addr)
    }

    pub fn requests(&self) -> Vec<Recorded> {
        self.inner.lock().unwrap().requests.clone()
    }

    pub fn remaining(&self) -> usize {
        self.inner.lock().unwrap().replies.len()
    }

    pub fn push(&self, reply: Reply) {
        self.inner.lock().unwrap().replies.push_back(reply);
    }

    /// Keeps a prompt cache as the real APIs do ([`prompt_cache`]) and reports its reads
    /// and writes in every answer's usage, in place of the script's numbers.
    pub fn with_prompt_cache(self) -> ModelServer {
        self.inner.lock().unwrap().cache = Some(prompt_cache::PromptCache::default());
        self
    }

    /// What the prompt cache counted for each model request so far.
    pub fn counted(&self) -> Vec<prompt_cache::Counted> {
        self.inner.lock().unwrap().counted.clone()
    }

    /// Answers `GET path` with `json` from now on.
    pub fn serve_get(&self, path: &str, json: Value) {
        self.inner
            .lock()
            .unwrap()
            .gets
            .insert(path.to_string(), json);
    }

    /// The paths of the GET requests so far.
    pub fn gets(&self) -> Vec<String> {
        self.inner.lock().unwrap().get_log.clone()
    }

    /// Panics with every protocol violation seen so far.
    pub fn assert_clean(&self) {
        let inner = self.inner.lock().unwrap();
        assert!(
            inner.violations.is_empty(),
            "tool-call protocol violations:\n{}",
            inner.violations.join("\n")
        );
    }
}

async fn handle(
    State(state): State<Arc<Mutex<Inner>>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: String,
) -> Response {
    if method == Method::GET {
        let mut inner = state.lock().unwrap();
        inner.get_log.push(uri.path().to_string());
        return match inner.gets.get(uri.path()) {
            Some(json) => Response::builder()
                .header("content-type", "application/json")
                .body(Body::from(json.to_string()))
                .unwrap(),
            None => Response::builder()
                .status(404)
                .body(Body::from("not found"))
                .unwrap(),
        };
    }
    let body: Value = serde_json::from_str(&body).unwrap_or(Value::Null);
    let anthropic = uri.path().ends_with("/v1/messages");
    let reply = {
        let mut inner = state.lock().unwrap();
        let mut problems = check_conversation(&body);
        if anthropic {
            problems.extend(prompt_cache::breakpoint_problems(&body));
        }
        let answered = call_ids(&body);
        let key = conversation_key(&body);
        for id in inner.handed_out.remove(&key).unwrap_or_default() {
            if !answered.contains_key(&id) {
                problems.push(format!(
                    "tool call {id} from the last reply was not sent back"
                ));
            }
        }
        let n = inner.requests.len();
        inner
            .violations
            .extend(problems.into_iter().map(|p| format!("request {n}: {p}")));
        inner.requests.push(Recorded {
            path: uri.path().to_string(),
            authorization: headers
                .get("authorization")
                .or_else(|| headers.get("x-api-key"))
                .and_then(|v| v.to_str().ok())
                .map(str::to_string),
            body,
        });
        let mut reply = inner.replies.pop_front();
        if let Some(Reply::FromRequest(make)) = reply {
            reply = Some(make(&inner.requests[n].body));
        }
        if let Some(Reply::Sse(text) | Reply::Delayed { sse: text, .. }) = &reply {
            inner.handed_out.insert(key, handed_out_ids(text));
        }
        let inner = &mut *inner;
        let request = &inner.requests[n].body;
        let counted = inner.cache.as_mut().map(|cache| {
            if anthropic {
                cache.anthropic(request)
            } else {
                cache.openai(request)
            }
        });
        if let Some(counted) = counted {
            inner.counted.push(counted);
            if let Some(Reply::Sse(text) | Reply::Delayed { sse: text, .. }) = &mut reply {
                *text = prompt_cache::with_usage(text, counted, anthropic);
            }
        }
        reply
    };
    match reply {
        Some(Reply::FromRequest(_)) => Response::builder()
            .status(500)
            .body(Body::from(
                "a reply made from a request made another such reply",
            ))
            .unwrap(),
        None => Response::builder()
            .status(500)
            .body(Body::from("the script has no more replies"))
            .unwrap(),
        Some(Reply::Sse(text)) => sse(Body::from(text)),
        Some(Reply::Delayed { wait, sse: text }) => {
            tokio::time::sleep(wait).await;
            sse(Body::from(text))
        }
        Some(Reply::Status {
            status,
            retry_after,
            body,
        }) => {
            let mut builder = Response::builder().status(StatusCode::from_u16(status).unwrap());
            if let Some(value) = retry_after {
                builder = builder.header("retry-after", value);
            }
            builder.body(Body::from(body)).unwrap()
        }
        Some(Reply::Raw {
            status,
            headers,
            body,
        }) => {
            let mut builder = Response::builder().status(StatusCode::from_u16(status).unwrap());
            for (name, value) in headers {
                builder = builder.header(name, value);
            }
            builder.body(Body::from(body)).unwrap()
        }
        Some(Reply::StatusStall { status, body_start }) => {
            let first = futures_util::stream::once(async move {
                Ok::<_, std::io::Error>(axum::body::Bytes::from(body_start))
            });
            let never = futures_util::stream::pending();
            use futures_util::StreamExt;
            Response::builder()
                .status(StatusCode::from_u16(status).unwrap())
                .body(Body::from_stream(first.chain(never)))
                .unwrap()
        }
        Some(Reply::Stall(text)) => {
            let first = futures_util::stream::once(async move {
                Ok::<_, std::io::Error>(axum::body::Bytes::from(text))
            });
            let never = futures_util::stream::pending();
            use futures_util::StreamExt;
            sse(Body::from_stream(first.chain(never)))
        }
    }
}

fn sse(body: Body) -> Response {
    Response::builder()
        .header("content-type", "text/event-stream")
        .header("cache-control", "no-cache")
        .body(body)
        .unwrap()
}

/// The first user message of a request, in either format.
fn conversation_key(body: &Value) -> String {
    for message in body["messages"].as_array().into_iter().flatten() {
        if message["role"] != "user" {
            continue;
        }
        if let Some(text) = message["content"].as_str() {
            return text.to_string();
        }
        for block in message["content"].as_array().into_iter().flatten() {
            if let Some(text) = block["text"].as_str() {
                return text.to_string();
            }
        }
    }
    String::new()
}

/// An OpenAI-format answer with text only.
pub fn openai_text(text: &str) -> Reply {
    let chunk = serde_json::json!({
        "choices": [{"index": 0, "delta": {"role": "assistant", "content": text}, "finish_reason": null}]
    });
    let done = serde_json::json!({
        "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 100, "completion_tokens": 20}
    });
    Reply::Sse(format!("data: {chunk}\n\ndata: {done}\n\ndata: [DONE]\n\n"))
}

/// An OpenAI-format answer calling tools: `(id, name, arguments)`.
pub fn openai_calls(calls: &[(&str, &str, Value)]) -> Reply {
    openai_calls_with_usage(calls, 100)
}

/// Like [`openai_calls`], reporting `prompt_tokens` input tokens.
pub fn openai_calls_with_usage(calls: &[(&str, &str, Value)], prompt_tokens: u64) -> Reply {
    let mut text = String::new();
    for (i, (id, name, args)) in calls.iter().enumerate() {
        let chunk = serde_json::json!({
            "choices": [{"index": 0, "delta": {"tool_calls": [{
                "index": i, "id": id, "type": "function",
                "function": {"name": name, "arguments": args.to_string()}
            }]}, "finish_reason": null}]
        });
        text.push_str(&format!("data: {chunk}\n\n"));
    }
    let done = serde_json::json!({
        "choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}],
        "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": 20}
    });
    text.push_str(&format!("data: {done}\n\ndata: [DONE]\n\n"));
    Reply::Sse(text)
}

/// A Messages-format answer with text only.
pub fn anthropic_text(text: &str) -> Reply {
    let events = [
        serde_json::json!({"type": "message_start", "message": {"id": "msg_t", "type": "message", "role": "assistant", "content": [], "usage": {"input_tokens": 100, "output_tokens": 1}}}),
        serde_json::json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
        serde_json::json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": text}}),
        serde_json::json!({"type": "content_block_stop", "index": 0}),
        serde_json::json!({"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 20}}),
        serde_json::json!({"type": "message_stop"}),
    ];
    Reply::Sse(anthropic_sse(&events))
}

/// A Messages-format answer calling tools: `(id, name, arguments)`.
pub fn anthropic_calls(calls: &[(&str, &str, Value)]) -> Reply {
    anthropic_calls_with_usage(calls, 100)
}

/// Like [`anthropic_calls`], reporting `input_tokens` input tokens.
pub fn anthropic_calls_with_usage(calls: &[(&str, &str, Value)], input_tokens: u64) -> Reply {
    let mut events = vec![
        serde_json::json!({"type": "message_start", "message": {"id": "msg_c", "type": "message", "role": "assistant", "content": [], "usage": {"input_tokens": input_tokens, "output_tokens": 1}}}),
    ];
    for (i, (id, name, args)) in calls.iter().enumerate() {
        events.push(serde_json::json!({"type": "content_block_start", "index": i, "content_block": {"type": "tool_use", "id": id, "name": name, "input": {}}}));
        events.push(serde_json::json!({"type": "content_block_delta", "index": i, "delta": {"type": "input_json_delta", "partial_json": args.to_string()}}));
        events.push(serde_json::json!({"type": "content_block_stop", "index": i}));
    }
    events.push(serde_json::json!({"type": "message_delta", "delta": {"stop_reason": "tool_use"}, "usage": {"output_tokens": 20}}));
    events.push(serde_json::json!({"type": "message_stop"}));
    Reply::Sse(anthropic_sse(&events))
}

fn anthropic_sse(events: &[Value]) -> String {
    events
        .iter()
        .map(|e| format!("event: {}\ndata: {e}\n\n", e["type"].as_str().unwrap_or("")))
        .collect()
}

/// Runs `agent exec --json` against `server` (OpenAI format) and returns the output.
pub fn exec(
    server: &ModelServer,
    home: &Path,
    cwd: &Path,
    env: &[(&str, &str)],
    args: &[&str],
) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_agent"))
        .arg("exec")
        .arg("--json")
        .args(args)
        .current_dir(cwd)
        .env("AGENT_HOME", home)
        .env("AGENT_BASE_URL", server.openai_base())
        .env("AGENT_API", "openai")
        .env("AGENT_MODEL", "test-model")
        .env_remove("AGENT_API_KEY")
        .env_remove("AGENT_CONTEXT_TOKENS")
        .envs(env.iter().copied())
        .output()
        .unwrap()
}

/// The system prompt and the messages of a recorded OpenAI-format request.
pub fn system_of(request: &Recorded) -> String {
    request.body["messages"][0]["content"]
        .as_str()
        .unwrap_or("")
        .to_string()
}

/// The tool names a recorded OpenAI-format request offered.
pub fn tools_of(request: &Recorded) -> Vec<String> {
    request.body["tools"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|t| t["function"]["name"].as_str().unwrap_or("").to_string())
        .collect()
}

/// Tool-call ids in a transcript, in either format. Empty ids are the client's to fill.
fn handed_out_ids(transcript: &str) -> Vec<String> {
    let mut ids = Vec::new();
    for line in transcript.lines() {
        let Some(data) = line.strip_prefix("data:") else {
            continue;
        };
        let Ok(value) = serde_json::from_str::<Value>(data.trim()) else {
            continue;
        };
        if value["type"] == "content_block_start" && value["content_block"]["type"] == "tool_use" {
            ids.push(
                value["content_block"]["id"]
                    .as_str()
                    .unwrap_or("")
                    .to_string(),
            );
        }
        for choice in value["choices"].as_array().into_iter().flatten() {
            for call in choice["delta"]["tool_calls"]
                .as_array()
                .into_iter()
                .flatten()
            {
                if let Some(id) = call["id"].as_str() {
                    ids.push(id.to_string());
                }
            }
        }
    }
    ids.retain(|id| !id.is_empty());
    ids
}

/// Tool calls in the request with how many results each got.
fn call_ids(body: &Value) -> BTreeMap<String, usize> {
    let mut calls = BTreeMap::new();
    for (kind, id) in events(body) {
        match kind {
            Event::Call => {
                calls.entry(id).or_insert(0);
            }
            Event::Result => *calls.entry(id).or_insert(0) += 1,
            Event::Speaks => {}
        }
    }
    calls
}

enum Event {
    Call,
    Result,
    /// An assistant message starts.
    Speaks,
}

/// The conversation as a flat list of call / result / assistant-turn events.
fn events(body: &Value) -> Vec<(Event, String)> {
    let mut out = Vec::new();
    for message in body["messages"].as_array().into_iter().flatten() {
        let role = message["role"].as_str().unwrap_or_default();
        if role == "assistant" {
            out.push((Event::Speaks, String::new()));
        }
        // OpenAI shape.
        for call in message["tool_calls"].as_array().into_iter().flatten() {
            out.push((Event::Call, call["id"].as_str().unwrap_or("").to_string()));
        }
        if role == "tool" {
            let id = message["tool_call_id"].as_str().unwrap_or("").to_string();
            out.push((Event::Result, id));
        }
        // Anthropic shape.
        for block in message["content"].as_array().into_iter().flatten() {
            match block["type"].as_str() {
                Some("tool_use") => {
                    out.push((Event::Call, block["id"].as_str().unwrap_or("").to_string()))
                }
                Some("tool_result") => out.push((
                    Event::Result,
                    block["tool_use_id"].as_str().unwrap_or("").to_string(),
                )),
                _ => {}
            }
        }
    }
    out
}

/// Every call answered exactly once, before the assistant's next message, and no result
/// without a call.
fn check_conversation(body: &Value) -> Vec<String> {
    let mut problems = Vec::new();
    let mut open: BTreeMap<String, usize> = BTreeMap::new();
    let flush = |open: &mut BTreeMap<String, usize>, problems: &mut Vec<String>| {
        for (id, n) in std::mem::take(open) {
            if n != 1 {
                problems.push(format!("tool call {id:?} got {n} results"));
            }
        }
    };
    for (kind, id) in events(body) {
        match kind {
            Event::Speaks => flush(&mut open, &mut problems),
            Event::Call => {
                if id.is_empty() {
                    problems.push("a tool call was sent back with an empty id".into());
                }
                open.insert(id, 0);
            }
            Event::Result => match open.get_mut(&id) {
                Some(n) => *n += 1,
                None => problems.push(format!("tool result for {id:?} matches no open call")),
            },
        }
    }
    flush(&mut open, &mut problems);
    problems
}

/// Waits until `f` holds, for tests watching a background process.
pub fn wait_for(what: &str, mut f: impl FnMut() -> bool) {
    for _ in 0..500 {
        if f() {
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    panic!("timed out waiting for {what}");
}
