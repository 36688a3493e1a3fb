//! The floor of packd's HTTP stack, for BENCHMARKS.md: hyper at its cheapest here (one thread
//! per core, each with a single-threaded runtime and its own `SO_REUSEPORT` socket, packd's
//! header-read timer), answering every request with a fixed `304` (or `200` when
//! `If-None-Match` differs) and nothing else: no router, no storage, no metrics. What packd
//! spends per revalidation beyond this is its accept model's and its own work.
//!
//! ```sh
//! cargo run --release -p pack-server --example bare_304 -- '"<etag>"'
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
            runtime.block_on(serve(socket, etag));
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
