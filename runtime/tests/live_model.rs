//! Opt-in: the real `agent` binary against a real OpenAI-compatible server, such as
//! llama.cpp's `llama-server` (see the README's "Running the agent"). Ignored by default so
//! a run without a model shows it as ignored, never as passed; run it with:
//!
//! ```sh
//! AGENT_E2E_BASE_URL=http://127.0.0.1:8080/v1 AGENT_E2E_MODEL=qwen3 \
//!   cargo test -p agent-runtime --test live_model -- --ignored --nocapture
//! ```

use std::process::Command;

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
