//! The console against real `packd` processes over HTTP: who may see it (sign-in cookie,
//! bearer token, public deployments), that untrusted names reach the page only escaped, that
//! nothing on it can publish, and that history pages hold what they say. What the sign-in
//! cookie holds, and that it is no credential, is in console_cookie.rs; what a person sees
//! in a browser is in tests/tests/console_browser.rs.

use crate::common;

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

const RAMP_RANGE: &str = ">=1.4.0, <1.5.0";

fn pack_ref(pack: &[u8]) -> pack_format::PackRef {
    let (header, _) = pack_format::read_header(pack, &pack_format::Limits::default()).unwrap();
    pack_format::PackRef {
        version: header.version,
        sha256: pack_format::sha256_hex(pack),
        size: pack.len() as u64,
        schema: header.schema,
    }
}

/// Sequence 1 of `stable`: `new` ramping over `old` for 1.4.x, 5 % 90 minutes ago then 25, 50
/// and 100 % an hour apart (so 25 % now), its tool-error rate watched by `guard`'s key with a
/// freeze on regression; every other release on its built-in pack.
fn ramp_document(
    fx: &Fixture,
    old: &[u8],
    new: &[u8],
    guard: &pack_format::SigningKey,
) -> pack_format::ChannelDocument {
    let now = time::OffsetDateTime::now_utc();
    let (first, ramp) =
        pack_format::Ramp::parse("5,25,50,100%/1h", now - time::Duration::minutes(90)).unwrap();
    let range: semver::VersionReq = RAMP_RANGE.parse().unwrap();
    let mut doc = fx.document("stable", 1, new, "ramp");
    doc.entries = vec![
        pack_format::ChannelEntry {
            clients: range.clone(),
            target: pack_format::EntryTarget::Pack(pack_ref(new)),
            rollout: Some(pack_format::Rollout {
                percent: first,
                salt: "ramp".to_string(),
                ramp: Some(ramp),
                watch: Some(pack_format::Watch {
                    metrics: vec!["tool_error_rate".to_string()],
                    action: pack_format::WatchAction::Freeze,
                }),
            }),
        },
        pack_format::ChannelEntry {
            clients: range,
            target: pack_format::EntryTarget::Pack(pack_ref(old)),
            rollout: None,
        },
        pack_format::ChannelEntry {
            clients: semver::VersionReq::STAR,
            target: pack_format::EntryTarget::Builtin,
            rollout: None,
        },
    ];
    doc.guard = Some(pack_format::Guard::for_key(guard));
    doc
}

/// `installs` installs of release 1.4.2 report a day of `calls` tool calls on `pack`, `errors`
/// of them failed; `first` numbers the first install.
async fn report_outcomes(
    server: &Packd,
    pack: &[u8],
    first: usize,
    installs: usize,
    calls: u64,
    errors: u64,
) {
    let reference = pack_ref(pack);
    let day = time::OffsetDateTime::now_utc().date().to_string();
    for i in first..first + installs {
        let report = pack_protocol::OutcomeReport {
            channel: "stable".to_string(),
            day: day.clone(),
            pack: reference.sha256.clone(),
            pack_name: "core".to_string(),
            pack_version: reference.version.clone(),
            client_version: semver::Version::new(1, 4, 2),
            counts: pack_protocol::OutcomeCounts {
                turns: calls,
                tool_calls: calls,
                tool_errors: errors,
                ..pack_protocol::OutcomeCounts::default()
            },
        };
        let install = pack_protocol::fleet::install_hash("http://test", "stable", &format!("{i}"));
        let r = client()
            .post(server.url(&paths::outcomes("stable")))
            .header(pack_protocol::headers::INSTALL, &install)
            .json(&report)
            .send()
            .await
            .unwrap();
        assert_eq!(
            r.status(),
            StatusCode::ACCEPTED,
            "{}",
            r.text().await.unwrap()
        );
    }
}

async fn page(server: &Packd, path: &str) -> String {
    let r = client().get(server.url(path)).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::OK, "{path}");
    r.text().await.unwrap()
}

/// The part of `html` from `start` up to the next `end`.
fn between<'a>(html: &'a str, start: &str, end: &str) -> &'a str {
    let from = html
        .find(start)
        .unwrap_or_else(|| panic!("no {start:?} in {html}"));
    let rest = &html[from..];
    &rest[..rest.find(end).unwrap_or(rest.len())]
}

/// A watched ramp on a packd holding its guard key. While it runs, the channel page shows
/// its percentage now and which steps of its schedule landed, the tool-error rate of both
/// versions with their intervals, and that the guard's test needs more installs. Once the new
/// version's tool errors regress, the guard freezes it: the page says at what percentage,
/// when and what it restricts, why, and the exact command that resumes the ramp.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_guarded_ramp_shows_its_schedule_its_evidence_and_the_guards_freeze() {
    let guard = pack_format::SigningKey::generate(None).unwrap();
    let fx = Fixture::new(
        "[fleet]\nflush_secs = 1\n\n[guard]\nkey = \"guard.key\"\ninterval_secs = 1\nmin_installs = 5\n",
    );
    std::fs::write(fx.dir.path().join("guard.key"), &guard.secret_file).unwrap();
    let server = Packd::start(&fx.disk(), Some(&fx.config));
    let old = fx.pack("core", "1.0.0", "old");
    let new = fx.pack("core", "1.1.0", "new");
    for pack in [&old, &new] {
        assert_eq!(upload(&server, pack).await.status(), StatusCode::CREATED);
    }
    let doc = ramp_document(&fx, &old, &new, &guard.key);
    publish_created(&server, "stable", &fx.publish_body(&doc)).await;

    // Both versions at a 5 % tool-error rate, 100 calls each: too few to decide.
    report_outcomes(&server, &new, 0, 1, 100, 5).await;
    report_outcomes(&server, &old, 100, 1, 100, 5).await;
    let html = page(&server, "/console/channels/stable").await;
    let card = between(&html, r#"<article class="rollout-card""#, "</article>");
    assert!(card.contains(r#"data-version="1.1.0""#), "{card}");
    assert!(card.contains(r#"<span class="pct">25 %</span>"#), "{card}");
    assert!(card.contains("ramp from 5 % to 100 %, in steps"), "{card}");
    let steps: Vec<&str> = card
        .split(r#"<tr class=""#)
        .skip(1)
        .map(|row| row.split('"').next().unwrap())
        .collect();
    assert_eq!(steps, ["landed", "landed", "next", "later"], "{card}");
    assert!(
        card.contains("<code>tool_error_rate</code>; on a regression: <strong>freeze</strong>"),
        "{card}"
    );
    let evidence = between(card, r#"<table class="numbers evidence""#, "</table>");
    assert!(
        evidence.contains("1.1.0 beside 1.0.0, which it replaces"),
        "{evidence}"
    );
    assert!(
        evidence.contains(
            r#"<tr data-version="1.1.0"><th scope="row">1.1.0 (rolling out)</th><td>1</td><td>100</td><td>5.0 % [2.2–11.2 %]</td></tr>"#
        ),
        "{evidence}"
    );
    assert!(
        evidence.contains(r#"<th scope="row">1.0.0 (replaced)</th><td>1</td><td>100</td>"#),
        "{evidence}"
    );
    assert!(
        card.contains("needs 4 more installs on 1.1.0 and 4 more on 1.0.0"),
        "{card}"
    );
    assert!(
        card.contains("of 100</td>"),
        "the threshold is 1/alpha: {card}"
    );
    assert!(html.contains("No freeze or rollback yet."), "{html}");
    assert!(html.contains(&guard.key.key_id()), "the guard key is named");
    assert!(!html.contains(r#"class="stopped""#), "{html}");

    // Ten installs of each: 1.1.0 now fails a quarter of its tool calls, 1.0.0 still 5 %
    // (the first install's new report replaces its earlier one): the guard freezes it.
    report_outcomes(&server, &new, 0, 10, 100, 25).await;
    report_outcomes(&server, &old, 100, 10, 100, 5).await;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let decision = loop {
        let view: serde_json::Value = client()
            .get(server.url(&paths::guard("stable")))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        if let Some(decision) = view["decisions"].as_array().and_then(|d| d.first()) {
            break decision.clone();
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no decision: {view:#}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    };
    assert_eq!(decision["action"], "freeze", "{decision:#}");
    assert_eq!(decision["sequence"], 2);

    let html = page(&server, "/console/channels/stable").await;
    let banner = between(&html, r#"<section class="stopped""#, "</section>");
    assert!(
        banner.contains("The rollout of 1.1.0 is frozen by the guard"),
        "{banner}"
    );
    assert!(
        banner.contains("Frozen at 25 % by the guard at "),
        "{banner}"
    );
    assert!(
        banner.contains(
            r#"(restricts sequence <a href="/console/channels/stable/history/1">1</a>)."#
        ),
        "{banner}"
    );
    assert!(
        banner.contains("Why: tool_error_rate 25.00% over 10 installs (250 of 1000) against 5.00% over 10 installs (50 of 1000)"),
        "{banner}"
    );
    let origin = html
        .split("packer release stable --server ")
        .nth(1)
        .and_then(|rest| rest.split(' ').next())
        .unwrap();
    assert!(
        banner.contains(&format!(
            "<pre><code>packer release stable --server {origin} --keys KEYS --resume '&gt;=1.4.0, &lt;1.5.0'</code></pre>"
        )),
        "{banner}"
    );
    // The live entry holds 25 %; the schedule's later steps are held back.
    let live = between(&html, r#"<table class="cards live""#, "</table>");
    assert!(live.contains("frozen by the guard"), "{live}");
    let card = between(&html, r#"<article class="rollout-card""#, "</article>");
    assert_eq!(card.matches(r#"<tr class="held">"#).count(), 2, "{card}");
    assert!(
        card.contains("The guard already acted on this rollout."),
        "{card}"
    );
    assert!(
        card.contains(r#"<strong class="flag">Regressed</strong>"#),
        "{card}"
    );
    assert!(card.contains("+20.0 points"), "{card}");
    let decisions = between(&html, r#"<table class="cards decisions""#, "</table>");
    assert!(
        decisions.contains("<strong>freeze</strong> at 25 %"),
        "{decisions}"
    );
    assert!(
        decisions.contains(r#"sequence <a href="/console/channels/stable/history/2">2</a>"#),
        "{decisions}"
    );
    assert!(
        html.contains("this packd holds it and looks at each watched rollout every 1 s"),
        "{html}"
    );
    // The resume comes first among the commands that change the channel.
    let change = between(&html, r#"<section class="change""#, "</section>");
    assert!(
        change.find("--resume").unwrap() < change.find("--rollback").unwrap(),
        "{change}"
    );
    // The history says what the guard's document changed.
    let history = between(&html, r#"id="history-title""#, "</section>");
    assert!(
        history.contains("1.1.0 for &gt;=1.4.0, &lt;1.5.0: rollout 5 % ramping to 100 % → 25 %"),
        "{history}"
    );
    let overview = page(&server, "/console").await;
    assert!(
        overview.contains("By the guard: 1.1.0 frozen at 25 %"),
        "{overview}"
    );
}

/// A guard document that rolled a ramp back, published on a packd that holds no guard key:
/// the page says so, offers to keep the rollback with the offline key, and computes the
/// guard's test itself for what is still rolling out (nothing here).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_guards_rollback_is_shown_with_the_command_that_keeps_it() {
    let guard = pack_format::SigningKey::generate(None).unwrap();
    let fx = Fixture::new("");
    let server = Packd::start(&fx.disk(), Some(&fx.config));
    let old = fx.pack("core", "1.0.0", "old");
    let new = fx.pack("core", "1.1.0", "new");
    for pack in [&old, &new] {
        assert_eq!(upload(&server, pack).await.status(), StatusCode::CREATED);
    }
    let doc = ramp_document(&fx, &old, &new, &guard.key);
    let signed = doc.sign(&fx.signing).unwrap();
    let body = fx.publish_body(&doc);
    publish_created(&server, "stable", &body).await;
    let rollback = pack_format::guard::guard_document(
        &signed,
        &doc,
        0,
        pack_format::GuardAction::Rollback,
        time::OffsetDateTime::now_utc(),
    )
    .unwrap()
    .sign(&guard.key)
    .unwrap();
    publish_created(
        &server,
        "stable",
        &serde_json::json!({
            "document": String::from_utf8(rollback.document).unwrap(),
            "signature": rollback.signature,
        }),
    )
    .await;

    let html = page(&server, "/console/channels/stable").await;
    let banner = between(&html, r#"<section class="stopped""#, "</section>");
    assert!(
        banner.contains("The rollout of 1.1.0 is rolled back by the guard"),
        "{banner}"
    );
    assert!(
        banner.contains("installs of &gt;=1.4.0, &lt;1.5.0 get 1.0.0 again."),
        "{banner}"
    );
    assert!(
        banner.contains("--rollback '&gt;=1.4.0, &lt;1.5.0=1.0.0'</code></pre>"),
        "{banner}"
    );
    let card = between(&html, r#"<article class="rollout-card""#, "</article>");
    assert!(card.contains("rolled back to 1.0.0"), "{card}");
    assert!(card.contains(r#"<span class="pct">0 %</span>"#), "{card}");
    assert!(
        card.contains("No look at this rollout: it is rolled back."),
        "{card}"
    );
    assert!(html.contains("this packd does not hold it"), "{html}");
    assert!(
        html.contains(", signed by the guard key, restricting "),
        "{html}"
    );
}
