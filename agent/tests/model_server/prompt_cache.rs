//! The scripted server's prompt cache, kept the way the real APIs keep theirs, so the
//! cache figures a test reads mean what a real server's would.
//!
//! A request is a row of blocks in the order the APIs cache them: each tool, the system
//! prompt, then every message's content blocks (their role included). A prefix is cached
//! under the hash of its blocks; tokens are counted as four bytes each.
//!
//! - Anthropic Messages: only prefixes ending at a `cache_control` breakpoint are written,
//!   from 1,024 tokens up. A read is the longest cached prefix ending at a breakpoint or at
//!   one of the 20 block boundaries before it. Usage reports the read part as
//!   `cache_read_input_tokens`, the part up to the last breakpoint that was not read as
//!   `cache_creation_input_tokens`, and the rest as `input_tokens`.
//! - OpenAI Chat Completions: every prefix of 1,024 tokens or more is cached, with no
//!   markers; a read counts in steps of 128 tokens, reported as
//!   `prompt_tokens_details.cached_tokens` within `prompt_tokens`.

use std::collections::HashMap;
use std::hash::{DefaultHasher, Hash, Hasher};

use serde_json::Value;

/// The smallest prefix either API caches.
const MIN_CACHED: u64 = 1024;
/// How many block boundaries before a breakpoint the Messages API looks for a cached
/// prefix.
const LOOKBACK: usize = 20;
/// OpenAI counts cached tokens in steps of this many.
const OPENAI_STEP: u64 = 128;

/// What one request cost, as the server reports it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counted {
    /// Every input token.
    pub total: u64,
    pub read: u64,
    pub written: u64,
}

impl Counted {
    /// The input tokens neither read from the cache nor written to it.
    pub fn uncached(&self) -> u64 {
        self.total - self.read - self.written
    }
}

#[derive(Debug, Default)]
pub struct PromptCache {
    /// Prefix hash → its tokens.
    entries: HashMap<u64, u64>,
}

/// One block of a request, as cached: its bytes without breakpoints, and whether it
/// carried one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Block {
    pub text: String,
    pub breakpoint: bool,
}

impl PromptCache {
    /// Counts (and caches) one Messages API request.
    pub fn anthropic(&mut self, body: &Value) -> Counted {
        let blocks = anthropic_blocks(body);
        let (tokens, hashes) = prefixes(&blocks);
        let breakpoints: Vec<usize> = (1..=blocks.len())
            .filter(|&end| blocks[end - 1].breakpoint)
            .collect();
        let read = breakpoints
            .iter()
            .flat_map(|&end| (end.saturating_sub(LOOKBACK).max(1)..=end).rev())
            .filter(|&end| self.entries.contains_key(&hashes[end]))
            .map(|end| tokens[end])
            .max()
            .unwrap_or(0);
        let last = breakpoints.last().map_or(0, |&end| tokens[end]);
        let written = if last >= MIN_CACHED {
            last.saturating_sub(read)
        } else {
            0
        };
        for &end in &breakpoints {
            if tokens[end] >= MIN_CACHED {
                self.entries.insert(hashes[end], tokens[end]);
            }
        }
        Counted {
            total: *tokens.last().unwrap_or(&0),
            read,
            written,
        }
    }

    /// Counts (and caches) one Chat Completions request.
    pub fn openai(&mut self, body: &Value) -> Counted {
        let blocks = openai_blocks(body);
        let (tokens, hashes) = prefixes(&blocks);
        let longest = (1..=blocks.len())
            .rev()
            .find(|&end| self.entries.contains_key(&hashes[end]))
            .map_or(0, |end| tokens[end]);
        let read = if longest >= MIN_CACHED {
            longest / OPENAI_STEP * OPENAI_STEP
        } else {
            0
        };
        for end in 1..=blocks.len() {
            if tokens[end] >= MIN_CACHED {
                self.entries.insert(hashes[end], tokens[end]);
            }
        }
        Counted {
            total: *tokens.last().unwrap_or(&0),
            read,
            written: 0,
        }
    }
}

/// Tokens and hash of every prefix: index `n` is the first `n` blocks.
fn prefixes(blocks: &[Block]) -> (Vec<u64>, Vec<u64>) {
    let mut tokens = vec![0];
    let mut hashes = Vec::with_capacity(blocks.len() + 1);
    let mut hasher = DefaultHasher::new();
    let mut bytes = 0u64;
    hashes.push(hasher.finish());
    for block in blocks {
        block.text.hash(&mut hasher);
        bytes += block.text.len() as u64;
        tokens.push(bytes.div_ceil(4));
        hashes.push(hasher.finish());
    }
    (tokens, hashes)
}

/// A block's JSON without its breakpoint, and whether it had one.
fn strip(block: &Value) -> (Value, bool) {
    let mut block = block.clone();
    let marked = block
        .as_object_mut()
        .and_then(|o| o.remove("cache_control"))
        .is_some();
    (block, marked)
}

/// A Messages API request as the blocks it is cached in: tools, system, messages.
pub fn anthropic_blocks(body: &Value) -> Vec<Block> {
    let mut blocks = Vec::new();
    for tool in body["tools"].as_array().into_iter().flatten() {
        let (tool, breakpoint) = strip(tool);
        blocks.push(Block {
            text: tool.to_string(),
            breakpoint,
        });
    }
    match &body["system"] {
        Value::String(text) => blocks.push(Block {
            text: Value::String(text.clone()).to_string(),
            breakpoint: false,
        }),
        Value::Array(parts) => {
            for part in parts {
                let (part, breakpoint) = strip(part);
                blocks.push(Block {
                    text: part.to_string(),
                    breakpoint,
                });
            }
        }
        _ => {}
    }
    for message in body["messages"].as_array().into_iter().flatten() {
        let role = message["role"].as_str().unwrap_or_default();
        match &message["content"] {
            Value::Array(parts) => {
                for (i, part) in parts.iter().enumerate() {
                    let (part, breakpoint) = strip(part);
                    let lead = if i == 0 { role } else { "" };
                    blocks.push(Block {
                        text: format!("{lead}:{part}"),
                        breakpoint,
                    });
                }
            }
            content => blocks.push(Block {
                text: format!("{role}:{content}"),
                breakpoint: false,
            }),
        }
    }
    blocks
}

/// A Chat Completions request as the blocks a server renders it in: tools, then each
/// message.
pub fn openai_blocks(body: &Value) -> Vec<Block> {
    body["tools"]
        .as_array()
        .into_iter()
        .flatten()
        .chain(body["messages"].as_array().into_iter().flatten())
        .map(|v| Block {
            text: v.to_string(),
            breakpoint: false,
        })
        .collect()
}

/// Problems a Messages API server answers 400 for: more than four breakpoints, a type
/// other than `ephemeral`, a breakpoint on an empty text block.
pub fn breakpoint_problems(body: &Value) -> Vec<String> {
    let mut problems = Vec::new();
    let mut marked = Vec::new();
    let mut visit = |where_: String, block: &Value| {
        if let Some(control) = block.get("cache_control") {
            if control != &serde_json::json!({"type": "ephemeral"}) {
                problems.push(format!(
                    "{where_}: cache_control {control} is not ephemeral"
                ));
            }
            if block["type"] == "text" && block["text"].as_str().is_some_and(str::is_empty) {
                problems.push(format!("{where_}: a breakpoint on an empty text block"));
            }
            marked.push(where_);
        }
    };
    for (i, tool) in body["tools"].as_array().into_iter().flatten().enumerate() {
        visit(format!("tools[{i}]"), tool);
    }
    for (i, part) in body["system"].as_array().into_iter().flatten().enumerate() {
        visit(format!("system[{i}]"), part);
    }
    for (i, message) in body["messages"]
        .as_array()
        .into_iter()
        .flatten()
        .enumerate()
    {
        for (j, part) in message["content"]
            .as_array()
            .into_iter()
            .flatten()
            .enumerate()
        {
            visit(format!("messages[{i}].content[{j}]"), part);
        }
    }
    if marked.len() > 4 {
        problems.push(format!(
            "{} cache_control breakpoints, at most 4 allowed: {}",
            marked.len(),
            marked.join(", ")
        ));
    }
    problems
}

/// `sse` with its usage replaced by `counted`: `message_start`'s on the Messages API, the
/// chunk carrying `usage` on Chat Completions.
pub fn with_usage(sse: &str, counted: Counted, anthropic: bool) -> String {
    let mut out = String::with_capacity(sse.len());
    for line in sse.split_inclusive('\n') {
        let Some(data) = line.strip_prefix("data:") else {
            out.push_str(line);
            continue;
        };
        let Ok(mut value) = serde_json::from_str::<Value>(data.trim()) else {
            out.push_str(line);
            continue;
        };
        if anthropic && value["type"] == "message_start" {
            let usage = &mut value["message"]["usage"];
            usage["input_tokens"] = counted.uncached().into();
            usage["cache_read_input_tokens"] = counted.read.into();
            usage["cache_creation_input_tokens"] = counted.written.into();
        } else if !anthropic && value.get("usage").is_some_and(Value::is_object) {
            value["usage"]["prompt_tokens"] = counted.total.into();
            value["usage"]["prompt_tokens_details"] =
                serde_json::json!({ "cached_tokens": counted.read });
        } else {
            out.push_str(line);
            continue;
        }
        out.push_str(&format!("data: {value}\n"));
    }
    out
}
