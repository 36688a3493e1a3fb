//! A real third-party agent, unmodified, whose system prompt comes from a pack: OpenCode
//! (`opencode-ai` from npm, the version `scripts/test.sh` installs) with the plugin and config
//! of `integrations/opencode/`, reading the pack through `pack-client`'s file view. The agent
//! talks to a scripted model server on loopback, which records what it sends.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::Mutex;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use promptpack_tests::chat_server::{self, ChatServer, Reply};
use promptpack_tests::*;
use serde_json::{Value, json};

/// The OpenCode release `scripts/test.sh` installs.
const OPENCODE_VERSION: &str = "1.18.33";
/// Where the publisher's packs keep OpenCode's prompt; the plugin's `prompt` option.
const PROMPT_FILE: &str = "opencode/system.md";
/// How OpenCode's own prompt starts (for a model of no family it knows).
const OPENCODE_OWN_PROMPT: &str = "You are opencode, an interactive CLI tool";
/// The first line of OpenCode's environment block, which the plugin keeps.
const ENVIRONMENT_BLOCK: &str = "You are powered by the model named";

/// The OpenCode executable `scripts/test.sh` installs (`PROMPTPACK_OPENCODE` names another).
/// Missing: a failure under `CI`, else the test says it skipped.
fn opencode() -> Option<PathBuf> {
    npm_tool(
        "PROMPTPACK_OPENCODE",
        &format!("opencode-{OPENCODE_VERSION}"),
        "opencode",
        OPENCODE_VERSION,
    )
}

/// packd, a publisher and a client cache whose `pack-client run` keeps the file view.
struct World {
    publisher: Publisher,
    _data: tempfile::TempDir,
    packd: Packd,
    cache: tempfile::TempDir,
    config: PathBuf,
    client: Option<Child>,
}

impl World {
    fn new() -> Self {
        Self::with_updates("")
    }

    /// [`World::new`] with `updates` added to the client config's `[updates]` table.
    fn with_updates(updates: &str) -> Self {
        let publisher = Publisher::new();
        let data = tempfile::tempdir().unwrap();
        let packd = Packd::start(data.path(), &publisher.server_config());
        let config = publisher.client_config(&packd.url, &format!("{updates}[files]\n"));
        World {
            publisher,
            _data: data,
            packd,
            cache: tempfile::tempdir().unwrap(),
            config,
            client: None,
        }
    }

    /// Publishes a release of a pack whose OpenCode prompt says `text`: the name of its
    /// directory in the view.
    fn release(&self, version: &str, text: &str) -> String {
        let path = self
            .publisher
            .build_edited(version, &format!("MARKER-{version}"), |src| {
                std::fs::create_dir_all(src.join("opencode")).unwrap();
                std::fs::write(src.join(PROMPT_FILE), text).unwrap();
            });
        let sha = self.packd.upload(&self.publisher, &path);
        self.packd.publish(
            &self.publisher,
            &self
                .publisher
                .sign(&[format!("*={}", path.display())], "30d"),
        );
        format!("builtin-{version}-{}", &sha[..8])
    }

    /// Starts `pack-client run`, which installs releases and keeps the view.
    fn run_client(&mut self) {
        let child = client_cmd(self.cache.path(), &self.config, "1.0.0")
            .args(["--json", "run"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        self.client = Some(child);
    }

    fn view(&self) -> PathBuf {
        self.cache.path().join("files/current")
    }

    /// Waits until the view's link names a directory `wanted` accepts; its name.
    fn until_view(&self, wanted: impl Fn(&str) -> bool) -> String {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let named = std::fs::canonicalize(self.view())
                .ok()
                .and_then(|p| Some(p.file_name()?.to_string_lossy().into_owned()));
            if let Some(named) = named.as_deref().filter(|n| wanted(n)) {
                return named.to_string();
            }
            assert!(
                Instant::now() < deadline,
                "the view never got there; it names {named:?}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for World {
    fn drop(&mut self) {
        if let Some(mut child) = self.client.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// A project for the agent, its home and its config: `integrations/opencode/opencode.json`
/// with the plugin's path and options filled in and the scripted server as its model.
struct Agent {
    exe: PathBuf,
    home: tempfile::TempDir,
    project: tempfile::TempDir,
    config: PathBuf,
}

const NOTES: &str = "The release train leaves at noon.";

/// A project with notes for the agent to read.
fn project() -> tempfile::TempDir {
    let project = tempfile::tempdir().unwrap();
    std::fs::write(project.path().join("notes.txt"), NOTES).unwrap();
    project
}

impl Agent {
    fn new(exe: PathBuf, project: tempfile::TempDir, view: &Path, model: &ChatServer) -> Self {
        let home = tempfile::tempdir().unwrap();
        // OpenCode installs its plugin SDK into its config directory unless the lock file
        // there already lists it; the plugin needs nothing from it, and the test no registry.
        let dir = home.path().join("config/opencode");
        std::fs::create_dir_all(dir.join("node_modules")).unwrap();
        std::fs::write(
            dir.join("package-lock.json"),
            json!({"packages": {"": {"dependencies": {"@opencode-ai/plugin": OPENCODE_VERSION}}}})
                .to_string(),
        )
        .unwrap();

        let integration = workspace().join("integrations/opencode");
        let mut config: Value =
            serde_json::from_slice(&std::fs::read(integration.join("opencode.json")).unwrap())
                .unwrap();
        let plugin = &mut config["plugin"][0];
        plugin[0] = json!(format!(
            "file://{}",
            integration.join("promptpack.js").display()
        ));
        plugin[1]["view"] = json!(view.display().to_string());
        assert_eq!(plugin[1]["prompt"], PROMPT_FILE);
        config["model"] = json!("scripted/scripted-model");
        config["provider"] = json!({"scripted": {
            "npm": "@ai-sdk/openai-compatible",
            "name": "Scripted",
            "options": {"baseURL": model.base_url, "apiKey": "test"},
            "models": {"scripted-model": {"name": "scripted-model"}},
        }});
        let path = home.path().join("opencode.json");
        std::fs::write(&path, config.to_string()).unwrap();
        Agent {
            exe,
            home,
            project,
            config: path,
        }
    }

    /// `opencode run ARGS…`, non-interactive, touching nothing outside its temp dirs and
    /// reaching nothing but loopback.
    fn start(&self, args: &[&str]) -> Running {
        let home = self.home.path();
        let child = Command::new(&self.exe)
            .arg("run")
            .args(args)
            .current_dir(self.project.path())
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("HOME", home)
            .env("XDG_CONFIG_HOME", home.join("config"))
            .env("XDG_DATA_HOME", home.join("data"))
            .env("XDG_CACHE_HOME", home.join("cache"))
            .env("XDG_STATE_HOME", home.join("state"))
            .env("OPENCODE_CONFIG", &self.config)
            .env("OPENCODE_DISABLE_AUTOUPDATE", "1")
            .env("OPENCODE_DISABLE_SHARE", "1")
            .env("OPENCODE_DISABLE_MODELS_FETCH", "1")
            .env("OPENCODE_DISABLE_LSP_DOWNLOAD", "1")
            .env("OPENCODE_DISABLE_DEFAULT_PLUGINS", "1")
            .env("OPENCODE_DISABLE_CLAUDE_CODE", "1")
            // Anything it would fetch from the internet fails at once.
            .env("HTTP_PROXY", "http://127.0.0.1:9")
            .env("HTTPS_PROXY", "http://127.0.0.1:9")
            .env("NO_PROXY", "127.0.0.1,localhost")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        Running(child)
    }
}

/// A running `opencode`, killed if the test ends before it does.
struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Waits for the agent, which must end within two minutes, and checks it ended well.
fn finished(mut running: Running) -> Output {
    let pipe = |mut from: Box<dyn std::io::Read + Send>| {
        std::thread::spawn(move || {
            let mut bytes = Vec::new();
            let _ = from.read_to_end(&mut bytes);
            bytes
        })
    };
    let stdout = pipe(Box::new(running.0.stdout.take().unwrap()));
    let stderr = pipe(Box::new(running.0.stderr.take().unwrap()));
    let deadline = Instant::now() + Duration::from_secs(120);
    let status = loop {
        if let Some(status) = running.0.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            let _ = running.0.kill();
            panic!(
                "opencode did not finish within two minutes:\n{}",
                String::from_utf8_lossy(&stderr.join().unwrap())
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let out = Output {
        status,
        stdout: stdout.join().unwrap(),
        stderr: stderr.join().unwrap(),
    };
    assert!(
        out.status.success(),
        "opencode failed ({}):\n{}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// The model's part of one turn: read `notes.txt`, then answer from it. A request without
/// tools is OpenCode asking for a session title. `hold` is waited on before the tool call
/// is answered, so the test can act between the turn's two model calls.
fn script(
    project: &Path,
    hold: Option<mpsc::Receiver<()>>,
) -> impl Fn(&Value) -> Reply + Send + Sync + 'static {
    let project = project.to_path_buf();
    let hold = Mutex::new(hold);
    move |body| {
        if body["tools"].as_array().is_none_or(|t| t.is_empty()) {
            return Reply::Text("Scripted title".into());
        }
        let messages = chat_server::messages(body);
        if let Some(result) = messages.last().filter(|m| m["role"] == "tool") {
            let read = chat_server::content_text(&result["content"]);
            return Reply::Text(format!("The notes say: {}", read.contains(NOTES)));
        }
        if let Some(hold) = hold.lock().unwrap().take() {
            hold.recv_timeout(Duration::from_secs(60))
                .expect("the test never let the tool call through");
        }
        Reply::ToolCall {
            name: "read".into(),
            arguments: json!({"filePath": project.join("notes.txt")}),
        }
    }
}

/// The turn's model calls (those that offer tools), in order.
fn turn_requests(model: &ChatServer) -> Vec<Value> {
    model
        .requests()
        .into_iter()
        .filter(|b| b["tools"].as_array().is_some_and(|t| !t.is_empty()))
        .collect()
}

/// What stands before OpenCode's environment block in a request's system prompt: the part
/// the plugin replaces. The block itself must be there.
fn prompt_part(body: &Value) -> String {
    let system = chat_server::system_prompt(body);
    let Some(at) = system.find(ENVIRONMENT_BLOCK) else {
        panic!("no environment block in the system prompt:\n{system}");
    };
    system[..at].trim_end().to_string()
}

#[test]
fn the_agent_sends_the_packs_prompt_and_a_release_reaches_its_next_model_call_and_turn() {
    let Some(exe) = opencode() else { return };
    let mut w = World::new();
    let one = "You are Scribe, a careful coding agent (pack 1.0.0).";
    let dir_one = w.release("1.0.0", one);
    w.run_client();
    w.until_view(|named| named == dir_one);

    let (let_through, hold) = mpsc::channel();
    let project = project();
    let model = ChatServer::start(script(project.path(), Some(hold)));
    let agent = Agent::new(exe, project, &w.view(), &model);
    let running = agent.start(&["What do the notes in this project say?"]);

    // The turn's first model call carries the pack's text in place of OpenCode's prompt.
    let first = model.until_request(Duration::from_secs(120), |b| {
        b["tools"].as_array().is_some_and(|t| !t.is_empty())
    });
    assert_eq!(prompt_part(&first), one);

    // While the model "thinks", the publisher releases 2.0.0 and the client installs it.
    let two = "You are Scribe, now terser (pack 2.0.0).";
    let dir_two = w.release("2.0.0", two);
    w.until_view(|named| named == dir_two);
    let_through.send(()).unwrap();

    let out = finished(running);
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("The notes say: true"),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let turn = turn_requests(&model);
    assert_eq!(turn.len(), 2, "{turn:#?}");
    // The next model call, in the same process and session, after the tool ran: 2.0.0.
    assert_eq!(prompt_part(&turn[1]), two);
    let tool_result = chat_server::messages(&turn[1]).last().cloned().unwrap();
    assert_eq!(tool_result["role"], "tool");
    assert!(chat_server::content_text(&tool_result["content"]).contains(NOTES));
    // A request for another job (the session's title) keeps OpenCode's prompt for it.
    let others: Vec<Value> = model
        .requests()
        .into_iter()
        .filter(|b| !turn.contains(b))
        .collect();
    assert!(!others.is_empty(), "OpenCode asked for no title");
    for other in &others {
        let system = chat_server::system_prompt(other);
        assert!(
            system.starts_with("You are a title generator") && !system.contains("Scribe"),
            "a title request got the pack's text:\n{system}"
        );
    }

    // Between turns the publisher releases 3.0.0: the session's next turn carries it.
    let three = "You are Scribe, third edition (pack 3.0.0).";
    let dir_three = w.release("3.0.0", three);
    w.until_view(|named| named == dir_three);
    finished(agent.start(&["--continue", "Read them again, please."]));
    let turns = turn_requests(&model);
    assert_eq!(turns.len(), 4, "{turns:#?}");
    let history = chat_server::messages(&turns[2]);
    assert!(
        history
            .iter()
            .any(|m| chat_server::content_text(&m["content"]).contains("What do the notes")),
        "the next turn is not in the same session: {history:#?}"
    );
    for request in &turns[2..] {
        assert_eq!(prompt_part(request), three);
    }
    assert!(
        model.other_requests().is_empty(),
        "{:?}",
        model.other_requests()
    );
}

/// One turn of OpenCode against the view of `w` with packd down: the turn's two model
/// requests, after checking the turn finished with the model's answer.
fn offline_turn(exe: PathBuf, w: &World) -> Vec<Value> {
    let project = project();
    let model = ChatServer::start(script(project.path(), None));
    let agent = Agent::new(exe, project, &w.view(), &model);
    let out = finished(agent.start(&["What do the notes in this project say?"]));
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("The notes say: true"),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let turn = turn_requests(&model);
    assert_eq!(turn.len(), 2, "{turn:#?}");
    turn
}

#[test]
fn with_packd_down_and_nothing_installed_the_agent_runs_on_its_bundled_prompt() {
    let Some(exe) = opencode() else { return };
    // The app ships its own prompts (`builtin_dir`): the built-in pack's files and its
    // OpenCode prompt. That is what serves with nothing installed.
    let bundled_dir = tempfile::tempdir().unwrap();
    copy_tree(&workspace().join("packs/builtin"), bundled_dir.path());
    let bundled = "You are Scribe, as bundled with the app.";
    std::fs::create_dir_all(bundled_dir.path().join("opencode")).unwrap();
    std::fs::write(bundled_dir.path().join(PROMPT_FILE), bundled).unwrap();
    let mut w = World::with_updates(&format!(
        "builtin_dir = {:?}\n",
        bundled_dir.path().display().to_string()
    ));
    // A release exists, but packd goes down before this client ever asked.
    w.release("1.0.0", "You are Scribe (pack 1.0.0).");
    w.packd.stop();
    w.run_client();
    let named = w.until_view(|named| named.starts_with("builtin-0.0.0-"));
    let in_view = w.cache.path().join("files").join(&named).join(PROMPT_FILE);
    assert_eq!(std::fs::read_to_string(in_view).unwrap(), bundled);

    for request in &offline_turn(exe, &w) {
        assert_eq!(prompt_part(request), bundled);
    }
}

#[test]
fn a_view_without_the_prompt_file_leaves_the_agent_its_own_prompt() {
    let Some(exe) = opencode() else { return };
    // No builtin_dir: the compiled-in pack serves, and it has no OpenCode prompt.
    let mut w = World::new();
    w.packd.stop();
    w.run_client();
    let named = w.until_view(|named| named.starts_with("builtin-0.0.0-"));
    let in_view = w.cache.path().join("files").join(&named).join(PROMPT_FILE);
    assert!(!in_view.exists());

    for request in &offline_turn(exe, &w) {
        let prompt = prompt_part(request);
        assert!(prompt.starts_with(OPENCODE_OWN_PROMPT), "{prompt}");
        assert!(!prompt.contains("Scribe"), "{prompt}");
    }
}
