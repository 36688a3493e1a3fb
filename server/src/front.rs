//! The front of every connection: its requests are read and parsed ahead of hyper, with the
//! parser hyper itself uses (`httparse`, its default settings). The request almost every
//! client makes, a plain `GET` of a channel's live document that memory answers, is answered
//! here: by `routes::channels::from_memory`, as the router's route and `App` answer it, with
//! the same headers, counted and logged the same way. The answers to requests
//! pipelined together are written together, [`WRITE_BATCH`] at a time. With `blob_send =
//! "sendfile"`, a plain `GET` of a whole blob in a data directory on local disk is answered
//! here too: the route's head, then the file's bytes by `sendfile`.
//!
//! The first request that is anything else hands the connection, with every byte read so
//! far, to hyper, which serves it from there on, as it serves every connection: another route
//! or method, a query (a watch), HTTP/1.0, a body or a header about the connection's framing
//! (`Content-Length`, `Transfer-Encoding`, `Connection`, `Upgrade`, `Expect`), a token or a
//! name the route would refuse, `Cache-Control: no-cache`, or a head that is malformed,
//! longer than [`HEAD_LIMIT`] or has more than [`MAX_HEADERS`] fields. Hyper then judges it
//! under its own limits, so no request is refused here. When memory holds no document a check
//! of storage confirmed within the poll interval, the front checks storage, as the route
//! would, and answers from memory again; only if that fails does hyper take over.
//!
//! As hyper does, a connection waits for each request head at most the header-read timeout
//! (which also closes an idle keep-alive connection), and is closed once the node drains,
//! at the end of the answer it is writing. A head handed to hyper gets hyper's own timeout
//! afresh, so a head that ends there may take up to twice the timeout in all.

use std::cell::RefCell;
use std::future::Future;
use std::io::{self, IoSlice, Write as _};
use std::net::SocketAddr;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, SystemTime};

use axum::http::StatusCode;
use hyper::server::conn::http1;
use hyper_util::rt::TokioIo;
use hyper_util::server::graceful::Watcher;
use pack_protocol::{headers, paths};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, Interest, ReadBuf};
use tokio::net::TcpStream;
use tokio::time::Instant;

use crate::app::{App, count_answer};
use crate::config::BlobSend;
use crate::error::ApiError;
use crate::routes::channels::{self, FetchHeaders, FromMemory, MemoryAnswer};

/// The longest request head read ahead of hyper. A client's revalidation is a few hundred
/// bytes; a longer head goes to hyper, under its limits.
pub const HEAD_LIMIT: usize = 8 * 1024;

/// The most header fields read ahead of hyper; a head with more goes to hyper.
pub const MAX_HEADERS: usize = 32;

/// The answers written at once at most (beyond one that is larger alone): a client that
/// pipelines requests and reads no answers holds no more of them than this.
const WRITE_BATCH: usize = 64 * 1024;

/// The most room for answers a connection keeps between writes.
const KEPT_ROOM: usize = 16 * 1024;

/// Fields about the connection or a body: a request naming one goes to hyper.
const FRAMING: [&str; 5] = [
    "content-length",
    "transfer-encoding",
    "connection",
    "upgrade",
    "expect",
];

/// Serves `stream` until the client closes it, its head is late, the node drains, or hyper,
/// given the connection, is done with it.
pub(crate) async fn serve(
    mut stream: TcpStream,
    peer: SocketAddr,
    app: App,
    http: http1::Builder,
    watcher: Watcher,
    header_timeout: Duration,
    drain: impl Future<Output = ()>,
) {
    let mut head = vec![0u8; HEAD_LIMIT];
    // The unanswered bytes are `head[start..end]`.
    let (mut start, mut end) = (0, 0);
    let mut out = Vec::new();
    // When this connection began to wait for the head it has not read whole yet. The timer
    // is moved on only when it fires, so a request costs a clock read, not a timer.
    let mut waiting_since = Instant::now();
    let timer = tokio::time::sleep_until(waiting_since + header_timeout);
    tokio::pin!(timer, drain);
    // Whether storage was checked for the request at `start` already.
    let mut checked = false;
    loop {
        let mut hand_over = false;
        let mut unconfirmed = None;
        let mut blob = None;
        loop {
            // Requests pipelined behind each other are answered a batch at a time: a client
            // that sends many and reads none holds at most this much of their answers.
            if out.len() >= WRITE_BATCH {
                break;
            }
            let mut fields = [httparse::EMPTY_HEADER; MAX_HEADERS];
            let mut request = httparse::Request::new(&mut fields);
            match request.parse(&head[start..end]) {
                Ok(httparse::Status::Complete(len)) => match answer(&app, &request, &mut out) {
                    Answered::Yes(done) => {
                        start += len;
                        waiting_since = Instant::from_std(done);
                        checked = false;
                    }
                    Answered::Blob(file) => {
                        start += len;
                        checked = false;
                        blob = Some(file);
                        break;
                    }
                    Answered::Unconfirmed(channel) if !checked => {
                        unconfirmed = Some(channel.to_owned());
                        break;
                    }
                    Answered::Unconfirmed(_) | Answered::No => {
                        hand_over = true;
                        break;
                    }
                },
                Ok(httparse::Status::Partial) => break,
                // Hyper answers what it makes of it (a `400`, mostly).
                Err(_) => {
                    hand_over = true;
                    break;
                }
            }
        }
        if let Some(file) = blob {
            // The blob's head goes out with the answers before it, held back by the kernel
            // to fill a segment with the blob's first bytes; its bytes follow.
            if let Err(err) = send_more(&stream, &mut out).await {
                tracing::debug!(%peer, %err, "connection ended with an error");
                return;
            }
            if let Err(err) = send_file(&stream, &file).await {
                tracing::debug!(%peer, %err, "connection ended with an error");
                return;
            }
            waiting_since = Instant::now();
            continue;
        }
        // Pipelined answers go out together, and before hyper answers what follows them.
        let batch_full = out.len() >= WRITE_BATCH;
        if flush(&mut stream, &mut out, peer).await.is_err() {
            return;
        }
        if batch_full {
            continue;
        }
        if let Some(channel) = unconfirmed {
            // Memory is past the poll interval: check storage as the route would, then
            // answer the request again (from memory now, or by hyper). A connection is not
            // given to hyper for good because the poll interval ran out under it.
            checked = true;
            let state = app.state();
            let timeout = state.settings.request_timeout;
            if let Err(err) = tokio::time::timeout(timeout, state.live.find(&channel))
                .await
                .unwrap_or(Err(ApiError::Timeout {
                    secs: timeout.as_secs(),
                }))
            {
                tracing::debug!(channel, %err, "could not check the live document; hyper answers");
            }
            continue;
        }
        if start == end {
            (start, end) = (0, 0);
        } else if end == head.len() && start > 0 {
            head.copy_within(start..end, 0);
            (end, start) = (end - start, 0);
        }
        if hand_over || end == head.len() {
            head.truncate(end);
            head.drain(..start);
            let io = Rewind {
                read_ahead: head,
                at: 0,
                stream,
            };
            let connection = http.serve_connection(
                TokioIo::new(io),
                hyper::service::service_fn(
                    move |mut request: hyper::Request<hyper::body::Incoming>| {
                        request
                            .extensions_mut()
                            .insert(axum::extract::ConnectInfo(peer));
                        hyper::service::Service::call(&app, request)
                    },
                ),
            );
            if let Err(err) = watcher.watch(connection).await {
                tracing::debug!(%peer, %err, "connection ended with an error");
            }
            return;
        }
        tokio::select! {
            biased;
            () = &mut drain => return,
            read = stream.read(&mut head[end..]) => match read {
                Ok(0) => return,
                Ok(n) => end += n,
                Err(err) => {
                    tracing::debug!(%peer, %err, "connection ended with an error");
                    return;
                }
            },
            () = &mut timer => {
                let deadline = waiting_since + header_timeout;
                if Instant::now() >= deadline {
                    tracing::debug!(%peer, "closed: no whole request head within the header-read timeout");
                    return;
                }
                timer.as_mut().reset(deadline);
            }
        }
    }
}

/// Whether [`answer`] answered a request.
enum Answered<'a> {
    /// Answered; when the answer was done.
    Yes(std::time::Instant),
    /// A whole blob: its head is written, its bytes are to follow from this file.
    Blob(BlobFile),
    /// A plain `GET` of this channel's document, but memory holds no confirmed one.
    Unconfirmed(&'a str),
    /// Hyper's to answer.
    No,
}

/// Writes the answers in `out` and empties it; logs why the connection ended if it did.
async fn flush(stream: &mut TcpStream, out: &mut Vec<u8>, peer: SocketAddr) -> io::Result<()> {
    if out.is_empty() {
        return Ok(());
    }
    let written = stream.write_all(out).await;
    empty(out);
    if let Err(err) = &written {
        tracing::debug!(%peer, %err, "connection ended with an error");
    }
    written
}

/// Empties `out`. An idle connection keeps a revalidation's worth of room, not a whole
/// batch's.
fn empty(out: &mut Vec<u8>) {
    out.clear();
    if out.capacity() > KEPT_ROOM {
        *out = Vec::new();
    }
}

/// Answers `request` into `out` if it is a plain `GET` of a channel's document that memory
/// answers.
fn answer<'a>(app: &App, request: &httparse::Request<'_, 'a>, out: &mut Vec<u8>) -> Answered<'a> {
    if request.method != Some("GET") || request.version != Some(1) {
        return Answered::No;
    }
    if let Some(sha256) = request.path.and_then(|p| p.strip_prefix(BLOBS)) {
        if app.state().settings.blob_send == BlobSend::Sendfile {
            return answer_blob(app, sha256, request.headers, out);
        }
        return Answered::No;
    }
    let Some(channel) = request
        .path
        .and_then(|p| p.strip_prefix(paths::CHANNELS))
        .and_then(|p| p.strip_prefix('/'))
    else {
        return Answered::No;
    };
    // A query (a watch names `wait`) is the router's; `from_memory` refuses any name with
    // a `#` or `%`, as it does any other it would not take.
    if channel.contains('?') {
        return Answered::No;
    }
    let Some(fetch) = fetch_headers(request.headers) else {
        return Answered::No;
    };
    let began = std::time::Instant::now();
    let answer = match channels::from_memory(app.state(), channel, &fetch) {
        FromMemory::Answer(answer) => answer,
        FromMemory::Unconfirmed => return Answered::Unconfirmed(channel),
        FromMemory::Elsewhere => return Answered::No,
    };
    let bytes = write_answer(&answer, out);
    // One clock read ends the answer's time and starts the wait for the next head.
    let done = std::time::Instant::now();
    let status = if answer.unchanged {
        StatusCode::NOT_MODIFIED
    } else {
        StatusCode::OK
    };
    count_answer(
        app.state(),
        paths::CHANNEL_ROUTE,
        "GET",
        status,
        Some(bytes),
        done.duration_since(began),
    );
    Answered::Yes(done)
}

/// The path of a blob, less its SHA-256 (`paths::BLOB_ROUTE`'s).
const BLOBS: &str = "/v1/blobs/";

/// Fields that ask for less than a whole blob, or for none: a request naming one goes to
/// hyper, which answers `206`, `304` and `416`.
const CONDITIONS: [&str; 3] = ["range", "if-range", "if-none-match"];

/// The most of a blob one `sendfile` call sends (nginx's `sendfile_max_chunk`): one call for
/// a fast reader of a large blob holds the thread no longer than this much takes.
const SENDFILE_CHUNK: usize = 2 * 1024 * 1024;

/// A blob the front sends whole from its file.
struct BlobFile {
    file: std::fs::File,
    len: u64,
}

/// Writes the head of a whole blob to `out` and hands back its file, if `request` is a plain
/// `GET` of a blob in a data directory on local disk that the route would answer `200` whole.
/// Anything else is hyper's: a range or a condition, a token the route would refuse, a name
/// that is not a SHA-256, object storage, no such file, or an error opening it (which the
/// route then reports).
fn answer_blob<'a>(
    app: &App,
    sha256: &str,
    fields: &[httparse::Header<'_>],
    out: &mut Vec<u8>,
) -> Answered<'a> {
    let began = std::time::Instant::now();
    let state = app.state();
    if crate::routes::check_sha256(sha256).is_err() {
        return Answered::No;
    }
    let Some(authorization) = blob_authorization(fields) else {
        return Answered::No;
    };
    if state
        .settings
        .tokens
        .authorize_read_header(authorization)
        .is_err()
    {
        return Answered::No;
    }
    let Ok(Some((file, len))) = state
        .storage
        .open_local(&crate::storage::keys::blob(sha256))
    else {
        return Answered::No;
    };
    out.extend_from_slice(b"HTTP/1.1 200 OK\r\ncache-control: ");
    out.extend_from_slice(crate::routes::blobs::IMMUTABLE.as_bytes());
    // Writing to a vector cannot fail.
    let _ = write!(
        out,
        "\r\naccept-ranges: bytes\r\netag: \"{sha256}\"\r\n\
         content-type: application/octet-stream\r\ncontent-length: {len}\r\ndate: "
    );
    write_date(out);
    out.extend_from_slice(b"\r\n\r\n");
    // Counted as the router counts a blob: when its head is ready, with its whole length.
    count_answer(
        state,
        paths::BLOB_ROUTE,
        "GET",
        StatusCode::OK,
        Some(len),
        began.elapsed(),
    );
    Answered::Blob(BlobFile { file, len })
}

/// The `Authorization` value of a plain `GET` of a whole blob, as the route reads it (the
/// first, when it is visible ASCII); `None` when a field asks for a range or a condition, or
/// is about the connection or a body.
fn blob_authorization<'a>(fields: &[httparse::Header<'a>]) -> Option<Option<&'a str>> {
    let mut authorization = None;
    for field in fields {
        let name = field.name;
        if name.eq_ignore_ascii_case("authorization") {
            authorization.get_or_insert(field.value);
        } else if CONDITIONS
            .iter()
            .chain(&FRAMING)
            .any(|f| name.eq_ignore_ascii_case(f))
        {
            return None;
        }
    }
    Some(authorization.and_then(visible))
}

/// Sends `out` on `stream` with `MSG_MORE`, as nginx's `tcp_nopush` does a file's head: more
/// follows at once, so the kernel sends no segment that is only the head. Empties `out`.
async fn send_more(stream: &TcpStream, out: &mut Vec<u8>) -> io::Result<()> {
    let mut at = 0;
    while at < out.len() {
        at += stream
            .async_io(Interest::WRITABLE, || {
                rustix::net::send(stream, &out[at..], rustix::net::SendFlags::MORE)
                    .map_err(io::Error::from)
            })
            .await?;
    }
    empty(out);
    Ok(())
}

/// Sends `blob`'s bytes on `stream` with `sendfile`: from the page cache to the socket,
/// never through this process's memory.
async fn send_file(stream: &TcpStream, blob: &BlobFile) -> io::Result<()> {
    let mut offset = 0u64;
    while offset < blob.len {
        let want =
            usize::try_from(blob.len - offset).map_or(SENDFILE_CHUNK, |n| n.min(SENDFILE_CHUNK));
        let sent = stream
            .async_io(Interest::WRITABLE, || {
                rustix::fs::sendfile(stream, &blob.file, Some(&mut offset), want)
                    .map_err(io::Error::from)
            })
            .await?;
        if sent == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                format!("the blob's file ended at byte {offset} of {}", blob.len),
            ));
        }
    }
    Ok(())
}

/// What a fetch reads from `fields`, as [`FetchHeaders::from_map`] reads it from hyper's map
/// (each name's first value, when it is visible ASCII); `None` when a field is about the
/// connection or a body.
fn fetch_headers<'a>(fields: &[httparse::Header<'a>]) -> Option<FetchHeaders<'a>> {
    let mut first: [Option<&'a [u8]>; 5] = [None; 5];
    let mut wants_storage = false;
    for field in fields {
        let name = field.name;
        let slot = if name.eq_ignore_ascii_case("if-none-match") {
            0
        } else if name.eq_ignore_ascii_case(headers::CLIENT_VERSION) {
            1
        } else if name.eq_ignore_ascii_case(headers::INSTALLED_PACK) {
            2
        } else if name.eq_ignore_ascii_case(headers::INSTALL) {
            3
        } else if name.eq_ignore_ascii_case("authorization") {
            4
        } else {
            if name.eq_ignore_ascii_case("cache-control") {
                wants_storage |= visible(field.value).is_some_and(channels::asks_storage);
            } else if FRAMING.iter().any(|f| name.eq_ignore_ascii_case(f)) {
                return None;
            }
            continue;
        };
        first[slot].get_or_insert(field.value);
    }
    let [
        if_none_match,
        client_version,
        installed,
        install,
        authorization,
    ] = first.map(|value| value.and_then(visible));
    Some(FetchHeaders {
        authorization,
        if_none_match,
        wants_storage,
        client_version,
        installed,
        install,
    })
}

/// `value` as text when it is visible ASCII or tabs, the rule of `HeaderValue::to_str`.
fn visible(value: &[u8]) -> Option<&str> {
    // Every byte looked at, without stopping at the first bad one, so the loop is vectorised:
    // this runs on every field of every revalidation.
    let invisible = value.iter().fold(false, |bad, &b| {
        bad | (b != b'\t' && !(32..127).contains(&b))
    });
    if invisible {
        return None;
    }
    std::str::from_utf8(value).ok()
}

/// Writes `answer` as HTTP/1.1 to `out`, with the headers `MemoryAnswer::into_response`
/// gives it and the `Date` and `Content-Length` hyper would add. Returns the body's length.
fn write_answer(answer: &MemoryAnswer, out: &mut Vec<u8>) -> u64 {
    let summary = &answer.record.summary;
    out.extend_from_slice(if answer.unchanged {
        b"HTTP/1.1 304 Not Modified\r\n"
    } else {
        b"HTTP/1.1 200 OK\r\n"
    });
    out.extend_from_slice(b"cache-control: no-cache\r\netag: \"");
    out.extend_from_slice(summary.sha256.as_bytes());
    // Writing to a vector cannot fail.
    let _ = write!(out, "\"\r\n{}: {}\r\n", headers::SEQUENCE, summary.sequence);
    let body = answer.record.document.as_bytes();
    if !answer.unchanged {
        let _ = write!(
            out,
            "content-type: {}\r\ncontent-length: {}\r\n",
            MemoryAnswer::CONTENT_TYPE,
            body.len()
        );
    }
    out.extend_from_slice(b"date: ");
    write_date(out);
    out.extend_from_slice(b"\r\n\r\n");
    if answer.unchanged {
        return 0;
    }
    out.extend_from_slice(body);
    body.len() as u64
}

thread_local! {
    /// The `Date` of this second (as hyper keeps it): the second, and its text.
    static DATE: RefCell<(u64, String)> = const { RefCell::new((u64::MAX, String::new())) };
}

fn write_date(out: &mut Vec<u8>) {
    let now = SystemTime::now();
    let second = now
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    DATE.with_borrow_mut(|(at, text)| {
        if *at != second {
            *at = second;
            *text = httpdate::fmt_http_date(now);
        }
        out.extend_from_slice(text.as_bytes());
    });
}

/// A connection handed to hyper: the bytes read ahead of it first, then the socket.
struct Rewind {
    read_ahead: Vec<u8>,
    at: usize,
    stream: TcpStream,
}

impl AsyncRead for Rewind {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if this.at < this.read_ahead.len() {
            let n = (this.read_ahead.len() - this.at).min(buf.remaining());
            buf.put_slice(&this.read_ahead[this.at..this.at + n]);
            this.at += n;
            if this.at == this.read_ahead.len() {
                this.read_ahead = Vec::new();
                this.at = 0;
            }
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut this.stream).poll_read(cx, buf)
    }
}

impl AsyncWrite for Rewind {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().stream).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().stream).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use axum::http::{HeaderMap, HeaderName, HeaderValue};

    use super::*;

    /// What the front reads from `head`'s fields, and what the router's path reads from the
    /// header map hyper builds of the same fields (each as its debug text).
    fn both_ways(fields: &[(&str, &[u8])]) -> (Option<String>, String) {
        let mut head = b"GET /v1/channels/stable HTTP/1.1\r\n".to_vec();
        for (name, value) in fields {
            head.extend_from_slice(name.as_bytes());
            head.extend_from_slice(b": ");
            head.extend_from_slice(value);
            head.extend_from_slice(b"\r\n");
        }
        head.extend_from_slice(b"\r\n");
        let mut parsed = [httparse::EMPTY_HEADER; MAX_HEADERS];
        let mut request = httparse::Request::new(&mut parsed);
        assert!(request.parse(&head).unwrap().is_complete());
        let mut map = HeaderMap::new();
        for field in request.headers.iter() {
            map.append(
                HeaderName::from_bytes(field.name.as_bytes()).unwrap(),
                HeaderValue::from_bytes(field.value).unwrap(),
            );
        }
        (
            fetch_headers(request.headers).map(|front| format!("{front:?}")),
            format!("{:?}", FetchHeaders::from_map(&map)),
        )
    }

    #[test]
    fn the_front_reads_a_fetch_s_headers_as_the_header_map_gives_them() {
        let cases: [&[(&str, &[u8])]; 6] = [
            &[
                ("If-None-Match", b"\"a\""),
                ("if-none-match", b"\"b\""),
                ("X-PROMPTPACK-CLIENT-VERSION", b"1.4.0"),
                ("x-promptpack-installed-pack", b"builtin"),
                ("X-Promptpack-Install", b"0123456789abcdef0123456789abcdef"),
            ],
            // A first value that is not visible ASCII hides the second, as `get` does.
            &[
                ("X-Promptpack-Client-Version", b"1.4\xe9"),
                ("X-Promptpack-Client-Version", b"1.4.0"),
            ],
            // Any `Cache-Control` value may ask for storage.
            &[
                ("Cache-Control", b"public"),
                ("cache-control", b"max-age=60, max-age=0"),
            ],
            &[
                ("Cache-Control", b"NO-CACHE"),
                ("Authorization", b"Bearer\tx"),
            ],
            &[("Authorization", b"Bearer  ppt_token  "), ("Host", b"x")],
            &[],
        ];
        for fields in cases {
            let (front, map) = both_ways(fields);
            assert_eq!(front.expect("no framing field"), map, "{fields:?}");
        }
    }

    #[test]
    fn a_framing_field_leaves_the_request_to_hyper() {
        for name in FRAMING.iter().chain(&["Content-Length", "CONNECTION"]) {
            let (front, _) = both_ways(&[("If-None-Match", b"\"a\""), (name, b"0")]);
            assert!(front.is_none(), "{name}");
        }
    }

    /// An app configured by `toml`, storing on disk in `dir`, which holds one blob; the
    /// blob's SHA-256 and length.
    fn app_with_blob(toml: &str, dir: &std::path::Path) -> (App, String, u64) {
        let file: crate::config::ConfigFile = toml::from_str(toml).unwrap();
        let overrides = crate::config::Overrides {
            data_dir: Some(dir.to_path_buf()),
            ..Default::default()
        };
        let settings = crate::config::Settings::from_file(file, dir, overrides).unwrap();
        let bytes = b"a sealed pack ".repeat(100);
        let sha256 = pack_format::sha256_hex(&bytes);
        std::fs::create_dir_all(dir.join("blobs")).unwrap();
        std::fs::write(dir.join("blobs").join(&sha256), &bytes).unwrap();
        let storage = crate::storage::Storage::local(dir).unwrap();
        let (app, _live) = crate::app::router(settings, storage).unwrap();
        (app, sha256, bytes.len() as u64)
    }

    /// What the front makes of `head`: the length of a blob it sends, or `None` when it is
    /// hyper's; and the head it wrote.
    fn front_of(app: &App, head: &str) -> (Option<u64>, String) {
        let mut fields = [httparse::EMPTY_HEADER; MAX_HEADERS];
        let mut request = httparse::Request::new(&mut fields);
        assert!(request.parse(head.as_bytes()).unwrap().is_complete());
        let mut out = Vec::new();
        let sent = match answer(app, &request, &mut out) {
            Answered::Blob(blob) => Some(blob.len),
            Answered::No => None,
            Answered::Yes(_) | Answered::Unconfirmed(_) => panic!("not a blob's answer"),
        };
        (sent, String::from_utf8(out).unwrap())
    }

    #[tokio::test]
    async fn with_sendfile_the_front_sends_only_a_plain_get_of_a_whole_blob() {
        let dir = tempfile::tempdir().unwrap();
        let (app, sha256, len) = app_with_blob("blob_send = \"sendfile\"", dir.path());
        let get =
            |extra: &str| format!("GET /v1/blobs/{sha256} HTTP/1.1\r\nHost: x\r\n{extra}\r\n");

        let (sent, head) = front_of(&app, &get("Authorization: Bearer any\r\n"));
        assert_eq!(sent, Some(len), "{head}");
        assert!(head.starts_with("HTTP/1.1 200 OK\r\n"), "{head}");
        for field in [
            format!("content-length: {len}\r\n"),
            format!("etag: \"{sha256}\"\r\n"),
            "cache-control: public, max-age=31536000, immutable\r\n".into(),
            "accept-ranges: bytes\r\n".into(),
            "content-type: application/octet-stream\r\n".into(),
        ] {
            assert!(head.contains(&field), "{field} in {head}");
        }
        assert!(head.ends_with("\r\n\r\n"), "{head}");

        // A range, a condition or a framing field: hyper answers `206`, `304`, `416`.
        for extra in [
            "Range: bytes=0-9\r\n",
            "range: bytes=0-9\r\n",
            "If-Range: \"x\"\r\n",
            "If-None-Match: \"x\"\r\n",
            "Connection: close\r\n",
        ] {
            assert_eq!(
                front_of(&app, &get(extra)),
                (None, String::new()),
                "{extra}"
            );
        }
        // No such blob, a name that is not a SHA-256, a HEAD: the route's answers.
        let missing = format!("GET /v1/blobs/{} HTTP/1.1\r\n\r\n", "0".repeat(64));
        let upper = format!("GET /v1/blobs/{} HTTP/1.1\r\n\r\n", sha256.to_uppercase());
        let head_request = format!("HEAD /v1/blobs/{sha256} HTTP/1.1\r\n\r\n");
        for request in [missing, upper, head_request] {
            assert_eq!(front_of(&app, &request), (None, String::new()), "{request}");
        }
    }

    #[tokio::test]
    async fn by_default_blobs_are_hyper_s() {
        let dir = tempfile::tempdir().unwrap();
        let (app, sha256, _) = app_with_blob("", dir.path());
        let request = format!("GET /v1/blobs/{sha256} HTTP/1.1\r\n\r\n");
        assert_eq!(front_of(&app, &request), (None, String::new()));
    }

    #[test]
    fn the_front_s_blob_path_is_the_route_s() {
        assert_eq!(paths::blob("abc"), format!("{BLOBS}abc"));
    }

    #[test]
    fn visible_is_header_value_to_str() {
        for value in [&b"a\tb c~"[..], b"\x7f", b"\xe9", b"", b"\x1f"] {
            let header = HeaderValue::from_bytes(value).ok();
            let expected = header.as_ref().and_then(|h| h.to_str().ok());
            assert_eq!(visible(value), expected, "{value:?}");
        }
    }
}
