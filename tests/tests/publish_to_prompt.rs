//! The whole chain: a publisher edits a template, packer builds and signs, packd serves,
//! `agent packs refresh` installs, and `agent prompt` renders the edited text. Then the
//! publisher rolls the channel back to the built-in pack and the prompt follows.

use std::process::Command;

use promptpack_tests::*;

fn agent(home: &std::path::Path) -> Command {
    let mut cmd = Command::new(bin("agent", "agent"));
    cmd.env("AGENT_HOME", home).env_remove("AGENT_BASE_URL");
    cmd
}

fn prompt_json(home: &std::path::Path) -> serde_json::Value {
    let mut cmd = agent(home);
    cmd.args(["prompt", "--agent", "mavis", "--json"]);
    serde_json::from_str(&run(cmd)).unwrap()
}

/// A packd serving one released pack, and an agent data directory configured for it.
struct Published {
    publisher: Publisher,
    _data: tempfile::TempDir,
    packd: Packd,
    home: tempfile::TempDir,
}

/// Builds `packs/builtin` with `marker` as `version`, uploads and releases it to every
/// client, and writes an agent config that updates from that packd.
fn published(version: &str, marker: &str) -> Published {
    let publisher = Publisher::new();
    let data = tempfile::tempdir().unwrap();
    let packd = Packd::start(data.path(), &publisher.server_config());
    let edited = publisher.build(version, marker);
    packd.upload(&publisher, &edited);
    packd.publish(
        &publisher,
        &publisher.sign(&[format!("*={}", edited.display())], "30d"),
    );
    let home = tempfile::tempdir().unwrap();
    let client_config = std::fs::read_to_string(publisher.client_config(&packd.url, "")).unwrap();
    std::fs::write(home.path().join("config.toml"), client_config).unwrap();
    Published {
        publisher,
        _data: data,
        packd,
        home,
    }
}

#[test]
fn a_published_template_edit_reaches_the_rendered_prompt_and_a_rollback_removes_it() {
    // Every field bound: with `..` the data directory would be dropped (and deleted) here.
    let Published {
        publisher,
        _data,
        packd,
        home,
    } = published("3.1.0", "PUBLISHED-EDIT-3.1.0");

    // Before any refresh: the built-in pack.
    let before = prompt_json(home.path());
    assert!(
        !before["prompt"]
            .as_str()
            .unwrap()
            .contains("PUBLISHED-EDIT")
    );

    let mut cmd = agent(home.path());
    cmd.args(["packs", "refresh"]);
    run(cmd);
    let after = prompt_json(home.path());
    let text = after["prompt"].as_str().unwrap();
    assert!(
        text.contains("PUBLISHED-EDIT-3.1.0"),
        "the installed pack is not what renders:\n{text}"
    );
    let metadata = after["metadata"].to_string();
    assert!(
        metadata.contains("3.1.0") && metadata.contains("remote"),
        "{metadata}"
    );

    // Roll back to the built-in pack: a higher sequence with a builtin entry.
    packd.publish(
        &publisher,
        &publisher.sign(&["*=builtin".to_string()], "30d"),
    );
    let mut cmd = agent(home.path());
    cmd.args(["packs", "refresh"]);
    run(cmd);
    let rolled_back = prompt_json(home.path());
    assert!(
        !rolled_back["prompt"]
            .as_str()
            .unwrap()
            .contains("PUBLISHED-EDIT")
    );
    assert!(rolled_back["metadata"].to_string().contains("builtin"));
}

/// A one-shot run on a stale cache is not delayed by a refresh, but leaves one running in
/// the background: a later run serves the new pack without anyone running `packs refresh`.
#[test]
fn a_one_shot_run_on_a_stale_cache_leaves_the_next_run_updated() {
    // Every field bound: with `..` the data directory would be dropped (and deleted) here.
    let Published {
        publisher,
        _data,
        packd,
        home,
    } = published("3.2.0", "BACKGROUND-REFRESH-3.2.0");

    // Never refreshed: this run renders the built-in pack and starts a refresh.
    let first = prompt_json(home.path());
    assert!(
        !first["prompt"]
            .as_str()
            .unwrap()
            .contains("BACKGROUND-REFRESH")
    );
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let next = prompt_json(home.path());
        if next["prompt"]
            .as_str()
            .unwrap()
            .contains("BACKGROUND-REFRESH-3.2.0")
        {
            assert!(next["metadata"].to_string().contains("remote"));
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no background refresh installed the pack within 30 s"
        );
        std::thread::sleep(std::time::Duration::from_millis(200));
    }

    // With updates off, nothing starts: a new release stays unseen.
    let newer = publisher.build("3.3.0", "NOT-WITH-UPDATES-OFF");
    packd.upload(&publisher, &newer);
    packd.publish(
        &publisher,
        &publisher.sign(&[format!("*={}", newer.display())], "30d"),
    );
    let state = home.path().join("packs/state.json");
    // Make the cache stale again: only auto_update = false keeps the refresh away.
    let mut value: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&state).unwrap()).unwrap();
    value["last_success"] = serde_json::json!(0);
    value["last_check"] = serde_json::json!(0);
    std::fs::write(&state, value.to_string()).unwrap();
    // A twin of this data directory keeps updates on: the refresh its run starts is the sign
    // of life. Started after the run with updates off, once it has installed the release a
    // refresh that run started would have checked the channel too.
    let twin = tempfile::tempdir().unwrap();
    copy_tree(home.path(), twin.path());
    let config = home.path().join("config.toml");
    let text = std::fs::read_to_string(&config).unwrap();
    std::fs::write(
        &config,
        text.replace("[updates]\n", "[updates]\nauto_update = false\n"),
    )
    .unwrap();
    prompt_json(home.path());
    prompt_json(twin.path());
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while !prompt_json(twin.path())["prompt"]
        .as_str()
        .unwrap()
        .contains("NOT-WITH-UPDATES-OFF")
    {
        assert!(
            std::time::Instant::now() < deadline,
            "the twin with updates on installed nothing within 30 s"
        );
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    let checked: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&state).unwrap()).unwrap();
    assert_eq!(
        (&checked["last_check"], &checked["last_success"]),
        (&serde_json::json!(0), &serde_json::json!(0)),
        "a refresh ran with auto_update = false"
    );
    let after = prompt_json(home.path());
    assert!(
        after["prompt"]
            .as_str()
            .unwrap()
            .contains("BACKGROUND-REFRESH-3.2.0"),
        "auto_update = false was not respected"
    );
}

/// `agent packs forget-bad` clears a bad-pack mark, as `pack-client forget-bad` does: the
/// refused pack shows in `agent packs status`, and after the command it is gone.
#[test]
fn agent_packs_forget_bad_clears_a_refused_pack() {
    let Published {
        publisher,
        _data,
        packd,
        home,
    } = published("3.4.0", "SEALED-FOR-A-STRANGER");
    let keys = pack_format::ContentKeyRing::new([pack_format::ContentKey::load(
        &publisher.keys().join("content.key"),
    )
    .unwrap()]);
    let stranger = publisher.build("3.5.0", "STRANGER");
    let sealed = reseal_for(
        &std::fs::read(&stranger).unwrap(),
        &keys,
        &pack_format::ContentKey::generate(),
    );
    std::fs::write(&stranger, &sealed).unwrap();
    let sha = packd.upload(&publisher, &stranger);
    packd.publish(
        &publisher,
        &publisher.sign(&[format!("*={}", stranger.display())], "30d"),
    );

    let mut refresh = agent(home.path());
    refresh.args(["packs", "refresh"]);
    assert!(!refresh.output().unwrap().status.success());
    let status = || {
        let mut cmd = agent(home.path());
        cmd.args(["packs", "status", "--json"]);
        serde_json::from_str::<serde_json::Value>(&run(cmd)).unwrap()
    };
    assert_eq!(status()["bad_packs"][0]["sha256"], sha.as_str());

    let mut forget = agent(home.path());
    forget.args(["packs", "forget-bad", &sha]);
    assert!(run(forget).contains(&format!("cleared {sha}")));
    assert_eq!(status()["bad_packs"], serde_json::json!([]));
}
