//! `web_fetch` through the real `agent exec` against local HTTP servers: HTML comes back
//! as Markdown, the size, time and redirect caps hold, and nothing reaches a loopback or
//! private address unless the user listed it, checked on every hop and for the address a
//! name resolves to.

use crate::model_server;

use std::path::Path;
use std::process::Output;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use model_server::{ModelServer, exec, openai_calls, openai_text};
use serde_json::{Value, json};

/// Serves `router` on `ip` (any port) on its own thread; returns the port.
fn serve(ip: &str, router: axum::Router) -> u16 {
    let listener = std::net::TcpListener::bind((ip, 0)).unwrap();
    listener.set_nonblocking(true).unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async move {
            let listener = tokio::net::TcpListener::from_std(listener).unwrap();
            axum::serve(listener, router).await.unwrap();
        });
    });
    port
}

const PAGE: &str = r#"<!doctype html><html><head><title>Release notes</title>
<style>body { color: red }</style><script>window.SECRET_SCRIPT = 1</script></head>
<body><h1>Release 2.0</h1><p>The <b>fast</b> path is <a href="/docs">documented</a>.</p>
<ul><li>one</li><li>two</li></ul></body></html>"#;

/// A site on 127.0.0.2 with every page the tests need; `secret` counts the requests that
/// reach the 127.0.0.1 server the redirects point at.
struct Site {
    port: u16,
    secret_port: u16,
    secret_hits: Arc<AtomicUsize>,
}

fn site() -> Site {
    let secret_hits = Arc::new(AtomicUsize::new(0));
    let hits = secret_hits.clone();
    let secret_port = serve(
        "127.0.0.1",
        axum::Router::new().fallback(move || {
            hits.fetch_add(1, Ordering::SeqCst);
            async { "internal admin page" }
        }),
    );
    let redirect = |to: String| {
        move || {
            let to = to.clone();
            async move { (StatusCode::FOUND, [(header::LOCATION, to)]).into_response() }
        }
    };
    let router = axum::Router::new()
        .route(
            "/page",
            get(|| async { ([(header::CONTENT_TYPE, "text/html; charset=utf-8")], PAGE) }),
        )
        .route(
            "/big",
            get(|| async {
                (
                    [(header::CONTENT_TYPE, "text/plain")],
                    "a".repeat(2_000_000),
                )
            }),
        )
        .route(
            "/slow",
            get(|| async {
                let never =
                    futures_util::stream::pending::<Result<axum::body::Bytes, std::io::Error>>();
                Response::builder()
                    .header(header::CONTENT_TYPE, "text/plain")
                    .body(axum::body::Body::from_stream(never))
                    .unwrap()
            }),
        )
        .route(
            "/binary",
            get(|| async {
                (
                    [(header::CONTENT_TYPE, "image/png")],
                    vec![0x89u8, b'P', b'N', b'G'],
                )
            }),
        )
        .route("/loop", get(redirect("/loop".to_string())))
        .route("/hop", get(redirect("/page".to_string())))
        .route(
            "/to-loopback",
            get(redirect(format!("http://127.0.0.1:{secret_port}/secret"))),
        )
        .route(
            "/to-localhost",
            get(redirect(format!("http://localhost:{secret_port}/secret"))),
        );
    let port = serve("127.0.0.2", router);
    Site {
        port,
        secret_port,
        secret_hits,
    }
}

fn results(out: &Output) -> Vec<(bool, String)> {
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|e| e["type"] == "tool_call_completed")
        .map(|e| {
            (
                e["is_error"].as_bool().unwrap(),
                e["output"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

/// One `web_fetch` per model step, then a final answer.
fn fetch_all(home: &Path, config: &str, urls: &[String]) -> Vec<(bool, String)> {
    std::fs::write(home.join("config.toml"), config).unwrap();
    let work = tempfile::tempdir().unwrap();
    let mut replies: Vec<model_server::Reply> = urls
        .iter()
        .enumerate()
        .map(|(i, url)| openai_calls(&[(&format!("f{i}"), "web_fetch", json!({"url": url}))]))
        .collect();
    replies.push(openai_text("done"));
    let server = ModelServer::start(replies);
    let out = exec(&server, home, work.path(), &[], &["fetch"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    server.assert_clean();
    let results = results(&out);
    assert_eq!(results.len(), urls.len());
    results
}

/// Network on for the session, the site's address listed, tight caps.
const ALLOWED: &str = "[permissions]\nnetwork = true\n[web_fetch]\nallow_private = [\"127.0.0.2\"]\nmax_bytes = 10000\ntimeout_secs = 1\n";

#[test]
fn html_comes_back_as_markdown() {
    let site = site();
    let home = tempfile::tempdir().unwrap();
    let base = format!("http://127.0.0.2:{}", site.port);
    let results = fetch_all(
        home.path(),
        ALLOWED,
        &[format!("{base}/page"), format!("{base}/hop")],
    );
    let (is_error, page) = &results[0];
    assert!(!is_error, "{page}");
    assert!(page.contains("Title: Release notes\n"), "{page}");
    assert!(page.contains("# Release 2.0"), "{page}");
    assert!(page.contains("**fast**"), "{page}");
    assert!(page.contains("[documented](/docs)"), "{page}");
    assert!(page.contains("one") && page.contains("two"), "{page}");
    assert!(
        !page.contains("SECRET_SCRIPT") && !page.contains("color: red"),
        "{page}"
    );
    assert!(!page.contains("<p>"), "{page}");
    // A redirect on the same site is followed and reported.
    let (is_error, hopped) = &results[1];
    assert!(!*is_error && hopped.contains("# Release 2.0"), "{hopped}");
    assert!(
        hopped.contains(&format!("Redirected from: {base}/hop")),
        "{hopped}"
    );
}

#[test]
fn size_time_redirect_and_type_caps_hold() {
    let site = site();
    let home = tempfile::tempdir().unwrap();
    let base = format!("http://127.0.0.2:{}", site.port);
    let started = std::time::Instant::now();
    let results = fetch_all(
        home.path(),
        ALLOWED,
        &[
            format!("{base}/big"),
            format!("{base}/slow"),
            format!("{base}/loop"),
            format!("{base}/binary"),
        ],
    );
    let (is_error, big) = &results[0];
    assert!(!is_error, "{big}");
    assert!(
        big.contains("larger than the 10000-byte download limit"),
        "{big}"
    );
    assert!(big.len() < 12_000, "{} bytes came back", big.len());
    let (is_error, slow) = &results[1];
    assert!(
        *is_error && slow.contains("took longer than the 1 s limit"),
        "{slow}"
    );
    let (is_error, looping) = &results[2];
    assert!(
        *is_error && looping.contains("redirected more than 5 times"),
        "{looping}"
    );
    let (is_error, binary) = &results[3];
    assert!(
        *is_error && binary.contains("image/png, not text"),
        "{binary}"
    );
    // The stalled page did not hold the run for longer than its cap.
    assert!(started.elapsed().as_secs() < 20, "{:?}", started.elapsed());
}

#[test]
fn a_redirect_to_loopback_is_refused_by_default() {
    let site = site();
    let home = tempfile::tempdir().unwrap();
    let base = format!("http://127.0.0.2:{}", site.port);
    let results = fetch_all(
        home.path(),
        ALLOWED,
        &[
            format!("{base}/to-loopback"),
            format!("{base}/to-localhost"),
            format!("http://127.0.0.1:{}/direct", site.secret_port),
            format!("http://[::ffff:127.0.0.1]:{}/mapped", site.secret_port),
        ],
    );
    for (is_error, message) in &results {
        assert!(is_error, "{message}");
        assert!(message.contains("is a loopback address"), "{message}");
    }
    assert!(
        results[0].1.contains("127.0.0.1 is a loopback"),
        "{}",
        results[0].1
    );
    assert!(
        results[0].1.contains("reached by a redirect from"),
        "{}",
        results[0].1
    );
    // The name was refused for the address it resolves to, not for its spelling.
    assert!(
        results[1].1.contains("localhost resolves to it"),
        "{}",
        results[1].1
    );
    assert_eq!(site.secret_hits.load(Ordering::SeqCst), 0);
}

#[test]
fn private_addresses_need_listing_and_fetches_need_the_network() {
    let site = site();
    let home = tempfile::tempdir().unwrap();
    let url = format!("http://127.0.0.2:{}/page", site.port);
    let unlisted = fetch_all(
        home.path(),
        "[permissions]\nnetwork = true\n",
        std::slice::from_ref(&url),
    );
    assert!(unlisted[0].0 && unlisted[0].1.contains("127.0.0.2 is a loopback address"));
    // Without network access for the session, `exec` refuses the fetch and says why.
    let offline = fetch_all(
        home.path(),
        "[web_fetch]\nallow_private = [\"127.0.0.2\"]\n",
        &[url],
    );
    let (is_error, message) = &offline[0];
    assert!(is_error, "{message}");
    assert!(
        message.contains("has no network access unless `network = true`"),
        "{message}"
    );
    assert!(message.contains("web_fetch: http://127.0.0.2"), "{message}");
}
