//! `packer status --outcomes` against a real `packd`: the version being rolled out shows
//! beside the one it replaces, each rate with its 95 % interval.

use crate::common;

use common::packd::{Env, json};
use common::{assert_fails, assert_ok, stdout};
use serde_json::json;

/// Posts one install's counts of today for `version` of the pack at `pack`.
fn report(env: &Env, install: &str, pack: &str, version: &str, calls: u64, errors: u64) {
    let today = time::OffsetDateTime::now_utc().date();
    let body = json!({
        "channel": "stable",
        "day": format!("{:04}-{:02}-{:02}", today.year(), u8::from(today.month()), today.day()),
        "pack": pack, "pack_name": "prompts", "pack_version": version, "client_version": "1.4.2",
        "counts": {
            "turns": calls, "tool_calls": calls, "tool_errors": errors, "permission_denials": 0,
            "model_errors": 0, "aborted_turns": 0, "builtin_fallbacks": 0, "compactions": 0,
            "input_tokens": 0, "output_tokens": 0, "exec_runs": 0, "exec_failures": 0
        }
    });
    let hash = pack_protocol::fleet::install_hash(&env.packd.url, "stable", install);
    let response = reqwest::blocking::Client::new()
        .post(format!("{}/v1/channels/stable/outcomes", env.packd.url))
        .header(pack_protocol::headers::INSTALL, hash)
        .json(&body)
        .send()
        .unwrap();
    assert_eq!(response.status().as_u16(), 202, "{:?}", response.text());
}

#[test]
fn status_outcomes_shows_the_new_version_beside_the_old_with_intervals() {
    let env = Env::start();
    let old = env.build("1.0.0", "prompts-1.0.0.pack");
    let new = env.build("1.1.0", "prompts-1.1.0.pack");
    assert_ok(&env.publish(&old));
    assert_ok(&env.publish(&new));
    assert_ok(&env.release(&[
        "--new-channel",
        "--pack",
        "prompts",
        "--pin",
        "*=1.0.0",
        "--yes",
    ]));
    let sha = |path| pack_format::sha256_hex(&std::fs::read(path).unwrap());
    // 81 tool errors in 263 calls on the old version, 1 in 100 on the new.
    report(&env, "a", &sha(&old), "1.0.0", 263, 81);
    report(&env, "b", &sha(&new), "1.1.0", 100, 1);

    let url = env.packd.url.clone();
    let out = env.packer(&["status", "--server", &url, "--outcomes"]);
    assert_ok(&out);
    let text = stdout(&out);
    // The status comes first, as without the flag.
    assert!(text.contains("channel stable  pack prompts"), "{text}");
    assert!(
        text.contains("outcomes of stable, last 7 UTC days"),
        "{text}"
    );
    let line = |version: &str| {
        text.lines()
            .position(|l| l.split_whitespace().take(2).eq(["1.4.2", version]))
            .unwrap_or_else(|| panic!("no row for {version}:\n{text}"))
    };
    let (new_row, old_row) = (line("1.1.0"), line("1.0.0"));
    assert_eq!(
        new_row + 1,
        old_row,
        "the new version sits above the old:\n{text}"
    );
    let lines: Vec<&str> = text.lines().collect();
    assert!(lines[old_row].contains("30.8% [25.5–36.6]"), "{text}");
    assert!(lines[new_row].contains("1.0% [0.2–5.4]"), "{text}");
    let header = lines[new_row - 1];
    for column in [
        "installs",
        "turns",
        "tool errors",
        "fallbacks",
        "exec failures",
    ] {
        assert!(header.contains(column), "{header}");
    }

    // One JSON object with every channel's counts, and a shorter window without --fleet.
    let answer = json(&env.packer(&[
        "--json",
        "status",
        "--server",
        &url,
        "--outcomes",
        "--days",
        "1",
    ]));
    let rows = answer["outcomes"][0]["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 2, "{answer}");
    assert_eq!(answer["outcomes"][0]["days"].as_array().unwrap().len(), 1);
    let tool_errors =
        &rows.iter().find(|r| r["pack_version"] == "1.0.0").unwrap()["rates"]["tool_error_rate"];
    assert_eq!(
        (
            tool_errors["events"].as_u64(),
            tool_errors["trials"].as_u64()
        ),
        (Some(81), Some(263))
    );

    // --days still needs a view to size.
    assert_fails(&env.packer(&["status", "--server", &url, "--days", "3"]));
}
