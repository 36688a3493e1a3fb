//! `agent exec` against a model server that sends absurd values where numbers belong: the
//! run must neither panic nor hang. The binary is the debug build, so an integer overflow
//! would panic here rather than wrap silently.

use crate::model_server;

use std::path::Path;
use std::process::Output;
use std::time::{Duration, Instant};

use model_server::{ModelServer, Reply};
use serde_json::json;

fn config(home: &Path, max_retry_wait_secs: u64) {
    std::fs::write(
        home.join("config.toml"),
        format!(
            "[providers.local]\nbase_url = \"http://unused.invalid/v1\"\nmodel = \"test-model\"\nmax_retry_wait_secs = {max_retry_wait_secs}\n"
        ),
    )
    .unwrap();
}

#[track_caller]
fn assert_clean_exit(out: &Output) {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !stderr.contains("panicked"),
        "the agent panicked:\n{stderr}"
    );
    assert!(out.status.success(), "stderr: {stderr}");
}

#[test]
fn absurd_retry_after_values_are_survived_and_the_wait_stays_bounded() {
    let home = tempfile::tempdir().unwrap();
    let work = tempfile::tempdir().unwrap();
    config(home.path(), 1);
    let status = |status: u16, value: &str| Reply::Status {
        status,
        retry_after: Some(value.to_string()),
        body: r#"{"error":{"message":"slow down"}}"#.to_string(),
    };
    let server = ModelServer::start(vec![
        // Not a number we accept: ignored, the backoff applies.
        status(429, "1e20"),
        // Far too long: capped at max_retry_wait_secs.
        status(429, "99999999999999999999999"),
        status(503, "Fri, 31 Dec 9999 23:59:59 GMT"),
        status(429, "-5"),
        model_server::openai_text("Back after the storm."),
    ]);
    let started = Instant::now();
    let out = model_server::exec(&server, home.path(), work.path(), &[], &["say hi"]);
    let elapsed = started.elapsed();
    assert_clean_exit(&out);
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("Back after the storm."),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert_eq!(server.requests().len(), 5);
    // A backoff pause, two waits capped at 1 s (the huge count, the date), and another
    // backoff pause; with a 1 s cap each backoff pause is drawn from [0.5 s, 1 s).
    assert!(elapsed >= Duration::from_secs(3), "{elapsed:?}");
    assert!(elapsed < Duration::from_secs(30), "{elapsed:?}");
}

#[test]
fn token_counts_that_overflow_when_added_are_survived() {
    let home = tempfile::tempdir().unwrap();
    let work = tempfile::tempdir().unwrap();
    config(home.path(), 1);
    std::fs::write(work.path().join("a.txt"), "hello\n").unwrap();
    let path = work.path().join("a.txt");
    let server = ModelServer::start(vec![
        model_server::openai_calls_with_usage(
            &[("c1", "read", json!({"path": path.to_str().unwrap()}))],
            u64::MAX,
        ),
        model_server::openai_text("Read it."),
    ]);
    let out = model_server::exec(&server, home.path(), work.path(), &[], &["read a.txt"]);
    assert_clean_exit(&out);
    assert!(String::from_utf8_lossy(&out.stdout).contains("Read it."));
    assert_eq!(server.requests().len(), 2);
    server.assert_clean();
}
