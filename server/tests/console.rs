//! The console against real `packd` processes over HTTP: who may see it (sign-in cookie,
//! bearer token, public deployments), that untrusted names reach the page only escaped, that
//! nothing on it can publish, and that history pages hold what they say. What the sign-in
//! cookie holds, and that it is no credential, is in console_cookie.rs; what a person sees
//! in a browser is in tests/tests/console_browser.rs.

mod common;

use common::*;
use pack_protocol::paths;
use reqwest::StatusCode;
use reqwest::header::{HeaderMap, LOCATION, SET_COOKIE};

/// A client that shows redirects instead of following them.
fn browser_like() -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .timeout(std::time::Duration::from_secs(30))
        .build()
        .unwrap()
}

/// Uploads one pack and publishes `documents` sequences of `channel` pointing at it; returns
/// the pack's SHA-256.
async fn publish_n(server: &Packd, fx: &Fixture, channel: &str, documents: u64) -> String {
    let pack = fx.pack("core", "1.0.0", "console");
    let sha = pack_format::sha256_hex(&pack);
    let r = upload(server, &pack).await;
    assert!(r.status().is_success(), "{}", r.status());
    for sequence in 1..=documents {
        // Alternate the rollout percent so every document changes something.
        let mut doc = fx.document(channel, sequence, &pack, "salt");
        doc.entries[0].rollout.as_mut().unwrap().percent = 50 + (sequence % 2) as u8 * 50;
        publish_created(server, channel, &fx.publish_body(&doc)).await;
    }
    sha
}

fn set_cookie(headers: &HeaderMap) -> String {
    headers
        .get_all(SET_COOKIE)
        .iter()
        .map(|v| v.to_str().unwrap().to_string())
        .find(|v| v.starts_with("packd_console="))
        .unwrap_or_default()
}

/// `name=value` of a Set-Cookie line.
fn cookie_pair(set_cookie: &str) -> String {
    set_cookie.split(';').next().unwrap().to_string()
}

async fn login(server: &Packd, token: &str, origin: Option<&str>) -> reqwest::Response {
    let mut request = browser_like()
        .post(server.url("/console/login"))
        .header("content-type", "application/x-www-form-urlencoded")
        .body(format!(
            "token={}&next=%2Fconsole%2Fchannels%2Fstable",
            token
        ));
    if let Some(origin) = origin {
        request = request.header("origin", origin);
    }
    request.send().await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_private_console_sends_the_browser_to_sign_in_and_back() {
    let fx = Fixture::new(&Fixture::read_token_toml());
    let server = Packd::start(&fx.disk(), Some(&fx.config));
    publish_n(&server, &fx, "stable", 1).await;
    let c = browser_like();

    let r = c
        .get(server.url("/console/channels/stable"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::SEE_OTHER);
    assert_eq!(
        r.headers()[LOCATION],
        "/console/login?next=/console/channels/stable"
    );
    let form = c.get(server.url("/console/login")).send().await.unwrap();
    assert_eq!(form.status(), StatusCode::OK);
    let html = form.text().await.unwrap();
    assert!(
        html.contains(r#"<label for="token">Token</label>"#),
        "{html}"
    );
    assert!(html.contains("This packd is private"), "{html}");

    let wrong = login(&server, "not-a-token", None).await;
    assert_eq!(wrong.status(), StatusCode::UNAUTHORIZED);
    assert!(set_cookie(wrong.headers()).is_empty());
    assert!(wrong.text().await.unwrap().contains("packd knows no token"));

    let ok = login(&server, READ_ONLY_TOKEN, None).await;
    assert_eq!(ok.status(), StatusCode::SEE_OTHER);
    assert_eq!(ok.headers()[LOCATION], "/console/channels/stable");
    let cookie = set_cookie(ok.headers());
    for attribute in [
        "HttpOnly",
        "SameSite=Strict",
        "Path=/console",
        "Max-Age=43200",
    ] {
        assert!(cookie.contains(attribute), "{cookie}");
    }
    assert!(!cookie.contains("Secure"), "plain loopback HTTP: {cookie}");
    assert!(
        !cookie.contains(READ_ONLY_TOKEN),
        "the cookie holds no token: {cookie}"
    );

    let page = c
        .get(server.url("/console/channels/stable"))
        .header("cookie", cookie_pair(&cookie))
        .send()
        .await
        .unwrap();
    assert_eq!(page.status(), StatusCode::OK);
    let html = page.text().await.unwrap();
    assert!(
        html.contains("Signed in with token <strong>reader</strong> (read)"),
        "{html}"
    );
    // Neither the token nor any token's hash is ever on a page.
    for secret in [
        READ_ONLY_TOKEN.to_string(),
        hash_token_with_cli(READ_ONLY_TOKEN),
        hash_token_with_cli(PUBLISH_TOKEN),
    ] {
        assert!(!html.contains(&secret), "{secret} on the page");
    }

    // Signed in over HTTPS (the form's page said so), the cookie is Secure.
    let secure = login(&server, READ_ONLY_TOKEN, Some("https://packs.example.com")).await;
    assert!(set_cookie(secure.headers()).contains("; Secure"));

    let out = c
        .post(server.url("/console/logout"))
        .header("cookie", cookie_pair(&cookie))
        .send()
        .await
        .unwrap();
    assert_eq!(out.status(), StatusCode::SEE_OTHER);
    assert!(set_cookie(out.headers()).contains("Max-Age=0"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bearer_token_also_opens_a_private_console_and_a_wrong_one_is_401() {
    let fx = Fixture::new(&Fixture::read_token_toml());
    let server = Packd::start(&fx.disk(), Some(&fx.config));
    publish_n(&server, &fx, "stable", 1).await;
    let c = browser_like();
    let r = c
        .get(server.url("/console"))
        .bearer_auth(PUBLISH_TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    assert!(r.text().await.unwrap().contains("(publish)"));
    let r = c
        .get(server.url("/console"))
        .bearer_auth("nope")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
}

/// A link followed from another site arrives without the SameSite=Strict cookie: the
/// answer reloads the page from the console itself instead of asking to sign in.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_link_from_another_site_reloads_once_instead_of_asking_to_sign_in() {
    let fx = Fixture::new(&Fixture::read_token_toml());
    let server = Packd::start(&fx.disk(), Some(&fx.config));
    let r = browser_like()
        .get(server.url("/console/channels/stable?x=1"))
        .header("sec-fetch-site", "cross-site")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    let html = r.text().await.unwrap();
    assert!(
        html.contains(
            r#"<meta http-equiv="refresh" content="0; url=/console/channels/stable?x=1">"#
        ),
        "{html}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sign_in_never_redirects_off_the_console() {
    let fx = Fixture::new(&Fixture::read_token_toml());
    let server = Packd::start(&fx.disk(), Some(&fx.config));
    for next in [
        "https%3A%2F%2Fevil.example%2F",
        "%2F%2Fevil.example",
        "%2Fv1%2Fchannels",
    ] {
        let r = browser_like()
            .post(server.url("/console/login"))
            .header("content-type", "application/x-www-form-urlencoded")
            .body(format!("token={READ_ONLY_TOKEN}&next={next}"))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::SEE_OTHER);
        assert_eq!(r.headers()[LOCATION], "/console", "next={next}");
    }
}

/// A token's name comes from the config and may hold markup: the page shows it as text.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_name_with_markup_is_shown_as_text() {
    let evil = r#"<script>alert(1)</script><img src=x onerror=alert(2)>"#;
    let fx = Fixture::new(&format!(
        "[[tokens]]\nname = {evil:?}\nsha256 = \"{}\"\nscopes = [\"publish\"]\n",
        hash_token_with_cli("evil-token")
    ));
    let server = Packd::start(&fx.disk(), Some(&fx.config));
    let c = client();
    let pack = fx.pack("core", "1.0.0", "x");
    let sha = pack_format::sha256_hex(&pack);
    c.put(server.url(&paths::blob(&sha)))
        .bearer_auth("evil-token")
        .body(pack.clone())
        .send()
        .await
        .unwrap();
    let r = c
        .put(server.url(&paths::channel("stable")))
        .bearer_auth("evil-token")
        .json(&fx.publish_body(&fx.document("stable", 1, &pack, "s")))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::CREATED);
    for path in [
        "/console",
        "/console/channels/stable",
        "/console/channels/stable/history",
        "/console/channels/stable/history/1",
    ] {
        let html = c
            .get(server.url(path))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        assert!(
            html.contains(
                "&lt;script&gt;alert(1)&lt;/script&gt;&lt;img src=x onerror=alert(2)&gt;"
            ),
            "{path}: {html}"
        );
        assert!(
            !html.contains("<script") && !html.contains("<img"),
            "{path}: {html}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pages_forbid_scripts_framing_and_caching_and_nothing_on_them_publishes() {
    let fx = Fixture::new("");
    let server = Packd::start(&fx.disk(), Some(&fx.config));
    publish_n(&server, &fx, "stable", 1).await;
    let c = browser_like();
    let r = c.get(server.url("/console")).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    let h = r.headers();
    assert_eq!(h["content-type"], "text/html; charset=utf-8");
    assert_eq!(h["cache-control"], "no-store");
    let csp = h["content-security-policy"].to_str().unwrap();
    assert!(
        csp.contains("default-src 'none'") && !csp.contains("script-src"),
        "{csp}"
    );
    assert!(csp.contains("frame-ancestors 'none'"), "{csp}");
    assert_eq!(h["x-content-type-options"], "nosniff");
    let html = r.text().await.unwrap();
    assert!(!html.contains("<script"), "no script at all");
    // The stylesheet comes from packd itself, cacheable forever under its content hash.
    let href = html
        .split(r#"<link rel="stylesheet" href=""#)
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .unwrap()
        .to_string();
    assert!(href.starts_with("/console/assets/console.css?v="), "{href}");
    let css = c.get(server.url(&href)).send().await.unwrap();
    assert_eq!(css.headers()["content-type"], "text/css; charset=utf-8");
    assert!(
        css.headers()["cache-control"]
            .to_str()
            .unwrap()
            .contains("immutable")
    );
    assert!(css.text().await.unwrap().contains("prefers-color-scheme"));
    // The only forms are sign-in, sign-out and compare; every other method is refused.
    for (method, path) in [
        (reqwest::Method::PUT, "/console/channels/stable"),
        (reqwest::Method::POST, "/console/channels/stable"),
        (
            reqwest::Method::DELETE,
            "/console/channels/stable/history/1",
        ),
        (reqwest::Method::POST, "/console/packs"),
    ] {
        let r = c
            .request(method.clone(), server.url(path))
            .send()
            .await
            .unwrap();
        assert_eq!(
            r.status(),
            StatusCode::METHOD_NOT_ALLOWED,
            "{method} {path}"
        );
    }
    let live: serde_json::Value = c
        .get(server.url("/v1/channels/stable/history"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(live["live_sequence"], 1);
}

/// 120 documents: the history shows 50 a page, newest first, each with the token that
/// published it and what it changed; pages link to each other; a page past the start is
/// empty rather than an error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn history_pages_hold_fifty_documents_newest_first() {
    let fx = Fixture::new("");
    let server = Packd::start(&fx.disk(), Some(&fx.config));
    publish_n(&server, &fx, "stable", 120).await;
    let c = client();
    let sequences = |html: &str| -> Vec<u64> {
        html.split(
            r#"<th scope="row" data-label="Sequence"><a href="/console/channels/stable/history/"#,
        )
        .skip(1)
        .map(|rest| rest.split('"').next().unwrap().parse().unwrap())
        .collect()
    };
    let first = c
        .get(server.url("/console/channels/stable/history"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert_eq!(sequences(&first), (71..=120).rev().collect::<Vec<_>>());
    assert!(first.contains(r#"href="/console/channels/stable/history?before=71" rel="next""#));
    assert_eq!(
        first
            .matches(r#"<span class="by">publisher</span>"#)
            .count(),
        50
    );
    // Every document flipped the rollout between 50 and 100 %.
    assert!(
        first.contains("1.0.0 for every release: rollout 50 % → 100 %"),
        "{first}"
    );
    let last = c
        .get(server.url("/console/channels/stable/history?before=21"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert_eq!(sequences(&last), (1..=20).rev().collect::<Vec<_>>());
    assert!(
        last.contains("added every release → 1.0.0 (rollout 100 %)"),
        "{last}"
    );
    assert!(!last.contains("rel=\"next\""));
    let page = c
        .get(server.url("/console/channels/stable/history/37?with=12"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(page.contains("What changed from 12 to 37"), "{page}");
    assert!(page.contains("Not live: sequence"), "{page}");
    let missing = c
        .get(server.url("/console/channels/nope"))
        .send()
        .await
        .unwrap();
    assert_eq!(missing.status(), StatusCode::NOT_FOUND);
    assert!(
        missing
            .text()
            .await
            .unwrap()
            .contains("channel nope not found")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fleet_data_kept_for_publishers_needs_a_publish_token_on_the_console_too() {
    let fx = Fixture::new("[fleet]\nview = \"publish\"\n");
    let server = Packd::start(&fx.disk(), Some(&fx.config));
    publish_n(&server, &fx, "stable", 1).await;
    let c = browser_like();
    let open = c
        .get(server.url("/console/channels/stable"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        open.contains("shows fleet data to publishers only"),
        "{open}"
    );
    assert!(!open.contains(r#"id="adoption-title""#));
    let cookie = cookie_pair(&set_cookie(
        login(&server, PUBLISH_TOKEN, None).await.headers(),
    ));
    let signed_in = c
        .get(server.url("/console/channels/stable"))
        .header("cookie", cookie)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(signed_in.contains(r#"id="adoption-title""#), "{signed_in}");
}

/// A packd that just started has not read the fleet files yet: until it has, the overview
/// says a channel's failures are still being read, never that none are rising.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fresh_overview_says_it_is_still_reading_rather_than_nothing_is_rising() {
    let fx = Fixture::new("[fleet]\nflush_secs = 1\n");
    let mut server = Packd::start(&fx.disk(), Some(&fx.config));
    let sha = publish_n(&server, &fx, "stable", 1).await;
    let c = client();
    for i in 0..4 {
        let install = pack_protocol::fleet::install_hash("http://test", "stable", &format!("{i}"));
        let r = c
            .post(server.url(&paths::reports("stable")))
            .header(pack_protocol::headers::INSTALL, &install)
            .json(&serde_json::json!({"channel": "stable", "pack": sha,
                                      "reason": "render_failed", "client_version": "1.4.0"}))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::ACCEPTED);
    }
    // SIGTERM writes the counts; a new process starts with nothing cached.
    server.sigterm();
    server.child.wait().unwrap();
    server = Packd::start(&fx.disk(), Some(&fx.config));
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        let html = c
            .get(server.url("/console"))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        assert!(!html.contains("none rising"), "{html}");
        if html.contains("Rising: 1.0.0") {
            break;
        }
        assert!(html.contains("still being read"), "{html}");
        assert!(
            std::time::Instant::now() < deadline,
            "never flagged: {html}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}
