//! Anthropic-compatible Messages (`POST {base_url}/v1/messages`, streamed).
//!
//! The answer is a list of content blocks announced by `content_block_start` and grown by
//! `content_block_delta`; tool arguments arrive as `input_json_delta` fragments of one JSON
//! text. Input tokens come with `message_start`, output tokens with `message_delta`.

use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::{Value, json};

use super::settings::ProviderSettings;
use super::sse::SseEvent;
use super::{
    Delta, Message, ModelRequest, ModelResponse, ProviderError, StreamFold, ToolCall, Usage,
    decode_error, fresh_call_id, server_error,
};

/// Messages requires `max_tokens`; this is used when the config sets none.
pub const DEFAULT_MAX_TOKENS: u32 = 8192;

/// `max_tokens` when the config sets none: [`DEFAULT_MAX_TOKENS`], but never more than a
/// quarter of the context. A small local model with an 8192-token context otherwise may
/// ramble for its whole context at a few tokens a second, which llama-server showed.
pub fn default_max_tokens(context_tokens: u64) -> u32 {
    u32::try_from(context_tokens / 4)
        .unwrap_or(u32::MAX)
        .clamp(256, DEFAULT_MAX_TOKENS)
}

/// The request body. `context_tokens` is the context as far as it is known (the server's
/// word or the settings), for the default `max_tokens`.
pub(crate) fn body(
    settings: &ProviderSettings,
    context_tokens: u64,
    request: &ModelRequest<'_>,
) -> Value {
    // Roles must alternate, so consecutive tool results (and a user message after them)
    // merge into one user turn.
    let mut turns: Vec<(&str, Vec<Value>)> = Vec::new();
    let mut push = |role: &'static str, block: Value| match turns.last_mut() {
        Some((last, blocks)) if *last == role => blocks.push(block),
        _ => turns.push((role, vec![block])),
    };
    for message in request.messages {
        match message {
            Message::User { content } => push("user", json!({ "type": "text", "text": content })),
            Message::Assistant {
                content,
                tool_calls,
                ..
            } => {
                if !content.is_empty() {
                    push("assistant", json!({ "type": "text", "text": content }));
                }
                for call in tool_calls {
                    // The API wants an object; arguments the model garbled were already
                    // answered with an error, so an empty object is faithful enough.
                    let input = serde_json::from_str::<Value>(&call.arguments)
                        .ok()
                        .filter(Value::is_object)
                        .unwrap_or_else(|| json!({}));
                    push(
                        "assistant",
                        json!({ "type": "tool_use", "id": call.id, "name": call.name, "input": input }),
                    );
                }
            }
            Message::Tool {
                call_id,
                content,
                is_error,
                ..
            } => push(
                "user",
                json!({
                    "type": "tool_result",
                    "tool_use_id": call_id,
                    "content": content,
                    "is_error": is_error,
                }),
            ),
        }
    }
    mark_breakpoints(&mut turns);
    let messages: Vec<Value> = turns
        .into_iter()
        .map(|(role, content)| json!({ "role": role, "content": content }))
        .collect();
    let mut body = json!({
        "model": settings.model,
        "max_tokens": settings.max_tokens.unwrap_or_else(|| default_max_tokens(context_tokens)),
        "messages": messages,
        "stream": true,
    });
    // An empty text block is refused, and so would be a breakpoint on it.
    if !request.system.is_empty() {
        body["system"] =
            json!([{ "type": "text", "text": request.system, "cache_control": ephemeral() }]);
    }
    if !request.tools.is_empty() {
        let mut tools: Vec<Value> = request
            .tools
            .iter()
            .map(|t| json!({ "name": t.name, "description": t.description, "input_schema": t.parameters }))
            .collect();
        if let Some(last) = tools.last_mut() {
            last["cache_control"] = ephemeral();
        }
        body["tools"] = tools.into();
    }
    body
}

/// Marks the last block of the conversation, so the next step reads everything up to it
/// from the cache, and the last block of the previous request (the turn before the latest
/// answer), where the previous step's breakpoint was: the server looks for an earlier
/// entry only 20 blocks back from a breakpoint, and one step can add more than that (many
/// parallel calls). With the tools and the system prompt that makes four, the most the
/// API allows.
fn mark_breakpoints(turns: &mut [(&str, Vec<Value>)]) {
    let last_answer = turns.iter().rposition(|(role, _)| *role == "assistant");
    let previous_end = last_answer.and_then(|i| i.checked_sub(1));
    let last = turns.len().checked_sub(1);
    for index in [previous_end, last].into_iter().flatten() {
        if let Some(block) = turns[index].1.last_mut() {
            block["cache_control"] = ephemeral();
        }
    }
}

/// A prompt-cache breakpoint: the server caches the request up to and including the block
/// that carries it (tools, then system, then messages), for five minutes from its last use.
fn ephemeral() -> Value {
    json!({ "type": "ephemeral" })
}

#[derive(Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum Event {
    MessageStart {
        message: StartMessage,
    },
    ContentBlockStart {
        index: u64,
        content_block: Value,
    },
    ContentBlockDelta {
        index: u64,
        delta: Value,
    },
    ContentBlockStop {},
    MessageDelta {
        #[serde(default)]
        delta: Value,
        #[serde(default)]
        usage: Option<WireUsage>,
    },
    MessageStop {},
    Ping {},
    Error {
        error: Value,
    },
    /// New event types are allowed by the API's versioning policy; skip them.
    #[serde(other)]
    Unknown,
}

#[derive(Deserialize)]
struct StartMessage {
    #[serde(default)]
    usage: Option<WireUsage>,
}

#[derive(Deserialize, Default)]
struct WireUsage {
    #[serde(default)]
    input_tokens: Option<u64>,
    #[serde(default)]
    output_tokens: Option<u64>,
    #[serde(default)]
    cache_creation_input_tokens: Option<u64>,
    #[serde(default)]
    cache_read_input_tokens: Option<u64>,
}

enum Block {
    Text,
    Thinking,
    ToolUse {
        id: String,
        name: String,
        json: String,
        /// Some compatible servers put the whole input in the start block.
        initial: Value,
    },
    Other,
}

#[derive(Default)]
pub(crate) struct Fold {
    text: String,
    reasoning: String,
    blocks: BTreeMap<u64, Block>,
    usage: Usage,
    stop_reason: Option<String>,
}

impl Fold {
    fn usage(&mut self, usage: WireUsage) {
        // The server's numbers: saturate rather than overflow on absurd ones.
        let input = usage
            .input_tokens
            .unwrap_or(0)
            .saturating_add(usage.cache_creation_input_tokens.unwrap_or(0))
            .saturating_add(usage.cache_read_input_tokens.unwrap_or(0));
        if input > 0 {
            self.usage.input_tokens = input;
        }
        if let Some(read) = usage.cache_read_input_tokens {
            self.usage.cache_read_tokens = read;
        }
        if let Some(written) = usage.cache_creation_input_tokens {
            self.usage.cache_write_tokens = written;
        }
        // `output_tokens` is cumulative in every event that carries it.
        if let Some(output) = usage.output_tokens {
            self.usage.output_tokens = output;
        }
    }
}

fn str_field<'v>(value: &'v Value, key: &str) -> &'v str {
    value.get(key).and_then(Value::as_str).unwrap_or_default()
}

impl StreamFold for Fold {
    const API: &'static str = "anthropic";

    fn event(
        &mut self,
        event: &SseEvent,
        on_delta: &mut (dyn FnMut(Delta<'_>) + Send),
    ) -> Result<bool, ProviderError> {
        let data = event.data.trim();
        if data.is_empty() {
            return Ok(false);
        }
        let parsed: Event =
            serde_json::from_str(data).map_err(|e| decode_error(Self::API, e, data))?;
        match parsed {
            Event::MessageStart { message } => {
                if let Some(usage) = message.usage {
                    self.usage(usage);
                }
            }
            Event::ContentBlockStart {
                index,
                content_block,
            } => {
                let block = match str_field(&content_block, "type") {
                    "text" => {
                        let text = str_field(&content_block, "text");
                        if !text.is_empty() {
                            on_delta(Delta::Text(text));
                            self.text.push_str(text);
                        }
                        Block::Text
                    }
                    "thinking" => Block::Thinking,
                    "tool_use" => Block::ToolUse {
                        id: str_field(&content_block, "id").to_string(),
                        name: str_field(&content_block, "name").to_string(),
                        json: String::new(),
                        initial: content_block.get("input").cloned().unwrap_or(Value::Null),
                    },
                    _ => Block::Other,
                };
                self.blocks.insert(index, block);
            }
            Event::ContentBlockDelta { index, delta } => {
                let block = self.blocks.entry(index).or_insert(Block::Other);
                match (str_field(&delta, "type"), block) {
                    ("text_delta", _) => {
                        let text = str_field(&delta, "text");
                        on_delta(Delta::Text(text));
                        self.text.push_str(text);
                    }
                    ("thinking_delta", _) => {
                        let text = str_field(&delta, "thinking");
                        on_delta(Delta::Reasoning(text));
                        self.reasoning.push_str(text);
                    }
                    ("input_json_delta", Block::ToolUse { json, .. }) => {
                        json.push_str(str_field(&delta, "partial_json"));
                    }
                    // Signatures, citations and deltas for blocks never announced.
                    _ => {}
                }
            }
            Event::MessageDelta { delta, usage } => {
                if let Some(reason) = delta.get("stop_reason").and_then(Value::as_str) {
                    self.stop_reason = Some(reason.to_string());
                }
                if let Some(usage) = usage {
                    self.usage(usage);
                }
            }
            Event::MessageStop {} => return Ok(true),
            Event::Error { error } => {
                return Err(server_error(&error));
            }
            Event::ContentBlockStop {} | Event::Ping {} | Event::Unknown => {}
        }
        Ok(false)
    }

    fn finish(self) -> ModelResponse {
        let tool_calls = self
            .blocks
            .into_values()
            .filter_map(|block| match block {
                Block::ToolUse {
                    id,
                    name,
                    json,
                    initial,
                } => {
                    let arguments = if !json.trim().is_empty() {
                        json
                    } else if initial.is_object() {
                        initial.to_string()
                    } else {
                        "{}".to_string()
                    };
                    let id = if id.is_empty() { fresh_call_id() } else { id };
                    Some(ToolCall {
                        id,
                        name,
                        arguments,
                    })
                }
                Block::Text | Block::Thinking | Block::Other => None,
            })
            .collect();
        ModelResponse {
            text: self.text,
            reasoning: self.reasoning,
            tool_calls,
            usage: self.usage,
            stop_reason: self.stop_reason,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cache_reads_and_writes_are_part_of_the_input() {
        let mut fold = Fold::default();
        for data in [
            r#"{"type":"message_start","message":{"usage":{"input_tokens":10,"cache_read_input_tokens":1800,"cache_creation_input_tokens":200,"output_tokens":1}}}"#,
            r#"{"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":7}}"#,
        ] {
            let event = SseEvent {
                event: None,
                data: data.to_string(),
            };
            fold.event(&event, &mut |_| {}).unwrap();
        }
        let usage = fold.finish().usage;
        assert_eq!(
            usage,
            Usage {
                input_tokens: 2010,
                output_tokens: 7,
                cache_read_tokens: 1800,
                cache_write_tokens: 200,
            }
        );
    }

    #[test]
    fn the_default_answer_limit_follows_a_small_context() {
        assert_eq!(default_max_tokens(128_000), DEFAULT_MAX_TOKENS);
        assert_eq!(default_max_tokens(8192), 2048);
        assert_eq!(default_max_tokens(100), 256);
    }

    #[test]
    fn tool_results_and_following_user_text_share_one_turn() {
        let settings = ProviderSettings::for_tests(super::super::Api::Anthropic, "http://x");
        let messages = vec![
            Message::User {
                content: "hi".into(),
            },
            Message::Assistant {
                content: String::new(),
                reasoning: None,
                tool_calls: vec![
                    ToolCall {
                        id: "a".into(),
                        name: "read".into(),
                        arguments: "{\"path\":\"/x\"}".into(),
                    },
                    ToolCall {
                        id: "b".into(),
                        name: "read".into(),
                        arguments: "not json".into(),
                    },
                ],
            },
            Message::Tool {
                call_id: "a".into(),
                name: "read".into(),
                content: "1|x".into(),
                is_error: false,
            },
            Message::Tool {
                call_id: "b".into(),
                name: "read".into(),
                content: "bad".into(),
                is_error: true,
            },
            Message::User {
                content: "go on".into(),
            },
        ];
        let body = body(
            &settings,
            settings.context_tokens,
            &ModelRequest {
                system: "sys",
                messages: &messages,
                tools: &[],
            },
        );
        let turns = body["messages"].as_array().unwrap();
        assert_eq!(turns.len(), 3);
        assert_eq!(turns[1]["content"][1]["input"], json!({}));
        assert_eq!(turns[2]["role"], "user");
        assert_eq!(turns[2]["content"].as_array().unwrap().len(), 3);
        assert_eq!(turns[2]["content"][1]["is_error"], true);
    }
}
