//! A scripted model server for agents we did not write: OpenAI's chat-completions wire
//! (`POST …/chat/completions`, answered as an SSE stream of `chat.completion.chunk`s, tool
//! calls included) on loopback. It records every request body, so a test can read the
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
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let base_url = format!("http://{}/v1", listener.local_addr().unwrap());
        let recorded = Arc::new((Mutex::new(Recorded::default()), Condvar::new()));
        let script: Arc<Script> = Arc::new(script);
        let state = recorded.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let (state, script) = (state.clone(), script.clone());
                std::thread::spawn(move || serve(stream, &state, &*script));
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

fn serve(stream: TcpStream, state: &(Mutex<Recorded>, Condvar), script: &Script) {
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
    if method != "POST" || !path.ends_with("/chat/completions") {
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
    for event in sse(&reply, body["model"].as_str().unwrap_or("scripted")) {
        if writer
            .write_all(format!("data: {event}\n\n").as_bytes())
            .is_err()
        {
            return;
        }
        let _ = writer.flush();
    }
    let _ = writer.write_all(b"data: [DONE]\n\n");
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
