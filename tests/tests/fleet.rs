//! The fleet, end to end with real processes: 50 installs refreshing through two packd
//! nodes show up in `packer status --fleet`; a pack whose template fails to render on one
//! device is marked bad there after three failures in a row, the device falls back to its
//! built-in pack, reports it — reason codes only, checked byte for byte on the wire — and
//! the publisher sees the failures in `packer status --fleet`.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use promptpack_tests::*;

/// A packd config with this publisher's key and a one-second fleet write interval.
fn fleet_config(publisher: &Publisher) -> std::path::PathBuf {
    let path = publisher.server_config();
    let mut text = std::fs::read_to_string(&path).unwrap();
    text.push_str("\n[fleet]\nflush_secs = 1\n");
    std::fs::write(&path, text).unwrap();
    path
}

fn packer_status_fleet(server: &str) -> String {
    let mut cmd = packer();
    cmd.args(["status", "--fleet", "--server", server]);
    run(cmd)
}

#[test]
fn fifty_installs_through_two_packd_nodes_add_up_in_packer_status() {
    let publisher = Publisher::new();
    let data = tempfile::tempdir().unwrap();
    let config = fleet_config(&publisher);
    let a = Packd::start(data.path(), &config);
    let b = Packd::start(data.path(), &config);
    let pack = publisher.build("3.1.0", "FLEET-3.1.0");
    a.upload(&publisher, &pack);
    // 40 % of 1.4.x gets 3.1.0; everyone else stays on the built-in pack.
    a.publish(
        &publisher,
        &publisher.sign(
            &[
                format!(">=1.4.0, <1.5.0={}@40%", pack.display()),
                ">=1.4.0, <1.5.0=builtin".to_string(),
                "*=builtin".to_string(),
            ],
            "30d",
        ),
    );
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let caches = tempfile::tempdir().unwrap();
    let mut on_pack = 0;
    for i in 0..50 {
        let server = if i % 2 == 0 { &a.url } else { &b.url };
        let release = if i < 30 { "1.4.2" } else { "1.3.0" };
        let client_config = publisher.client_config(server, "");
        let config = pack_client::ClientConfig::load(
            &client_config,
            caches.path().join(format!("install-{i}")),
            release.parse().unwrap(),
        )
        .unwrap();
        let client = pack_client::Client::new(config).unwrap();
        runtime.block_on(client.refresh_now()).unwrap();
        // The fetch that counts what it serves now: a second refresh (a 304).
        runtime.block_on(client.refresh_now()).unwrap();
        if client.store().capture().source() == pack_client::Source::Remote {
            on_pack += 1;
        }
    }
    assert!(
        on_pack > 0 && on_pack < 30,
        "{on_pack} of 30 in the 40 % rollout"
    );

    // Both nodes answer with the whole fleet once each has written its counts.
    let deadline = Instant::now() + Duration::from_secs(20);
    let (text_a, text_b) = loop {
        let (ta, tb) = (packer_status_fleet(&a.url), packer_status_fleet(&b.url));
        if (ta.contains("fleet, last 7 days: 50 installs")
            && tb.contains("fleet, last 7 days: 50 installs"))
            || Instant::now() > deadline
        {
            break (ta, tb);
        }
        std::thread::sleep(Duration::from_millis(300));
    };
    for text in [&text_a, &text_b] {
        assert!(text.contains("fleet, last 7 days: 50 installs"), "{text}");
        assert!(text.contains(">=1.4.0, <1.5.0: 30 installs"), "{text}");
        let share = (100.0 * on_pack as f64 / 30.0).round();
        let line = format!(
            "3.1.0: {on_pack} installs, {share:.0} % of >=1.4.0, <1.5.0; rollout target 40 %"
        );
        assert!(text.contains(&line), "{line:?} not in\n{text}");
        // Every install served the built-in pack before its first refresh installed 3.1.0:
        // each is counted on every pack it was seen on in the window.
        assert!(
            text.contains("builtin: 30 installs, 100 % of >=1.4.0, <1.5.0"),
            "{text}"
        );
        assert!(text.contains("*: 20 installs"), "{text}");
    }
}

/// Every request that went through, head and body, as bytes.
type Captured = Arc<Mutex<Vec<Vec<u8>>>>;

/// A one-request-per-connection HTTP proxy to `upstream` that keeps every request's bytes.
fn recording_proxy(upstream: &str) -> (String, Captured) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let upstream = upstream.trim_start_matches("http://").to_string();
    let captured: Captured = Arc::default();
    let seen = captured.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(stream) = stream else { continue };
            let (upstream, seen) = (upstream.clone(), seen.clone());
            std::thread::spawn(move || {
                let _ = forward(stream, &upstream, &seen);
            });
        }
    });
    (url, captured)
}

fn forward(client: TcpStream, upstream: &str, seen: &Captured) -> std::io::Result<()> {
    let mut reader = BufReader::new(client.try_clone()?);
    let mut head = Vec::new();
    let mut length = 0usize;
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line)? == 0 {
            return Ok(());
        }
        if let Some(value) = line.to_ascii_lowercase().strip_prefix("content-length:") {
            length = value.trim().parse().unwrap_or(0);
        }
        // One request per connection: the upstream closes after answering.
        if line.to_ascii_lowercase().starts_with("connection:") {
            continue;
        }
        if line == "\r\n" {
            head.extend_from_slice(b"connection: close\r\n\r\n");
            break;
        }
        head.extend_from_slice(line.as_bytes());
    }
    let mut body = vec![0u8; length];
    reader.read_exact(&mut body)?;
    let mut request = head;
    request.extend_from_slice(&body);
    seen.lock().unwrap().push(request.clone());
    let mut up = TcpStream::connect(upstream)?;
    up.write_all(&request)?;
    let mut answer = Vec::new();
    up.read_to_end(&mut answer)?;
    let mut client = client;
    client.write_all(&answer)?;
    client.shutdown(std::net::Shutdown::Both)
}

fn agent(home: &Path) -> Command {
    let mut cmd = Command::new(bin("agent", "agent"));
    cmd.env("AGENT_HOME", home)
        .env_remove("AGENT_BASE_URL")
        .env_remove("DO_NOT_TRACK");
    cmd
}

/// `agent prompt` for `model`: the prompt's metadata.
fn prompt_metadata(home: &Path, model: &str) -> serde_json::Value {
    let mut cmd = agent(home);
    cmd.args(["prompt", "--agent", "mavis", "--model", model, "--json"]);
    let out: serde_json::Value = serde_json::from_str(&run(cmd)).unwrap();
    out["metadata"].clone()
}

fn status(home: &Path) -> String {
    let mut cmd = agent(home);
    cmd.args(["packs", "status"]);
    run(cmd)
}

/// The report requests among what the proxy saw: (head, body).
fn reports(captured: &Captured) -> Vec<(String, Vec<u8>)> {
    captured
        .lock()
        .unwrap()
        .iter()
        .filter(|r| r.starts_with(b"POST /v1/channels/stable/reports "))
        .map(|r| {
            let split = r.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
            (
                String::from_utf8_lossy(&r[..split]).into_owned(),
                r[split..].to_vec(),
            )
        })
        .collect()
}

#[test]
fn a_template_failing_on_one_device_is_marked_bad_there_reported_and_shown_to_the_publisher() {
    let publisher = Publisher::new();
    let data = tempfile::tempdir().unwrap();
    let packd = Packd::start(data.path(), &fleet_config(&publisher));
    // Every template passes the contract check; the model-family list sends Gemini models
    // to a template the pack does not have, so only devices that run Gemini fail.
    let pack = publisher.build_edited("3.2.0", "MARKER-FROM-THE-PROMPT-3.2.0", |src| {
        let path = src.join("models/families.json");
        let text = std::fs::read_to_string(&path)
            .unwrap()
            .replace("models/gemini.hbs", "models/gemini-next.hbs");
        std::fs::write(path, text).unwrap();
    });
    packd.upload(&publisher, &pack);
    packd.publish(
        &publisher,
        &publisher.sign(&[format!("*={}", pack.display())], "30d"),
    );
    let sha = pack_format::sha256_hex(&std::fs::read(&pack).unwrap());

    let (proxy, captured) = recording_proxy(&packd.url);
    let home = tempfile::tempdir().unwrap();
    let config = std::fs::read_to_string(publisher.client_config(&proxy, "")).unwrap();
    std::fs::write(home.path().join("config.toml"), config).unwrap();
    let mut cmd = agent(home.path());
    cmd.args(["packs", "refresh"]);
    run(cmd);

    // Two failures, then a success on another model: the count starts again.
    for _ in 0..2 {
        let meta = prompt_metadata(home.path(), "gemini-2.5-pro");
        assert_eq!(meta["pack"]["source"], "builtin", "{meta}");
        assert!(
            meta["fallback"].as_str().unwrap().contains("3.2.0"),
            "{meta}"
        );
    }
    let meta = prompt_metadata(home.path(), "claude-sonnet-4");
    assert_eq!(meta["pack"]["source"], "remote", "{meta}");
    assert!(meta["fallback"].is_null());
    assert!(!status(home.path()).contains("refused pack"));

    // Three in a row: marked bad on this device; every model now gets the built-in pack.
    for _ in 0..3 {
        prompt_metadata(home.path(), "gemini-2.5-pro");
    }
    let meta = prompt_metadata(home.path(), "claude-sonnet-4");
    assert_eq!(meta["pack"]["source"], "builtin", "{meta}");
    assert!(
        meta["fallback"].is_null(),
        "served whole from the built-in pack: {meta}"
    );
    let text = status(home.path());
    assert!(
        text.contains(&format!(
            "refused pack: {sha} (its templates failed to render 3 times in a row on this device)"
        )),
        "{text}"
    );
    // A refresh does not bring the marked bytes back.
    let mut cmd = agent(home.path());
    cmd.args(["packs", "refresh"]);
    let out = cmd.output().unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("failed before and is not retried"));

    // The runs started a background refresh that sent the reports.
    let deadline = Instant::now() + Duration::from_secs(20);
    while reports(&captured).len() < 2 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(200));
    }
    let sent = reports(&captured);
    assert_eq!(
        sent.len(),
        2,
        "render_failed once (once a day) and marked_bad once"
    );
    let install_id = std::fs::read_to_string(home.path().join("packs/install-id")).unwrap();
    let install_hash = pack_protocol_install_hash(&proxy, install_id.trim());
    let templates: Vec<String> = walk(&publisher.dir.path().join("src-3.2.0"))
        .into_iter()
        .filter_map(|p| std::fs::read_to_string(p).ok())
        .collect();
    let mut reasons = Vec::new();
    for (head, body) in &sent {
        let value: serde_json::Value = serde_json::from_slice(body).unwrap();
        let keys: Vec<&str> = value
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        assert_eq!(
            keys,
            ["channel", "client_version", "pack", "reason"],
            "{value}"
        );
        assert_eq!(value["channel"], "stable");
        assert_eq!(value["pack"], sha.as_str());
        assert_eq!(value["client_version"], env!("CARGO_PKG_VERSION"));
        reasons.push(value["reason"].as_str().unwrap().to_string());
        assert!(body.len() < 200, "{} bytes", body.len());
        let wire = format!("{head}{}", String::from_utf8_lossy(body));
        assert!(
            wire.contains(&format!("x-promptpack-install: {install_hash}")),
            "{wire}"
        );
        assert!(
            !wire.contains(install_id.trim()),
            "the raw install id left the device"
        );
        assert!(!wire.contains("MARKER-FROM-THE-PROMPT"), "{wire}");
        assert!(
            !wire.contains("gemini"),
            "no file name or model from the failure: {wire}"
        );
        for template in &templates {
            for line in template.lines().filter(|l| l.trim().len() > 24) {
                assert!(
                    !wire.contains(line.trim()),
                    "template text on the wire: {line}"
                );
            }
        }
    }
    reasons.sort();
    assert_eq!(reasons, ["marked_bad", "render_failed"]);

    // The publisher sees the failures beside the adoption of 3.2.0.
    let text = packer_status_fleet(&packd.url);
    let line = text
        .lines()
        .find(|l| l.trim_start().starts_with("3.2.0:"))
        .unwrap_or_else(|| panic!("no 3.2.0 line in\n{text}"));
    assert!(
        line.contains("failures: 1 marked_bad from 1 installs, 1 render_failed from 1 installs"),
        "{text}"
    );
}

/// With telemetry off the device still protects itself, and tells the server nothing.
#[test]
fn with_telemetry_off_nothing_identifies_the_install_and_nothing_is_reported() {
    let publisher = Publisher::new();
    let data = tempfile::tempdir().unwrap();
    let packd = Packd::start(data.path(), &fleet_config(&publisher));
    let pack = publisher.build_edited("3.3.0", "OFF", |src| {
        let path = src.join("models/families.json");
        let text = std::fs::read_to_string(&path)
            .unwrap()
            .replace("models/gemini.hbs", "models/gemini-next.hbs");
        std::fs::write(path, text).unwrap();
    });
    packd.upload(&publisher, &pack);
    packd.publish(
        &publisher,
        &publisher.sign(&[format!("*={}", pack.display())], "30d"),
    );
    let (proxy, captured) = recording_proxy(&packd.url);
    let home = tempfile::tempdir().unwrap();
    let config =
        std::fs::read_to_string(publisher.client_config(&proxy, "telemetry = false\n")).unwrap();
    std::fs::write(home.path().join("config.toml"), config).unwrap();
    let mut cmd = agent(home.path());
    cmd.args(["packs", "refresh"]);
    run(cmd);
    for _ in 0..3 {
        prompt_metadata(home.path(), "gemini-2.5-pro");
    }
    assert!(status(home.path()).contains("its templates failed to render 3 times"));
    // A refresh sends the failure reports that wait before it returns (with telemetry on,
    // the 3 failures would be on the wire when it ends). The sign that it ran: its channel
    // fetch went through the proxy.
    let before = captured.lock().unwrap().len();
    let mut cmd = agent(home.path());
    cmd.args(["packs", "refresh"]);
    let _ = cmd.output().unwrap();
    let seen = captured.lock().unwrap();
    assert!(
        seen[before..]
            .iter()
            .any(|r| r.starts_with(b"GET /v1/channels/stable ")),
        "the refresh fetched no channel through the proxy"
    );
    for request in seen.iter() {
        let text = String::from_utf8_lossy(request).to_ascii_lowercase();
        assert!(!text.contains("x-promptpack-install:"), "{text}");
        assert!(!text.starts_with("post "), "{text}");
    }
}

/// The client's install hash, as the protocol defines it (written out here so the test
/// does not trust the code under test to compute it).
fn pack_protocol_install_hash(server: &str, install_id: &str) -> String {
    let salted = format!("promptpack install v1\n{server}\nstable\n{install_id}");
    pack_format::sha256_hex(salted.as_bytes())[..32].to_string()
}
