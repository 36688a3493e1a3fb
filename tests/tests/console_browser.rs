//! The console in a real browser (headless Chromium) against a real packd: after releases, a
//! staged rollout, failure reports from installs and a rollback, what a person sees on the
//! pages — the live version, the rollout percentage, the failing version flagged — read
//! from the rendered page; a watched ramp the guard freezes, with its schedule, evidence and
//! the guard's decision, resumed with the command the page shows; keyboard reach and text
//! contrast checked in the browser; the sign-in of a private deployment done with the
//! keyboard. Screenshots of the main pages go to target/console-screenshots/.

#![allow(clippy::print_stderr)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use pack_protocol::{OutcomeCounts, OutcomeReport, paths};
use promptpack_tests::browser::{Browser, chromium, screenshot_dir};
use promptpack_tests::{Packd, Publisher, packer, run};

const RANGE: &str = ">=1.4.0, <1.5.0";

/// packd with the publisher's key, its token named `release-ci`, and fleet counts written
/// every second; `extra` appended.
fn config(publisher: &Publisher, extra: &str) -> PathBuf {
    let hash = pack_format::sha256_hex(publisher.token.as_bytes());
    let path = publisher.dir.path().join("console-packd.toml");
    std::fs::write(
        &path,
        format!(
            "publisher_keys = [{:?}]\n\n[[tokens]]\nname = \"release-ci\"\nsha256 = \"{hash}\"\nscopes = [\"publish\"]\n\n{extra}\n[fleet]\nflush_secs = 1\n",
            publisher.keys().join("signing.pub").display().to_string()
        ),
    )
    .unwrap();
    path
}

fn release(publisher: &Publisher, server: &Packd, args: &[&str]) {
    let mut cmd = packer();
    cmd.args(["release", "stable", "--server", &server.url, "--keys"])
        .arg(publisher.keys())
        .args(args)
        .arg("--yes")
        .env("PROMPTPACK_TOKEN", &publisher.token);
    run(cmd);
}

fn publish(publisher: &Publisher, server: &Packd, pack: &Path) -> String {
    let mut cmd = packer();
    cmd.arg("publish")
        .arg(pack)
        .args(["--server", &server.url])
        .env("PROMPTPACK_TOKEN", &publisher.token);
    run(cmd);
    pack_format::sha256_hex(&std::fs::read(pack).unwrap())
}

fn http() -> reqwest::blocking::Client {
    reqwest::blocking::Client::builder()
        .timeout(Duration::from_secs(30))
        .build()
        .unwrap()
}

/// One install fetching the channel, as a client sends it.
fn fetch_as(server: &Packd, install: &str, release: &str, pack: &str) {
    let r = http()
        .get(format!("{}/v1/channels/stable", server.url))
        .header("x-promptpack-install", install)
        .header("x-promptpack-client-version", release)
        .header("x-promptpack-installed-pack", pack)
        .send()
        .unwrap();
    assert!(r.status().is_success(), "{}", r.status());
}

fn report(server: &Packd, install: &str, release: &str, pack: &str, reason: &str) {
    let r = http()
        .post(format!("{}/v1/channels/stable/reports", server.url))
        .header("x-promptpack-install", install)
        .json(
            &serde_json::json!({"channel": "stable", "pack": pack, "reason": reason,
                                  "client_version": release}),
        )
        .send()
        .unwrap();
    assert_eq!(r.status(), reqwest::StatusCode::ACCEPTED);
}

/// Install `n`'s install hash: 32 lowercase hex digits, as a client sends it.
fn install(n: usize) -> String {
    pack_format::sha256_hex(format!("console-install-{n}").as_bytes())[..32].to_string()
}

/// Polls `check` until it holds or 15 s pass.
fn eventually(what: &str, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(15);
    while !check() {
        assert!(Instant::now() < deadline, "{what}: not within 15 s");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Text (and SVG text) whose contrast against its background is under WCAG AA: 4.5:1, or
/// 3:1 for large text.
const CONTRAST: &str = r#"(() => {
  const parse = c => { const m = c && c.match(/rgba?\(([^)]+)\)/); if (!m) return null;
    const p = m[1].split(/[ ,\/]+/).filter(Boolean).map(Number);
    return {r: p[0], g: p[1], b: p[2], a: p.length > 3 ? p[3] : 1}; };
  const lum = ({r, g, b}) => { const f = v => { v /= 255; return v <= 0.03928 ? v / 12.92 : Math.pow((v + 0.055) / 1.055, 2.4); };
    return 0.2126 * f(r) + 0.7152 * f(g) + 0.0722 * f(b); };
  const background = e => { for (; e; e = e.parentElement) { const c = parse(getComputedStyle(e).backgroundColor);
    if (c && c.a > 0) return c; } return parse(getComputedStyle(document.documentElement).backgroundColor) || {r: 255, g: 255, b: 255, a: 1}; };
  const bad = [];
  const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
  while (walker.nextNode()) {
    const node = walker.currentNode; const text = node.textContent.trim();
    const e = node.parentElement; if (!text || !e) continue;
    const s = getComputedStyle(e);
    if (s.visibility === 'hidden' || s.display === 'none' || e.closest('title, desc, .visually-hidden, .skip')) continue;
    const inSvg = e.closest('svg') !== null;
    const fg = parse(inSvg ? s.fill : s.color); if (!fg) continue;
    const l1 = lum(fg), l2 = lum(background(e));
    const ratio = (Math.max(l1, l2) + 0.05) / (Math.min(l1, l2) + 0.05);
    const size = parseFloat(s.fontSize), bold = parseInt(s.fontWeight) >= 700;
    const large = size >= 24 || (size >= 18.66 && bold);
    if (ratio < (large ? 3 : 4.5)) bad.push(ratio.toFixed(2) + ' ' + e.tagName + ' "' + text.slice(0, 40) + '"');
  }
  return bad;
})()"#;

fn assert_contrast(browser: &mut Browser, page: &str) {
    for scheme in ["light", "dark"] {
        browser.call(
            "Emulation.setEmulatedMedia",
            serde_json::json!({"features": [{"name": "prefers-color-scheme", "value": scheme}]}),
        );
        let bad = browser.eval(CONTRAST);
        assert_eq!(
            bad.as_array().map(Vec::len),
            Some(0),
            "{page}, {scheme} scheme: low contrast: {bad}"
        );
    }
    browser.call(
        "Emulation.setEmulatedMedia",
        serde_json::json!({"features": [{"name": "prefers-color-scheme", "value": "light"}]}),
    );
}

/// Every element Tab reaches on the page, in order, from the top until focus comes back.
fn tab_order(browser: &mut Browser) -> Vec<String> {
    browser.eval("document.activeElement && document.activeElement.blur(); window.focus();");
    let mut seen = Vec::new();
    for _ in 0..300 {
        browser.press("Tab");
        let now = browser.focused();
        if seen.first() == Some(&now) || now == "body" && !seen.is_empty() {
            break;
        }
        seen.push(now);
    }
    seen
}

/// Every link, button, field and scrollable region a mouse could use.
fn interactive(browser: &mut Browser) -> Vec<String> {
    let all = browser.eval(
        "[...document.querySelectorAll('a[href], button, input:not([type=hidden]), summary, [tabindex=\"0\"]')]\
         .map(e => e.tagName.toLowerCase() + ' ' + (e.getAttribute('href') || e.id || e.name || e.type || e.innerText.trim()))",
    );
    all.as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap().to_string())
        .collect()
}

fn assert_keyboard_reaches_everything(browser: &mut Browser, page: &str) {
    let order = tab_order(browser);
    assert_eq!(
        order.first().map(String::as_str),
        Some("a #main"),
        "{page}: the skip link comes first: {order:?}"
    );
    for target in interactive(browser) {
        assert!(
            order.contains(&target),
            "{page}: Tab never reaches {target}; order: {order:?}"
        );
    }
}

#[test]
fn a_publisher_sees_the_rollout_its_failures_and_the_rollback() {
    let Some(chromium) = chromium() else { return };
    let shots = screenshot_dir();
    let publisher = Publisher::new();
    let config = config(&publisher, "");
    let data = publisher.dir.path().join("data");
    let server = Packd::start(&data, &config);

    // Two versions; every release pinned to 1.0.0, then 1.1.0 staged to half of 1.4.x.
    let v1 = publish(
        &publisher,
        &server,
        &publisher.build("1.0.0", "console one"),
    );
    let v2 = publish(
        &publisher,
        &server,
        &publisher.build("1.1.0", "console two"),
    );
    release(
        &publisher,
        &server,
        &["--new-channel", "--pack", "builtin", "--pin", "*=1.0.0"],
    );
    release(
        &publisher,
        &server,
        &["--rollout", &format!("{RANGE}=1.1.0@25")],
    );
    release(
        &publisher,
        &server,
        &["--rollout", &format!("{RANGE}=1.1.0@50")],
    );

    // 40 installs of 1.4.x (half on the new version), 10 of 1.3.0 on their built-in pack.
    for n in 0..40 {
        let pack = if n < 20 { &v2 } else { &v1 };
        fetch_as(&server, &install(n), &format!("1.4.{}", n % 3), pack);
    }
    for n in 40..50 {
        fetch_as(&server, &install(n), "1.3.0", "builtin");
    }
    // Six of the installs on 1.1.0 fail to render it; two of them then mark it bad.
    for n in 0..6 {
        report(&server, &install(n), "1.4.0", &v2, "render_failed");
        if n < 2 {
            report(&server, &install(n), "1.4.0", &v2, "marked_bad");
        }
    }

    let mut b = Browser::start(&chromium);
    b.viewport(1280, 900, false);
    let channel_url = format!("{}/console/channels/stable", server.url);
    b.open(&channel_url);
    assert_eq!(b.text("h1").as_deref(), Some("Channel stable"));
    // The rollout row: 1.1.0 to 50 % of 1.4.x, flagged, reaching half of the range today.
    let rollout = r#"table.live tr[data-version="1.1.0"]"#;
    let row = b.text(rollout).expect("a live entry for 1.1.0");
    assert!(row.contains(RANGE), "{row}");
    assert!(row.contains("50 %"), "{row}");
    assert!(row.contains("Failures rising (6 installs)"), "{row}");
    assert!(row.contains("20 (50 % of the range)"), "{row}");
    assert_eq!(
        b.eval(&format!(
            "document.querySelector('{}').classList.contains('flagged')",
            rollout.replace('\'', "\\'")
        )),
        true
    );
    let base = b
        .text(r#"table.live tr[data-version="1.0.0"]"#)
        .expect("1.0.0 live");
    assert!(
        base.contains("every release") && base.contains("no rise"),
        "{base}"
    );
    let alarm = b
        .text("section.alarm")
        .expect("an alarm for the rising version");
    assert!(alarm.contains("Failures rising on 1.1.0"), "{alarm}");
    assert!(alarm.contains("Do not widen this rollout"), "{alarm}");
    let failures = b
        .text(r#"table.failures tr[data-version="1.1.0"]"#)
        .expect("failure reports of 1.1.0");
    assert!(failures.contains("Rising"), "{failures}");
    assert!(
        failures.contains("render_failed 6, marked_bad 2"),
        "{failures}"
    );
    // Adoption: a chart for the 1.4.x range, with today's share in its table.
    let chart = b.text("figure.adoption").expect("an adoption chart");
    assert!(chart.contains(&format!("Releases {RANGE}")), "{chart}");
    assert_eq!(
        b.eval("document.querySelectorAll('figure.adoption svg rect').length > 0"),
        true
    );
    assert!(chart.contains("50 %"), "{chart}");
    let history = b.text("section[aria-labelledby=history-title]").unwrap();
    assert!(history.contains("release-ci"), "{history}");
    assert!(history.contains("rollout 25 % → 50 %"), "{history}");
    assert_contrast(&mut b, "channel page");
    assert_keyboard_reaches_everything(&mut b, "channel page");
    b.screenshot(&shots.join("channel.png"));
    b.viewport(1100, 1250, false);
    b.open(&channel_url);
    b.screenshot_view(&shots.join("channel-top.png"));
    b.viewport(390, 844, true);
    b.open(&channel_url);
    // On a phone the page fits the width: nothing scrolls sideways.
    assert_eq!(
        b.eval("document.documentElement.scrollWidth <= window.innerWidth"),
        true,
        "the channel page is wider than a phone"
    );
    b.screenshot(&shots.join("channel-phone.png"));
    b.viewport(1280, 900, false);

    // The overview names the channel with the rising version; the packs page says where
    // each version is live.
    b.open(&format!("{}/console", server.url));
    let overview = b.text("table.channels").unwrap();
    assert!(overview.contains("Rising: 1.1.0"), "{overview}");
    assert!(overview.contains("50 %"), "{overview}");
    assert_contrast(&mut b, "overview");
    assert_keyboard_reaches_everything(&mut b, "overview");
    b.screenshot(&shots.join("overview.png"));
    b.open(&format!("{}/console/packs", server.url));
    let v2_row = b.text(r#"table.packs tr[data-version="1.1.0"]"#).unwrap();
    assert!(v2_row.contains(&format!("stable: {RANGE}")), "{v2_row}");
    assert!(v2_row.contains(&v2), "{v2_row}");
    b.screenshot(&shots.join("packs.png"));

    // Roll back with exactly the command the console suggests.
    b.open(&channel_url);
    let suggested = b
        .text("section.alarm pre")
        .expect("a rollback command on the alarm");
    assert!(
        suggested.starts_with("packer release stable --server "),
        "{suggested}"
    );
    let keys = publisher.keys();
    let command = suggested
        .replacen(
            "packer",
            &promptpack_tests::bin("packer", "packer")
                .display()
                .to_string(),
            1,
        )
        .replace("--keys KEYS", &format!("--keys '{}'", keys.display()));
    let out = Command::new("sh")
        .arg("-c")
        .arg(format!("{command} --yes"))
        .env("PROMPTPACK_TOKEN", &publisher.token)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{command}: {}",
        String::from_utf8_lossy(&out.stderr)
    );

    b.open(&channel_url);
    assert!(
        b.text(r#"table.live tr[data-version="1.1.0"]"#).is_none(),
        "1.1.0 is no longer live"
    );
    let live = b.text("table.live").unwrap();
    assert!(
        live.contains("every release") && live.contains("1.0.0"),
        "{live}"
    );
    assert!(b.text("section.alarm").is_none(), "nothing live is failing");
    let failures = b
        .text(r#"table.failures tr[data-version="1.1.0"]"#)
        .unwrap();
    assert!(
        failures.contains("not live") && failures.contains("Rising"),
        "{failures}"
    );
    let latest = b
        .text("section[aria-labelledby=history-title] tbody tr")
        .unwrap();
    assert!(latest.starts_with('4'), "{latest}");
    assert!(latest.contains("release-ci"), "{latest}");
    assert!(
        latest.contains(&format!("removed {RANGE} → 1.1.0 (rollout 50 %)")),
        "{latest}"
    );
    b.open(&format!("{}/console/channels/stable/history", server.url));
    b.screenshot(&shots.join("history.png"));
    assert_keyboard_reaches_everything(&mut b, "history");
    eprintln!("screenshots in {}", shots.display());
}

/// Agents `installs` (of release 1.4.2) report a day of `calls` tool calls on `pack`
/// (`version`), `errors` of them failed.
fn report_outcomes(
    server: &Packd,
    installs: std::ops::Range<usize>,
    (pack, version): (&str, &str),
    calls: u64,
    errors: u64,
) {
    let day = time::OffsetDateTime::now_utc().date().to_string();
    for i in installs {
        let report = OutcomeReport {
            channel: "stable".to_string(),
            day: day.clone(),
            pack: pack.to_string(),
            pack_name: "builtin".to_string(),
            pack_version: version.parse().unwrap(),
            client_version: "1.4.2".parse().unwrap(),
            counts: OutcomeCounts {
                turns: calls,
                tool_calls: calls,
                tool_errors: errors,
                ..OutcomeCounts::default()
            },
        };
        let r = http()
            .post(format!("{}{}", server.url, paths::outcomes("stable")))
            .header("x-promptpack-install", install(i))
            .json(&report)
            .send()
            .unwrap();
        assert_eq!(r.status(), reqwest::StatusCode::ACCEPTED);
    }
}

/// The guard's decisions on `stable`, newest first.
fn decisions(server: &Packd) -> Vec<serde_json::Value> {
    let view: serde_json::Value = http()
        .get(format!("{}{}", server.url, paths::guard("stable")))
        .send()
        .unwrap()
        .json()
        .unwrap();
    view["decisions"].as_array().cloned().unwrap_or_default()
}

#[test]
fn a_publisher_sees_the_guard_freeze_a_ramp_and_why_and_resumes_it_from_the_page() {
    let Some(chromium) = chromium() else { return };
    let shots = screenshot_dir();
    let publisher = Publisher::new();
    let mut keygen = packer();
    keygen
        .args(["keygen", "--guard", "--dir"])
        .arg(publisher.keys());
    run(keygen);
    let config = config(
        &publisher,
        &format!(
            "[guard]\nkey = {:?}\ninterval_secs = 1\nmin_installs = 5\n",
            publisher.keys().join("guard.key").display().to_string()
        ),
    );
    let data = publisher.dir.path().join("data");
    let server = Packd::start(&data, &config);

    // 1.4.x pinned to 1.0.0 under a guard key, then 1.1.0 ramped over it: 5 % now, 25 %
    // tomorrow, watched on its tool-error rate.
    let v1 = publish(
        &publisher,
        &server,
        &publisher.build("1.0.0", "guarded one"),
    );
    let v2 = publish(
        &publisher,
        &server,
        &publisher.build("1.1.0", "guarded two"),
    );
    let guard_pub = publisher.keys().join("guard.pub");
    release(
        &publisher,
        &server,
        &[
            "--new-channel",
            "--pack",
            "builtin",
            "--pin",
            &format!("{RANGE}=1.0.0"),
            "--guard-key",
            guard_pub.to_str().unwrap(),
        ],
    );
    release(
        &publisher,
        &server,
        &[
            "--ramp",
            &format!("{RANGE}=1.1.0@5,25,50,100%/24h"),
            "--guard-watch",
            "tool_error_rate",
        ],
    );
    // Its agents fail 30 % of their tool calls; those on 1.0.0 fail 5 %.
    report_outcomes(&server, 0..5, (&v2, "1.1.0"), 100, 30);
    report_outcomes(&server, 5..10, (&v1, "1.0.0"), 100, 5);
    eventually("the guard freezes the ramp", || {
        !decisions(&server).is_empty()
    });

    let mut b = Browser::start(&chromium);
    b.viewport(1280, 900, false);
    let channel_url = format!("{}/console/channels/stable", server.url);
    b.open(&channel_url);
    let banner = b.text("section.stopped").expect("the guard's banner");
    assert!(
        banner.contains("The rollout of 1.1.0 is frozen by the guard"),
        "{banner}"
    );
    assert!(
        banner.contains("Frozen at 5 % by the guard at ")
            && banner.contains("(restricts sequence 2)."),
        "{banner}"
    );
    assert!(
        banner.contains("Why: tool_error_rate 30.00% over 5 installs (150 of 500)"),
        "{banner}"
    );
    let live = b.text(r#"table.live tr[data-version="1.1.0"]"#).unwrap();
    assert!(
        live.contains("5 %") && live.contains("frozen by the guard"),
        "{live}"
    );

    // The ramp: where it stands, its schedule, what the guard watches.
    let card = r#"article.rollout-card[data-version="1.1.0"]"#;
    let rollout = b.text(card).expect("the rollout of 1.1.0");
    assert!(
        rollout.contains("ramp from 5 % to 100 %, in steps"),
        "{rollout}"
    );
    assert!(
        rollout.contains("tool_error_rate; on a regression: freeze"),
        "{rollout}"
    );
    let schedule: Vec<String> = b
        .eval(&format!(
            "[...document.querySelectorAll('{card} table.schedule tbody tr')].map(r => r.cells[2].innerText + ' ' + r.cells[1].innerText)"
        ))
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap().to_string())
        .collect();
    assert_eq!(
        schedule,
        [
            "landed 5 %",
            "held back by the guard 25 %",
            "held back by the guard 50 %",
            "held back by the guard 100 %"
        ]
    );
    // The evidence, side by side, and the guard's test.
    let new = b
        .text(&format!(
            r#"{card} table.evidence tr[data-version="1.1.0"]"#
        ))
        .expect("1.1.0's outcomes");
    assert!(
        new.contains("1.1.0 (rolling out)\t5\t500\t30.0 % ["),
        "{new:?}"
    );
    let old = b
        .text(&format!(
            r#"{card} table.evidence tr[data-version="1.0.0"]"#
        ))
        .expect("1.0.0's outcomes");
    assert!(old.contains("1.0.0 (replaced)\t5\t500\t5.0 % ["), "{old:?}");
    let look = b
        .text(&format!(
            r#"{card} table.looks tr[data-metric="tool_error_rate"]"#
        ))
        .expect("the guard's test");
    assert!(
        look.contains("+25.0 points") && look.contains("Regressed"),
        "{look}"
    );
    let decision = b
        .text("table.decisions tbody tr")
        .expect("the guard's decision");
    assert!(decision.contains("freeze at 5 %"), "{decision}");
    assert!(decision.contains("1.1.0 for >=1.4.0, <1.5.0"), "{decision}");
    assert!(decision.contains("tool_error_rate 30.00%"), "{decision}");
    assert_contrast(&mut b, "guarded channel page");
    assert_keyboard_reaches_everything(&mut b, "guarded channel page");
    b.screenshot(&shots.join("guarded.png"));
    b.viewport(390, 844, true);
    b.open(&channel_url);
    assert_eq!(
        b.eval("document.documentElement.scrollWidth <= window.innerWidth"),
        true,
        "the guarded channel page is wider than a phone"
    );
    b.screenshot(&shots.join("guarded-phone.png"));
    b.viewport(1280, 900, false);
    b.open(&format!("{}/console", server.url));
    let overview = b.text("table.channels").unwrap();
    assert!(
        overview.contains("By the guard: 1.1.0 frozen at 5 %"),
        "{overview}"
    );

    // Resume with exactly the command the banner shows. The tool errors stay, so the guard
    // looks at the resumed ramp and freezes it again: a second decision.
    b.open(&channel_url);
    let suggested = b.text("section.stopped pre").expect("the resume command");
    assert!(
        suggested.ends_with(&format!("--resume '{RANGE}'")),
        "{suggested}"
    );
    let command = suggested
        .replacen(
            "packer",
            &promptpack_tests::bin("packer", "packer")
                .display()
                .to_string(),
            1,
        )
        .replace(
            "--keys KEYS",
            &format!("--keys '{}'", publisher.keys().display()),
        );
    let out = Command::new("sh")
        .arg("-c")
        .arg(format!("{command} --yes"))
        .env("PROMPTPACK_TOKEN", &publisher.token)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{command}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    eventually("the guard freezes the resumed ramp", || {
        decisions(&server).len() == 2
    });
    b.open(&channel_url);
    let banner = b.text("section.stopped").unwrap();
    assert!(banner.contains("(restricts sequence 4)."), "{banner}");
    let history = b.text("table.decisions").unwrap();
    assert_eq!(history.matches("freeze at 5 %").count(), 2, "{history}");
}

#[test]
fn a_private_console_is_opened_with_a_token_typed_at_the_keyboard() {
    let Some(chromium) = chromium() else { return };
    let publisher = Publisher::new();
    let read_token = "console-read-token";
    let config = config(
        &publisher,
        &format!(
            "[[tokens]]\nname = \"reader\"\nsha256 = \"{}\"\nscopes = [\"read\"]\n",
            pack_format::sha256_hex(read_token.as_bytes())
        ),
    );
    let data = publisher.dir.path().join("data");
    let server = Packd::start(&data, &config);
    publish(&publisher, &server, &publisher.build("1.0.0", "private"));
    release(
        &publisher,
        &server,
        &["--new-channel", "--pack", "builtin", "--pin", "*=1.0.0"],
    );

    let mut b = Browser::start(&chromium);
    b.viewport(1280, 900, false);
    b.open(&format!("{}/console/channels/stable", server.url));
    assert!(
        b.url()
            .ends_with("/console/login?next=/console/channels/stable"),
        "{}",
        b.url()
    );
    assert_eq!(b.focused(), "input token", "the token field has the focus");
    assert_contrast(&mut b, "sign-in");
    b.eval("document.getElementById('token').focus()");
    b.type_text("wrong-token");
    b.and_wait_for_load(|b| b.press("Enter"));
    assert!(
        b.text("#login-problem")
            .is_some_and(|t| t.contains("packd knows no token")),
        "the wrong token is refused"
    );
    b.eval("document.getElementById('token').focus()");
    b.type_text(read_token);
    // Tab to the button, Enter: signed in, back on the page first asked for.
    b.press("Tab");
    assert_eq!(b.focused(), "button submit");
    b.and_wait_for_load(|b| b.press("Enter"));
    assert!(b.url().ends_with("/console/channels/stable"), "{}", b.url());
    let who = b.text("header .who").unwrap();
    assert!(who.contains("Signed in with token reader (read)"), "{who}");
    let live = b.text("table.live").unwrap();
    assert!(live.contains("1.0.0"), "{live}");
    // The cookie is not for scripts.
    assert_eq!(b.eval("document.cookie"), "");

    // A shared link followed from another site still opens signed in.
    let link = format!("{}/console/packs", server.url);
    b.open(&format!(
        "data:text/html,<a id=go href=\"{link}\">the packs</a>"
    ));
    b.and_wait_for_load(|b| {
        b.eval("document.getElementById('go').click()");
    });
    eventually("the shared link opens the packs page", || {
        b.text("h1").as_deref() == Some("Packs")
    });
    assert!(
        b.text("header .who")
            .unwrap()
            .contains("Signed in with token reader")
    );

    // Sign out from the keyboard; the console asks for a token again.
    b.eval("document.querySelector('header .who button').focus()");
    b.and_wait_for_load(|b| b.press("Enter"));
    assert!(b.url().contains("/console/login"), "{}", b.url());
    b.open(&format!("{}/console", server.url));
    assert!(b.url().contains("/console/login"), "{}", b.url());
}
