//! Talking to `packd`: the server URL and token options shared by `publish`, `release` and
//! `status`, and one blocking HTTP client that turns the server's JSON errors into messages
//! that name the URL, the status, the server's error code and its explanation.
//!
//! A connection packd refuses is tried again for up to [`REFUSED_RETRY_FOR`] (2 s), with
//! short pauses: a script that starts packd and publishes at once finds it listening. Only a
//! refused connection: nothing of the request was sent then, so sending it again cannot do
//! anything twice. Any other failure (a timeout, a name that does not resolve, a connection
//! that breaks) is reported at once.

use std::fmt;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use reqwest::StatusCode;
use reqwest::blocking::{Body, Client, RequestBuilder, Response};
use serde::de::DeserializeOwned;
use zeroize::Zeroizing;

use crate::shown;

/// Environment variable holding the publish token.
pub const TOKEN_ENV: &str = "PROMPTPACK_TOKEN";

/// Largest JSON answer read from the server (pack and channel lists included).
const MAX_JSON_BYTES: u64 = 16 * 1024 * 1024;

/// How long a refused connection is tried again (packd may be starting).
pub const REFUSED_RETRY_FOR: Duration = Duration::from_secs(2);

/// The pauses between those tries: 50 ms doubling, jittered, each under half a second.
const REFUSED_BACKOFF: pack_protocol::retry::Backoff = pack_protocol::retry::Backoff {
    first: Duration::from_millis(50),
    cap: Duration::from_millis(500),
    retries: None,
};

/// `--server` and `--token-file`, shared by every command that talks to packd.
#[derive(clap::Args, Debug, Clone)]
pub struct ServerArgs {
    /// Base URL of packd, e.g. http://127.0.0.1:8470. A refused connection (packd still
    /// starting) is tried again for up to 2 s.
    #[arg(long, value_name = "URL", env = "PROMPTPACK_SERVER")]
    pub server: String,

    /// File whose first line is the bearer token (default: the PROMPTPACK_TOKEN variable).
    #[arg(long, value_name = "FILE")]
    pub token_file: Option<PathBuf>,
}

/// What the server said when it refused a request.
#[derive(Debug)]
pub struct ServerError {
    pub method: &'static str,
    pub url: String,
    pub status: StatusCode,
    /// The server's stable error code (`version_exists`, `stale_sequence`, ...), when the
    /// body was the usual JSON error.
    pub code: Option<String>,
    pub message: String,
}

impl fmt::Display for ServerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let Self {
            method,
            url,
            status,
            code,
            message,
        } = self;
        match code {
            Some(code) => write!(f, "{method} {url}: {status}: {code}: {message}"),
            None => write!(f, "{method} {url}: {status}: {message}"),
        }
    }
}

impl std::error::Error for ServerError {}

/// A connection to one packd.
pub struct Remote {
    base: String,
    client: Client,
    token: Option<Zeroizing<String>>,
}

impl Remote {
    /// Checks the URL and loads the token. `need_token`: fail now, before any work, when
    /// there is none (uploads and releases); otherwise it is sent only if present.
    pub fn new(args: &ServerArgs, need_token: bool) -> Result<Remote> {
        let base = args.server.trim().trim_end_matches('/').to_string();
        if !(base.starts_with("http://") || base.starts_with("https://")) {
            bail!(
                "--server {:?}: expected an http:// or https:// URL such as http://127.0.0.1:8470",
                args.server
            );
        }
        let token = token(args.token_file.as_deref())?;
        if need_token && token.is_none() {
            bail!(
                "no token for {base}: set {TOKEN_ENV} or pass --token-file FILE with a token that has the publish scope (an operator makes one with `packd token new`)"
            );
        }
        let client = Client::builder()
            .connect_timeout(Duration::from_secs(15))
            .timeout(Duration::from_secs(60))
            .user_agent(concat!("packer/", env!("CARGO_PKG_VERSION")))
            .build()
            .context("starting the HTTP client")?;
        Ok(Remote {
            base,
            client,
            token,
        })
    }

    pub fn base(&self) -> &str {
        &self.base
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    fn authorized(&self, request: RequestBuilder) -> RequestBuilder {
        // A publisher reads what storage holds now, not a node's answer from memory (up to
        // a poll interval old): a release signs the live sequence + 1.
        let request = request.header(reqwest::header::CACHE_CONTROL, "no-cache");
        match &self.token {
            Some(token) => request.bearer_auth(token.as_str()),
            None => request,
        }
    }

    /// Sends the request `request` builds; any status other than 2xx becomes a
    /// [`ServerError`]. A refused connection is tried again, with a request built anew, for up
    /// to [`REFUSED_RETRY_FOR`].
    fn send(
        &self,
        method: &'static str,
        url: &str,
        request: impl Fn() -> RequestBuilder,
    ) -> Result<Response> {
        let started = Instant::now();
        let mut pauses = REFUSED_BACKOFF.delays();
        let mut said = false;
        let response = loop {
            let error = match self.authorized(request()).send() {
                Ok(response) => break response,
                Err(error) => error,
            };
            let pause = pauses.next().unwrap_or(REFUSED_BACKOFF.cap / 2);
            let refused = refused(&error);
            if !refused || started.elapsed() + pause > REFUSED_RETRY_FOR {
                let tried = if refused {
                    format!(" (tried for {} s)", REFUSED_RETRY_FOR.as_secs())
                } else {
                    String::new()
                };
                bail!(
                    "{method} {url}: could not reach packd at {}: {}{tried}; check --server and that packd is running",
                    self.base,
                    error_chain(&error)
                );
            }
            if !said {
                eprintln!(
                    "note: {} refused the connection; trying again for up to {} s (is packd starting?)",
                    self.base,
                    REFUSED_RETRY_FOR.as_secs()
                );
                said = true;
            }
            std::thread::sleep(pause);
        };
        if response.status().is_success() {
            return Ok(response);
        }
        let error = server_error(method, url, response);
        let hint = match error.status {
            StatusCode::UNAUTHORIZED if self.token.is_none() => Some(format!(
                "{} needs a token: set {TOKEN_ENV} or pass --token-file FILE",
                self.base
            )),
            StatusCode::UNAUTHORIZED => Some(format!(
                "{} does not know this token (from --token-file or {TOKEN_ENV}); ask its operator for one with the publish scope",
                self.base
            )),
            StatusCode::FORBIDDEN => Some(format!(
                "this token may not do that on {}; ask its operator for one with the publish scope",
                self.base
            )),
            _ => None,
        };
        match hint {
            Some(hint) => Err(anyhow::Error::new(error).context(hint)),
            None => Err(error.into()),
        }
    }

    /// GET a JSON answer.
    pub fn get_json<T: DeserializeOwned>(&self, path: &str) -> Result<T> {
        let url = self.url(path);
        let response = self.send("GET", &url, || self.client.get(&url))?;
        json_body(&url, response)
    }

    /// GET a JSON answer, `None` on 404.
    pub fn get_json_opt<T: DeserializeOwned>(&self, path: &str) -> Result<Option<T>> {
        not_found_is_none(self.get_json(path))
    }

    /// GET a body as bytes (at most `limit`) with the response headers; `None` on 404.
    pub fn get_bytes_opt(
        &self,
        path: &str,
        limit: u64,
    ) -> Result<Option<(Vec<u8>, reqwest::header::HeaderMap)>> {
        let url = self.url(path);
        let response = match self.send("GET", &url, || self.client.get(&url)) {
            Ok(response) => response,
            Err(e) => return not_found_is_none(Err(e)),
        };
        let headers = response.headers().clone();
        Ok(Some((read_limited(&url, response, limit)?, headers)))
    }

    /// PUT raw bytes; `progress` sees the bytes as they go out.
    pub fn put_bytes<T: DeserializeOwned>(
        &self,
        path: &str,
        bytes: Vec<u8>,
        progress: Option<indicatif::ProgressBar>,
    ) -> Result<T> {
        let url = self.url(path);
        let len = bytes.len() as u64;
        // Shared, so a request built again after a refused connection sends the same bytes.
        let bytes: Arc<[u8]> = bytes.into();
        let body = || {
            let reader = std::io::Cursor::new(bytes.clone());
            match &progress {
                Some(bar) => Body::sized(bar.wrap_read(reader), len),
                None => Body::sized(reader, len),
            }
        };
        // A large pack over a slow link takes longer than the default deadline.
        let response = self.send("PUT", &url, || {
            self.client
                .put(&url)
                .header(reqwest::header::CONTENT_TYPE, "application/octet-stream")
                .timeout(Duration::from_secs(600))
                .body(body())
        })?;
        json_body(&url, response)
    }

    /// Checks that packd takes this token for publishing, before any work that needs it
    /// (a release's diff and signature). packd checks an upload's token before anything
    /// else, then its hash: an upload to a name that is not a hash is refused next, with
    /// `400`, and stores nothing. So `400` is a token it takes, `401` / `403` one it does not.
    pub fn check_publish_token(&self) -> Result<()> {
        let path = pack_protocol::paths::blob("token-check");
        let url = self.url(&path);
        let request = || {
            self.client
                .put(&url)
                .header(reqwest::header::CONTENT_TYPE, "application/octet-stream")
                .body(Vec::new())
        };
        let error = match self.send("PUT", &url, request) {
            Ok(response) => {
                bail!(
                    "PUT {url}: {}: packd stores nothing under a name that is not a SHA-256, \
                     yet this server answered with success; is --server a packd?",
                    response.status()
                )
            }
            Err(error) => error,
        };
        match error.downcast_ref::<ServerError>() {
            Some(server) if server.status == StatusCode::BAD_REQUEST => Ok(()),
            Some(_) | None => Err(error),
        }
    }

    /// PUT a JSON body.
    pub fn put_json<T: DeserializeOwned>(
        &self,
        path: &str,
        body: &impl serde::Serialize,
    ) -> Result<T> {
        let url = self.url(path);
        let response = self.send("PUT", &url, || self.client.put(&url).json(body))?;
        json_body(&url, response)
    }
}

/// Turns a 404 [`ServerError`] into `Ok(None)`.
fn not_found_is_none<T>(result: Result<T>) -> Result<Option<T>> {
    match result {
        Ok(value) => Ok(Some(value)),
        Err(e) => match e.downcast_ref::<ServerError>() {
            Some(server) if server.status == StatusCode::NOT_FOUND => Ok(None),
            Some(_) | None => Err(e),
        },
    }
}

/// Largest error body read from the server; only its start is ever shown.
const MAX_ERROR_BYTES: u64 = 64 * 1024;

fn server_error(method: &'static str, url: &str, response: Response) -> ServerError {
    let status = response.status();
    // Bytes, not a string: `read_to_string` keeps nothing at all when the body is not
    // UTF-8 or the cap falls inside a character, and then the server's explanation is lost.
    // A connection that breaks mid-body still leaves what arrived in `bytes`, which is the
    // best explanation there is.
    let mut bytes = Vec::new();
    let _ = response.take(MAX_ERROR_BYTES).read_to_end(&mut bytes);
    let text = String::from_utf8_lossy(&bytes);
    let (code, message) = match serde_json::from_str::<pack_protocol::ErrorBody>(&text) {
        Ok(body) => (Some(body.error.code), body.error.message),
        Err(_) => {
            let snippet: String = text.trim().chars().take(300).collect();
            let message = if snippet.is_empty() {
                "no explanation in the answer (is this URL a packd?)".to_string()
            } else {
                snippet
            };
            (None, message)
        }
    };
    ServerError {
        method,
        url: url.to_string(),
        status,
        code,
        message,
    }
}

fn read_limited(url: &str, response: Response, limit: u64) -> Result<Vec<u8>> {
    let mut bytes = Vec::new();
    response
        .take(limit.saturating_add(1))
        .read_to_end(&mut bytes)
        .with_context(|| format!("GET {url}: reading the answer"))?;
    if bytes.len() as u64 > limit {
        bail!("GET {url}: the answer is over the limit of {limit} bytes");
    }
    Ok(bytes)
}

fn json_body<T: DeserializeOwned>(url: &str, response: Response) -> Result<T> {
    let bytes = read_limited(url, response, MAX_JSON_BYTES)?;
    serde_json::from_slice(&bytes).with_context(|| {
        format!("{url}: the answer is not the JSON packd sends (is --server a packd of the same version?)")
    })
}

/// Whether packd refused the connection: nothing of the request was sent.
fn refused(error: &reqwest::Error) -> bool {
    let mut source: Option<&dyn std::error::Error> = Some(error);
    while let Some(cause) = source {
        if cause
            .downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::ConnectionRefused)
        {
            return true;
        }
        source = cause.source();
    }
    false
}

/// Every cause of a reqwest error on one line ("error sending request: connection refused").
fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

/// The token: the first line of `file`, or else `PROMPTPACK_TOKEN`.
fn token(file: Option<&Path>) -> Result<Option<Zeroizing<String>>> {
    let token = match file {
        Some(path) => {
            let text = Zeroizing::new(
                std::fs::read_to_string(path)
                    .with_context(|| format!("reading token file {}", shown(path)))?,
            );
            let line = text.lines().next().unwrap_or_default().trim();
            if line.is_empty() {
                bail!(
                    "token file {} is empty: put the token on its first line",
                    shown(path)
                );
            }
            Zeroizing::new(line.to_string())
        }
        None => match std::env::var(TOKEN_ENV) {
            Ok(value) if !value.trim().is_empty() => Zeroizing::new(value.trim().to_string()),
            _ => return Ok(None),
        },
    };
    Ok(Some(token))
}

/// The JSON shapes of packd's answers: the protocol crate's, checked where they are parsed.
pub mod model {
    pub use pack_protocol::{
        ChannelList, ChannelSummary, PackList, PackRecord, PackVersions, PublishRequest,
        PublishResponse, UploadResponse,
    };
}
