//! `web_fetch`: one URL over HTTP(S), HTML turned into Markdown.
//!
//! Limits hold for every fetch: at most `max_bytes` of body are read, the whole fetch
//! (redirects and conversion included) ends after `timeout`, and at most `max_redirects`
//! redirects are followed, each one checked again. No request goes to a loopback, private,
//! link-local or otherwise non-public address unless that address is listed in
//! `allow_private`: IP literals are checked before connecting, and host names through a
//! resolver that refuses a name with any such address, so the address checked is the
//! address connected to (no window for DNS rebinding), on every hop. Proxies from the
//! environment are not used, since a proxy would make the connection on our behalf.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use reqwest::Url;
use reqwest::dns::{Addrs, Name, Resolve, Resolving};
use schemars::JsonSchema;
use serde::Deserialize;

use super::{Call, Gate, Tool, ToolContext, ToolError, ToolResult};
use crate::capabilities::ToolId;
use crate::permissions::Access;

#[derive(Deserialize, JsonSchema)]
pub(super) struct Args {
    /// The http:// or https:// URL to fetch.
    url: String,
}

/// `web_fetch`'s limits, from `[web_fetch]` in config.toml.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WebSettings {
    /// Most body bytes read; the rest of a larger page is not downloaded.
    pub max_bytes: usize,
    /// Longest result handed to the model, in bytes.
    pub max_output: usize,
    pub timeout: Duration,
    pub max_redirects: usize,
    /// Non-public addresses that may be fetched anyway (an address or a CIDR block).
    pub allow_private: Vec<Block>,
}

impl Default for WebSettings {
    fn default() -> Self {
        WebSettings {
            max_bytes: 5 * 1024 * 1024,
            max_output: 100_000,
            timeout: Duration::from_secs(30),
            max_redirects: 5,
            allow_private: Vec::new(),
        }
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct Section {
    max_bytes: Option<usize>,
    max_output: Option<usize>,
    timeout_secs: Option<u64>,
    max_redirects: Option<usize>,
    #[serde(default)]
    allow_private: Vec<String>,
}

#[derive(Debug, Default, Deserialize)]
struct File {
    #[serde(default)]
    web_fetch: Section,
}

impl WebSettings {
    /// Reads `[web_fetch]` from the config file's text; other tables are left alone.
    pub fn parse(config_text: &str) -> Result<WebSettings, String> {
        let file: File = toml::from_str(config_text).map_err(|e| format!("[web_fetch]: {e}"))?;
        let section = file.web_fetch;
        let defaults = WebSettings::default();
        let allow_private = section
            .allow_private
            .iter()
            .map(|b| parse_block(b))
            .collect::<Result<Vec<Block>, String>>()
            .map_err(|e| format!("[web_fetch] allow_private: {e}"))?;
        let settings = WebSettings {
            max_bytes: section.max_bytes.unwrap_or(defaults.max_bytes),
            max_output: section.max_output.unwrap_or(defaults.max_output),
            timeout: section
                .timeout_secs
                .map_or(defaults.timeout, Duration::from_secs),
            max_redirects: section.max_redirects.unwrap_or(defaults.max_redirects),
            allow_private,
        };
        if settings.max_bytes == 0 || settings.max_output == 0 || settings.timeout.is_zero() {
            return Err(
                "[web_fetch]: max_bytes, max_output and timeout_secs must be above 0".to_string(),
            );
        }
        Ok(settings)
    }
}

/// An address block: `10.0.0.0/8`, `::1/128`, or one address (a block of one).
pub type Block = ipnet::IpNet;

/// Reads one `allow_private` entry: a CIDR block or a single address.
fn parse_block(s: &str) -> Result<Block, String> {
    let text = s.trim();
    if let Ok(addr) = text.parse::<IpAddr>() {
        return Ok(Block::from(addr));
    }
    let Some((addr, prefix)) = text.split_once('/') else {
        return Err(format!("{s:?} is not an IP address or CIDR block"));
    };
    let addr: IpAddr = addr
        .trim()
        .parse()
        .map_err(|_| format!("{s:?} is not an IP address or CIDR block"))?;
    let max = if addr.is_ipv4() { 32 } else { 128 };
    prefix
        .trim()
        .parse::<u8>()
        .ok()
        .and_then(|p| Block::new(addr, p).ok())
        .ok_or_else(|| format!("{s:?}: the prefix length must be 0 to {max}"))
}

/// Why `ip` is not a public address, or `None` when it is.
pub fn non_public(ip: IpAddr) -> Option<&'static str> {
    match ip.to_canonical() {
        IpAddr::V4(v4) => non_public_v4(v4),
        IpAddr::V6(v6) => non_public_v6(v6),
    }
}

fn non_public_v4(ip: Ipv4Addr) -> Option<&'static str> {
    let [a, b, c, _] = ip.octets();
    if ip.is_loopback() {
        Some("loopback")
    } else if ip.is_private() {
        Some("private")
    } else if ip.is_link_local() {
        Some("link-local")
    } else if a == 0 {
        Some("unspecified")
    } else if ip.is_broadcast() || a >= 240 {
        Some("reserved")
    } else if ip.is_multicast() {
        Some("multicast")
    } else if a == 100 && (64..128).contains(&b) {
        Some("shared (carrier-grade NAT)")
    } else if a == 192 && b == 0 && c == 0 {
        Some("IETF protocol assignment")
    } else if a == 198 && (b == 18 || b == 19) {
        Some("benchmarking")
    } else if ip.is_documentation() {
        Some("documentation")
    } else {
        None
    }
}

fn non_public_v6(ip: Ipv6Addr) -> Option<&'static str> {
    let segments = ip.segments();
    let embedded_v4 = |hi: u16, lo: u16| Ipv4Addr::from((u32::from(hi) << 16) | u32::from(lo));
    if ip.is_loopback() {
        Some("loopback")
    } else if ip.is_unspecified() {
        Some("unspecified")
    } else if ip.is_multicast() {
        Some("multicast")
    } else if segments[0] & 0xfe00 == 0xfc00 {
        Some("unique local (private)")
    } else if segments[0] & 0xffc0 == 0xfe80 || segments[0] & 0xffc0 == 0xfec0 {
        Some("link-local")
    } else if segments[0] == 0x2001 && segments[1] == 0x0db8 {
        Some("documentation")
    } else if segments[..6] == [0x64, 0xff9b, 0, 0, 0, 0] {
        // NAT64: the IPv4 address it reaches is what counts.
        non_public_v4(embedded_v4(segments[6], segments[7]))
    } else if segments[0] == 0x2002 {
        // 6to4 carries an IPv4 address in bits 16..48.
        non_public_v4(embedded_v4(segments[1], segments[2]))
    } else {
        None
    }
}

/// Refuses `ip` unless it is public or listed; `host` is the name it was found under.
fn check_ip(ip: IpAddr, host: &str, allow: &[Block]) -> Result<(), String> {
    let Some(kind) = non_public(ip) else {
        return Ok(());
    };
    if allow.iter().any(|b| b.contains(&ip.to_canonical())) {
        return Ok(());
    }
    let via = if host.trim_matches(['[', ']']) == ip.to_string() {
        String::new()
    } else {
        format!(" ({host} resolves to it)")
    };
    Err(format!(
        "{ip} is a {kind} address{via}; web_fetch reaches only public addresses unless the user lists this one under `allow_private` in [web_fetch]"
    ))
}

/// Resolves host names and refuses any that has a non-public address, remembering why so
/// the model gets that reason rather than a generic connection error.
struct GuardedResolver {
    allow: Arc<Vec<Block>>,
    refused: Arc<Mutex<Option<String>>>,
}

impl Resolve for GuardedResolver {
    fn resolve(&self, name: Name) -> Resolving {
        let host = name.as_str().to_string();
        let allow = self.allow.clone();
        let refused = self.refused.clone();
        Box::pin(async move {
            let addrs: Vec<SocketAddr> =
                tokio::net::lookup_host((host.as_str(), 0)).await?.collect();
            if addrs.is_empty() {
                return Err(format!("{host} has no address").into());
            }
            for addr in &addrs {
                if let Err(why) = check_ip(addr.ip(), &host, &allow) {
                    *refused.lock().unwrap_or_else(PoisonError::into_inner) = Some(why.clone());
                    return Err(why.into());
                }
            }
            Ok(Box::new(addrs.into_iter()) as Addrs)
        })
    }
}

pub(super) struct WebFetch;

impl Tool for WebFetch {
    type Args = Args;

    fn name(&self) -> &'static str {
        "web_fetch"
    }

    fn gate(&self) -> Gate {
        Gate::Tool(ToolId::WebFetch)
    }

    fn read_only(&self) -> bool {
        true
    }

    fn access(&self, _context: &ToolContext, args: &Args) -> Access {
        // Rules match the URL as the client will send it.
        Access::Fetch(
            Url::parse(args.url.trim())
                .map_or_else(|_| args.url.trim().to_string(), |u| u.to_string()),
        )
    }

    async fn run(&self, call: Call<'_>, args: Args) -> ToolResult {
        let settings = call.context.web.clone();
        let mut cancel = call.cancel.clone();
        tokio::select! {
            result = tokio::time::timeout(settings.timeout, fetch(&settings, args.url.trim())) => {
                result.unwrap_or_else(|_| Err(ToolError::new(format!(
                    "{} took longer than the {} s limit and was abandoned",
                    args.url.trim(),
                    settings.timeout.as_secs_f64()
                ))))
            }
            _ = cancel.wait_for(|c| *c) => Err(ToolError::new("stopped: the user interrupted the run")),
        }
    }
}

/// What the fetched body is.
enum Kind {
    Html,
    Text,
}

fn kind_of(content_type: Option<&str>, body: &[u8]) -> Result<Kind, String> {
    let essence = content_type
        .and_then(|t| t.split(';').next())
        .map(|t| t.trim().to_ascii_lowercase());
    match essence.as_deref() {
        Some("text/html" | "application/xhtml+xml") => Ok(Kind::Html),
        Some(t)
            if t.starts_with("text/")
                || t.ends_with("+json")
                || t.ends_with("+xml")
                || matches!(
                    t,
                    "application/json" | "application/xml" | "application/javascript"
                ) =>
        {
            Ok(Kind::Text)
        }
        Some(t) => Err(format!(
            "the content is {t}, not text; web_fetch returns web pages and text only"
        )),
        None => {
            let head = String::from_utf8_lossy(&body[..body.len().min(512)]).to_lowercase();
            if head.trim_start().starts_with("<!doctype html") || head.contains("<html") {
                Ok(Kind::Html)
            } else if std::str::from_utf8(body).is_ok() {
                Ok(Kind::Text)
            } else {
                Err("the content has no type and is not text".to_string())
            }
        }
    }
}

/// The page's `<title>`, whitespace collapsed.
fn title(html: &str) -> Option<String> {
    static TITLE: std::sync::OnceLock<regex::Regex> = std::sync::OnceLock::new();
    #[allow(
        clippy::expect_used,
        reason = "a constant pattern, checked by the tests"
    )]
    let re = TITLE.get_or_init(|| {
        regex::Regex::new(r"(?is)<title[^>]*>(.*?)</title>").expect("a valid pattern")
    });
    let text = re.captures(html)?.get(1)?.as_str();
    let text = text.split_whitespace().collect::<Vec<_>>().join(" ");
    (!text.is_empty()).then_some(text)
}

/// HTML as Markdown, without the parts a reader never sees; the title, from the head,
/// comes first.
fn to_markdown(html: &str) -> Result<String, String> {
    let converter = htmd::HtmlToMarkdown::builder()
        .skip_tags(vec![
            "script", "style", "noscript", "template", "svg", "iframe", "head",
        ])
        .build();
    let body = converter
        .convert(html)
        .map_err(|e| format!("the HTML could not be converted: {e}"))?;
    Ok(match title(html) {
        Some(title) => format!("Title: {title}\n\n{body}"),
        None => body,
    })
}

/// A page as fetched: where it ended up, and its text (HTML already turned into Markdown).
struct Page {
    url: Url,
    hops: Vec<String>,
    content_type: Option<String>,
    text: String,
    /// The body was larger than `max_bytes`; `text` is its beginning.
    cut: bool,
}

async fn fetch(settings: &WebSettings, start: &str) -> ToolResult {
    let page = fetch_page(settings, start).await?;
    let mut out = format!("URL: {}\n", page.url);
    if !page.hops.is_empty() {
        out.push_str(&format!("Redirected from: {}\n", page.hops.join(" → ")));
    }
    if let Some(t) = &page.content_type {
        out.push_str(&format!("Content-Type: {t}\n"));
    }
    out.push('\n');
    out.push_str(&cap(page.text.trim(), settings.max_output));
    if page.cut {
        out.push_str(&format!(
            "\n\n[the page is larger than the {}-byte download limit; only its beginning was read]",
            settings.max_bytes
        ));
    }
    Ok(out)
}

/// The text at `url` for the prompt's instructions, under `web_fetch`'s address rules and
/// download cap, within `timeout` (or `settings.timeout`, if shorter); the reason when
/// there is none. The text is as the page gives it (HTML turned into Markdown), without
/// the tool's header lines.
pub async fn fetch_text(
    settings: &WebSettings,
    url: &str,
    timeout: Duration,
) -> Result<String, String> {
    let limit = timeout.min(settings.timeout);
    match tokio::time::timeout(limit, fetch_page(settings, url.trim())).await {
        // A page past the download cap gives its beginning; the instruction budget is far
        // smaller than the cap and cuts it again, with a note.
        Ok(Ok(page)) => Ok(page.text),
        Ok(Err(e)) => Err(e.0),
        Err(_) => Err(format!("no answer within {} s", limit.as_secs_f64())),
    }
}

async fn fetch_page(settings: &WebSettings, start: &str) -> Result<Page, ToolError> {
    let refused = Arc::new(Mutex::new(None::<String>));
    let client = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .no_proxy()
        .connect_timeout(settings.timeout)
        .user_agent(concat!("promptpack-agent/", env!("CARGO_PKG_VERSION")))
        .dns_resolver(Arc::new(GuardedResolver {
            allow: Arc::new(settings.allow_private.clone()),
            refused: refused.clone(),
        }))
        .build()
        .map_err(|e| ToolError::new(format!("cannot set up the HTTP client: {e}")))?;
    let mut url =
        Url::parse(start).map_err(|e| ToolError::new(format!("{start:?} is not a URL: {e}")))?;
    let mut hops = Vec::new();
    loop {
        if !matches!(url.scheme(), "http" | "https") {
            return Err(ToolError::new(format!(
                "{url}: only http and https URLs can be fetched"
            )));
        }
        let host = url
            .host_str()
            .ok_or_else(|| ToolError::new(format!("{url} has no host")))?
            .to_string();
        // An address in the URL is connected to without a lookup, so it is checked here.
        let literal = host.trim_matches(['[', ']']).parse::<IpAddr>().ok();
        let redirected = if hops.is_empty() {
            String::new()
        } else {
            format!(" (reached by a redirect from {})", hops.join(" → "))
        };
        if let Some(ip) = literal {
            check_ip(ip, &host, &settings.allow_private)
                .map_err(|why| ToolError::new(format!("refused {url}{redirected}: {why}")))?;
        }
        let response = client
            .get(url.clone())
            .header(
                reqwest::header::ACCEPT,
                "text/html, text/markdown, text/plain;q=0.9, */*;q=0.1",
            )
            .send()
            .await
            .map_err(|e| {
                let taken = refused
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .take();
                ToolError::new(match taken {
                    Some(why) => format!("refused {url}{redirected}: {why}"),
                    None => format!(
                        "fetching {url}{redirected} failed: {}",
                        pack_protocol::error_text::report(&e)
                    ),
                })
            })?;
        let status = response.status();
        if status.is_redirection() {
            let location = response
                .headers()
                .get(reqwest::header::LOCATION)
                .and_then(|v| v.to_str().ok())
                .ok_or_else(|| {
                    ToolError::new(format!("{url} answered {status} without a Location"))
                })?;
            let next = url.join(location).map_err(|e| {
                ToolError::new(format!("{url} redirected to {location:?}, not a URL: {e}"))
            })?;
            if hops.len() >= settings.max_redirects {
                return Err(ToolError::new(format!(
                    "{start} redirected more than {} times (last to {next}); not followed further",
                    settings.max_redirects
                )));
            }
            hops.push(url.to_string());
            url = next;
            continue;
        }
        let content_type = response
            .headers()
            .get(reqwest::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        let (body, cut) = read_capped(response, settings.max_bytes)
            .await
            .map_err(|e| ToolError::new(format!("reading {url}{redirected} failed: {e}")))?;
        if !status.is_success() {
            let head = String::from_utf8_lossy(&body[..body.len().min(500)]).into_owned();
            return Err(ToolError::new(format!(
                "{url}{redirected} answered {status}: {}",
                head.trim()
            )));
        }
        let kind = kind_of(content_type.as_deref(), &body)
            .map_err(|why| ToolError::new(format!("{url}{redirected}: {why}")))?;
        let text = String::from_utf8_lossy(&body).into_owned();
        let text = match kind {
            Kind::Text => text,
            Kind::Html => tokio::task::spawn_blocking(move || to_markdown(&text))
                .await
                .map_err(|e| ToolError::new(format!("the HTML conversion crashed: {e}")))?
                .map_err(ToolError::new)?,
        };
        return Ok(Page {
            url,
            hops,
            content_type,
            text,
            cut,
        });
    }
}

/// Reads at most `max` bytes of the body; `true` when there was more.
async fn read_capped(
    mut response: reqwest::Response,
    max: usize,
) -> Result<(Vec<u8>, bool), String> {
    if let Some(length) = response.content_length()
        && length > max as u64
    {
        // Read what the cap allows and stop; the connection is dropped with the rest.
        let mut body = Vec::with_capacity(max);
        while let Some(chunk) = response.chunk().await.map_err(|e| e.to_string())? {
            let room = max - body.len();
            body.extend_from_slice(&chunk[..chunk.len().min(room)]);
            if body.len() >= max {
                break;
            }
        }
        return Ok((body, true));
    }
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await.map_err(|e| e.to_string())? {
        let room = max - body.len();
        if chunk.len() > room {
            body.extend_from_slice(&chunk[..room]);
            return Ok((body, true));
        }
        body.extend_from_slice(&chunk);
    }
    Ok((body, false))
}

/// The first `max` bytes of `text` (at a character boundary), with a note when cut.
fn cap(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_string();
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!(
        "{}\n\n[cut here: {} more bytes of this page were not shown]",
        &text[..end],
        text.len() - end
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn non_public_addresses() {
        for ip in [
            "127.0.0.1",
            "10.1.2.3",
            "172.16.0.1",
            "192.168.1.1",
            "169.254.169.254",
            "0.0.0.0",
            "100.64.0.1",
            "::1",
            "::",
            "fe80::1",
            "fd00::1",
            "::ffff:127.0.0.1",
            "64:ff9b::7f00:1",
            "2002:7f00:1::",
        ] {
            let ip: IpAddr = ip.parse().unwrap();
            assert!(non_public(ip).is_some(), "{ip}");
        }
        for ip in ["93.184.216.34", "1.1.1.1", "2606:4700::1111"] {
            let ip: IpAddr = ip.parse().unwrap();
            assert_eq!(non_public(ip), None, "{ip}");
        }
    }

    #[test]
    fn blocks() {
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        let b = parse_block("10.0.0.0/8").unwrap();
        assert!(b.contains(&ip("10.9.9.9")));
        assert!(!b.contains(&ip("11.0.0.1")));
        // Host bits set: the block is still the /8 around it.
        assert!(
            parse_block("10.1.2.3/8")
                .unwrap()
                .contains(&ip("10.200.0.1"))
        );
        let one = parse_block(" 127.0.0.2 ").unwrap();
        assert!(one.contains(&ip("127.0.0.2")));
        assert!(!one.contains(&ip("127.0.0.1")));
        let all = parse_block("0.0.0.0/0").unwrap();
        assert!(all.contains(&ip("127.0.0.1")));
        assert!(!all.contains(&ip("::1")));
        assert!(parse_block("fd00::/8").unwrap().contains(&ip("fd12::1")));
        assert_eq!(
            parse_block("10.0.0.0/33").unwrap_err(),
            "\"10.0.0.0/33\": the prefix length must be 0 to 32"
        );
        assert_eq!(
            parse_block("localhost").unwrap_err(),
            "\"localhost\" is not an IP address or CIDR block"
        );
        assert!(parse_block("10.0.0.0/x").is_err());
    }

    #[test]
    fn caps_cut_at_a_character_boundary() {
        let text = "é".repeat(10);
        let out = cap(&text, 5);
        assert!(out.starts_with("éé\n"), "{out}");
        assert!(out.contains("16 more bytes"), "{out}");
    }
}
