//! The file view when its writer is killed at any point: the link never names a directory
//! that is not whole, no version directory is ever half-written, and the next process on
//! the cache finishes the view and removes what the killed one left.

// The test says how its kills fell (seen with --nocapture).
#![allow(clippy::print_stderr)]

use std::collections::BTreeSet;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn status(cache: &Path, config: &Path) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_pack-client"));
    cmd.arg("--cache").arg(cache).arg("--config").arg(config);
    cmd.arg("status")
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    cmd
}

/// Whether `dir` holds exactly the files its manifest lists, each with its SHA-256.
fn whole(dir: &Path) -> Result<(), String> {
    let manifest = std::fs::read(dir.join(".promptpack.json"))
        .map_err(|e| format!("{}: no manifest: {e}", dir.display()))?;
    let manifest: serde_json::Value = serde_json::from_slice(&manifest)
        .map_err(|e| format!("{}: manifest: {e}", dir.display()))?;
    let listed = manifest["files"].as_object().unwrap();
    let mut found = BTreeSet::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(at) = stack.pop() {
        for entry in std::fs::read_dir(&at).unwrap().flatten() {
            if entry.file_type().unwrap().is_dir() {
                stack.push(entry.path());
            } else {
                let key = entry
                    .path()
                    .strip_prefix(dir)
                    .unwrap()
                    .to_string_lossy()
                    .into_owned();
                found.insert(key);
            }
        }
    }
    found.remove(".promptpack.json");
    let expected: BTreeSet<String> = listed.keys().cloned().collect();
    if found != expected {
        return Err(format!("{}: files differ from its manifest", dir.display()));
    }
    for (key, sha) in listed {
        let bytes = std::fs::read(dir.join(key)).unwrap();
        let sha = sha.as_str().unwrap();
        if hex_sha256(&bytes) != sha {
            return Err(format!(
                "{}: {key} differs from its manifest",
                dir.display()
            ));
        }
    }
    Ok(())
}

fn hex_sha256(bytes: &[u8]) -> String {
    pack_format::sha256_hex(bytes)
}

#[test]
fn a_writer_killed_at_any_point_leaves_the_link_whole_and_the_next_one_finishes() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("client.toml");
    std::fs::write(&config, "[files]\n").unwrap();
    // How long a whole first write takes here, to spread the kills over it.
    let started = Instant::now();
    let probe = dir.path().join("probe");
    assert!(status(&probe, &config).status().unwrap().success());
    let whole_run = started.elapsed();

    let mut killed_with_link = 0;
    let mut left_behind = 0;
    for round in 0..40u32 {
        let cache = dir.path().join(format!("cache-{round}"));
        let mut child = status(&cache, &config).spawn().unwrap();
        let at = whole_run.mul_f64(f64::from(round) / 40.0);
        std::thread::sleep(at);
        let _ = child.kill();
        let _ = child.wait();

        let files = cache.join("files");
        if let Ok(resolved) = std::fs::canonicalize(files.join("current")) {
            whole(&resolved).unwrap();
            killed_with_link += 1;
        }
        for entry in std::fs::read_dir(&files).into_iter().flatten().flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if name.contains(".tmp-") {
                left_behind += 1;
            }
            if !name.starts_with('.') && entry.file_type().unwrap().is_dir() {
                whole(&entry.path()).unwrap();
            }
        }
        // The next process finishes the view and clears what the killed one left.
        assert!(status(&cache, &config).status().unwrap().success());
        whole(&std::fs::canonicalize(files.join("current")).unwrap()).unwrap();
        let hidden: Vec<String> = std::fs::read_dir(&files)
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with('.'))
            .collect();
        assert_eq!(hidden, [".lock"], "round {round}");
    }
    // The kills were spread over the write, not all before or after it.
    assert!(
        killed_with_link < 40,
        "every kill came after the view was done ({whole_run:?} per run)"
    );
    assert!(whole_run > Duration::ZERO);
    eprintln!(
        "{killed_with_link} of 40 kills after the link was made, {left_behind} half-written staging entries cleared"
    );
}
