//! SIGKILL the refreshing process at random points, 100 times: every restart loads the old
//! or the new pack, verified, never a mix and never a fallback caused by a torn install, and
//! leaves no temp file behind.

use std::collections::BTreeMap;
use std::time::Instant;

use pack_format::{ContentKey, ContentKeyRing, Limits};
use promptpack_tests::*;

fn expected_files(pack: &std::path::Path, keys: &ContentKeyRing) -> BTreeMap<String, String> {
    let opened =
        pack_format::pack::open(&std::fs::read(pack).unwrap(), keys, &Limits::DEFAULT).unwrap();
    opened
        .payload
        .files()
        .iter()
        .map(|(k, v)| (k.clone(), pack_format::sha256_hex(v)))
        .collect()
}

#[test]
fn killing_a_refresh_at_random_points_never_leaves_a_mix() {
    let publisher = Publisher::new();
    let data = tempfile::tempdir().unwrap();
    let packd = Packd::start(data.path(), &publisher.server_config());
    let config = publisher.client_config(&packd.url, "");
    let cache = tempfile::tempdir().unwrap();
    let keys =
        ContentKeyRing::new([ContentKey::load(&publisher.keys().join("content.key")).unwrap()]);
    let packs = [
        publisher.build("1.0.0", "PACK-A"),
        publisher.build("2.0.0", "PACK-B"),
    ];
    let versions = ["1.0.0", "2.0.0"];
    let files = [
        expected_files(&packs[0], &keys),
        expected_files(&packs[1], &keys),
    ];
    for pack in &packs {
        packd.upload(&publisher, pack);
    }

    // How long one whole refresh process takes here, to spread the kills over it.
    packd.publish(
        &publisher,
        &publisher.sign(&[format!("*={}", packs[0].display())], "30d"),
    );
    let started = Instant::now();
    let mut cmd = client_cmd(cache.path(), &config, "1.0.0");
    cmd.arg("refresh");
    run(cmd);
    let full = started.elapsed();
    let (version, source, _) = dump(cache.path(), &config, "1.0.0");
    assert_eq!((version.as_str(), source.as_str()), ("1.0.0", "remote"));

    let mut installed = 0usize; // index into `packs` of what the cache holds
    let mut killed_mid_way = 0;
    for i in 1..=100 {
        let target = i % 2;
        packd.publish(
            &publisher,
            &publisher.sign(&[format!("*={}", packs[target].display())], "30d"),
        );
        let mut cmd = client_cmd(cache.path(), &config, "1.0.0");
        cmd.arg("refresh")
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null());
        let mut child = cmd.spawn().unwrap();
        let delay = full.mul_f64(rand::random_range(0.0..1.2));
        std::thread::sleep(delay);
        let finished = child.try_wait().unwrap().is_some();
        let _ = child.kill();
        let _ = child.wait();
        if !finished {
            killed_mid_way += 1;
        }

        let mut cmd = client_cmd(cache.path(), &config, "1.0.0");
        cmd.args(["--json", "dump"]);
        let out: serde_json::Value = serde_json::from_str(&run(cmd)).unwrap();
        assert!(
            out["last_error"].is_null(),
            "iteration {i}: start-up fell back: {}",
            out["last_error"]
        );
        assert_eq!(out["meta"]["source"], "remote", "iteration {i}");
        let version = out["meta"]["version"].as_str().unwrap();
        let now = versions.iter().position(|v| *v == version).unwrap();
        assert!(
            now == installed || now == target,
            "iteration {i}: {version} is neither old nor new"
        );
        let loaded: BTreeMap<String, String> = out["files"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| {
                (
                    f["key"].as_str().unwrap().to_string(),
                    f["sha256"].as_str().unwrap().to_string(),
                )
            })
            .collect();
        assert_eq!(loaded, files[now], "iteration {i}: files are a mix");
        installed = now;
        // The next process to open the cache removed what the killed writer left.
        let leftovers: Vec<_> = walk(cache.path())
            .into_iter()
            .filter(|p| p.to_string_lossy().contains(".tmp-"))
            .collect();
        assert!(
            leftovers.is_empty(),
            "iteration {i}: temp files left behind: {leftovers:?}"
        );
    }
    // The kills must really have landed during refreshes, not only after them.
    assert!(
        killed_mid_way >= 20,
        "only {killed_mid_way} of 100 kills interrupted a refresh (full run {full:?})"
    );
}
