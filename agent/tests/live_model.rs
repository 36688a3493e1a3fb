//! Opt-in: the real `agent` binary against a real model server, such as
//! llama.cpp's `llama-server` (see the README's "Running the agent"). Ignored by default so
//! a run without a model shows it as ignored, never as passed; run it with:
//!
//! ```sh
//! AGENT_E2E_BASE_URL=http://127.0.0.1:8080/v1 AGENT_E2E_MODEL=qwen3 \
//!   cargo test -p agent --test suite live_model:: -- --ignored --nocapture
//! ```
//!
//! `scripts/live-model.sh` installs llama-server and a small model, starts the server and
//! runs both tests over both wire formats (`AGENT_E2E_API=anthropic`);
//! `AGENT_E2E_MAX_TOKENS` and `AGENT_E2E_CONTEXT_TOKENS` are passed on to the agent.

// The live run reports its measurements on stdout (`--nocapture`).
#![allow(clippy::print_stdout)]

use std::process::Command;

/// `AGENT_E2E_MAX_TOKENS` and `AGENT_E2E_CONTEXT_TOKENS`, passed on to the agent: a small
/// model on a slow machine needs its answers capped and its context named.
fn limits() -> Vec<(&'static str, String)> {
    [
        ("AGENT_E2E_MAX_TOKENS", "AGENT_MAX_TOKENS"),
        ("AGENT_E2E_CONTEXT_TOKENS", "AGENT_CONTEXT_TOKENS"),
    ]
    .into_iter()
    .filter_map(|(from, to)| std::env::var(from).ok().map(|v| (to, v)))
    .collect()
}

#[test]
#[ignore = "needs a model server: set AGENT_E2E_BASE_URL and run with --ignored"]
fn a_real_model_edits_a_file_and_runs_a_command() {
    let base_url = std::env::var("AGENT_E2E_BASE_URL")
        .expect("AGENT_E2E_BASE_URL names the model server, e.g. http://127.0.0.1:8080/v1");
    let model = std::env::var("AGENT_E2E_MODEL").unwrap_or_else(|_| "default".to_string());
    let api = std::env::var("AGENT_E2E_API").unwrap_or_else(|_| "openai".to_string());
    let home = tempfile::tempdir().unwrap();
    let work = tempfile::tempdir().unwrap();
    let file = work.path().join("greeting.txt");
    std::fs::write(&file, "Hello, world\n").unwrap();
    let task = format!(
        "Read {path}, then use the edit tool to replace the word `world` with `promptpack` in it, \
         then run `cat greeting.txt` with the bash tool and tell me what it printed.",
        path = file.display()
    );
    let mut command = Command::new(env!("CARGO_BIN_EXE_agent"));
    command
        .args(["exec", "--json", "--max-steps", "12", &task])
        .current_dir(work.path())
        .env("AGENT_HOME", home.path())
        .env("AGENT_BASE_URL", &base_url)
        .env("AGENT_MODEL", &model)
        .env("AGENT_API", &api);
    command.envs(limits());
    match std::env::var("AGENT_E2E_API_KEY") {
        Ok(key) => command.env("AGENT_API_KEY", key),
        Err(_) => command.env_remove("AGENT_API_KEY"),
    };
    let out = command.output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "agent failed\nstdout:\n{stdout}\nstderr:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        std::fs::read_to_string(&file).unwrap(),
        "Hello, promptpack\n",
        "events:\n{stdout}"
    );
    assert!(
        stdout.contains(r#""name":"bash""#),
        "the model ran a command: {stdout}"
    );
    let sessions: Vec<_> = std::fs::read_dir(home.path().join("sessions"))
        .unwrap()
        .collect();
    assert_eq!(sessions.len(), 1, "one session file");
}

/// Time to the first streamed byte of the answer and output tokens per second after it,
/// for a plain question (no tools needed), measured on the real binary as a user sees it.
#[test]
#[ignore = "needs a model server: set AGENT_E2E_BASE_URL and run with --ignored"]
fn a_real_model_streams_its_first_token_and_reports_throughput() {
    use std::io::Read as _;
    let base_url = std::env::var("AGENT_E2E_BASE_URL")
        .expect("AGENT_E2E_BASE_URL names the model server, e.g. http://127.0.0.1:8080/v1");
    let model = std::env::var("AGENT_E2E_MODEL").unwrap_or_else(|_| "default".to_string());
    let api = std::env::var("AGENT_E2E_API").unwrap_or_else(|_| "openai".to_string());
    let home = tempfile::tempdir().unwrap();
    let work = tempfile::tempdir().unwrap();
    let started = std::time::Instant::now();
    let mut child = Command::new(env!("CARGO_BIN_EXE_agent"))
        .args([
            "exec",
            "--max-steps",
            "3",
            "In one or two sentences: what is a prompt pack?",
        ])
        .current_dir(work.path())
        .env("AGENT_HOME", home.path())
        .env("AGENT_BASE_URL", &base_url)
        .env("AGENT_MODEL", &model)
        .env("AGENT_API", &api)
        .env_remove("AGENT_API_KEY")
        .envs(limits())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = child.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut first = None;
        let mut text = Vec::new();
        let mut buf = [0u8; 4096];
        loop {
            match stdout.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    first.get_or_insert_with(std::time::Instant::now);
                    text.extend_from_slice(&buf[..n]);
                }
            }
        }
        (first, text)
    });
    let mut stderr = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    let status = child.wait().unwrap();
    let ended = std::time::Instant::now();
    let (first, text) = reader.join().unwrap();
    assert!(status.success(), "agent failed:\n{stderr}");
    let first = first.unwrap_or_else(|| panic!("no text was streamed:\n{stderr}"));
    // `done · session … · 1 turns · 6123 in / 41 out tokens`
    let out_tokens: u64 = stderr
        .lines()
        .rev()
        .find_map(|l| l.split(" in / ").nth(1))
        .and_then(|rest| rest.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no token counts in:\n{stderr}"));
    let ttft = first - started;
    let generating = (ended - first).as_secs_f64().max(0.001);
    println!(
        "LIVE api={api} model={model} time_to_first_token={:.2}s output_tokens={out_tokens} tokens_per_sec={:.1} answer={:?}",
        ttft.as_secs_f64(),
        out_tokens.saturating_sub(1) as f64 / generating,
        String::from_utf8_lossy(&text).trim()
    );
}
