//! Who is looking: the console respects the deployment's auth.
//!
//! On a public deployment (no token has the `read` scope) every console page is open, like
//! every read route. On a private one a page needs a `read` or `publish` token, which a
//! browser supplies through the sign-in form: `POST /console/login` checks the token like a
//! bearer token and sets the cookie [`COOKIE`] to a sign-in that names the token without
//! holding it ([`super::session`]: the token's name, an expiry and a MAC keyed by
//! the token's configured hash), which no `/v1` route accepts. The cookie is `HttpOnly`, so
//! no script can read it; `SameSite=Strict`, so no other site's page can make the browser
//! send it; `Path=/console`; `Secure` when the page was loaded over HTTPS; it lasts
//! [`LIFETIME_SECS`]. Every request checks the MAC against the configured hashes again, so
//! removing a token from the config signs its sessions out, on every node, with no session
//! state anywhere. Scripts may send `Authorization: Bearer` instead. Nothing on the console
//! shows a token or its hash: only the token's name from the config.
//!
//! A link to the console followed from another site arrives without the `SameSite=Strict`
//! cookie. Such a request (the browser says `Sec-Fetch-Site: cross-site`) gets a page that
//! reloads itself (a `<meta http-equiv="refresh">`, no script): that reload comes from the
//! console's own page, so the cookie goes along and a shared link opens signed in.

use axum::Form;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use maud::html;
use serde::Deserialize;
use time::OffsetDateTime;

use crate::auth::{Scope, Token};
use crate::error::ApiError;

use super::layout::{Section, page};
use super::session::{self, COOKIE, LIFETIME_SECS};
use super::{ConsoleState, html_response};

/// Largest sign-in form body read.
pub const MAX_LOGIN_BYTES: usize = 4096;

/// The token a request was made with: its name in the config and its scope.
#[derive(Debug, Clone)]
pub struct TokenInfo {
    pub name: String,
    pub scope: Scope,
}

/// Who is looking at a page.
#[derive(Debug, Clone)]
pub struct Viewer {
    /// `None` on a public deployment without a token.
    pub token: Option<TokenInfo>,
    /// The token came from the sign-in cookie (so there is something to sign out of).
    pub from_cookie: bool,
    /// Where `packer release --server` points, as this request reached packd.
    pub origin: String,
}

impl Viewer {
    pub fn can_publish(&self) -> bool {
        self.token
            .as_ref()
            .is_some_and(|t| t.scope == Scope::Publish)
    }
}

/// The sign-in cookie's value, if the request carries one.
fn cookie_value(headers: &HeaderMap) -> Option<&str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(name, _)| *name == COOKIE)
        .map(|(_, value)| value.trim())
}

/// A configured token's name and widest scope, or `None` when it has neither scope.
fn token_info(token: &Token) -> Option<TokenInfo> {
    Some(TokenInfo {
        name: token.name().to_string(),
        scope: token.widest_scope()?,
    })
}

/// The configured token `presented` is, with its name and scope, or `None` when packd does
/// not know it (or it has neither scope).
fn check_token<'a>(state: &'a ConsoleState, presented: &str) -> Option<(&'a Token, TokenInfo)> {
    let token = state.app.settings.tokens.find(presented.trim())?;
    Some((token, token_info(token)?))
}

/// Who a sign-in cookie's value signs in, now.
fn check_cookie(state: &ConsoleState, value: &str) -> Option<TokenInfo> {
    match session::check(&state.app.settings.tokens, value, OffsetDateTime::now_utc()) {
        Ok(token) => token_info(token),
        Err(refused) => {
            tracing::debug!(%refused, "console sign-in cookie refused");
            None
        }
    }
}

/// `https://host` or `http://host` as the request reached packd (a proxy's
/// `X-Forwarded-Proto` and `X-Forwarded-Host` first). Shown in commands only, escaped; a
/// host with characters no host name has becomes `URL`.
fn origin(headers: &HeaderMap) -> String {
    let get = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(|v| v.split(',').next().unwrap_or_default().trim().to_string())
    };
    let scheme = match get("x-forwarded-proto").as_deref() {
        Some("https") => "https",
        _ => "http",
    };
    let host = get("x-forwarded-host").or_else(|| get("host"));
    match host {
        Some(host)
            if !host.is_empty()
                && host.len() <= 255
                && host
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"-.:[]".contains(&b)) =>
        {
            format!("{scheme}://{host}")
        }
        _ => "URL".to_string(),
    }
}

/// Who is looking, or the answer that asks them to sign in. `path_and_query` is where to
/// come back to after signing in.
pub fn viewer(
    state: &ConsoleState,
    headers: &HeaderMap,
    path_and_query: &str,
) -> Result<Viewer, Box<Response>> {
    let origin = origin(headers);
    let private = state.app.settings.tokens.reads_need_token();
    let bearer = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split_once(' '))
        .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
        .map(|(_, token)| token.trim().to_string());
    let (presented, from_cookie, token) = match bearer {
        Some(bearer) => (
            true,
            false,
            check_token(state, &bearer).map(|(_, info)| info),
        ),
        None => match cookie_value(headers) {
            Some(value) => (true, true, check_cookie(state, value)),
            None => (false, true, None),
        },
    };
    if token.is_some() || !private {
        return Ok(Viewer {
            from_cookie: from_cookie && token.is_some(),
            token,
            origin,
        });
    }
    if !from_cookie {
        return Err(Box::new(ApiError::Unauthorized.into_response()));
    }
    let cross_site = headers
        .get("sec-fetch-site")
        .is_some_and(|v| v.as_bytes() == b"cross-site");
    if !presented && cross_site {
        return Err(Box::new(reload_page(path_and_query)));
    }
    // Something was presented and refused: the cookie is removed and the form says why.
    let mut target = format!("/console/login?next={}", encode_next(path_and_query));
    if presented {
        target.push_str("&expired=1");
    }
    let mut response = Redirect::to(&target).into_response();
    if presented {
        clear_cookie(&mut response);
    }
    Err(Box::new(response))
}

/// The page a cross-site link lands on: it reloads itself from the console's own origin.
fn reload_page(path_and_query: &str) -> Response {
    let body = html! {
        (maud::DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta http-equiv="refresh" content={ "0; url=" (path_and_query) };
                title { "Opening the packd console" }
            }
            body {
                p { a href=(path_and_query) { "Open the packd console" } }
            }
        }
    };
    html_response(StatusCode::OK, body)
}

/// `next` values are console paths only: anything else would make the sign-in form an open
/// redirect.
fn safe_next(next: Option<&str>) -> String {
    match next {
        Some(n)
            if (n == "/console" || n.starts_with("/console/") || n.starts_with("/console?"))
                && !n.contains("//")
                && !n.contains('\\')
                && n.bytes().all(|b| b.is_ascii_graphic()) =>
        {
            n.to_string()
        }
        _ => "/console".to_string(),
    }
}

fn encode_next(next: &str) -> String {
    next.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' | b'/' => {
                (b as char).to_string()
            }
            other => format!("%{other:02X}"),
        })
        .collect()
}

fn clear_cookie(response: &mut Response) {
    let value = format!("{COOKIE}=; Path=/console; HttpOnly; SameSite=Strict; Max-Age=0");
    if let Ok(v) = HeaderValue::from_str(&value) {
        response.headers_mut().append(header::SET_COOKIE, v);
    }
}

#[derive(Debug, Deserialize)]
pub struct LoginQuery {
    next: Option<String>,
    expired: Option<String>,
}

#[derive(Debug, Deserialize)]
pub struct LoginForm {
    token: String,
    next: Option<String>,
}

/// Whether the page holding the form was loaded over HTTPS (so the cookie can be `Secure`).
fn over_https(headers: &HeaderMap) -> bool {
    let forwarded = headers
        .get("x-forwarded-proto")
        .is_some_and(|v| v.as_bytes() == b"https");
    let origin = headers
        .get(header::ORIGIN)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|o| o.starts_with("https://"));
    forwarded || origin
}

fn login_page(
    state: &ConsoleState,
    headers: &HeaderMap,
    next: &str,
    problem: Option<&str>,
) -> maud::Markup {
    let private = state.app.settings.tokens.reads_need_token();
    let shown = origin(headers);
    let loopback = ["http://127.0.0.1", "http://localhost", "http://[::1]"]
        .iter()
        .any(|o| shown == *o || shown.starts_with(&format!("{o}:")));
    let plain_http = !over_https(headers) && !loopback;
    let content = html! {
        h1 { "Sign in" }
        @if private {
            p { "This packd is private: reading it takes a token with the " code { "read" }
                " or " code { "publish" } " scope." }
        } @else {
            p { "This packd is public: every page is open. A " code { "publish" }
                " token also shows fleet data that the server keeps for publishers." }
        }
        @if let Some(problem) = problem {
            p class="problem" role="alert" id="login-problem" { (problem) }
        }
        form class="login" method="post" action="/console/login" {
            input type="hidden" name="next" value=(next);
            label for="token" { "Token" }
            input id="token" name="token" type="password" required autocomplete="current-password"
                spellcheck="false" autofocus
                aria-describedby=[problem.map(|_| "login-problem")];
            button type="submit" { "Sign in" }
        }
        p class="note" {
            "The browser keeps a sign-in for this console only, for 12 hours, in a cookie "
            "(HttpOnly, SameSite=Strict) that names the token without holding it: it opens "
            "these pages and nothing else. Sign out removes it. An operator makes a read "
            "token with " code { "packd token new --scope read --name NAME" } "."
        }
        @if plain_http {
            p class="warning" { "This connection is not encrypted: anyone on the network path "
                "can read the token. Put packd behind HTTPS before signing in from elsewhere." }
        }
    };
    page("Sign in", Section::None, None, content)
}

pub async fn login_form(
    State(state): State<ConsoleState>,
    Query(query): Query<LoginQuery>,
    headers: HeaderMap,
) -> Response {
    let next = safe_next(query.next.as_deref());
    let problem = query.expired.is_some().then_some(
        "That sign-in has ended, or its token is no longer in this server's config: \
             sign in again.",
    );
    html_response(StatusCode::OK, login_page(&state, &headers, &next, problem))
}

pub async fn login(
    State(state): State<ConsoleState>,
    headers: HeaderMap,
    Form(form): Form<LoginForm>,
) -> Response {
    let next = safe_next(form.next.as_deref());
    let Some((token, info)) = check_token(&state, &form.token) else {
        tracing::info!("console sign-in with an unknown token refused");
        return html_response(
            StatusCode::UNAUTHORIZED,
            login_page(
                &state,
                &headers,
                &next,
                Some("packd knows no token with the read or publish scope like that one."),
            ),
        );
    };
    tracing::info!(token = info.name, "console sign-in");
    let mut cookie = format!(
        "{COOKIE}={}; Path=/console; HttpOnly; SameSite=Strict; Max-Age={LIFETIME_SECS}",
        session::issue(token, OffsetDateTime::now_utc())
    );
    if over_https(&headers) {
        cookie.push_str("; Secure");
    }
    let mut response = Redirect::to(&next).into_response();
    if let Ok(v) = HeaderValue::from_str(&cookie) {
        response.headers_mut().append(header::SET_COOKIE, v);
    }
    response
}

pub async fn logout() -> Response {
    let mut response = Redirect::to("/console/login").into_response();
    clear_cookie(&mut response);
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn next_is_a_console_path_or_the_console() {
        assert_eq!(
            safe_next(Some("/console/channels/stable?x=1")),
            "/console/channels/stable?x=1"
        );
        for bad in [
            "https://evil.example/console",
            "//evil.example",
            "/console//evil",
            "/consolex",
            "/v1/channels",
            "/console/\\evil",
        ] {
            assert_eq!(safe_next(Some(bad)), "/console", "{bad}");
        }
        assert_eq!(safe_next(None), "/console");
    }

    #[test]
    fn the_cookie_is_read_back_among_other_cookies() {
        let mut headers = HeaderMap::new();
        let value = format!("a=b; {COOKIE}=bmFtZQ.1.bWFj; c=d");
        headers.insert(header::COOKIE, HeaderValue::from_str(&value).unwrap());
        assert_eq!(cookie_value(&headers), Some("bmFtZQ.1.bWFj"));
    }

    #[test]
    fn a_host_that_is_no_host_name_is_not_shown() {
        let mut headers = HeaderMap::new();
        headers.insert(
            header::HOST,
            HeaderValue::from_static("packs.example.com:8470"),
        );
        assert_eq!(origin(&headers), "http://packs.example.com:8470");
        headers.insert("x-forwarded-proto", HeaderValue::from_static("https"));
        assert_eq!(origin(&headers), "https://packs.example.com:8470");
        headers.insert(header::HOST, HeaderValue::from_static("a\"b"));
        assert_eq!(origin(&headers), "URL");
    }
}
