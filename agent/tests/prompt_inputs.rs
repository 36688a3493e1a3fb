//! What goes into the model's context, through the real binary: instruction URLs and
//! per-directory instruction names, plan reminders that do not pile up, helpers told their
//! limits, the environment block, `read`'s line numbers kept out of `write`, and the task
//! tools that come with `bash`.

use crate::model_server;

use std::path::Path;
use std::process::{Command, Output};

use model_server::{ModelServer, exec, openai_calls, openai_text, system_of, tools_of};
use serde_json::{Value, json};

/// `agent prompt` in `work`, with the provider environment `exec` gets.
fn agent_prompt(home: &Path, work: &Path, env: &[(&str, &str)], args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_agent"))
        .arg("prompt")
        .args(args)
        .current_dir(work)
        .env("AGENT_HOME", home)
        .env("AGENT_BASE_URL", "http://127.0.0.1:9/v1")
        .env("AGENT_API", "openai")
        .env("AGENT_MODEL", "test-model")
        .envs(env.iter().copied())
        .output()
        .unwrap()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn events(output: &Output) -> Vec<Value> {
    text(&output.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

/// A loopback HTTP server answering `/rules.md` with Markdown and everything else with 404.
fn rules_server(body: &'static str) -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let addr = format!("http://{}", listener.local_addr().unwrap());
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async move {
            let listener = tokio::net::TcpListener::from_std(listener).unwrap();
            let app = axum::Router::new().route(
                "/rules.md",
                axum::routing::get(move || async move {
                    ([("content-type", "text/markdown; charset=utf-8")], body)
                }),
            );
            axum::serve(listener, app).await.unwrap();
        });
    });
    addr
}

#[test]
fn an_instruction_url_is_fetched_into_the_prompt_and_a_failure_is_a_visible_warning() {
    let home = tempfile::tempdir().unwrap();
    let work = tempfile::tempdir().unwrap();
    let base = rules_server("Indent with tabs in this organisation.\n");
    std::fs::write(
        home.path().join("config.toml"),
        format!(
            "instructions = [\"{base}/rules.md\", \"{base}/gone.md\"]\n[web_fetch]\nallow_private = [\"127.0.0.1\"]\n"
        ),
    )
    .unwrap();
    let out = agent_prompt(home.path(), work.path(), &[], &[]);
    let (prompt, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "{stderr}");
    assert!(
        prompt.contains(&format!(
            "Contents of {base}/rules.md:\n\nIndent with tabs in this organisation."
        )),
        "{prompt}"
    );
    // The preamble says the instructions override the defaults and are followed exactly.
    assert!(
        prompt.contains("They override your default behaviour")
            && prompt.contains("follow them exactly as written"),
        "{prompt}"
    );
    assert!(
        stderr.contains(&format!(
            "warning: instructions: {base}/gone.md was left out of the prompt: {base}/gone.md answered 404"
        )),
        "{stderr}"
    );

    // Without `allow_private`, web_fetch's address rules refuse loopback, and a session
    // says so on stderr before it starts.
    std::fs::write(
        home.path().join("config.toml"),
        format!("instructions = [\"{base}/rules.md\"]\n"),
    )
    .unwrap();
    let server = ModelServer::start(vec![openai_text("Done.")]);
    let out = exec(&server, home.path(), work.path(), &[], &["hello"]);
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "warning: instructions: {base}/rules.md was left out of the prompt: refused"
        )) && stderr.contains("loopback"),
        "{stderr}"
    );
    assert!(!system_of(&server.requests()[0]).contains("Indent with tabs"));
}

#[test]
fn instruction_file_names_follow_the_configured_order_and_context_md_is_read() {
    let home = tempfile::tempdir().unwrap();
    let work = tempfile::tempdir().unwrap();
    let root = work.path();
    std::fs::create_dir(root.join(".git")).unwrap();
    std::fs::create_dir(root.join("sub")).unwrap();
    std::fs::write(root.join("CLAUDE.md"), "Rule from CLAUDE.md.\n").unwrap();
    std::fs::write(root.join("AGENTS.md"), "Rule from AGENTS.md.\n").unwrap();
    std::fs::write(root.join("sub/CONTEXT.md"), "Rule from CONTEXT.md.\n").unwrap();

    let sub = root.join("sub");
    let out = agent_prompt(home.path(), &sub, &[], &[]);
    let prompt = text(&out.stdout);
    assert!(out.status.success(), "{}", text(&out.stderr));
    // The default list: CLAUDE.md, then AGENTS.md, then CONTEXT.md; the first non-empty one
    // of each directory is read.
    assert!(prompt.contains("Rule from CLAUDE.md."), "{prompt}");
    assert!(!prompt.contains("Rule from AGENTS.md."), "{prompt}");
    assert!(prompt.contains("Rule from CONTEXT.md."), "{prompt}");

    std::fs::write(
        home.path().join("config.toml"),
        "instruction_files = [\"AGENTS.md\", \"CLAUDE.md\"]\n",
    )
    .unwrap();
    let out = agent_prompt(home.path(), &sub, &[], &[]);
    let prompt = text(&out.stdout);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(prompt.contains("Rule from AGENTS.md."), "{prompt}");
    assert!(!prompt.contains("Rule from CLAUDE.md."), "{prompt}");
    assert!(
        !prompt.contains("Rule from CONTEXT.md."),
        "a name the list leaves out is not read: {prompt}"
    );

    std::fs::write(
        home.path().join("config.toml"),
        "instruction_files = [\"docs/AGENTS.md\"]\n",
    )
    .unwrap();
    let out = agent_prompt(home.path(), &sub, &[], &[]);
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("instruction_files: \"docs/AGENTS.md\" is a path"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn five_plan_turns_send_one_reminder_and_store_none() {
    let home = tempfile::tempdir().unwrap();
    let work = tempfile::tempdir().unwrap();
    let server = ModelServer::start(
        (0..5)
            .map(|n| openai_text(&format!("Thought {n}.")))
            .collect(),
    );
    let first = exec(
        &server,
        home.path(),
        work.path(),
        &[],
        &["--agent", "plan", "plan step 0"],
    );
    assert!(first.status.success(), "{}", text(&first.stderr));
    let id = events(&first)[0]["session_id"]
        .as_str()
        .unwrap()
        .to_string();
    for n in 1..5 {
        let out = exec(
            &server,
            home.path(),
            work.path(),
            &[],
            &["--resume", &id, &format!("plan step {n}")],
        );
        assert!(out.status.success(), "{}", text(&out.stderr));
    }
    server.assert_clean();
    let requests = server.requests();
    assert_eq!(requests.len(), 5);
    let last = requests[4].body["messages"].as_array().unwrap();
    let reminders = last
        .iter()
        .filter(|m| m["content"].to_string().contains("Plan mode is on"))
        .count();
    assert_eq!(reminders, 1, "{last:#?}");
    // The one copy is the last message, after the fifth user turn.
    assert!(
        last.last().unwrap()["content"]
            .to_string()
            .contains("Plan mode is on")
    );
    let users = last
        .iter()
        .filter(|m| m["role"] == "user" && m["content"].to_string().contains("plan step"))
        .count();
    assert_eq!(users, 5);
    let transcript =
        std::fs::read_to_string(home.path().join("sessions").join(format!("{id}.jsonl"))).unwrap();
    assert!(transcript.contains("plan step 4"), "{transcript}");
    assert!(!transcript.contains("Plan mode is on"), "{transcript}");
}

#[test]
fn a_helper_is_told_its_step_limit_and_handoff_cap() {
    let home = tempfile::tempdir().unwrap();
    let work = tempfile::tempdir().unwrap();
    std::fs::write(
        home.path().join("config.toml"),
        "[agents.default]\nmax_steps = 12\n[agents.explore]\nmax_steps = 7\nhandoff_bytes = 5000\n",
    )
    .unwrap();
    let report: String = (0..200)
        .map(|n| format!("finding {n:03}: the retry limit is read in one place only\n"))
        .collect();
    assert!(report.len() > 10_000);
    let server = ModelServer::start(vec![
        openai_calls(&[(
            "t1",
            "task",
            json!({"agent": "explore", "task": "Find where retries are configured."}),
        )]),
        openai_text(&report),
        openai_calls(&[(
            "t2",
            "task",
            json!({"agent": "verifier", "task": "Check the retry settings."}),
        )]),
        openai_text("Checked.\nVERDICT: PASS"),
        openai_text("Done."),
    ]);
    // A large parent context, so the default handoff is not narrowed by it.
    let out = exec(
        &server,
        home.path(),
        work.path(),
        &[("AGENT_CONTEXT_TOKENS", "200000")],
        &["look at retries"],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    server.assert_clean();
    let requests = server.requests();
    let explore = system_of(&requests[1]);
    assert!(explore.contains("Step limit: 7 model calls"), "{explore}");
    assert!(
        explore.contains("Handoff limit: the parent receives at most 5000 bytes"),
        "{explore}"
    );
    // `[agents.default]` for a helper without its own table; the handoff default otherwise.
    let verifier = system_of(&requests[3]);
    assert!(
        verifier.contains("Step limit: 12 model calls"),
        "{verifier}"
    );
    assert!(
        verifier.contains("Handoff limit: the parent receives at most 97500 bytes"),
        "{verifier}"
    );
    // The cap the prompt stated is the cap applied.
    let handoff = requests[2].body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["role"] == "tool")
        .unwrap()["content"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(handoff.len() < 5000 + 1000, "{} bytes", handoff.len());
    assert!(
        handoff.contains("past the 5000 a handoff may take"),
        "{handoff}"
    );
}

#[test]
fn the_environment_block_names_the_worktree_the_qualified_model_and_the_locale() {
    let home = tempfile::tempdir().unwrap();
    let work = tempfile::tempdir().unwrap();
    std::fs::create_dir(work.path().join(".git")).unwrap();
    std::fs::create_dir(work.path().join("src")).unwrap();
    let env = [("LC_ALL", ""), ("LC_MESSAGES", ""), ("LANG", "de_DE.UTF-8")];
    let out = agent_prompt(home.path(), &work.path().join("src"), &env, &[]);
    let prompt = text(&out.stdout);
    assert!(out.status.success(), "{}", text(&out.stderr));
    for line in [
        format!("\nWorktree root: {}\n", work.path().display()),
        "\nModel: openai/test-model\n".to_string(),
        "\nLanguage: de\n".to_string(),
        "\nLocale: de_DE.UTF-8\n".to_string(),
    ] {
        assert!(prompt.contains(&line), "{line:?} missing from:\n{prompt}");
    }
    // A named provider entry qualifies the model with its id.
    std::fs::write(
        home.path().join("config.toml"),
        "[providers.lab]\napi = \"openai\"\nbase_url = \"http://127.0.0.1:9/v1\"\nmodel = \"lab-model\"\n",
    )
    .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_agent"))
        .arg("prompt")
        .current_dir(work.path())
        .env("AGENT_HOME", home.path())
        .env_remove("AGENT_BASE_URL")
        .env_remove("AGENT_API")
        .env_remove("AGENT_MODEL")
        .env_remove("AGENT_PROVIDER")
        .envs(env)
        .output()
        .unwrap();
    let prompt = text(&out.stdout);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(prompt.contains("\nModel: lab/lab-model\n"), "{prompt}");
    assert!(prompt.contains("\nWorktree root: "), "{prompt}");
}

#[test]
fn write_refuses_content_copied_with_line_numbers_and_read_says_why() {
    let home = tempfile::tempdir().unwrap();
    let work = tempfile::tempdir().unwrap();
    let target = work.path().join("main.rs");
    let server = ModelServer::start(vec![
        openai_calls(&[(
            "w1",
            "write",
            json!({"path": target, "content": "1|fn main() {\n2|    run();\n3|}\n"}),
        )]),
        openai_calls(&[(
            "w2",
            "write",
            json!({"path": target, "content": "fn main() {\n    run();\n}\n"}),
        )]),
        openai_text("Written."),
    ]);
    let out = exec(&server, home.path(), work.path(), &[], &["write main.rs"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    server.assert_clean();
    let results: Vec<Value> = events(&out)
        .into_iter()
        .filter(|e| e["type"] == "tool_call_completed")
        .collect();
    assert_eq!(results[0]["is_error"], true);
    let refusal = results[0]["output"].as_str().unwrap();
    assert!(
        refusal.contains("line-number prefix like `1|`") && refusal.contains("without them"),
        "{refusal}"
    );
    assert_eq!(results[1]["is_error"], false, "{}", results[1]["output"]);
    assert_eq!(
        std::fs::read_to_string(&target).unwrap(),
        "fn main() {\n    run();\n}\n"
    );
    let read = server.requests()[0].body["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["function"]["name"] == "read")
        .unwrap()["function"]["description"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        read.contains("`N` is the line number") && read.contains("not in the file"),
        "{read}"
    );
}

#[test]
fn a_legacy_tools_list_with_bash_keeps_the_task_tools() {
    let home = tempfile::tempdir().unwrap();
    let work = tempfile::tempdir().unwrap();
    std::fs::write(
        home.path().join("config.toml"),
        "[agents.default]\ntools = [\"read\", \"bash\"]\n",
    )
    .unwrap();
    let server = ModelServer::start(vec![openai_text("Done.")]);
    let out = exec(&server, home.path(), work.path(), &[], &["hello"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let tools = tools_of(&server.requests()[0]);
    for name in ["read", "bash", "task_query", "task_output", "task_stop"] {
        assert!(tools.iter().any(|t| t == name), "{name} missing: {tools:?}");
    }
    assert!(!tools.iter().any(|t| t == "write"), "{tools:?}");

    // A list without bash gets none of them.
    std::fs::write(
        home.path().join("config.toml"),
        "[agents.default]\ntools = [\"read\"]\n",
    )
    .unwrap();
    let server = ModelServer::start(vec![openai_text("Done.")]);
    let out = exec(&server, home.path(), work.path(), &[], &["hello"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let tools = tools_of(&server.requests()[0]);
    assert!(!tools.iter().any(|t| t.starts_with("task_")), "{tools:?}");
}
