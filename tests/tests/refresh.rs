//! The whole story with real processes: packer builds and signs, packd serves, the client
//! refreshes into snapshots that never change under a reader.

use std::sync::Arc;

use pack_client::{Client, ClientConfig, Clock, ManualClock, RefreshOutcome, Source};
use promptpack_tests::*;

fn client(cache: &std::path::Path, config: &std::path::Path, version: &str) -> Client {
    client_at(cache, config, version, Clock::system())
}

/// [`client`] deciding by `clock`.
fn client_at(
    cache: &std::path::Path,
    config: &std::path::Path,
    version: &str,
    clock: Clock,
) -> Client {
    let mut config =
        ClientConfig::load(config, cache.to_path_buf(), version.parse().unwrap()).unwrap();
    config.clock = clock;
    Client::new(config).unwrap()
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

#[test]
fn publish_refresh_and_snapshots_that_do_not_change_under_a_reader() {
    let publisher = Publisher::new();
    let data = tempfile::tempdir().unwrap();
    let mut packd = Packd::start(data.path(), &publisher.server_config());
    let cache = tempfile::tempdir().unwrap();
    let config = publisher.client_config(&packd.url, "");
    let rt = rt();

    // Empty cache, nothing published: the built-in pack serves.
    let clock = ManualClock::new(time::OffsetDateTime::now_utc());
    let c = client_at(cache.path(), &config, "1.4.2", clock.clock());
    assert_eq!(c.store().capture().source(), Source::Builtin);
    assert!(rt.block_on(c.refresh_now()).is_err(), "no channel yet");
    assert_eq!(c.store().capture().source(), Source::Builtin);

    // publish v1 → refresh → v1
    let v1 = publisher.build("1.0.0", "MARKER-V1");
    packd.upload(&publisher, &v1);
    packd.publish(
        &publisher,
        &publisher.sign(&[format!("*={}", v1.display())], "30d"),
    );
    let outcome = rt.block_on(c.refresh_now()).unwrap();
    assert!(
        matches!(outcome, RefreshOutcome::Installed { ref version, .. } if version == "1.0.0"),
        "{outcome:?}"
    );
    let before: Arc<pack_client::Snapshot> = c.store().capture();
    assert_eq!(before.source(), Source::Remote);
    let template = before
        .keys()
        .into_iter()
        .find(|k| k.ends_with(".hbs"))
        .unwrap()
        .to_string();
    assert!(String::from_utf8_lossy(before.get(&template).unwrap()).contains("MARKER-V1"));

    // Same document again: a 304.
    assert_eq!(
        rt.block_on(c.refresh_now()).unwrap(),
        RefreshOutcome::NotModified
    );

    // publish v2 → a snapshot captured before still reads v1 for every key.
    let v2 = publisher.build("2.0.0", "MARKER-V2");
    packd.upload(&publisher, &v2);
    packd.publish(
        &publisher,
        &publisher.sign(&[format!("*={}", v2.display())], "30d"),
    );
    let outcome = rt.block_on(c.refresh_now()).unwrap();
    assert!(
        matches!(outcome, RefreshOutcome::Installed { ref version, .. } if version == "2.0.0"),
        "{outcome:?}"
    );
    let after = c.store().capture();
    for key in before.keys() {
        if key.ends_with(".hbs") {
            let old = String::from_utf8_lossy(before.get(key).unwrap()).into_owned();
            let new = String::from_utf8_lossy(after.get(key).unwrap()).into_owned();
            assert!(
                old.contains("MARKER-V1") && !old.contains("MARKER-V2"),
                "{key} changed under a reader"
            );
            assert!(
                new.contains("MARKER-V2"),
                "{key} not updated in the new capture"
            );
        }
    }
    assert_eq!(before.version().to_string(), "1.0.0");
    assert_eq!(after.version().to_string(), "2.0.0");

    // Server down → keeps v2 and says why. Successes and failures are recorded in whole
    // seconds; the failure must fall in a later second than the install for the order
    // between them to be known.
    clock.advance(time::Duration::seconds(2));
    packd.stop();
    let err = rt.block_on(c.refresh_now()).unwrap_err();
    assert!(err.to_string().contains("request to"), "{err}");
    assert_eq!(c.store().capture().version().to_string(), "2.0.0");
    let status = c.status();
    assert!(
        status
            .last_error
            .as_deref()
            .unwrap_or("")
            .contains("request to"),
        "{status:?}"
    );

    // A restart (new process) loads v2 from the cache, verified, while the server is down.
    drop(c);
    let c = client(cache.path(), &config, "1.4.2");
    assert_eq!(c.store().capture().version().to_string(), "2.0.0");
    assert_eq!(c.store().capture().source(), Source::Remote);
    // The failed refresh of the process before still counts: nothing succeeded after it.
    let status = c.status();
    assert!(
        status
            .last_error
            .as_deref()
            .unwrap_or("")
            .contains("request to"),
        "{status:?}"
    );

    // Empty cache offline → builtin.
    let empty = tempfile::tempdir().unwrap();
    let offline = client(empty.path(), &config, "1.4.2");
    assert!(rt.block_on(offline.refresh_now()).is_err());
    assert_eq!(offline.store().capture().source(), Source::Builtin);
}

#[test]
fn clients_get_the_pack_pinned_to_their_release_and_builtin_sends_them_back() {
    let publisher = Publisher::new();
    let data = tempfile::tempdir().unwrap();
    let packd = Packd::start(data.path(), &publisher.server_config());
    let config = publisher.client_config(&packd.url, "");
    let rt = rt();
    let old = publisher.build("1.4.0", "FOR-1.4");
    let new = publisher.build("1.5.0", "FOR-1.5");
    packd.upload(&publisher, &old);
    packd.upload(&publisher, &new);
    packd.publish(
        &publisher,
        &publisher.sign(
            &[
                format!(">=1.4.0, <1.5.0={}", old.display()),
                format!(">=1.5.0={}", new.display()),
            ],
            "30d",
        ),
    );
    let (c142, c150) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let a = client(c142.path(), &config, "1.4.2");
    let b = client(c150.path(), &config, "1.5.0");
    rt.block_on(a.refresh_now()).unwrap();
    rt.block_on(b.refresh_now()).unwrap();
    assert_eq!(a.store().capture().version().to_string(), "1.4.0");
    assert_eq!(b.store().capture().version().to_string(), "1.5.0");

    // Roll 1.5 back to the built-in pack: a higher sequence.
    packd.publish(
        &publisher,
        &publisher.sign(
            &[
                format!(">=1.4.0, <1.5.0={}", old.display()),
                ">=1.5.0=builtin".to_string(),
            ],
            "30d",
        ),
    );
    let outcome = rt.block_on(b.refresh_now()).unwrap();
    assert!(
        matches!(outcome, RefreshOutcome::Builtin { .. }),
        "{outcome:?}"
    );
    assert_eq!(b.store().capture().source(), Source::Builtin);
    assert!(matches!(
        rt.block_on(a.refresh_now()).unwrap(),
        RefreshOutcome::Unchanged { .. }
    ));
    assert_eq!(a.store().capture().version().to_string(), "1.4.0");
}

#[test]
fn a_rollout_holds_per_install_and_a_lowered_percentage_takes_installs_back() {
    let publisher = Publisher::new();
    let data = tempfile::tempdir().unwrap();
    let packd = Packd::start(data.path(), &publisher.server_config());
    let config = publisher.client_config(&packd.url, "");
    let rt = rt();
    let base = publisher.build("1.0.0", "BASE");
    let canary = publisher.build("2.0.0", "CANARY");
    packd.upload(&publisher, &base);
    packd.upload(&publisher, &canary);
    let entries = |percent: u8| {
        vec![
            format!("*={}@{percent}%:canary-salt", canary.display()),
            format!("*={}", base.display()),
        ]
    };
    packd.publish(&publisher, &publisher.sign(&entries(50), "30d"));
    let clients: Vec<(tempfile::TempDir, Client)> = (0..24)
        .map(|_| {
            let dir = tempfile::tempdir().unwrap();
            let c = client(dir.path(), &config, "1.0.0");
            (dir, c)
        })
        .collect();
    let on_canary = |clients: &[(tempfile::TempDir, Client)]| -> Vec<String> {
        clients
            .iter()
            .filter(|(_, c)| c.store().capture().version().major == 2)
            .map(|(_, c)| c.install_id().to_string())
            .collect()
    };
    for (_, c) in &clients {
        rt.block_on(c.refresh_now()).unwrap();
    }
    let at_50 = on_canary(&clients);
    // Each install lands where its bucket says.
    for (_, c) in &clients {
        let in_rollout = pack_format::rollout_bucket("canary-salt", c.install_id()) < 50;
        assert_eq!(c.store().capture().version().major == 2, in_rollout);
    }
    packd.publish(&publisher, &publisher.sign(&entries(10), "30d"));
    for (_, c) in &clients {
        rt.block_on(c.refresh_now()).unwrap();
    }
    let at_10 = on_canary(&clients);
    assert!(
        at_10.iter().all(|id| at_50.contains(id)),
        "lowering added installs"
    );
    for (_, c) in &clients {
        let in_rollout = pack_format::rollout_bucket("canary-salt", c.install_id()) < 10;
        assert_eq!(
            c.store().capture().version().major == 2,
            in_rollout,
            "install not taken back"
        );
    }
}

#[test]
fn a_corrupted_cache_serves_builtin_with_a_warning_and_the_next_refresh_repairs_it() {
    let publisher = Publisher::new();
    let data = tempfile::tempdir().unwrap();
    let packd = Packd::start(data.path(), &publisher.server_config());
    let config = publisher.client_config(&packd.url, "");
    let cache = tempfile::tempdir().unwrap();
    let rt = rt();
    let v1 = publisher.build("1.0.0", "V1");
    packd.upload(&publisher, &v1);
    packd.publish(
        &publisher,
        &publisher.sign(&[format!("*={}", v1.display())], "30d"),
    );
    let c = client(cache.path(), &config, "1.0.0");
    rt.block_on(c.refresh_now()).unwrap();
    drop(c);

    // Flip a byte in the installed pack.
    let pack = walk(&cache.path().join("packs"))
        .into_iter()
        .find(|p| p.extension().is_some_and(|e| e == "pack"))
        .unwrap();
    let mut bytes = std::fs::read(&pack).unwrap();
    let at = bytes.len() / 2;
    bytes[at] ^= 0x40;
    std::fs::write(&pack, bytes).unwrap();
    let c = client(cache.path(), &config, "1.0.0");
    assert_eq!(c.store().capture().source(), Source::Builtin);
    let warning = c.status().last_error.unwrap();
    assert!(warning.contains("start-up"), "{warning}");
    let outcome = rt.block_on(c.refresh_now()).unwrap();
    assert!(
        matches!(outcome, RefreshOutcome::Installed { .. }),
        "{outcome:?}"
    );
    assert_eq!(c.store().capture().version().to_string(), "1.0.0");
    drop(c);

    // Garbage in the state file.
    std::fs::write(cache.path().join("state.json"), b"{ not json").unwrap();
    let c = client(cache.path(), &config, "1.0.0");
    assert_eq!(c.store().capture().source(), Source::Builtin);
    assert!(
        c.status()
            .last_error
            .unwrap()
            .contains("corrupt state file")
    );
    rt.block_on(c.refresh_now()).unwrap();
    assert_eq!(c.store().capture().source(), Source::Remote);
}

#[test]
fn auto_update_off_and_a_local_pin_keep_what_the_client_has() {
    let publisher = Publisher::new();
    let data = tempfile::tempdir().unwrap();
    let packd = Packd::start(data.path(), &publisher.server_config());
    let rt = rt();
    let v1 = publisher.build("1.0.0", "V1");
    let v2 = publisher.build("2.0.0", "V2");
    packd.upload(&publisher, &v1);
    packd.upload(&publisher, &v2);
    packd.publish(
        &publisher,
        &publisher.sign(&[format!("*={}", v1.display())], "30d"),
    );

    // Auto-update off: the scheduled refresh does nothing; a manual one still works.
    let off = publisher.client_config(&packd.url, "auto_update = false\n");
    let cache = tempfile::tempdir().unwrap();
    let c = client(cache.path(), &off, "1.0.0");
    let outcome = rt.block_on(c.refresh()).unwrap();
    assert!(
        matches!(outcome, RefreshOutcome::Skipped { ref reason } if reason.contains("auto-update is off")),
        "{outcome:?}"
    );
    assert_eq!(c.store().capture().source(), Source::Builtin);
    rt.block_on(c.refresh_now()).unwrap();
    assert_eq!(c.store().capture().version().to_string(), "1.0.0");

    // Pinned to 1.0.0: a channel offering 2.0.0 changes nothing, and says why.
    let pinned = publisher.client_config(&packd.url, "pin = \"1.0.0\"\n");
    let cache = tempfile::tempdir().unwrap();
    let c = client(cache.path(), &pinned, "1.0.0");
    rt.block_on(c.refresh_now()).unwrap();
    assert_eq!(c.store().capture().version().to_string(), "1.0.0");
    packd.publish(
        &publisher,
        &publisher.sign(&[format!("*={}", v2.display())], "30d"),
    );
    let outcome = rt.block_on(c.refresh_now()).unwrap();
    assert!(
        matches!(outcome, RefreshOutcome::Skipped { ref reason } if reason.contains("pinned to 1.0.0")),
        "{outcome:?}"
    );
    assert_eq!(c.store().capture().version().to_string(), "1.0.0");
}

#[test]
fn the_schedule_refreshes_at_start_up_when_the_last_check_is_old() {
    let publisher = Publisher::new();
    let data = tempfile::tempdir().unwrap();
    let packd = Packd::start(data.path(), &publisher.server_config());
    let v1 = publisher.build("1.0.0", "V1");
    packd.upload(&publisher, &v1);
    packd.publish(
        &publisher,
        &publisher.sign(&[format!("*={}", v1.display())], "30d"),
    );
    let config = publisher.client_config(&packd.url, "");
    let cache = tempfile::tempdir().unwrap();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let c = Arc::new(client(cache.path(), &config, "1.0.0"));
    assert_eq!(c.store().capture().source(), Source::Builtin);
    // The sign: the client says it installed a pack (or that its refresh failed).
    let mut events = c.events();
    let schedule = rt
        .block_on(pack_client::schedule::start(c.clone()))
        .unwrap();
    rt.block_on(async {
        let installed = tokio::time::timeout(std::time::Duration::from_secs(20), async {
            loop {
                match events.recv().await {
                    Ok(pack_client::activity::Event::Installed { .. }) => break,
                    Ok(pack_client::activity::Event::Failed { message, .. }) => {
                        panic!("the start-up refresh failed: {message}")
                    }
                    Ok(_) | Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {}
                    Err(tokio::sync::broadcast::error::RecvError::Closed) => break,
                }
            }
        })
        .await;
        assert!(installed.is_ok(), "no start-up refresh within 20 s");
    });
    assert_eq!(
        c.store().capture().version().to_string(),
        "1.0.0",
        "no start-up refresh"
    );
    rt.block_on(schedule.shutdown()).unwrap();

    // Spread: installs land on different minutes of the six-hour window.
    let crons: std::collections::BTreeSet<String> = (0..50)
        .map(|i| pack_client::schedule::cron_for(&format!("install-{i}")))
        .collect();
    assert!(crons.len() > 40, "{crons:?}");
    assert!(crons.iter().all(|c| c.ends_with("/6 * * *")));
}

/// The document and its signature come from one publish even while a publisher releases in
/// a loop: the client asks for the signature of the sequence the document response named.
/// (Fetching the live signature instead failed 9 of 175 refreshes under releases.)
#[test]
#[allow(clippy::print_stderr)] // the counts are the measurement
fn a_thousand_refreshes_during_a_release_loop_never_pair_mismatched_signatures() {
    use pack_format::{ChannelDocument, ChannelEntry, EntryTarget, PackRef, SigningKey};
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

    let publisher = Publisher::new();
    let data = tempfile::tempdir().unwrap();
    let packd = Arc::new(Packd::start(data.path(), &publisher.server_config()));
    let cache = tempfile::tempdir().unwrap();
    let config = publisher.client_config(&packd.url, "");
    let pack_path = publisher.build("1.0.0", "RACE");
    packd.upload(&publisher, &pack_path);
    let pack = std::fs::read(&pack_path).unwrap();
    let key_path = publisher.keys().join("signing.key");
    // The same pack under a new sequence and issue time each release.
    let document = move |key: &SigningKey, sequence: u64| {
        let now = time::OffsetDateTime::now_utc();
        let doc = ChannelDocument {
            format: 1,
            channel: "stable".into(),
            pack: "builtin".into(),
            sequence,
            issued_at: now,
            expires_at: now + time::Duration::days(30),
            entries: vec![ChannelEntry {
                clients: "*".parse().unwrap(),
                target: EntryTarget::Pack(PackRef {
                    version: "1.0.0".parse().unwrap(),
                    sha256: pack_format::sha256_hex(&pack),
                    size: pack.len() as u64,
                    schema: 1,
                }),
                rollout: None,
            }],
            guard: None,
            restricts: None,
        };
        let signed = doc.sign(key).unwrap();
        (signed.document, signed.signature)
    };
    let key = SigningKey::load(&key_path, None).unwrap();
    packd.publish(&publisher, &document(&key, 1));

    let stop = Arc::new(AtomicBool::new(false));
    let released = Arc::new(AtomicU64::new(1));
    let releaser = {
        let (stop, released, packd) = (stop.clone(), released.clone(), packd.clone());
        let publisher_token = publisher.token.clone();
        std::thread::spawn(move || {
            let http = reqwest::blocking::Client::new();
            for sequence in 2u64.. {
                if stop.load(Ordering::SeqCst) {
                    break;
                }
                let (doc, sig) = document(&key, sequence);
                let response = http
                    .put(format!("{}/v1/channels/stable", packd.url))
                    .bearer_auth(&publisher_token)
                    .json(&serde_json::json!({
                        "document": String::from_utf8(doc).unwrap(),
                        "signature": sig,
                    }))
                    .send()
                    .unwrap();
                assert!(response.status().is_success(), "{}", response.status());
                released.store(sequence, Ordering::SeqCst);
            }
        })
    };

    let rt = rt();
    let c = client(cache.path(), &config, "1.0.0");
    let mut failures = Vec::new();
    let mut sequences_seen = std::collections::BTreeSet::new();
    for _ in 0..1000 {
        match rt.block_on(c.refresh_now()) {
            Ok(_) => {
                sequences_seen.insert(c.status().sequence);
            }
            Err(e) => failures.push(e.to_string()),
        }
    }
    stop.store(true, Ordering::SeqCst);
    releaser.join().unwrap();
    let releases = released.load(Ordering::SeqCst) - 1;
    eprintln!(
        "1000 refreshes during {releases} releases: {} failures, {} distinct sequences installed",
        failures.len(),
        sequences_seen.len()
    );
    assert!(failures.is_empty(), "{failures:?}");
    // The releases really ran alongside the refreshes.
    assert!(
        releases >= 50,
        "only {releases} releases during the refreshes"
    );
    assert!(sequences_seen.len() >= 50, "{}", sequences_seen.len());
}

/// `pack-client forget-bad` clears a bad-pack mark from the command line; the rest of the
/// state survives, and a hash that is not marked is an error that lists the marks.
#[test]
fn pack_client_forget_bad_clears_marks_and_keeps_the_sequence() {
    let publisher = Publisher::new();
    let data = tempfile::tempdir().unwrap();
    let packd = Packd::start(data.path(), &publisher.server_config());
    let cache = tempfile::tempdir().unwrap();
    let config = publisher.client_config(&packd.url, "");
    // v1 sealed for a content key no client holds.
    let v1 = publisher.build("1.0.0", "FOREIGN");
    let keys = pack_format::ContentKeyRing::new([pack_format::ContentKey::load(
        &publisher.keys().join("content.key"),
    )
    .unwrap()]);
    let foreign = reseal_for(
        &std::fs::read(&v1).unwrap(),
        &keys,
        &pack_format::ContentKey::generate(),
    );
    std::fs::write(&v1, &foreign).unwrap();
    let sha = packd.upload(&publisher, &v1);
    packd.publish(
        &publisher,
        &publisher.sign(&[format!("*={}", v1.display())], "30d"),
    );

    let mut refresh = client_cmd(cache.path(), &config, "1.0.0");
    refresh.arg("refresh");
    let out = refresh.output().unwrap();
    assert_eq!(out.status.code(), Some(3), "the refresh should fail");
    let mut status = client_cmd(cache.path(), &config, "1.0.0");
    status.args(["--json", "status"]);
    let before: serde_json::Value = serde_json::from_str(&run(status)).unwrap();
    assert_eq!(before["bad_packs"][0]["sha256"], sha.as_str());
    assert_eq!(before["bad_packs"][0]["reason"], "content_key");

    let mut unknown = client_cmd(cache.path(), &config, "1.0.0");
    unknown.args(["forget-bad", &"0".repeat(64)]);
    let out = unknown.output().unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("no bad-pack mark for") && stderr.contains(&sha),
        "{stderr}"
    );

    let mut forget = client_cmd(cache.path(), &config, "1.0.0");
    forget.args(["forget-bad", &sha]);
    assert!(run(forget).contains(&format!("cleared {sha}")));
    let mut status = client_cmd(cache.path(), &config, "1.0.0");
    status.args(["--json", "status"]);
    let after: serde_json::Value = serde_json::from_str(&run(status)).unwrap();
    assert_eq!(after["bad_packs"], serde_json::json!([]));
    assert_eq!(
        after["sequence"], before["sequence"],
        "the state went with the marks"
    );
    assert_eq!(after["last_check"], before["last_check"]);
}

/// Two processes on one cache (two `Client`s here): when one installs, the other's next
/// refresh takes the state it wrote under the refresh lock, answers 304 to its ETag, and
/// serves what the first installed — a rollback to the built-in pack included — instead of
/// keeping its old pack for good.
#[test]
fn a_process_that_adopts_another_processs_install_serves_it() {
    let publisher = Publisher::new();
    let data = tempfile::tempdir().unwrap();
    let packd = Packd::start(data.path(), &publisher.server_config());
    let config = publisher.client_config(&packd.url, "");
    let cache = tempfile::tempdir().unwrap();
    let rt = rt();
    let first = client(cache.path(), &config, "1.0.0");
    let second = client(cache.path(), &config, "1.0.0");
    let v1 = publisher.build("1.0.0", "SHARED-V1");
    packd.upload(&publisher, &v1);
    packd.publish(
        &publisher,
        &publisher.sign(&[format!("*={}", v1.display())], "30d"),
    );
    rt.block_on(first.refresh_now()).unwrap();
    assert_eq!(first.store().capture().version().to_string(), "1.0.0");
    assert_eq!(second.store().capture().source(), Source::Builtin);
    let outcome = rt.block_on(second.refresh_now()).unwrap();
    assert_eq!(outcome, RefreshOutcome::NotModified);
    assert_eq!(second.store().capture().version().to_string(), "1.0.0");
    assert_eq!(second.store().capture().source(), Source::Remote);

    packd.publish(
        &publisher,
        &publisher.sign(&["*=builtin".to_string()], "30d"),
    );
    rt.block_on(first.refresh_now()).unwrap();
    assert_eq!(first.store().capture().source(), Source::Builtin);
    rt.block_on(second.refresh_now()).unwrap();
    assert_eq!(second.store().capture().source(), Source::Builtin);
}
