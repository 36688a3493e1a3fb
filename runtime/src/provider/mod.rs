//! Model providers: one request, one streamed response, over two wire formats.
//!
//! The conversation is kept in our own provider-neutral [`Message`] type; each API module
//! turns it into its request body and folds its stream back into a [`ModelResponse`]. The
//! wire types are thin and lenient on purpose: "compatible" servers leave out fields, send
//! empty ids, and split tool calls across chunks in their own ways.

pub mod anthropic;
pub mod openai;
pub mod settings;
pub mod sse;

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use futures_util::StreamExt;
use serde::{Deserialize, Serialize};
use serde_json::Value;

pub use settings::{Api, ProviderOverrides, ProviderSettings};

/// One message of the conversation (the system prompt is not one: it is rebuilt each turn).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "role", rename_all = "snake_case")]
pub enum Message {
    User {
        content: String,
    },
    Assistant {
        #[serde(default)]
        content: String,
        /// Reasoning text some servers stream separately. Kept in the session, never sent
        /// back.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reasoning: Option<String>,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        tool_calls: Vec<ToolCall>,
    },
    Tool {
        call_id: String,
        name: String,
        content: String,
        #[serde(default)]
        is_error: bool,
    },
}

/// A tool call as the model made it. `arguments` is the raw JSON text: whether it parses is
/// the tool's business, and a parse failure goes back to the model.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolCall {
    pub id: String,
    pub name: String,
    pub arguments: String,
}

/// A tool offered to the model.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ToolSpec {
    pub name: String,
    pub description: String,
    /// JSON Schema of the arguments object.
    pub parameters: Value,
}

/// Token counts of one model call.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    pub input_tokens: u64,
    pub output_tokens: u64,
}

impl std::ops::AddAssign for Usage {
    fn add_assign(&mut self, other: Usage) {
        self.input_tokens += other.input_tokens;
        self.output_tokens += other.output_tokens;
    }
}

/// What one call asks for.
#[derive(Debug, Clone, Copy)]
pub struct ModelRequest<'a> {
    pub system: &'a str,
    pub messages: &'a [Message],
    pub tools: &'a [ToolSpec],
}

/// The model's complete answer to one call.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ModelResponse {
    pub text: String,
    pub reasoning: String,
    pub tool_calls: Vec<ToolCall>,
    pub usage: Usage,
    /// `stop`, `tool_calls`, `end_turn`, `max_tokens`… as the server said it.
    pub stop_reason: Option<String>,
}

impl ModelResponse {
    /// The assistant message to append to the conversation.
    pub fn to_message(&self) -> Message {
        Message::Assistant {
            content: self.text.clone(),
            reasoning: (!self.reasoning.is_empty()).then(|| self.reasoning.clone()),
            tool_calls: self.tool_calls.clone(),
        }
    }
}

/// Text as it streams in, for a reader watching.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Delta<'a> {
    Text(&'a str),
    Reasoning(&'a str),
}

/// Failures of a model call. All of them stop the run: the model cannot fix its server.
#[derive(Debug, thiserror::Error)]
pub enum ProviderError {
    #[error("cannot reach {url}: {reason}")]
    Connect { url: String, reason: String },
    #[error("{url} answered {status}: {body}")]
    Status {
        url: String,
        status: u16,
        body: String,
    },
    #[error("{url} still failing after {attempts} attempts; last: {last}")]
    RetriesExhausted {
        url: String,
        attempts: u32,
        last: String,
    },
    #[error("the model stream sent nothing for {}s", .0.as_secs())]
    IdleTimeout(Duration),
    #[error("the model stream broke: {0}")]
    Stream(String),
    #[error("the model server sent an error: {0}")]
    Server(String),
    #[error("cannot decode a {api} stream event: {reason}; event: {data}")]
    Decode {
        api: &'static str,
        reason: String,
        data: String,
    },
}

/// Longest error body kept from a failed response.
const MAX_ERROR_BODY: usize = 2000;

/// A configured model endpoint.
#[derive(Debug, Clone)]
pub struct Provider {
    settings: ProviderSettings,
    http: reqwest::Client,
}

/// Folds one API's stream events into a response.
pub(crate) trait StreamFold: Default {
    const API: &'static str;
    /// Handles one event; returns `true` when the stream is finished.
    fn event(
        &mut self,
        event: &sse::SseEvent,
        on_delta: &mut (dyn FnMut(Delta<'_>) + Send),
    ) -> Result<bool, ProviderError>;
    fn finish(self) -> ModelResponse;
}

impl Provider {
    pub fn new(settings: ProviderSettings) -> Result<Provider, ProviderError> {
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(30))
            .build()
            .map_err(|e| ProviderError::Connect {
                url: settings.base_url.clone(),
                reason: e.to_string(),
            })?;
        Ok(Provider { settings, http })
    }

    pub fn settings(&self) -> &ProviderSettings {
        &self.settings
    }

    /// The request body this provider would send (also used by the benchmark).
    pub fn body(&self, request: &ModelRequest<'_>) -> Value {
        match self.settings.api {
            Api::OpenAi => openai::body(&self.settings, request),
            Api::Anthropic => anthropic::body(&self.settings, request),
        }
    }

    /// One model call, streamed. Retries 429 and 5xx answers (and failed connections)
    /// with exponential backoff, honouring `Retry-After`; never retries once the stream
    /// has started, because the reader has already seen part of the answer.
    pub async fn complete(
        &self,
        request: &ModelRequest<'_>,
        on_delta: &mut (dyn FnMut(Delta<'_>) + Send),
    ) -> Result<ModelResponse, ProviderError> {
        let body = self.body(request);
        let url = self.settings.endpoint();
        let mut attempt: u32 = 0;
        loop {
            attempt += 1;
            let mut builder = self
                .http
                .post(&url)
                .header("accept", "text/event-stream")
                .json(&body);
            builder = match self.settings.api {
                Api::OpenAi => match &self.settings.api_key {
                    Some(key) => builder.bearer_auth(key),
                    None => builder,
                },
                Api::Anthropic => {
                    let builder = builder.header("anthropic-version", "2023-06-01");
                    match &self.settings.api_key {
                        Some(key) => builder.header("x-api-key", key),
                        None => builder,
                    }
                }
            };
            let failure = match builder.send().await {
                Ok(response) if response.status().is_success() => {
                    return match self.settings.api {
                        Api::OpenAi => self.read_stream::<openai::Fold>(response, on_delta).await,
                        Api::Anthropic => {
                            self.read_stream::<anthropic::Fold>(response, on_delta)
                                .await
                        }
                    };
                }
                Ok(response) => {
                    let status = response.status().as_u16();
                    let retry_after = retry_after(response.headers());
                    let mut text = response.text().await.unwrap_or_default();
                    truncate_utf8(&mut text, MAX_ERROR_BODY);
                    let retryable = status == 429 || status >= 500;
                    if !retryable {
                        return Err(ProviderError::Status {
                            url,
                            status,
                            body: text,
                        });
                    }
                    (format!("{status}: {text}"), retry_after)
                }
                Err(e) if e.is_connect() || e.is_timeout() || e.is_request() => {
                    (e.to_string(), None)
                }
                Err(e) => {
                    return Err(ProviderError::Connect {
                        url,
                        reason: e.to_string(),
                    });
                }
            };
            let (last, retry_after) = failure;
            if attempt > self.settings.max_retries {
                return Err(ProviderError::RetriesExhausted {
                    url,
                    attempts: attempt,
                    last,
                });
            }
            let backoff = self.settings.retry_base * 2u32.saturating_pow(attempt - 1);
            let wait = retry_after.unwrap_or(backoff).min(MAX_RETRY_WAIT);
            tracing::warn!(attempt, ?wait, "model call failed, retrying: {last}");
            tokio::time::sleep(wait).await;
        }
    }

    async fn read_stream<F: StreamFold>(
        &self,
        response: reqwest::Response,
        on_delta: &mut (dyn FnMut(Delta<'_>) + Send),
    ) -> Result<ModelResponse, ProviderError> {
        let mut stream = response.bytes_stream();
        let mut parser = sse::SseParser::new();
        let mut fold = F::default();
        let idle = self.settings.idle_timeout;
        loop {
            let chunk = match tokio::time::timeout(idle, stream.next()).await {
                Err(_) => return Err(ProviderError::IdleTimeout(idle)),
                Ok(None) => break,
                Ok(Some(Err(e))) => return Err(ProviderError::Stream(e.to_string())),
                Ok(Some(Ok(chunk))) => chunk,
            };
            let events = parser
                .feed(&chunk)
                .map_err(|e| ProviderError::Stream(e.to_string()))?;
            for event in &events {
                if fold.event(event, on_delta)? {
                    return Ok(fold.finish());
                }
            }
        }
        // Some servers close without a final marker; what arrived is the answer.
        if let Some(event) = parser.finish() {
            fold.event(&event, on_delta)?;
        }
        Ok(fold.finish())
    }
}

/// A server asking for a longer pause than this is treated as asking for this.
const MAX_RETRY_WAIT: Duration = Duration::from_secs(120);

/// `Retry-After` as seconds or an HTTP date.
fn retry_after(headers: &reqwest::header::HeaderMap) -> Option<Duration> {
    let value = headers.get(reqwest::header::RETRY_AFTER)?.to_str().ok()?;
    let value = value.trim();
    if let Ok(secs) = value.parse::<f64>() {
        return (secs.is_finite() && secs >= 0.0).then(|| Duration::from_secs_f64(secs));
    }
    let when =
        time::OffsetDateTime::parse(value, &time::format_description::well_known::Rfc2822).ok()?;
    let delta = when - time::OffsetDateTime::now_utc();
    Some(Duration::try_from(delta).unwrap_or(Duration::ZERO))
}

/// Cuts `text` to at most `max` bytes on a character boundary.
pub(crate) fn truncate_utf8(text: &mut String, max: usize) {
    if text.len() <= max {
        return;
    }
    let mut cut = max;
    while !text.is_char_boundary(cut) {
        cut -= 1;
    }
    text.truncate(cut);
}

/// An id for a tool call the server left without one. Ids only need to be unique within a
/// session; the clock keeps them unique across resumed runs too.
pub(crate) fn fresh_call_id() -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    format!("call_{nanos:x}_{n}")
}

fn decode_error(api: &'static str, e: serde_json::Error, data: &str) -> ProviderError {
    let mut data = data.to_string();
    truncate_utf8(&mut data, 500);
    ProviderError::Decode {
        api,
        reason: e.to_string(),
        data,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_after_seconds_and_dates() {
        let mut headers = reqwest::header::HeaderMap::new();
        headers.insert("retry-after", "2".parse().unwrap());
        assert_eq!(retry_after(&headers), Some(Duration::from_secs(2)));
        headers.insert(
            "retry-after",
            "Wed, 21 Oct 2015 07:28:00 GMT".parse().unwrap(),
        );
        assert_eq!(retry_after(&headers), Some(Duration::ZERO));
        headers.insert("retry-after", "soon".parse().unwrap());
        assert_eq!(retry_after(&headers), None);
    }
}
