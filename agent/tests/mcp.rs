//! MCP servers through the real `agent` binary, against real servers the tests start:
//! `mcp-server-time` (PyPI) over stdio and `@modelcontextprotocol/server-everything` (npm)
//! over stdio and streamable HTTP. `scripts/test.sh` installs both when missing.

use crate::model_server;

use crate::ports;

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::RecvTimeoutError;
use std::time::Duration;

use model_server::{ModelServer, exec, openai_calls, openai_text, system_of, tools_of};
use serde_json::{Value, json};

/// Fails with what to install rather than with a confusing spawn error.
fn require(program: &str, package: &str) {
    let found = std::env::var_os("PATH")
        .is_some_and(|path| std::env::split_paths(&path).any(|dir| dir.join(program).is_file()));
    assert!(
        found,
        "{program} is not on PATH: install {package} (scripts/test.sh does)"
    );
}

fn time_server() -> String {
    require("mcp-server-time", "mcp-server-time from PyPI");
    r#"
[mcp_servers.time]
command = "mcp-server-time"
args = ["--local-timezone", "UTC"]
"#
    .to_string()
}

/// `server-everything` over streamable HTTP on a free port, killed when dropped.
struct HttpEverything {
    child: Child,
    url: String,
}

impl HttpEverything {
    /// Started on a port from below the kernel's ephemeral range (a port `bind(0)` hands out
    /// can go to an outgoing connection of a parallel test before node binds it); when the
    /// port is taken anyway the server exits, and it is started again on another.
    fn start() -> HttpEverything {
        require(
            "mcp-server-everything",
            "@modelcontextprotocol/server-everything from npm",
        );
        let mut said = Vec::new();
        for _ in 0..3 {
            let port = ports::unassigned_port();
            let mut child = Command::new("mcp-server-everything")
                .arg("streamableHttp")
                .env("PORT", port.to_string())
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap();
            let stderr = child.stderr.take().unwrap();
            // Every line of stderr, read on a thread of its own that keeps draining the pipe
            // so the server never blocks on it.
            let (said_tx, lines) = std::sync::mpsc::channel();
            std::thread::spawn(move || {
                for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                    let _ = said_tx.send(line);
                }
            });
            let listening = lines.iter().find(|line| line.contains("listening on port"));
            // It says it listens before its bind fails ("Failed to start: Port … is already
            // in use"), and exits: a quiet half second after the line is the sign it holds
            // the port.
            let failed = match listening {
                None => Some("exited before listening".to_string()),
                Some(_) => loop {
                    match lines.recv_timeout(Duration::from_millis(500)) {
                        Ok(line) if line.contains("Failed") => break Some(line),
                        Ok(_) => {}
                        Err(RecvTimeoutError::Timeout) => break None,
                        Err(RecvTimeoutError::Disconnected) => {
                            break Some("exited after saying it listened".to_string());
                        }
                    }
                },
            };
            if let Some(failure) = failed {
                let _ = child.kill();
                let _ = child.wait();
                said.push(format!("port {port}: {failure}"));
                continue;
            }
            return HttpEverything {
                child,
                url: format!("http://127.0.0.1:{port}/mcp"),
            };
        }
        panic!("server-everything never listened: {}", said.join("; "));
    }
}

impl Drop for HttpEverything {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn home_with(config: &str) -> tempfile::TempDir {
    let home = tempfile::tempdir().unwrap();
    std::fs::write(home.path().join("config.toml"), config).unwrap();
    home
}

/// The tool results of a recorded OpenAI-format request, by call id.
fn results_of(request: &model_server::Recorded) -> Vec<(String, String)> {
    request.body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| {
            (
                m["tool_call_id"].as_str().unwrap().to_string(),
                m["content"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

fn events(stdout: &[u8]) -> Vec<Value> {
    String::from_utf8_lossy(stdout)
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

#[test]
fn tools_of_stdio_and_http_servers_are_offered_called_and_their_instructions_rendered() {
    let everything = HttpEverything::start();
    let home = home_with(&format!(
        "{}\n[mcp_servers.everything]\nurl = \"{}\"\n",
        time_server(),
        everything.url
    ));
    let work = tempfile::tempdir().unwrap();
    let server = ModelServer::start(vec![
        openai_calls(&[
            (
                "t1",
                "mcp__time__get_current_time",
                json!({"timezone": "UTC"}),
            ),
            (
                "e1",
                "mcp__everything__echo",
                json!({"message": "over http"}),
            ),
            ("e2", "mcp__everything__get-sum", json!({"a": 2, "b": 40})),
        ]),
        openai_text("It is some time in UTC."),
    ]);
    let out = exec(
        &server,
        home.path(),
        work.path(),
        &[],
        &["what time is it?"],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    server.assert_clean();
    let requests = server.requests();
    let offered = tools_of(&requests[0]);
    for name in [
        "read",
        "mcp__time__get_current_time",
        "mcp__time__convert_time",
        "mcp__everything__echo",
        "mcp__everything__get-sum",
    ] {
        assert!(offered.iter().any(|t| t == name), "{name} in {offered:?}");
    }
    // The server's own description and schema reach the model.
    let spec = requests[0].body["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["function"]["name"] == "mcp__time__get_current_time")
        .unwrap()
        .clone();
    assert!(
        spec["function"]["parameters"]["properties"]["timezone"].is_object(),
        "{spec}"
    );

    let results = results_of(&requests[1]);
    let result = |id: &str| {
        results
            .iter()
            .find(|(i, _)| i == id)
            .map(|(_, c)| c.clone())
            .unwrap()
    };
    let time: Value = serde_json::from_str(&result("t1")).unwrap();
    assert_eq!(time["timezone"], "UTC", "{time}");
    assert_eq!(result("e1"), "Echo: over http");
    assert!(result("e2").contains("42"), "{}", result("e2"));

    // server-everything sends instructions; mcp-server-time sends none.
    let system = system_of(&requests[0]);
    assert!(system.contains("<mcp_instructions>"), "{system}");
    assert!(system.contains("<server name=\"everything\">"), "{system}");
    assert!(!system.contains("<server name=\"time\">"), "{system}");
}

#[test]
fn agent_prompt_shows_server_instructions_only_when_asked_to_start_the_servers() {
    require(
        "mcp-server-everything",
        "@modelcontextprotocol/server-everything from npm",
    );
    let home = home_with("[mcp_servers.everything]\ncommand = \"mcp-server-everything\"\n");
    let work = tempfile::tempdir().unwrap();
    let prompt = |args: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_agent"))
            .arg("prompt")
            .args(args)
            .current_dir(work.path())
            .env("AGENT_HOME", home.path())
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    };
    let without = prompt(&[]);
    assert!(!without.contains("<mcp_instructions>"), "{without}");
    let with = prompt(&["--mcp"]);
    assert!(
        with.contains("<mcp_instructions>") && with.contains("<server name=\"everything\">"),
        "{with}"
    );
}

#[test]
fn mcp_list_shows_state_and_tools_and_fails_for_a_server_that_cannot_start() {
    let home = home_with(&format!(
        "{}\n[mcp_servers.missing]\ncommand = \"no-such-mcp-server\"\n[mcp_servers.off]\ncommand = \"x\"\nenabled = false\n",
        time_server()
    ));
    let out = Command::new(env!("CARGO_BIN_EXE_agent"))
        .args(["mcp", "list"])
        .env("AGENT_HOME", home.path())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    assert!(
        stdout.contains("missing  failed: cannot run `no-such-mcp-server`"),
        "{stdout}"
    );
    assert!(stdout.contains("off  disabled"), "{stdout}");
    assert!(stdout.contains("time  ready"), "{stdout}");
    assert!(
        stdout.contains("mcp__time__get_current_time  (read-only)"),
        "{stdout}"
    );

    let out = Command::new(env!("CARGO_BIN_EXE_agent"))
        .args(["mcp", "list", "--json"])
        .env("AGENT_HOME", home.path())
        .output()
        .unwrap();
    let list: Value = serde_json::from_slice(&out.stdout).unwrap();
    let time = list
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == "time")
        .unwrap();
    assert_eq!(time["state"], "ready");
    assert_eq!(time["tools"].as_array().unwrap().len(), 2);
}

#[test]
fn a_server_that_dies_takes_its_tools_and_tells_the_model_but_the_session_goes_on() {
    require("mcp-server-time", "mcp-server-time from PyPI");
    let work = tempfile::tempdir().unwrap();
    let pid_file = work.path().join("server.pid");
    let home = home_with(&format!(
        "[mcp_servers.time]\ncommand = \"sh\"\nargs = [\"-c\", \"echo $$ > {}; exec mcp-server-time\"]\n",
        pid_file.display()
    ));
    let server = ModelServer::start(vec![
        openai_calls(&[(
            "k1",
            "bash",
            json!({"command": format!("kill $(cat {}) && sleep 1", pid_file.display())}),
        )]),
        openai_calls(&[(
            "t1",
            "mcp__time__get_current_time",
            json!({"timezone": "UTC"}),
        )]),
        openai_text("The time server is gone; carrying on without it."),
    ]);
    // The sandbox keeps commands from signalling processes outside it (the server is the
    // agent's child), so this session runs with full permissions.
    let out = exec(
        &server,
        home.path(),
        work.path(),
        &[],
        &["--permissions", "full", "what time is it?"],
    );
    assert!(
        out.status.success(),
        "the session survived: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    server.assert_clean();
    let requests = server.requests();
    assert!(tools_of(&requests[0]).contains(&"mcp__time__get_current_time".to_string()));
    // After the kill: no longer offered, the model is told, and a call gets an error.
    assert!(
        !tools_of(&requests[1])
            .iter()
            .any(|t| t.starts_with("mcp__time")),
        "{:?}",
        tools_of(&requests[1])
    );
    let conversation = requests[1].body["messages"].to_string();
    assert!(
        conversation.contains("The MCP server `time` stopped"),
        "{conversation}"
    );
    let results = results_of(&requests[2]);
    let (_, late_call) = results.iter().find(|(id, _)| id == "t1").unwrap();
    assert!(late_call.contains("not available"), "{late_call}");
    let warnings: Vec<Value> = events(&out.stdout)
        .into_iter()
        .filter(|e| e["type"] == "warning")
        .collect();
    assert_eq!(warnings.len(), 1, "{warnings:?}");
}

#[test]
fn a_call_past_its_timeout_is_cancelled_and_reported_to_the_model() {
    require(
        "mcp-server-everything",
        "@modelcontextprotocol/server-everything from npm",
    );
    let home = home_with(
        "[mcp_servers.everything]\ncommand = \"mcp-server-everything\"\ntool_timeout_secs = 1\n",
    );
    let work = tempfile::tempdir().unwrap();
    let server = ModelServer::start(vec![
        openai_calls(&[(
            "l1",
            "mcp__everything__trigger-long-running-operation",
            json!({"duration": 30, "steps": 2}),
        )]),
        openai_text("That took too long."),
    ]);
    let started = std::time::Instant::now();
    let out = exec(
        &server,
        home.path(),
        work.path(),
        &[],
        &["run the long one"],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        started.elapsed() < std::time::Duration::from_secs(25),
        "the call did not wait for the 30-second operation"
    );
    let results = results_of(&server.requests()[1]);
    assert!(
        results[0].1.contains("did not answer within 1s"),
        "{results:?}"
    );
}

#[test]
fn a_server_that_never_finishes_starting_is_skipped_and_the_run_goes_on() {
    let home = home_with(
        "[mcp_servers.mute]\ncommand = \"sleep\"\nargs = [\"60\"]\nstartup_timeout_secs = 1\n",
    );
    let work = tempfile::tempdir().unwrap();
    let server = ModelServer::start(vec![openai_text("Hello without MCP.")]);
    let out = exec(&server, home.path(), work.path(), &[], &["hi"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("MCP server mute did not start within 1s"),
        "{stderr}"
    );
    assert!(
        !tools_of(&server.requests()[0])
            .iter()
            .any(|t| t.starts_with("mcp__")),
    );
}

#[test]
fn tool_lists_and_agent_ceilings_narrow_mcp_tools() {
    require(
        "mcp-server-everything",
        "@modelcontextprotocol/server-everything from npm",
    );
    // The config allows the time server and one everything tool; the server table takes
    // get-sum away again.
    let home = home_with(&format!(
        "{}\n[mcp_servers.everything]\ncommand = \"mcp-server-everything\"\ndisabled_tools = [\"get-sum\"]\n\n[agents.default]\ntools = [\"read\", \"bash\", \"mcp__time\", \"mcp__everything__echo\", \"mcp__everything__get-sum\"]\n",
        time_server()
    ));
    let agent_dir = home.path().join("agents/clock");
    std::fs::create_dir_all(&agent_dir).unwrap();
    std::fs::write(
        agent_dir.join("agent.md"),
        "---\ndescription: Tells the time.\ntools: [read]\nmcp_servers: [time]\n---\nYou tell the time.\n",
    )
    .unwrap();
    let work = tempfile::tempdir().unwrap();
    let server = ModelServer::start(vec![openai_text("ok"), openai_text("ok")]);
    let out = exec(&server, home.path(), work.path(), &[], &["hi"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mcp_tools = |request: &model_server::Recorded| -> Vec<String> {
        tools_of(request)
            .into_iter()
            .filter(|t| t.starts_with("mcp__"))
            .collect()
    };
    assert_eq!(
        mcp_tools(&server.requests()[0]),
        [
            "mcp__everything__echo",
            "mcp__time__get_current_time",
            "mcp__time__convert_time"
        ]
    );
    // The custom agent's ceiling keeps only its server, and only what the config allows.
    let out = exec(
        &server,
        home.path(),
        work.path(),
        &[],
        &["--agent", "clock", "hi"],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        mcp_tools(&server.requests()[1]),
        ["mcp__time__get_current_time", "mcp__time__convert_time"]
    );
    assert!(!tools_of(&server.requests()[1]).contains(&"bash".to_string()));
}

/// The config file's own mistakes stop the run before anything starts.
#[test]
fn a_bad_server_table_is_a_clear_error() {
    let home = home_with("[mcp_servers.time]\nargs = [\"x\"]\n");
    let work = tempfile::tempdir().unwrap();
    let server = ModelServer::start(vec![]);
    let out = exec(&server, home.path(), work.path(), &[], &["hi"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains("[mcp_servers.time]: set `command`"),
        "{stderr}"
    );
    assert!(stderr.contains(&Path::new("config.toml").display().to_string()));
}

/// Permissions apply to MCP tools: one its server marks read-only runs in any mode, any
/// other is outside `workspace` and needs an allow rule under `exec`'s `never`.
#[test]
fn mcp_tools_that_may_change_things_need_a_rule_below_full() {
    require(
        "mcp-server-everything",
        "@modelcontextprotocol/server-everything from npm",
    );
    let server_table = "[mcp_servers.everything]\ncommand = \"mcp-server-everything\"\n";
    let script = || {
        ModelServer::start(vec![
            openai_calls(&[
                (
                    "e1",
                    "mcp__everything__echo",
                    json!({"message": "read-only"}),
                ),
                ("e2", "mcp__everything__toggle-simulated-logging", json!({})),
            ]),
            openai_text("done"),
        ])
    };
    let work = tempfile::tempdir().unwrap();
    let home = home_with(server_table);
    let server = script();
    let out = exec(&server, home.path(), work.path(), &[], &["go"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let results = results_of(&server.requests()[1]);
    let (_, echo) = results.iter().find(|(id, _)| id == "e1").unwrap();
    assert!(echo.contains("read-only"), "{echo}");
    let (_, toggle) = results.iter().find(|(id, _)| id == "e2").unwrap();
    assert!(
        toggle.contains("not known to the runtime, so the `workspace` mode"),
        "{toggle}"
    );
    assert!(
        toggle.contains("mcp__everything__toggle-simulated-logging"),
        "{toggle}"
    );

    let home = home_with(&format!(
        "{server_table}[permissions]\nallow = [\"mcp__everything__toggle-*\"]\n"
    ));
    let server = script();
    let out = exec(&server, home.path(), work.path(), &[], &["go"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let results = results_of(&server.requests()[1]);
    let (_, toggle) = results.iter().find(|(id, _)| id == "e2").unwrap();
    assert!(!toggle.contains("refused"), "{toggle}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("allowed by the rule `mcp__everything__toggle-*`"),
        "{stderr}"
    );
}
