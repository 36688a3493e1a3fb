//! OpenAI-compatible Chat Completions (`POST {base_url}/chat/completions`, streamed).
//!
//! Tool calls arrive as deltas keyed by `index`: the id and name usually come first and
//! the arguments in pieces after, but servers differ — some send the name in a later
//! chunk, some leave the id empty, some omit `index` — so the fold accepts all of these.

use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::{Value, json};

use super::settings::ProviderSettings;
use super::sse::SseEvent;
use super::{
    Delta, Message, ModelRequest, ModelResponse, ProviderError, StreamFold, ToolCall, Usage,
    decode_error, fresh_call_id, server_error,
};

pub(crate) fn body(settings: &ProviderSettings, request: &ModelRequest<'_>) -> Value {
    let mut messages = Vec::with_capacity(request.messages.len() + 1);
    messages.push(json!({ "role": "system", "content": request.system }));
    for message in request.messages {
        messages.push(match message {
            Message::User { content } => json!({ "role": "user", "content": content }),
            Message::Assistant {
                content,
                tool_calls,
                ..
            } => {
                let mut m = json!({ "role": "assistant", "content": content });
                if !tool_calls.is_empty() {
                    if content.is_empty() {
                        m["content"] = Value::Null;
                    }
                    m["tool_calls"] = tool_calls
                        .iter()
                        .map(|c| {
                            json!({
                                "id": c.id,
                                "type": "function",
                                "function": { "name": c.name, "arguments": sendable_arguments(&c.arguments) },
                            })
                        })
                        .collect();
                }
                m
            }
            Message::Tool {
                call_id, content, ..
            } => json!({ "role": "tool", "tool_call_id": call_id, "content": content }),
        });
    }
    let mut body = json!({
        "model": settings.model,
        "messages": messages,
        "stream": true,
        "stream_options": { "include_usage": true },
    });
    if let Some(max) = settings.max_tokens {
        body["max_tokens"] = max.into();
    }
    if !request.tools.is_empty() {
        body["tools"] = request
            .tools
            .iter()
            .map(|t| {
                json!({
                    "type": "function",
                    "function": {
                        "name": t.name,
                        "description": t.description,
                        "parameters": t.parameters,
                    },
                })
            })
            .collect();
    }
    body
}

/// Arguments as the server will accept them back. A call cut off mid-arguments
/// (`{"path":`) that an older session stored makes servers refuse the whole history; it
/// was answered with an error when it was made, so `{}` is faithful enough, as on the
/// Anthropic wire.
fn sendable_arguments(arguments: &str) -> &str {
    match serde_json::from_str::<Value>(arguments) {
        Ok(Value::Object(_)) => arguments,
        Ok(_) | Err(_) => "{}",
    }
}

#[derive(Deserialize)]
struct Chunk {
    #[serde(default)]
    choices: Vec<Choice>,
    #[serde(default)]
    usage: Option<WireUsage>,
    #[serde(default)]
    error: Option<Value>,
}

#[derive(Deserialize)]
struct Choice {
    #[serde(default)]
    delta: Option<WireDelta>,
    #[serde(default)]
    finish_reason: Option<String>,
}

#[derive(Deserialize, Default)]
struct WireDelta {
    #[serde(default)]
    content: Option<String>,
    #[serde(default)]
    reasoning_content: Option<String>,
    /// vLLM and a few others name the field this way.
    #[serde(default)]
    reasoning: Option<String>,
    #[serde(default)]
    tool_calls: Option<Vec<WireCall>>,
}

#[derive(Deserialize)]
struct WireCall {
    #[serde(default)]
    index: Option<u64>,
    #[serde(default)]
    id: Option<String>,
    #[serde(default)]
    function: Option<WireFunction>,
}

#[derive(Deserialize)]
struct WireFunction {
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    arguments: Option<String>,
}

#[derive(Deserialize)]
struct WireUsage {
    #[serde(default)]
    prompt_tokens: u64,
    #[serde(default)]
    completion_tokens: u64,
    /// Of the prompt, how much came from the server's prompt cache.
    #[serde(default)]
    prompt_tokens_details: Option<PromptDetails>,
    /// DeepSeek's name for the same number.
    #[serde(default)]
    prompt_cache_hit_tokens: Option<u64>,
}

#[derive(Deserialize)]
struct PromptDetails {
    #[serde(default)]
    cached_tokens: Option<u64>,
}

#[derive(Default)]
struct PartialCall {
    id: String,
    name: String,
    arguments: String,
}

#[derive(Default)]
pub(crate) struct Fold {
    text: String,
    reasoning: String,
    calls: BTreeMap<u64, PartialCall>,
    /// The index the last index-less delta went to.
    last_index: Option<u64>,
    usage: Usage,
    stop_reason: Option<String>,
}

impl Fold {
    fn call_delta(&mut self, call: WireCall) {
        let id = call.id.filter(|id| !id.is_empty());
        let index = match call.index {
            Some(index) => index,
            // Without an index: a new id starts a new call, anything else continues the
            // last one.
            None => match (&id, self.last_index) {
                (Some(id), Some(last)) if self.calls.get(&last).is_some_and(|c| &c.id == id) => {
                    last
                }
                (None, Some(last)) => last,
                // The index is the server's number: at u64::MAX the "next" call joins the
                // last one rather than overflowing.
                _ => self
                    .calls
                    .keys()
                    .next_back()
                    .map_or(0, |k| k.saturating_add(1)),
            },
        };
        self.last_index = Some(index);
        let entry = self.calls.entry(index).or_default();
        if let Some(id) = id
            && entry.id.is_empty()
        {
            entry.id = id;
        }
        if let Some(function) = call.function {
            if let Some(name) = function.name.filter(|n| !n.is_empty()) {
                // Some servers repeat the whole name in every chunk, others send it once,
                // possibly after the first arguments; never append.
                if entry.name.is_empty() {
                    entry.name = name;
                }
            }
            if let Some(arguments) = function.arguments {
                entry.arguments.push_str(&arguments);
            }
        }
    }
}

impl StreamFold for Fold {
    const API: &'static str = "openai";

    fn event(
        &mut self,
        event: &SseEvent,
        on_delta: &mut (dyn FnMut(Delta<'_>) + Send),
    ) -> Result<bool, ProviderError> {
        let data = event.data.trim();
        if data == "[DONE]" {
            return Ok(true);
        }
        if data.is_empty() {
            return Ok(false);
        }
        let chunk: Chunk =
            serde_json::from_str(data).map_err(|e| decode_error(Self::API, e, data))?;
        if let Some(error) = chunk.error {
            return Err(server_error(&error));
        }
        if let Some(usage) = chunk.usage {
            let cached = usage
                .prompt_tokens_details
                .and_then(|d| d.cached_tokens)
                .or(usage.prompt_cache_hit_tokens)
                .unwrap_or(0);
            self.usage = Usage {
                input_tokens: usage.prompt_tokens,
                output_tokens: usage.completion_tokens,
                // The server's numbers: never more cached than sent.
                cache_read_tokens: cached.min(usage.prompt_tokens),
                cache_write_tokens: 0,
            };
        }
        for choice in chunk.choices {
            if let Some(reason) = choice.finish_reason {
                self.stop_reason = Some(reason);
            }
            let delta = choice.delta.unwrap_or_default();
            for reasoning in [delta.reasoning_content, delta.reasoning]
                .into_iter()
                .flatten()
            {
                if !reasoning.is_empty() {
                    on_delta(Delta::Reasoning(&reasoning));
                    self.reasoning.push_str(&reasoning);
                }
            }
            if let Some(text) = delta.content
                && !text.is_empty()
            {
                on_delta(Delta::Text(&text));
                self.text.push_str(&text);
            }
            for call in delta.tool_calls.into_iter().flatten() {
                self.call_delta(call);
            }
        }
        Ok(false)
    }

    fn finish(self) -> ModelResponse {
        let tool_calls = self
            .calls
            .into_values()
            .filter(|c| !(c.name.is_empty() && c.arguments.is_empty()))
            .map(|c| ToolCall {
                id: if c.id.is_empty() {
                    fresh_call_id()
                } else {
                    c.id
                },
                name: c.name,
                arguments: c.arguments,
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

    fn run(lines: &[&str]) -> ModelResponse {
        let mut fold = Fold::default();
        let mut seen = String::new();
        for line in lines {
            let event = SseEvent {
                event: None,
                data: line.to_string(),
            };
            if fold
                .event(&event, &mut |d| {
                    if let Delta::Text(t) = d {
                        seen.push_str(t)
                    }
                })
                .unwrap()
            {
                break;
            }
        }
        let response = fold.finish();
        assert_eq!(seen, response.text);
        response
    }

    #[test]
    fn name_in_a_later_chunk_and_empty_ids() {
        let r = run(&[
            r#"{"choices":[{"index":0,"delta":{"role":"assistant","content":null,"reasoning_content":"think"}}]}"#,
            r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"","type":"function","function":{"arguments":"{\"pa"}}]}}]}"#,
            r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"name":"read","arguments":"th\":1}"}}]}}]}"#,
            r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":1,"id":"b","function":{"name":"glob","arguments":"{}"}}]}}]}"#,
            r#"{"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}"#,
            r#"{"choices":[],"usage":{"prompt_tokens":10,"completion_tokens":3}}"#,
            "[DONE]",
        ]);
        assert_eq!(r.reasoning, "think");
        assert_eq!(r.tool_calls.len(), 2);
        assert_eq!(r.tool_calls[0].name, "read");
        assert_eq!(r.tool_calls[0].arguments, r#"{"path":1}"#);
        assert!(r.tool_calls[0].id.starts_with("call_"));
        assert_eq!(r.tool_calls[1].id, "b");
        assert_eq!(r.usage.input_tokens, 10);
        assert_eq!(r.stop_reason.as_deref(), Some("tool_calls"));
    }

    #[test]
    fn cached_prompt_tokens_are_reported() {
        let r = run(&[
            r#"{"choices":[{"index":0,"delta":{"content":"hi"},"finish_reason":"stop"}]}"#,
            r#"{"choices":[],"usage":{"prompt_tokens":2006,"completion_tokens":3,"prompt_tokens_details":{"cached_tokens":1920}}}"#,
        ]);
        assert_eq!(
            (r.usage.input_tokens, r.usage.cache_read_tokens),
            (2006, 1920)
        );
        let r = run(&[
            r#"{"choices":[],"usage":{"prompt_tokens":500,"completion_tokens":3,"prompt_cache_hit_tokens":384,"prompt_tokens_details":null}}"#,
        ]);
        assert_eq!(r.usage.cache_read_tokens, 384);
    }

    #[test]
    fn index_less_calls() {
        let r = run(&[
            r#"{"choices":[{"delta":{"tool_calls":[{"id":"x","function":{"name":"read","arguments":"{"}}]}}]}"#,
            r#"{"choices":[{"delta":{"tool_calls":[{"function":{"arguments":"}"}}]}}]}"#,
            r#"{"choices":[{"delta":{"tool_calls":[{"id":"y","function":{"name":"glob","arguments":"{}"}}]}}]}"#,
        ]);
        let names: Vec<_> = r
            .tool_calls
            .iter()
            .map(|c| (&*c.id, &*c.arguments))
            .collect();
        assert_eq!(names, vec![("x", "{}"), ("y", "{}")]);
    }

    #[test]
    fn error_chunks_stop_the_call() {
        let mut fold = Fold::default();
        let event = SseEvent {
            event: None,
            data: r#"{"error":{"message":"context too long"}}"#.into(),
        };
        let err = fold.event(&event, &mut |_| {}).unwrap_err();
        assert!(err.to_string().contains("context too long"), "{err}");
    }

    #[test]
    fn a_huge_error_message_is_cut_on_a_character_boundary() {
        let mut fold = Fold::default();
        let message = format!("a{}", "é".repeat(100_000));
        let event = SseEvent {
            event: None,
            data: serde_json::json!({"error": {"message": message}}).to_string(),
        };
        let ProviderError::Server(shown) = fold.event(&event, &mut |_| {}).unwrap_err() else {
            panic!("not a server error");
        };
        assert_eq!(shown.len(), 1999);
        assert!(message.starts_with(&shown));
    }
}
