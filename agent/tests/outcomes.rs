//! Outcome counts: what a scripted `agent exec` session counts lands in
//! `<data_dir>/packs/outcomes.json` under the pack that served it, as numbers only; with
//! `DO_NOT_TRACK` (or `telemetry = false`) nothing is counted.

use crate::model_server;

use std::path::Path;

use model_server::{ModelServer, Reply, exec, openai_calls, openai_text};
use serde_json::{Value, json};

/// A server that refuses connections: the client opens its cache, serves the built-in
/// pack, and counts; its background refresh fails and sends nothing.
const CONFIG: &str = "[updates]\nserver = \"http://127.0.0.1:9\"\n";

fn session(home: &Path, work: &Path, env: &[(&str, &str)]) {
    // One turn reading a missing file (a tool error) and writing under `read-only` (a
    // refusal), one answering; then a run whose model call is refused (exit status 1).
    let server = ModelServer::start(vec![
        openai_calls(&[
            ("r1", "read", json!({"path": work.join("missing.txt")})),
            (
                "w1",
                "write",
                json!({"path": work.join("new.txt"), "content": "x"}),
            ),
        ]),
        openai_text("done"),
    ]);
    let out = exec(
        &server,
        home,
        work,
        env,
        &["--permissions", "read-only", "look around"],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    server.assert_clean();
    let failing = ModelServer::start(vec![Reply::Status {
        status: 400,
        retry_after: None,
        body: r#"{"error":{"message":"unsupported parameter"}}"#.to_string(),
    }]);
    let out = exec(&failing, home, work, env, &["again"]);
    assert!(!out.status.success());
}

fn outcome_file(home: &Path) -> std::path::PathBuf {
    home.join("packs").join("outcomes.json")
}

#[test]
fn a_session_counts_its_turns_errors_refusals_tokens_and_exits_under_its_pack() {
    let home = tempfile::tempdir().unwrap();
    let work = tempfile::tempdir().unwrap();
    std::fs::write(home.path().join("config.toml"), CONFIG).unwrap();
    session(home.path(), work.path(), &[("DO_NOT_TRACK", "")]);

    let text = std::fs::read_to_string(outcome_file(home.path())).unwrap();
    let file: Value = serde_json::from_str(&text).unwrap();
    let rows = file["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 1, "{text}");
    let row = &rows[0];
    assert_eq!(row["channel"], "stable");
    assert_eq!(
        row["pack"],
        json!({"pack": "builtin", "name": "builtin", "version": "0.0.0"})
    );
    assert_eq!(row["client_version"], env!("CARGO_PKG_VERSION"));
    let today = time::OffsetDateTime::now_utc().date();
    assert_eq!(
        row["day"],
        format!(
            "{:04}-{:02}-{:02}",
            today.year(),
            u8::from(today.month()),
            today.day()
        )
    );
    assert_eq!(
        row["counts"],
        json!({
            "turns": 3, "tool_calls": 2, "tool_errors": 2, "permission_denials": 1,
            "model_errors": 1, "aborted_turns": 0, "builtin_fallbacks": 0, "compactions": 0,
            "input_tokens": 200, "output_tokens": 40, "exec_runs": 2, "exec_failures": 1
        }),
        "{text}"
    );
    // Numbers and names only: nothing the user, the model or a tool wrote.
    for word in [
        "look around",
        "again",
        "missing.txt",
        "new.txt",
        "done",
        "unsupported",
    ] {
        assert!(!text.contains(word), "{word} in {text}");
    }

    let status = std::process::Command::new(env!("CARGO_BIN_EXE_agent"))
        .args(["packs", "status"])
        .env("AGENT_HOME", home.path())
        .env_remove("DO_NOT_TRACK")
        .output()
        .unwrap();
    let status = String::from_utf8_lossy(&status.stdout);
    assert!(status.contains("1 outcome rows kept"), "{status}");
}

#[test]
fn do_not_track_and_telemetry_off_count_nothing() {
    for (config, env) in [
        (CONFIG.to_string(), [("DO_NOT_TRACK", "1")]),
        (
            format!("{CONFIG}telemetry = false\n"),
            [("DO_NOT_TRACK", "")],
        ),
    ] {
        let home = tempfile::tempdir().unwrap();
        let work = tempfile::tempdir().unwrap();
        std::fs::write(home.path().join("config.toml"), &config).unwrap();
        session(home.path(), work.path(), &env);
        // The session ran against the client's cache, which exists; the counts do not.
        assert!(home.path().join("packs").join("install-id").exists());
        assert!(
            !outcome_file(home.path()).exists(),
            "{config} {env:?}: {:?}",
            std::fs::read_to_string(outcome_file(home.path()))
        );
    }
}
