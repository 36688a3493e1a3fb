//! The console's sign-in cookie is not a credential: it holds a token's name, an expiry and
//! a MAC keyed by the token's configured hash, never the token. Against real `packd`
//! processes: no `/v1` route takes it (as a bearer token or as a cookie), a tampered one is
//! refused, it expires, and it holds on every node with the config until its token leaves
//! the config.

use crate::common;

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64;
use common::*;
use pack_protocol::paths;
use pack_server::console::session::{LIFETIME_SECS, issue_with_key};
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

/// The `packd_console` Set-Cookie line, or "".
fn set_cookie(headers: &HeaderMap) -> String {
    headers
        .get_all(SET_COOKIE)
        .iter()
        .map(|v| v.to_str().unwrap().to_string())
        .find(|v| v.starts_with("packd_console="))
        .unwrap_or_default()
}

/// The cookie's value as a sign-in with `token` sets it.
async fn sign_in(server: &Packd, token: &str) -> String {
    let r = browser_like()
        .post(server.url("/console/login"))
        .header("content-type", "application/x-www-form-urlencoded")
        .body(format!("token={token}&next=%2Fconsole"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::SEE_OTHER);
    let line = set_cookie(r.headers());
    let pair = line.split(';').next().unwrap();
    pair.strip_prefix("packd_console=").unwrap().to_string()
}

/// `GET /console` with `value` as the sign-in cookie: `signed in as NAME` (the token name
/// the page shows) or `sent to URL` (where it sends the browser instead).
async fn console_with(server: &Packd, value: &str) -> String {
    let r = browser_like()
        .get(server.url("/console"))
        .header("cookie", format!("packd_console={value}"))
        .send()
        .await
        .unwrap();
    if r.status() == StatusCode::SEE_OTHER {
        assert!(
            set_cookie(r.headers()).contains("Max-Age=0"),
            "a refused cookie is removed"
        );
        return format!("sent to {}", r.headers()[LOCATION].to_str().unwrap());
    }
    assert_eq!(r.status(), StatusCode::OK);
    let html = r.text().await.unwrap();
    let who = html
        .split("Signed in with token <strong>")
        .nth(1)
        .and_then(|rest| rest.split("</strong>").next())
        .unwrap_or_else(|| panic!("no signed-in token on the page: {html}"));
    format!("signed in as {who}")
}

const REFUSED: &str = "sent to /console/login?next=/console&expired=1";

/// Every string a thief could try as a token: the value, and what it or any of its
/// dot-separated parts decodes to.
fn credentials_in(value: &str) -> Vec<String> {
    let mut found = vec![value.to_string()];
    for part in std::iter::once(value).chain(value.split('.')) {
        if let Some(text) = B64
            .decode(part)
            .ok()
            .and_then(|b| String::from_utf8(b).ok())
        {
            found.push(text);
        }
    }
    found.retain(|c| !c.is_empty() && c.bytes().all(|b| b.is_ascii_graphic()));
    found
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sign_in_cookie_authenticates_no_v1_request() {
    let fx = Fixture::new(&Fixture::read_token_toml());
    let server = Packd::start(&fx.disk(), Some(&fx.config));
    let live = fx.pack("core", "1.0.0", "live");
    assert!(upload(&server, &live).await.status().is_success());
    publish_created(
        &server,
        "stable",
        &fx.publish_body(&fx.document("stable", 1, &live, "s")),
    )
    .await;

    // A publisher's browser: the cookie a thief would want most.
    let value = sign_in(&server, PUBLISH_TOKEN).await;
    assert_eq!(
        console_with(&server, &value).await,
        "signed in as publisher"
    );
    let other = fx.pack("core", "2.0.0", "stolen");
    let other_sha = pack_format::sha256_hex(&other);
    let document = fx.publish_body(&fx.document("stable", 2, &live, "s"));
    let c = client();
    let mut attempts = Vec::new();
    for credential in credentials_in(&value) {
        attempts.push(("bearer", format!("Bearer {credential}")));
    }
    attempts.push(("cookie", format!("packd_console={value}")));
    for (how, header) in attempts {
        let name = if how == "bearer" {
            "authorization"
        } else {
            "cookie"
        };
        let read = c
            .get(server.url(&paths::channel("stable")))
            .header(name, &header)
            .send()
            .await
            .unwrap();
        let upload = c
            .put(server.url(&paths::blob(&other_sha)))
            .header(name, &header)
            .body(other.clone())
            .send()
            .await
            .unwrap();
        let publish = c
            .put(server.url(&paths::channel("stable")))
            .header(name, &header)
            .json(&document)
            .send()
            .await
            .unwrap();
        for (route, r) in [("read", read), ("upload", upload), ("publish", publish)] {
            assert_eq!(
                r.status(),
                StatusCode::UNAUTHORIZED,
                "{route} with the cookie as {how} ({header})"
            );
        }
    }
    // Nothing was uploaded or published with it.
    let blob = c
        .get(server.url(&paths::blob(&other_sha)))
        .bearer_auth(PUBLISH_TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(blob.status(), StatusCode::NOT_FOUND);
    let live_now = c
        .get(server.url(&paths::channel("stable")))
        .bearer_auth(PUBLISH_TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(live_now.headers()["x-promptpack-sequence"], "1");
    for shown in [PUBLISH_TOKEN.to_string(), B64.encode(PUBLISH_TOKEN)] {
        assert!(
            !value.contains(&shown),
            "the cookie holds the token: {value}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tampered_sign_in_cookie_is_refused() {
    let fx = Fixture::new(&Fixture::read_token_toml());
    let server = Packd::start(&fx.disk(), Some(&fx.config));
    let value = sign_in(&server, READ_ONLY_TOKEN).await;
    assert_eq!(console_with(&server, &value).await, "signed in as reader");
    // What an older packd kept in the cookie: the token itself.
    for old in [B64.encode(READ_ONLY_TOKEN), READ_ONLY_TOKEN.to_string()] {
        assert_eq!(console_with(&server, &old).await, REFUSED, "{old}");
    }

    let parts: Vec<&str> = value.split('.').collect();
    assert_eq!(parts.len(), 3, "name.expiry.mac: {value}");
    let (name, expires, mac) = (parts[0], parts[1], parts[2]);
    assert_eq!(B64.decode(name).unwrap(), b"reader");
    let expires: u64 = expires.parse().unwrap();
    let mut other_mac = B64.decode(mac).unwrap();
    other_mac[0] ^= 1;
    for (what, tampered) in [
        // The read token's sign-in made into the publish token's.
        (
            "name changed",
            format!("{}.{expires}.{mac}", B64.encode("publisher")),
        ),
        (
            "expiry extended",
            format!("{name}.{}.{mac}", expires + 86_400),
        ),
        (
            "MAC changed",
            format!("{name}.{expires}.{}", B64.encode(&other_mac)),
        ),
        ("MAC left out", format!("{name}.{expires}.")),
    ] {
        assert_eq!(
            console_with(&server, &tampered).await,
            REFUSED,
            "{what}: {tampered}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sign_in_cookie_expires() {
    let fx = Fixture::new(&Fixture::read_token_toml());
    let server = Packd::start(&fx.disk(), Some(&fx.config));
    let r = browser_like()
        .post(server.url("/console/login"))
        .header("content-type", "application/x-www-form-urlencoded")
        .body(format!("token={READ_ONLY_TOKEN}"))
        .send()
        .await
        .unwrap();
    let max_age = format!("Max-Age={LIFETIME_SECS}");
    assert!(set_cookie(r.headers()).contains(&max_age), "{max_age}");

    // Signed in as the form does it, as long ago as a sign-in lasts (give or take a minute).
    let key: [u8; 32] = hex::decode(hash_token_with_cli(READ_ONLY_TOKEN))
        .unwrap()
        .try_into()
        .unwrap();
    let signed_in_ago = |secs: i64| {
        let at = time::OffsetDateTime::now_utc() - time::Duration::seconds(secs);
        issue_with_key(&key, "reader", at)
    };
    let ending = signed_in_ago(LIFETIME_SECS - 60);
    assert_eq!(console_with(&server, &ending).await, "signed in as reader");
    let ended = signed_in_ago(LIFETIME_SECS + 60);
    assert_eq!(console_with(&server, &ended).await, REFUSED);
}

/// No session is stored anywhere: any node with the config takes a sign-in made on another,
/// and a token taken out of the config signs its browsers out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sign_in_holds_on_every_node_until_its_token_leaves_the_config() {
    let fx = Fixture::new(&Fixture::read_token_toml());
    let a = Packd::start(&fx.disk(), Some(&fx.config));
    let mut b = Packd::start(&fx.disk(), Some(&fx.config));
    let reader = sign_in(&a, READ_ONLY_TOKEN).await;
    let publisher = sign_in(&a, PUBLISH_TOKEN).await;
    assert_eq!(console_with(&b, &reader).await, "signed in as reader");
    b.restart();
    assert_eq!(console_with(&b, &reader).await, "signed in as reader");

    // The operator replaces the read token with another under the same name.
    let original = std::fs::read_to_string(&fx.config).unwrap();
    let replaced = original.replace(
        &hash_token_with_cli(READ_ONLY_TOKEN),
        &hash_token_with_cli("another-read-token"),
    );
    std::fs::write(&fx.config, &replaced).unwrap();
    b.restart();
    assert_eq!(console_with(&b, &reader).await, REFUSED);
    assert_eq!(console_with(&b, &publisher).await, "signed in as publisher");

    // Then takes the publish token out altogether.
    let publish_entry = format!(
        "[[tokens]]\nname = \"publisher\"\nsha256 = \"{}\"\nscopes = [\"publish\"]\n",
        hash_token_with_cli(PUBLISH_TOKEN)
    );
    assert!(replaced.contains(&publish_entry), "{replaced}");
    std::fs::write(&fx.config, replaced.replace(&publish_entry, "")).unwrap();
    b.restart();
    assert_eq!(console_with(&b, &publisher).await, REFUSED);
    let r = browser_like()
        .get(b.url("/console/login?next=/console&expired=1"))
        .send()
        .await
        .unwrap();
    assert!(r.text().await.unwrap().contains("sign in again"));
}
