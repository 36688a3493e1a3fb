//! The floor of packd's HTTP stack, for BENCHMARKS.md: hyper on the same accept model as
//! packd (one thread per core, each with a single-threaded runtime and its own
//! `SO_REUSEPORT` socket, the same header-read timer), answering every request with a fixed
//! `304` (or `200` when `If-None-Match` differs) and nothing else: no router, no storage, no
//! metrics. With `--front`, the same answers from the loop packd's front runs ahead of hyper
//! (`src/front.rs`: read, parse with `httparse`, one write per batch of answers) instead.
//! What packd spends per revalidation beyond this is its own work.
//!
//! ```sh
//! cargo run --release -p pack-server --example bare_304 -- '"<etag>"' [--front]
//! ```
//! prints `listening on http://127.0.0.1:PORT`; any path answers.

#![allow(clippy::print_stdout)] // prints the address it listens on

use std::convert::Infallible;
use std::time::Duration;

use hyper::header::{CACHE_CONTROL, ETAG, HeaderValue, IF_NONE_MATCH};
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};

fn main() -> std::io::Result<()> {
    let etag = std::env::args().nth(1).unwrap_or_else(|| "\"bare\"".into());
    let front = std::env::args().nth(2).is_some_and(|a| a == "--front");
    let etag: &'static HeaderValue = Box::leak(Box::new(
        HeaderValue::from_str(&etag).map_err(std::io::Error::other)?,
    ));
    let probe = std::net::TcpListener::bind("127.0.0.1:0")?;
    let addr = probe.local_addr()?;
    drop(probe);
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let mut threads = Vec::new();
    for _ in 0..cores {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let socket = tokio::net::TcpSocket::new_v4()?;
        socket.set_reuseaddr(true)?;
        socket.set_reuseport(true)?;
        socket.bind(addr)?;
        threads.push(std::thread::spawn(move || {
            if front {
                runtime.block_on(serve_front(socket, etag));
            } else {
                runtime.block_on(serve(socket, etag));
            }
        }));
    }
    println!("listening on http://{addr}");
    for thread in threads {
        let _ = thread.join();
    }
    Ok(())
}

async fn serve(socket: tokio::net::TcpSocket, etag: &'static HeaderValue) {
    let Ok(listener) = socket.listen(1024) else {
        return;
    };
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(Duration::from_secs(30));
    while let Ok((stream, _)) = listener.accept().await {
        let answer = move |request: Request<hyper::body::Incoming>| async move {
            let unchanged = request.headers().get(IF_NONE_MATCH) == Some(etag);
            let mut response = Response::new(String::new());
            if unchanged {
                *response.status_mut() = StatusCode::NOT_MODIFIED;
            }
            response.headers_mut().insert(ETAG, etag.clone());
            response
                .headers_mut()
                .insert(CACHE_CONTROL, HeaderValue::from_static("no-cache"));
            Ok::<_, Infallible>(response)
        };
        let connection =
            http.serve_connection(TokioIo::new(stream), hyper::service::service_fn(answer));
        tokio::spawn(async move {
            let _ = connection.await;
        });
    }
}

/// Accepts connections, each answered by [`front_connection`].
async fn serve_front(socket: tokio::net::TcpSocket, etag: &'static HeaderValue) {
    let Ok(listener) = socket.listen(1024) else {
        return;
    };
    while let Ok((stream, _)) = listener.accept().await {
        tokio::spawn(front_connection(stream, etag));
    }
}

/// Answers each whole request head read so far, the answers in one write, then reads more;
/// the `Date` made once a second, as hyper and packd's front make it.
async fn front_connection(mut stream: tokio::net::TcpStream, etag: &'static HeaderValue) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut buf = vec![0u8; 8192];
    let (mut start, mut end) = (0usize, 0usize);
    let mut out: Vec<u8> = Vec::with_capacity(512);
    let mut date = (0u64, String::new());
    loop {
        loop {
            let mut headers = [httparse::EMPTY_HEADER; 32];
            let mut request = httparse::Request::new(&mut headers);
            match request.parse(&buf[start..end]) {
                Ok(httparse::Status::Complete(n)) => {
                    let unchanged = request
                        .headers
                        .iter()
                        .find(|h| h.name.eq_ignore_ascii_case("if-none-match"))
                        .is_some_and(|h| h.value == etag.as_bytes());
                    let now = std::time::SystemTime::now();
                    let secs = now
                        .duration_since(std::time::UNIX_EPOCH)
                        .map_or(0, |d| d.as_secs());
                    if secs != date.0 {
                        date = (secs, httpdate::fmt_http_date(now));
                    }
                    out.extend_from_slice(if unchanged {
                        b"HTTP/1.1 304 Not Modified\r\n"
                    } else {
                        b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n"
                    });
                    out.extend_from_slice(b"cache-control: no-cache\r\netag: ");
                    out.extend_from_slice(etag.as_bytes());
                    out.extend_from_slice(b"\r\ndate: ");
                    out.extend_from_slice(date.1.as_bytes());
                    out.extend_from_slice(b"\r\n\r\n");
                    start += n;
                }
                Ok(httparse::Status::Partial) => break,
                Err(_) => return,
            }
        }
        if !out.is_empty() {
            if stream.write_all(&out).await.is_err() {
                return;
            }
            out.clear();
        }
        if start == end {
            (start, end) = (0, 0);
        } else if end == buf.len() {
            buf.copy_within(start..end, 0);
            (start, end) = (0, end - start);
        }
        match stream.read(&mut buf[end..]).await {
            Ok(0) | Err(_) => return,
            Ok(n) => end += n,
        }
    }
}
