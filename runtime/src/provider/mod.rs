//! Model providers: one request, one streamed response, over two wire formats.
//!
//! The conversation is kept in our own provider-neutral [`Message`] type; each API module
//! turns it into its request body and folds its stream back into a [`ModelResponse`]. The
//! wire types are thin and lenient on purpose: "compatible" servers leave out fields, send
//! empty ids, and split tool calls across chunks in their own ways.

pub mod anthropic;
pub mod context;
pub mod openai;
pub mod retry;
pub mod settings;
pub mod sse;

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::Duration;

use backon::Retryable;
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
    /// Every input token, read from the prompt cache or not.
    pub input_tokens: u64,
    pub output_tokens: u64,
    /// Of the input, what the server read from its prompt cache (Anthropic's
    /// `cache_read_input_tokens`, OpenAI's `prompt_tokens_details.cached_tokens`).
    #[serde(default)]
    pub cache_read_tokens: u64,
    /// Of the input, what the server wrote to its prompt cache (Anthropic's
    /// `cache_creation_input_tokens`; OpenAI caches without saying).
    #[serde(default)]
    pub cache_write_tokens: u64,
}

impl Usage {
    /// Input and output together. The counts are the server's word, so they saturate
    /// rather than overflow.
    pub fn total(&self) -> u64 {
        self.input_tokens.saturating_add(self.output_tokens)
    }
}

impl std::ops::AddAssign for Usage {
    fn add_assign(&mut self, other: Usage) {
        self.input_tokens = self.input_tokens.saturating_add(other.input_tokens);
        self.output_tokens = self.output_tokens.saturating_add(other.output_tokens);
        self.cache_read_tokens = self
            .cache_read_tokens
            .saturating_add(other.cache_read_tokens);
        self.cache_write_tokens = self
            .cache_write_tokens
            .saturating_add(other.cache_write_tokens);
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
    /// The request (system prompt, history and tools) is larger than the model's context.
    #[error("{url} answered {status}: the request does not fit the model's context{}: {body}", fit_detail(*.prompt_tokens, *.context_tokens))]
    ContextOverflow {
        url: String,
        status: u16,
        body: String,
        /// What the server counted, when it said.
        prompt_tokens: Option<u64>,
        context_tokens: Option<u64>,
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
    #[error("the model stream went past {limit} bytes without finishing")]
    TooLarge { limit: usize },
    #[error("the model server sent an error: {0}")]
    Server(String),
    #[error("cannot decode a {api} stream event: {reason}; event: {data}")]
    Decode {
        api: &'static str,
        reason: String,
        data: String,
    },
}

fn fit_detail(prompt: Option<u64>, context: Option<u64>) -> String {
    match (prompt, context) {
        (Some(prompt), Some(context)) => format!(" ({prompt} tokens for a context of {context})"),
        (None, Some(context)) => format!(" (a context of {context} tokens)"),
        (Some(_) | None, None) => String::new(),
    }
}

/// What an error answer says about the request, beyond its status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Refusal {
    /// Too large for the context window: the same request fails the same way again.
    ContextOverflow {
        prompt_tokens: Option<u64>,
        context_tokens: Option<u64>,
    },
    /// The request itself is malformed (llama.cpp answers 500 for history it cannot
    /// parse): retrying sends the same bytes and gets the same answer.
    BadRequest,
    /// Nothing said: the status decides.
    Unknown,
}

/// Reads an error body: OpenAI-style `{"error": {"type", "message", …}}`, Anthropic-style
/// `{"type": "error", "error": {…}}`, llama.cpp's `exceed_context_size_error` with
/// `n_prompt_tokens` and `n_ctx`, or plain text.
fn refusal(body: &str) -> Refusal {
    let json: Value = serde_json::from_str(body).unwrap_or(Value::Null);
    let error = json.get("error").unwrap_or(&json);
    let kind = error.get("type").and_then(Value::as_str).unwrap_or("");
    let code = error.get("code").and_then(Value::as_str).unwrap_or("");
    let message = error
        .get("message")
        .and_then(Value::as_str)
        .unwrap_or(body)
        .to_lowercase();
    let number = |key: &str| error.get(key).and_then(Value::as_u64);
    let overflow = kind == "exceed_context_size_error"
        || code == "context_length_exceeded"
        || message.contains("exceeds the available context")
        || message.contains("context length")
        || message.contains("context window")
        || message.contains("prompt is too long")
        || message.contains("maximum context");
    if overflow {
        return Refusal::ContextOverflow {
            prompt_tokens: number("n_prompt_tokens"),
            context_tokens: number("n_ctx"),
        };
    }
    let malformed = kind == "invalid_request_error"
        || message.contains("parse error")
        || message.contains("parse_error")
        || message.contains("failed to parse")
        || message.contains("invalid request");
    if malformed {
        Refusal::BadRequest
    } else {
        Refusal::Unknown
    }
}

/// Why one attempt of a model call failed.
#[derive(Debug)]
enum Failed {
    /// A 429, a 5xx or no connection: worth another attempt, after `retry_after` when the
    /// server asked for a pause.
    Retryable {
        last: String,
        retry_after: Option<Duration>,
    },
    /// Anything else: the call stops with this error.
    Final(ProviderError),
}

impl std::fmt::Display for Failed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Failed::Retryable { last, .. } => f.write_str(last),
            Failed::Final(err) => err.fmt(f),
        }
    }
}

/// Longest error body kept from a failed response; the rest is never read.
const MAX_ERROR_BODY: usize = 2000;

/// The most bytes one streamed answer may take on the wire (the default of
/// [`ProviderSettings::max_response_bytes`]). Servers send each token as its own JSON event
/// of a few hundred bytes, so this is still over a million tokens: it only stops a server
/// that streams without end.
pub const MAX_RESPONSE_BYTES: usize = 256 * 1024 * 1024;

/// A configured model endpoint.
#[derive(Debug, Clone)]
pub struct Provider {
    settings: ProviderSettings,
    http: reqwest::Client,
    /// What the server said about its context, shared by every clone (a helper on the
    /// same model learns nothing twice).
    learned: Arc<LearnedContext>,
}

#[derive(Debug, Default)]
struct LearnedContext {
    /// Set once the server was asked, whatever it answered.
    asked: tokio::sync::OnceCell<()>,
    /// The context in tokens the server gave, 0 while it said nothing.
    tokens: AtomicU64,
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
        Ok(Provider {
            settings,
            http,
            learned: Arc::default(),
        })
    }

    /// The same endpoint and connection pool, another model: an agent's own `model`. Its
    /// context is its own to learn.
    pub fn with_model(&self, model: &str) -> Provider {
        let mut settings = self.settings.clone();
        settings.model = model.to_string();
        Provider {
            settings,
            http: self.http.clone(),
            learned: Arc::default(),
        }
    }

    pub fn settings(&self) -> &ProviderSettings {
        &self.settings
    }

    /// Asks the server how large the model's context is, once per provider (see
    /// [`context`]); later calls return what the first learned. `None` when the server
    /// does not say: the settings' `context_tokens` holds.
    pub async fn discover_context(&self) -> Option<u64> {
        self.learned
            .asked
            .get_or_init(|| async {
                if let Some(tokens) = context::discover(&self.http, &self.settings).await {
                    self.learn_context(tokens);
                }
            })
            .await;
        self.learned_context()
    }

    /// What the server said about the context: through discovery, or in an answer that
    /// refused a request as too large.
    pub fn learned_context(&self) -> Option<u64> {
        match self.learned.tokens.load(Ordering::Relaxed) {
            0 => None,
            tokens => Some(tokens),
        }
    }

    /// Records the context the server gave (an overflow answer naming `n_ctx`).
    pub fn learn_context(&self, tokens: u64) {
        self.learned.tokens.store(tokens, Ordering::Relaxed);
    }

    /// The context in tokens: the server's word when it gave one, else the settings'
    /// (configured, or the model family's default).
    pub fn context_tokens(&self) -> u64 {
        self.learned_context()
            .unwrap_or(self.settings.context_tokens)
    }

    /// The most tokens one answer may take: `max_tokens` as configured, else the default
    /// the Messages API is sent ([`anthropic::default_max_tokens`] of the context), which
    /// is also what an OpenAI-compatible request without `max_tokens` is allowed for.
    pub fn max_output_tokens(&self) -> u64 {
        self.settings
            .max_tokens
            .unwrap_or_else(|| anthropic::default_max_tokens(self.context_tokens()))
            .into()
    }

    /// The request body this provider would send (also used by the benchmark).
    pub fn body(&self, request: &ModelRequest<'_>) -> Value {
        match self.settings.api {
            Api::OpenAi => openai::body(&self.settings, request),
            Api::Anthropic => anthropic::body(&self.settings, self.context_tokens(), request),
        }
    }

    /// One model call, streamed. Retries 429 and 5xx answers (and failed connections) on
    /// the shared backoff schedule ([`ProviderSettings::backoff`]: jitter, under
    /// `max_retry_wait`), or after the pause the server asks for (`Retry-After`, see
    /// [`retry`]) up to `max_retry_wait`; never retries once the stream has started, because
    /// the reader has already seen part of the answer.
    pub async fn complete(
        &self,
        request: &ModelRequest<'_>,
        on_delta: &mut (dyn FnMut(Delta<'_>) + Send),
    ) -> Result<ModelResponse, ProviderError> {
        let body = self.body(request);
        let url = self.settings.endpoint();
        let backoff = self.settings.backoff();
        // Atomic, not a Cell: the call's future must stay `Send`.
        let attempts = AtomicU32::new(0);
        let sent = (|| {
            attempts.fetch_add(1, Ordering::Relaxed);
            self.send(&url, &body)
        })
        .retry(backoff.delays())
        .when(|failed: &Failed| matches!(failed, Failed::Retryable { .. }))
        .adjust(|failed, wait| match failed {
            Failed::Retryable {
                retry_after: Some(asked),
                ..
            } => wait.map(|_| backoff.capped(*asked)),
            Failed::Retryable {
                retry_after: None, ..
            }
            | Failed::Final(_) => wait,
        })
        .notify(|failed, wait| {
            let attempt = attempts.load(Ordering::Relaxed);
            tracing::warn!(attempt, ?wait, "model call failed, retrying: {failed}");
        })
        .await;
        let response = match sent {
            Ok(response) => response,
            Err(Failed::Final(err)) => return Err(err),
            Err(Failed::Retryable { last, .. }) => {
                return Err(ProviderError::RetriesExhausted {
                    url,
                    attempts: attempts.load(Ordering::Relaxed),
                    last,
                });
            }
        };
        match self.settings.api {
            Api::OpenAi => self.read_stream::<openai::Fold>(response, on_delta).await,
            Api::Anthropic => {
                self.read_stream::<anthropic::Fold>(response, on_delta)
                    .await
            }
        }
    }

    /// One attempt: the request sent and a success status back, or why not.
    async fn send(&self, url: &str, body: &Value) -> Result<reqwest::Response, Failed> {
        let mut builder = self
            .http
            .post(url)
            .header("accept", "text/event-stream")
            .json(body);
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
        match builder.send().await {
            Ok(response) if response.status().is_success() => Ok(response),
            Ok(response) => {
                let status = response.status().as_u16();
                let retry_after = retry::requested_wait(
                    response.headers(),
                    std::time::SystemTime::now(),
                    self.settings.max_retry_wait,
                );
                let text = error_text(response, self.settings.idle_timeout).await;
                // A 5xx that says the request itself is wrong fails the same way every
                // time: say so now instead of retrying it.
                let retryable = match refusal(&text) {
                    Refusal::ContextOverflow {
                        prompt_tokens,
                        context_tokens,
                    } => {
                        return Err(Failed::Final(ProviderError::ContextOverflow {
                            url: url.to_string(),
                            status,
                            body: text,
                            prompt_tokens,
                            context_tokens,
                        }));
                    }
                    Refusal::BadRequest => false,
                    Refusal::Unknown => status == 429 || status >= 500,
                };
                if retryable {
                    Err(Failed::Retryable {
                        last: format!("{status}: {text}"),
                        retry_after,
                    })
                } else {
                    Err(Failed::Final(ProviderError::Status {
                        url: url.to_string(),
                        status,
                        body: text,
                    }))
                }
            }
            // Nothing listens on this machine's port: waiting will not start the server, so
            // fail now with what to do rather than after the retries.
            Err(e) if e.is_connect() && refused_on_loopback(url, &e) => {
                Err(Failed::Final(ProviderError::Connect {
                    url: url.to_string(),
                    reason: format!(
                        "{}: no model server listens there; start one (for llama.cpp: \
                         `llama-server -m model.gguf --jinja --port PORT`) or point --base-url, \
                         AGENT_BASE_URL or `base_url` in config.toml at the one that runs",
                        pack_protocol::error_text::root_cause(&e)
                    ),
                }))
            }
            // reqwest's own message repeats the URL ("error sending request for url
            // (…)") and hides the cause two sources down; the URL is in our message
            // already, so keep only the cause ("Connection refused (os error 111)").
            Err(e) if e.is_connect() || e.is_timeout() || e.is_request() => {
                Err(Failed::Retryable {
                    last: pack_protocol::error_text::root_cause(&e),
                    retry_after: None,
                })
            }
            Err(e) => Err(Failed::Final(ProviderError::Connect {
                url: url.to_string(),
                reason: pack_protocol::error_text::root_cause(&e),
            })),
        }
    }

    async fn read_stream<F: StreamFold>(
        &self,
        response: reqwest::Response,
        on_delta: &mut (dyn FnMut(Delta<'_>) + Send),
    ) -> Result<ModelResponse, ProviderError> {
        let mut stream = response.bytes_stream();
        let mut decoder = Decoder::<F>::new(self.settings.max_response_bytes);
        let idle = self.settings.idle_timeout;
        loop {
            let chunk = match tokio::time::timeout(idle, stream.next()).await {
                Err(_) => return Err(ProviderError::IdleTimeout(idle)),
                Ok(None) => return decoder.finish(on_delta),
                Ok(Some(Err(e))) => return Err(ProviderError::Stream(e.to_string())),
                Ok(Some(Ok(chunk))) => chunk,
            };
            if decoder.feed(&chunk, on_delta)? {
                return Ok(decoder.done());
            }
        }
    }
}

/// Whether `error`, for a request to `url`, is a refused connection to this machine (a
/// loopback address or `localhost`): a model server that is not running, not one that is
/// briefly unreachable.
fn refused_on_loopback(url: &str, error: &reqwest::Error) -> bool {
    let loopback = reqwest::Url::parse(url).is_ok_and(|url| {
        let host = url.host_str().unwrap_or_default();
        let host = host.trim_start_matches('[').trim_end_matches(']');
        host.eq_ignore_ascii_case("localhost")
            || host
                .parse::<std::net::IpAddr>()
                .is_ok_and(|ip| ip.is_loopback())
    });
    let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(error);
    let mut refused = false;
    while let Some(e) = cause {
        if let Some(io) = e.downcast_ref::<std::io::Error>()
            && io.kind() == std::io::ErrorKind::ConnectionRefused
        {
            refused = true;
        }
        cause = e.source();
    }
    loopback && refused
}

/// Decodes a whole recorded stream of `api`, given as the chunks it arrived in, exactly as
/// [`Provider::complete`] decodes a live one: the same parser, the same limits, the same
/// answer for any split of the same bytes.
pub fn decode_stream<'c>(
    api: Api,
    chunks: impl IntoIterator<Item = &'c [u8]>,
    on_delta: &mut (dyn FnMut(Delta<'_>) + Send),
) -> Result<ModelResponse, ProviderError> {
    fn decode<'c, F: StreamFold>(
        chunks: impl IntoIterator<Item = &'c [u8]>,
        on_delta: &mut (dyn FnMut(Delta<'_>) + Send),
    ) -> Result<ModelResponse, ProviderError> {
        let mut decoder = Decoder::<F>::new(MAX_RESPONSE_BYTES);
        for chunk in chunks {
            if decoder.feed(chunk, on_delta)? {
                return Ok(decoder.done());
            }
        }
        decoder.finish(on_delta)
    }
    match api {
        Api::OpenAi => decode::<openai::Fold>(chunks, on_delta),
        Api::Anthropic => decode::<anthropic::Fold>(chunks, on_delta),
    }
}

/// Bytes in, one answer out: the SSE parser feeding one API's fold, with the whole answer
/// held to `limit` bytes.
struct Decoder<F> {
    parser: sse::SseParser,
    fold: F,
    received: usize,
    limit: usize,
}

impl<F: StreamFold> Decoder<F> {
    fn new(limit: usize) -> Self {
        Decoder {
            parser: sse::SseParser::new(),
            fold: F::default(),
            received: 0,
            limit,
        }
    }

    /// Feeds one chunk; `true` when the stream said it is finished (anything after that is
    /// not read).
    fn feed(
        &mut self,
        chunk: &[u8],
        on_delta: &mut (dyn FnMut(Delta<'_>) + Send),
    ) -> Result<bool, ProviderError> {
        self.received = self.received.saturating_add(chunk.len());
        if self.received > self.limit {
            return Err(ProviderError::TooLarge { limit: self.limit });
        }
        let events = self
            .parser
            .feed(chunk)
            .map_err(|e| ProviderError::Stream(e.to_string()))?;
        for event in &events {
            if self.fold.event(event, on_delta)? {
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// The stream ended. Some servers close without a final marker; what arrived is the
    /// answer.
    fn finish(
        mut self,
        on_delta: &mut (dyn FnMut(Delta<'_>) + Send),
    ) -> Result<ModelResponse, ProviderError> {
        if let Some(event) = self.parser.finish() {
            self.fold.event(&event, on_delta)?;
        }
        Ok(self.fold.finish())
    }

    /// The answer, after the stream said it is finished.
    fn done(self) -> ModelResponse {
        self.fold.finish()
    }
}

/// The start of an error answer's body, for the error message: at most [`MAX_ERROR_BODY`]
/// bytes are read, and no more than `idle` is waited for each piece, because the body
/// only explains a status we already have — a server sending gigabytes or stalling must
/// not hold the call. Whatever arrived before a stall or a broken connection is kept.
async fn error_text(mut response: reqwest::Response, idle: Duration) -> String {
    let mut bytes = Vec::new();
    while bytes.len() < MAX_ERROR_BODY {
        match tokio::time::timeout(idle, response.chunk()).await {
            Ok(Ok(Some(chunk))) => {
                let room = MAX_ERROR_BODY - bytes.len();
                bytes.extend_from_slice(&chunk[..chunk.len().min(room)]);
            }
            Ok(Ok(None)) => break,
            Ok(Err(e)) => {
                tracing::debug!("reading an error answer: {e}");
                break;
            }
            Err(_) => {
                tracing::debug!("an error answer stalled after {} bytes", bytes.len());
                break;
            }
        }
    }
    // A cut may fall inside a character; drop its first bytes rather than show a
    // replacement character for them.
    if bytes.len() == MAX_ERROR_BODY
        && let Err(e) = std::str::from_utf8(&bytes)
        && e.error_len().is_none()
    {
        bytes.truncate(e.valid_up_to());
    }
    String::from_utf8_lossy(&bytes).into_owned()
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

/// An error event in the stream: its `message`, else the whole error, cut to
/// [`MAX_ERROR_BODY`] bytes like an error answer's body.
fn server_error(error: &Value) -> ProviderError {
    let mut message = error
        .get("message")
        .and_then(Value::as_str)
        .map_or_else(|| error.to_string(), str::to_string);
    truncate_utf8(&mut message, MAX_ERROR_BODY);
    ProviderError::Server(message)
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
    fn error_bodies_that_say_the_request_is_at_fault() {
        let llama_overflow = r#"{"error":{"code":400,"message":"the request exceeds the available context size, try increasing it","type":"exceed_context_size_error","n_prompt_tokens":9500,"n_ctx":8192}}"#;
        assert_eq!(
            refusal(llama_overflow),
            Refusal::ContextOverflow {
                prompt_tokens: Some(9500),
                context_tokens: Some(8192)
            }
        );
        let openai_overflow = r#"{"error":{"message":"This model's maximum context length is 8192 tokens.","type":"invalid_request_error","code":"context_length_exceeded"}}"#;
        assert!(matches!(
            refusal(openai_overflow),
            Refusal::ContextOverflow { .. }
        ));
        let llama_bad_history = r#"{"error":{"code":500,"message":"[json.exception.parse_error.101] parse error at line 1, column 9: syntax error while parsing value - unexpected end of input","type":"server_error"}}"#;
        assert_eq!(refusal(llama_bad_history), Refusal::BadRequest);
        assert_eq!(refusal("upstream overloaded"), Refusal::Unknown);
        assert_eq!(
            refusal(
                r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#
            ),
            Refusal::Unknown
        );
    }
}
