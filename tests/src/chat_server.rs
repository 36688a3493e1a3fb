//! A scripted model server for agents we did not write, on loopback, speaking one of three
//! wires ([`Wire`]): OpenAI's chat completions (`POST …/chat/completions`, an SSE stream of
//! `chat.completion.chunk`s), Anthropic's Messages (`POST /v1/messages`, an SSE stream of
//! `message_start` … `message_stop`) or OpenAI's Responses (`POST …/responses`, an SSE
//! stream of `response.*` events), tool calls included. It records every request body, so a test can read the
//! system prompt an agent sent. What it answers is the script's choice, made per request.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

/// One scripted answer.
#[derive(Debug, Clone)]
pub enum Reply {
    /// The model says this and stops.
    Text(String),
    /// The model calls one tool with these arguments.
    ToolCall { name: String, arguments: Value },
}

type Script = dyn Fn(&Value) -> Reply + Send + Sync;

/// The API a server speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wire {
    /// OpenAI chat completions (OpenCode's OpenAI-compatible provider).
    Chat,
    /// Anthropic Messages (Claude Code with `ANTHROPIC_BASE_URL`).
    Messages,
    /// OpenAI Responses (Codex with `wire_api = "responses"`).
    Responses,
}

impl Wire {
    fn serves(self, path: &str) -> bool {
        let path = path.split('?').next().unwrap_or("");
        match self {
            Wire::Chat => path.ends_with("/chat/completions"),
            Wire::Messages => path.ends_with("/v1/messages"),
            Wire::Responses => path.ends_with("/responses"),
        }
    }
}

#[derive(Default)]
struct Recorded {
    /// Every chat-completions request body, in the order they arrived.
    bodies: Vec<Value>,
    /// Anything else that was asked (method and path), answered 404.
    other: Vec<String>,
}

/// The server; it runs until the test process ends.
pub struct ChatServer {
    /// Base URL to configure as an OpenAI-compatible provider (ends in `/v1`).
    pub base_url: String,
    recorded: Arc<(Mutex<Recorded>, Condvar)>,
}

impl ChatServer {
    /// Answers each request with what `script` makes of its body.
    pub fn start(script: impl Fn(&Value) -> Reply + Send + Sync + 'static) -> Self {
        Self::start_on(Wire::Chat, script)
    }

    /// [`ChatServer::start`] speaking `wire`.
    pub fn start_on(wire: Wire, script: impl Fn(&Value) -> Reply + Send + Sync + 'static) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let base_url = format!("http://{}/v1", listener.local_addr().unwrap());
        let recorded = Arc::new((Mutex::new(Recorded::default()), Condvar::new()));
        let script: Arc<Script> = Arc::new(script);
        let state = recorded.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let (state, script) = (state.clone(), script.clone());
                std::thread::spawn(move || serve(wire, stream, &state, &*script));
            }
        });
        ChatServer { base_url, recorded }
    }

    /// Every chat-completions request body so far.
    pub fn requests(&self) -> Vec<Value> {
        self.recorded.0.lock().unwrap().bodies.clone()
    }

    /// Requests for anything but chat completions (method and path).
    pub fn other_requests(&self) -> Vec<String> {
        self.recorded.0.lock().unwrap().other.clone()
    }

    /// Waits until a request body satisfies `matches`, and returns it.
    pub fn until_request(&self, within: Duration, matches: impl Fn(&Value) -> bool) -> Value {
        let deadline = Instant::now() + within;
        let (lock, arrived) = &*self.recorded;
        let mut recorded = lock.lock().unwrap();
        loop {
            if let Some(body) = recorded.bodies.iter().find(|b| matches(b)) {
                return body.clone();
            }
            let left = deadline.saturating_duration_since(Instant::now());
            assert!(!left.is_zero(), "no such request within {within:?}");
            recorded = arrived.wait_timeout(recorded, left).unwrap().0;
        }
    }
}

/// The system prompt of a request: its `system` messages' text, in order.
pub fn system_prompt(body: &Value) -> String {
    messages(body)
        .iter()
        .filter(|m| m["role"] == "system")
        .map(|m| content_text(&m["content"]))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The messages of a request.
pub fn messages(body: &Value) -> Vec<Value> {
    body["messages"].as_array().cloned().unwrap_or_default()
}

/// A message's content as text: a string, or the text parts of an array.
pub fn content_text(content: &Value) -> String {
    match content {
        Value::String(text) => text.clone(),
        Value::Array(parts) => parts
            .iter()
            .filter_map(|p| p["text"].as_str())
            .collect::<Vec<_>>()
            .join(""),
        _ => String::new(),
    }
}

fn serve(wire: Wire, stream: TcpStream, state: &(Mutex<Recorded>, Condvar), script: &Script) {
    let _ = stream.set_read_timeout(Some(Duration::from_secs(60)));
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut writer = stream;
    // One request per connection: the answer closes it, which also ends the SSE body.
    let mut line = String::new();
    if reader.read_line(&mut line).unwrap_or(0) == 0 {
        return;
    }
    let mut parts = line.split_whitespace();
    let (method, path) = (
        parts.next().unwrap_or("").to_string(),
        parts.next().unwrap_or("").to_string(),
    );
    let mut length = 0usize;
    let mut chunked = false;
    loop {
        let mut header = String::new();
        if reader.read_line(&mut header).unwrap_or(0) == 0 {
            return;
        }
        let header = header.trim_end();
        if header.is_empty() {
            break;
        }
        let (name, value) = header.split_once(':').unwrap_or((header, ""));
        match name.trim().to_ascii_lowercase().as_str() {
            "content-length" => length = value.trim().parse().unwrap_or(0),
            "transfer-encoding" => chunked = value.to_ascii_lowercase().contains("chunked"),
            _ => {}
        }
    }
    let body = if chunked {
        read_chunked(&mut reader)
    } else {
        let mut body = vec![0; length];
        if reader.read_exact(&mut body).is_err() {
            return;
        }
        body
    };
    let (lock, arrived) = state;
    if method != "POST" || !wire.serves(&path) {
        lock.lock().unwrap().other.push(format!("{method} {path}"));
        let _ = writer
            .write_all(b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\nconnection: close\r\n\r\n");
        return;
    }
    let Ok(body) = serde_json::from_slice::<Value>(&body) else {
        let _ = writer.write_all(
            b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\nconnection: close\r\n\r\n",
        );
        return;
    };
    lock.lock().unwrap().bodies.push(body.clone());
    arrived.notify_all();
    let reply = script(&body);
    let _ = writer.write_all(
        b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncache-control: no-cache\r\nconnection: close\r\n\r\n",
    );
    let model = body["model"].as_str().unwrap_or("scripted");
    let events = match wire {
        Wire::Chat => sse(&reply, model).into_iter().map(|e| (None, e)).collect(),
        Wire::Messages => messages_sse(&reply, model),
        Wire::Responses => responses_sse(&reply, model),
    };
    for (name, event) in events {
        let name = name.map(|n| format!("event: {n}\n")).unwrap_or_default();
        if writer
            .write_all(format!("{name}data: {event}\n\n").as_bytes())
            .is_err()
        {
            return;
        }
        let _ = writer.flush();
    }
    if wire == Wire::Chat {
        let _ = writer.write_all(b"data: [DONE]\n\n");
    }
}

/// One answer as Anthropic's Messages API streams it: named events, the text or the tool
/// call's input in pieces.
fn messages_sse(reply: &Reply, model: &str) -> Vec<(Option<&'static str>, Value)> {
    let mut events = vec![(
        Some("message_start"),
        json!({"type": "message_start", "message": {"id": "msg_scripted", "type": "message",
            "role": "assistant", "model": model, "content": [], "stop_reason": null,
            "stop_sequence": null, "usage": {"input_tokens": 100, "output_tokens": 1}}}),
    )];
    let stop = match reply {
        Reply::Text(text) => {
            events.push((
                Some("content_block_start"),
                json!({"type": "content_block_start", "index": 0,
                    "content_block": {"type": "text", "text": ""}}),
            ));
            for piece in pieces(text) {
                events.push((
                    Some("content_block_delta"),
                    json!({"type": "content_block_delta", "index": 0,
                        "delta": {"type": "text_delta", "text": piece}}),
                ));
            }
            "end_turn"
        }
        Reply::ToolCall { name, arguments } => {
            events.push((
                Some("content_block_start"),
                json!({"type": "content_block_start", "index": 0,
                    "content_block": {"type": "tool_use", "id": "toolu_scripted_1",
                        "name": name, "input": {}}}),
            ));
            for piece in pieces(&arguments.to_string()) {
                events.push((
                    Some("content_block_delta"),
                    json!({"type": "content_block_delta", "index": 0,
                        "delta": {"type": "input_json_delta", "partial_json": piece}}),
                ));
            }
            "tool_use"
        }
    };
    events.push((
        Some("content_block_stop"),
        json!({"type": "content_block_stop", "index": 0}),
    ));
    events.push((
        Some("message_delta"),
        json!({"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": null},
            "usage": {"output_tokens": 10}}),
    ));
    events.push((Some("message_stop"), json!({"type": "message_stop"})));
    events
}

/// One answer as OpenAI's Responses API streams it: the response created, one output item
/// (a message with its text in pieces, or a function call), the response completed.
fn responses_sse(reply: &Reply, model: &str) -> Vec<(Option<&'static str>, Value)> {
    let response = |status: &str, output: Value| {
        json!({"id": "resp_scripted", "object": "response", "created_at": 1_700_000_000,
            "status": status, "model": model, "output": output,
            "usage": {"input_tokens": 100, "input_tokens_details": {"cached_tokens": 0},
                "output_tokens": 10, "output_tokens_details": {"reasoning_tokens": 0},
                "total_tokens": 110}})
    };
    let mut events = vec![(
        Some("response.created"),
        json!({"type": "response.created", "response": response("in_progress", json!([]))}),
    )];
    let item = match reply {
        Reply::Text(text) => {
            events.push((
                Some("response.output_item.added"),
                json!({"type": "response.output_item.added", "output_index": 0,
                    "item": {"type": "message", "id": "msg_scripted", "role": "assistant",
                        "status": "in_progress", "content": []}}),
            ));
            for piece in pieces(text) {
                events.push((
                    Some("response.output_text.delta"),
                    json!({"type": "response.output_text.delta", "item_id": "msg_scripted",
                        "output_index": 0, "content_index": 0, "delta": piece}),
                ));
            }
            json!({"type": "message", "id": "msg_scripted", "role": "assistant",
                "status": "completed",
                "content": [{"type": "output_text", "text": text, "annotations": []}]})
        }
        Reply::ToolCall { name, arguments } => json!({"type": "function_call",
            "id": "fc_scripted", "call_id": "call_scripted_1", "name": name,
            "arguments": arguments.to_string(), "status": "completed"}),
    };
    events.push((
        Some("response.output_item.done"),
        json!({"type": "response.output_item.done", "output_index": 0, "item": item}),
    ));
    events.push((
        Some("response.completed"),
        json!({"type": "response.completed", "response": response("completed", json!([item]))}),
    ));
    events
}

fn read_chunked(reader: &mut impl BufRead) -> Vec<u8> {
    let mut body = Vec::new();
    loop {
        let mut size = String::new();
        if reader.read_line(&mut size).unwrap_or(0) == 0 {
            return body;
        }
        let size =
            usize::from_str_radix(size.trim().split(';').next().unwrap_or(""), 16).unwrap_or(0);
        let mut chunk = vec![0; size + 2];
        if size == 0 || reader.read_exact(&mut chunk).is_err() {
            return body;
        }
        body.extend_from_slice(&chunk[..size]);
    }
}

/// The chunks of one streamed answer, as OpenAI sends them: the role first, the content or
/// the tool call's arguments in pieces, then the finish reason and the usage.
fn sse(reply: &Reply, model: &str) -> Vec<Value> {
    let chunk = |delta: Value, finish: Value| {
        json!({
            "id": "chatcmpl-scripted",
            "object": "chat.completion.chunk",
            "created": 1_700_000_000,
            "model": model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        })
    };
    let mut events = vec![chunk(
        json!({"role": "assistant", "content": ""}),
        Value::Null,
    )];
    let finish = match reply {
        Reply::Text(text) => {
            for piece in pieces(text) {
                events.push(chunk(json!({"content": piece}), Value::Null));
            }
            "stop"
        }
        Reply::ToolCall { name, arguments } => {
            events.push(chunk(
                json!({"tool_calls": [{"index": 0, "id": "call_scripted_1", "type": "function",
                    "function": {"name": name, "arguments": ""}}]}),
                Value::Null,
            ));
            for piece in pieces(&arguments.to_string()) {
                events.push(chunk(
                    json!({"tool_calls": [{"index": 0, "function": {"arguments": piece}}]}),
                    Value::Null,
                ));
            }
            "tool_calls"
        }
    };
    events.push(chunk(json!({}), json!(finish)));
    let mut usage = chunk(json!({}), Value::Null);
    usage["choices"] = json!([]);
    usage["usage"] = json!({"prompt_tokens": 100, "completion_tokens": 10, "total_tokens": 110});
    events.push(usage);
    events
}

/// `text` in pieces of about 16 bytes, cut on character boundaries.
fn pieces(text: &str) -> Vec<String> {
    let mut out = vec![String::new()];
    for c in text.chars() {
        if out.last().unwrap().len() >= 16 {
            out.push(String::new());
        }
        out.last_mut().unwrap().push(c);
    }
    out
}
