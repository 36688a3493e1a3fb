//! The page shell every console page shares, and small formatting helpers. All markup goes
//! through maud, which escapes every value it is given: channel names, entries, token names
//! and anything else from storage or the request reach the page only as escaped text.

use std::sync::LazyLock;

use maud::{DOCTYPE, Markup, html};
use pack_protocol::Rate;
use time::OffsetDateTime;
use time::format_description::well_known::Rfc3339;

use super::access::Viewer;

/// The stylesheet, compiled into the binary.
pub const CSS: &str = include_str!("assets/console.css");

/// The first 12 hex digits of the stylesheet's SHA-256: its URL changes with its content, so
/// browsers may keep it forever.
pub static CSS_VERSION: LazyLock<String> =
    LazyLock::new(|| pack_format::sha256_hex(CSS.as_bytes())[..12].to_string());

/// Which top-level section a page belongs to, for the navigation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Section {
    Channels,
    Packs,
    None,
}

/// A whole page: head, skip link, navigation, the page's content in `<main>`, footer.
pub fn page(title: &str, section: Section, viewer: Option<&Viewer>, content: Markup) -> Markup {
    let current = |s: Section| if s == section { Some("page") } else { None };
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                meta name="color-scheme" content="light dark";
                meta name="robots" content="noindex";
                title { (title) " · packd console" }
                link rel="stylesheet" href={ "/console/assets/console.css?v=" (*CSS_VERSION) };
            }
            body {
                a class="skip" href="#main" { "Skip to content" }
                header class="top" {
                    nav aria-label="Console" {
                        a class="brand" href="/console" { "packd console" }
                        ul {
                            li { a href="/console" aria-current=[current(Section::Channels)] { "Channels" } }
                            li { a href="/console/packs" aria-current=[current(Section::Packs)] { "Packs" } }
                        }
                    }
                    @if let Some(viewer) = viewer {
                        div class="who" {
                            @match &viewer.token {
                                Some(token) => {
                                    span { "Signed in with token " strong { (token.name) } " (" (token.scope) ")" }
                                    @if viewer.from_cookie {
                                        form method="post" action="/console/logout" {
                                            button type="submit" { "Sign out" }
                                        }
                                    }
                                }
                                None => span { "Public server: anyone can read this." }
                            }
                        }
                    }
                }
                main id="main" tabindex="-1" { (content) }
                footer {
                    p {
                        "Read-only: nothing on this console can publish. Every change is a new "
                        "document signed with the publisher's key by "
                        code { "packer release" } "."
                    }
                }
            }
        }
    }
}

/// Shown on every page: which `packer release` commands change what the page shows.
pub fn change_box(intro: Markup, commands: &[(String, String)]) -> Markup {
    html! {
        section class="change" aria-labelledby="change-title" {
            h2 id="change-title" { "Change this" }
            (intro)
            @for (what, command) in commands {
                p class="what" { (what) }
                pre { code { (command) } }
            }
            p class="note" {
                "Run these where the signing key is. The token (publish scope) comes from "
                code { "--token-file" } " or " code { "PROMPTPACK_TOKEN" } "; "
                code { "packer release" } " shows the change and asks before publishing."
            }
        }
    }
}

/// `2026-12-01 08:11 UTC` with a machine-readable `<time>`, and how long ago.
pub fn when(rfc3339: &str, now: OffsetDateTime) -> Markup {
    let Ok(t) = OffsetDateTime::parse(rfc3339, &Rfc3339) else {
        return html! { (rfc3339) };
    };
    let t = t.to_offset(time::UtcOffset::UTC);
    let shown = format!(
        "{:04}-{:02}-{:02} {:02}:{:02} UTC",
        t.year(),
        u8::from(t.month()),
        t.day(),
        t.hour(),
        t.minute()
    );
    html! {
        time datetime=(rfc3339) { (shown) }
        " " span class="ago" { "(" (ago(now - t)) ")" }
    }
}

/// `5 min ago`, `in 3 days`.
pub fn ago(delta: time::Duration) -> String {
    let future = delta.is_negative();
    let secs = delta.whole_seconds().unsigned_abs();
    let amount = match secs {
        0..60 => "just now".to_string(),
        60..3600 => format!("{} min", secs / 60),
        3600..86_400 => format!("{} h", secs / 3600),
        _ => {
            let days = secs / 86_400;
            format!("{days} day{}", if days == 1 { "" } else { "s" })
        }
    };
    match (secs < 60, future) {
        (true, _) => amount,
        (false, true) => format!("in {amount}"),
        (false, false) => format!("{amount} ago"),
    }
}

/// `12.3 KiB`.
pub fn size(bytes: u64) -> String {
    match bytes {
        0..1024 => format!("{bytes} B"),
        1024..1_048_576 => format!("{:.1} KiB", bytes as f64 / 1024.0),
        _ => format!("{:.1} MiB", bytes as f64 / 1_048_576.0),
    }
}

/// `38 %`, one decimal under 10 %.
pub fn percent(share: f64) -> String {
    let p = share * 100.0;
    if p > 0.0 && p < 10.0 {
        format!("{p:.1} %")
    } else {
        format!("{p:.0} %")
    }
}

/// `5.1 % [4.3–6.0 %]`: a rate with its 95 % interval, `no trials` without any.
pub fn rate_interval(rate: &Rate) -> String {
    match rate.rate {
        Some(r) => format!(
            "{:.1} % [{:.1}–{:.1} %]",
            r * 100.0,
            rate.low * 100.0,
            rate.high * 100.0
        ),
        None => "no trials".to_string(),
    }
}

/// `+5.0 points`: a difference of two rates.
pub fn points(difference: f64) -> String {
    format!("{:+.1} points", difference * 100.0)
}

/// A likelihood ratio: two decimals while small, whole above 10, powers of ten past a
/// million (it grows exponentially with the evidence).
pub fn ratio(value: f64) -> String {
    match value {
        v if v < 10.0 => format!("{v:.2}"),
        v if v < 1e6 => format!("{v:.0}"),
        v => format!("{v:.1e}"),
    }
}

/// A rollout bar: the percentage in words, and a bar for the eye (SVG: attributes, not
/// inline styles, which the console's Content-Security-Policy forbids).
pub fn rollout_bar(percent: u8) -> Markup {
    let width = percent.min(100);
    html! {
        span class="rollout" {
            svg class="bar" viewBox="0 0 100 8" preserveAspectRatio="none" aria-hidden="true" {
                rect class="track" width="100" height="8" {}
                rect class="fill" width=(width) height="8" {}
            }
            span class="pct" { (width) " %" }
        }
    }
}

/// The start of a SHA-256, with the whole hash for screen readers and copying.
pub fn short_sha(sha: &str) -> Markup {
    let short = &sha[..sha.len().min(12)];
    html! { code class="sha" title=(sha) { (short) "…" } }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn relative_times_read_naturally() {
        assert_eq!(ago(time::Duration::seconds(5)), "just now");
        assert_eq!(ago(time::Duration::minutes(5)), "5 min ago");
        assert_eq!(ago(time::Duration::hours(-3)), "in 3 h");
        assert_eq!(ago(time::Duration::days(1)), "1 day ago");
        assert_eq!(ago(time::Duration::days(-30)), "in 30 days");
    }

    #[test]
    fn sizes_and_shares() {
        assert_eq!(size(512), "512 B");
        assert_eq!(size(12_595), "12.3 KiB");
        assert_eq!(percent(0.38), "38 %");
        assert_eq!(percent(0.042), "4.2 %");
        assert_eq!(percent(0.0), "0 %");
    }

    #[test]
    fn rates_differences_and_ratios() {
        // The Wilson interval of 10 in 200.
        assert_eq!(rate_interval(&Rate::new(10, 200)), "5.0 % [2.7–9.0 %]");
        assert_eq!(rate_interval(&Rate::new(0, 0)), "no trials");
        assert_eq!(points(0.0512), "+5.1 points");
        assert_eq!(points(-0.02), "-2.0 points");
        assert_eq!(ratio(0.5), "0.50");
        assert_eq!(ratio(412.3), "412");
        assert_eq!(ratio(3.2e9), "3.2e9");
    }
}
