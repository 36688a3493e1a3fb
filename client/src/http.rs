//! How pack-client talks to packd: a [`Transport`] sends one [`Request`] and hands back the
//! [`Response`] with its body still to read, in chunks. Everything pack-client asks of packd
//! goes through it: the channel document, its signature and the pack blob (read under their
//! caps by [`crate::client`]), the watch's long-poll ([`crate::watch`]), and the POSTs of
//! failure reports ([`crate::report`]) and outcome counts ([`crate::outcomes`]).
//!
//! A transport only moves bytes: it never looks at a status, a cap or a header. What an
//! answer means is decided above it, so a test hands [`crate::Client::with_transport`] an
//! in-process transport that answers from a script, and the refresh, its retries and its
//! limits run without a network (on a paused clock, when the test pauses it). `reqwest`'s
//! client is the real one.

use std::time::Duration;

use futures_util::StreamExt;
use futures_util::future::BoxFuture;
use futures_util::stream::BoxStream;
pub use reqwest::header::{HeaderMap, HeaderName};
pub use reqwest::{Method, StatusCode};

use crate::{ClientConfig, ClientError};

/// Bytes of a failed response's body kept for the error message.
pub const ERROR_BODY_LIMIT: usize = 2048;

/// One request to packd.
#[derive(Debug, Clone)]
pub struct Request {
    pub method: Method,
    pub url: String,
    pub headers: Vec<(HeaderName, String)>,
    pub body: Option<Vec<u8>>,
    /// The longest the whole exchange may take, body included; `None`: no limit of its own
    /// (a refresh runs under one deadline for all its requests).
    pub timeout: Option<Duration>,
}

impl Request {
    /// A GET of `url` without headers.
    pub fn get(url: impl Into<String>) -> Self {
        Request {
            method: Method::GET,
            url: url.into(),
            headers: Vec::new(),
            body: None,
            timeout: None,
        }
    }

    /// The same request with one more header.
    pub fn header(mut self, name: HeaderName, value: impl Into<String>) -> Self {
        self.headers.push((name, value.into()));
        self
    }

    /// The value of the first header `name`, if the request carries one.
    pub fn header_value(&self, name: &HeaderName) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

/// The chunks of a response body, in order; an error ends it.
pub type Body = BoxStream<'static, Result<Vec<u8>, TransportError>>;

/// What packd answered: the status and headers, and the body still to read.
pub struct Response {
    pub status: StatusCode,
    pub headers: HeaderMap,
    /// The length the server announced, if it did: only a hint, the body may differ.
    pub content_length: Option<u64>,
    pub body: Body,
}

impl Response {
    /// A response with `body` whole, in one chunk, and its length announced.
    pub fn new(status: StatusCode, headers: HeaderMap, body: Vec<u8>) -> Self {
        Response {
            status,
            headers,
            content_length: Some(body.len() as u64),
            body: futures_util::stream::iter([Ok(body)]).boxed(),
        }
    }

    /// The header `name` as text, if present and text.
    pub fn header(&self, name: impl reqwest::header::AsHeaderName) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    /// The next chunk of the body, `None` at its end.
    pub async fn chunk(&mut self) -> Result<Option<Vec<u8>>, TransportError> {
        self.body.next().await.transpose()
    }
}

/// A request that got no answer, or whose body broke off: why, as a person can act on it
/// (reqwest's own message repeats the URL and hides the cause two sources down; this is the
/// cause, "Connection refused (os error 111)").
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{reason}")]
pub struct TransportError {
    pub reason: String,
}

impl TransportError {
    /// The error of a request to `url` that failed so.
    pub(crate) fn at(self, url: impl Into<String>) -> ClientError {
        ClientError::Http {
            url: url.into(),
            reason: self.reason,
        }
    }
}

/// Sends requests to packd. Boxed futures, so a [`crate::Client`] holds any transport as an
/// `Arc<dyn Transport>`.
pub trait Transport: Send + Sync + 'static {
    /// Sends `request`; the answer's body is read from the [`Response`].
    fn send(&self, request: Request) -> BoxFuture<'_, Result<Response, TransportError>>;
}

/// The real transport, over HTTP(S).
impl Transport for reqwest::Client {
    fn send(&self, request: Request) -> BoxFuture<'_, Result<Response, TransportError>> {
        Box::pin(async move {
            let Request {
                method,
                url,
                headers,
                body,
                timeout,
            } = request;
            let mut builder = self.request(method, url);
            for (name, value) in headers {
                builder = builder.header(name, value);
            }
            if let Some(timeout) = timeout {
                builder = builder.timeout(timeout);
            }
            if let Some(body) = body {
                builder = builder.body(body);
            }
            let response = builder.send().await.map_err(|e| reqwest_error(&e))?;
            Ok(Response {
                status: response.status(),
                headers: response.headers().clone(),
                content_length: response.content_length(),
                body: response
                    .bytes_stream()
                    .map(|chunk| chunk.map(Vec::from).map_err(|e| reqwest_error(&e)))
                    .boxed(),
            })
        })
    }
}

fn reqwest_error(error: &reqwest::Error) -> TransportError {
    TransportError {
        reason: pack_protocol::error_text::root_cause(error),
    }
}

/// The reqwest client for `config`: its connect timeout and this release's user agent, and
/// no per-request timeout (the whole refresh runs under one deadline, `refresh_now`, which
/// then reports itself as such rather than as a body error).
pub fn reqwest_client(config: &ClientConfig) -> Result<reqwest::Client, ClientError> {
    reqwest::Client::builder()
        .connect_timeout(config.connect_timeout)
        .user_agent(format!("promptpack-client/{}", config.client_version))
        .build()
        .map_err(|e| ClientError::Http {
            url: config.server.clone().unwrap_or_default(),
            reason: pack_protocol::error_text::root_cause(&e),
        })
}

/// What a failed response says, read up to [`ERROR_BODY_LIMIT`] bytes: packd's JSON error
/// gives its message; a web page (a server or proxy that is not packd) gives one line of
/// it, said to be such; anything else is kept as text (bad bytes replaced, control
/// characters dropped so nothing reaches a terminal as an escape code).
pub(crate) async fn error_detail(mut response: Response) -> Detail {
    let html = response
        .header(reqwest::header::CONTENT_TYPE)
        .is_some_and(|t| t.to_ascii_lowercase().contains("html"));
    let mut body = Vec::new();
    while body.len() < ERROR_BODY_LIMIT {
        match response.chunk().await {
            Ok(Some(chunk)) => body.extend_from_slice(&chunk),
            Ok(None) | Err(_) => break,
        }
    }
    body.truncate(ERROR_BODY_LIMIT);
    if let Ok(packd) = serde_json::from_slice::<pack_protocol::ErrorBody>(&body) {
        return Detail::Packd {
            code: packd.error.code,
            message: printable(&packd.error.message),
        };
    }
    let text = String::from_utf8_lossy(&body);
    if html || text.trim_start().starts_with('<') {
        return Detail::NotPackd {
            line: page_line(&text),
        };
    }
    Detail::Text(printable(&text))
}

/// What [`error_detail`] found in a failed response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Detail {
    /// packd's JSON error body.
    Packd { code: String, message: String },
    /// A web page: its title, or else its first line of text.
    NotPackd { line: String },
    /// Anything else, as text (may be empty).
    Text(String),
}

impl std::fmt::Display for Detail {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Detail::Packd { message, .. } => f.write_str(message),
            Detail::NotPackd { line } => write!(
                f,
                "a web page, not packd's JSON error, so this does not look like packd ({line:?})"
            ),
            Detail::Text(text) => f.write_str(text),
        }
    }
}

/// `text` with control characters dropped and the ends trimmed.
fn printable(text: &str) -> String {
    text.chars()
        .filter(|c| !c.is_control() || *c == ' ')
        .collect::<String>()
        .trim()
        .to_string()
}

/// The one line of a web page that says what it is: its `<title>`, or else its first line
/// with text once the tags are taken out; at most 100 characters.
fn page_line(page: &str) -> String {
    let lower = page.to_ascii_lowercase();
    let title = lower.find("<title").and_then(|start| {
        let open = start + lower[start..].find('>')? + 1;
        let close = open + lower[open..].find("</title")?;
        Some(&page[open..close])
    });
    let line = title
        .map(printable)
        .filter(|t| !t.is_empty())
        .or_else(|| {
            page.lines()
                .map(|line| printable(&strip_tags(line)))
                .find(|line| !line.is_empty())
        })
        .unwrap_or_default();
    let mut chars = line.chars();
    let cut: String = chars.by_ref().take(100).collect();
    if chars.next().is_some() {
        format!("{cut}…")
    } else {
        cut
    }
}

/// `line` without anything between `<` and `>`.
fn strip_tags(line: &str) -> String {
    let mut out = String::new();
    let mut in_tag = false;
    for c in line.chars() {
        match c {
            '<' => in_tag = true,
            '>' => in_tag = false,
            c if !in_tag => out.push(c),
            _ => {}
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::page_line;

    #[test]
    fn a_page_is_named_by_its_title_or_its_first_line_of_text() {
        assert_eq!(
            page_line("<!DOCTYPE html>\n<html><head><title>404 Not Found</title></head>\n<body>…"),
            "404 Not Found"
        );
        assert_eq!(
            page_line("<html>\n<body>\n<h1>Bad Gateway</h1>\n<p>nginx</p>"),
            "Bad Gateway"
        );
        assert_eq!(
            page_line(&format!("<p>{}</p>", "x".repeat(150)))
                .chars()
                .count(),
            101
        );
    }
}
