//! Real coding agents from npm, unmodified, fed by `pack-client`'s targets: Claude Code
//! (`@anthropic-ai/claude-code`), Codex CLI (`@openai/codex`) and OpenCode (`opencode-ai`),
//! the versions
//! `scripts/test.sh` installs, each against a scripted model server on loopback speaking
//! its wire, which records every request. packd, packer and pack-client are the workspace's
//! binaries.
//!
//! Claude Code reads its managed files from `/etc/claude-code`, a path it does not let an
//! environment variable move. The test runs it in a user and mount namespace of its own
//! (`unshare -rm`, no privileges needed), where `/etc` is the machine's `/etc` plus
//! `claude-code` naming the test's machine directory: the real path, seen only by that
//! process.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use promptpack_tests::chat_server::{ChatServer, Reply, Wire};
use promptpack_tests::*;
use serde_json::{Value, json};

/// The Claude Code release `scripts/test.sh` installs.
const CLAUDE_VERSION: &str = "2.1.328";
/// The OpenCode release `scripts/test.sh` installs.
const OPENCODE_VERSION: &str = "1.18.33";
/// The Codex CLI release `scripts/test.sh` installs.
const CODEX_VERSION: &str = "0.169.0";
/// What the user's own `~/.claude/CLAUDE.md` says.
const USER_TEXT: &str = "USER-OWN-NOTES: answer in British English.";
/// What the project's notes say; a tool call that reads them would put this in the
/// transcript.
const NOTES: &str = "NOTES-SECRET: the release train leaves at noon.";

/// Whether this machine lets an unprivileged process make a user and mount namespace.
fn namespaces() -> bool {
    let ok = Command::new("unshare")
        .args(["-rm", "true"])
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        let why =
            "`unshare -rm` fails here: Claude Code's managed directory cannot be given to the test";
        if std::env::var_os("CI").is_some() {
            panic!("{why}");
        }
        skipped(why);
    }
    ok
}

/// packd, a publisher, one machine's client cache, home and machine directory.
struct Machine {
    publisher: Publisher,
    _data: tempfile::TempDir,
    packd: Packd,
    dir: tempfile::TempDir,
    config: PathBuf,
}

impl Machine {
    /// A machine whose pack-client projects into Claude Code's places (user level under the
    /// test's home, machine level in `etc/claude-code`) and Codex's, and whose bundled team
    /// pack says `BUNDLED-RULES`.
    fn new() -> Self {
        Self::with_targets("")
    }

    /// [`Machine::new`] with `targets` in the client config's `[targets]` table.
    fn with_targets(targets: &str) -> Self {
        let publisher = Publisher::new();
        let data = tempfile::tempdir().unwrap();
        let packd = Packd::start(data.path(), &publisher.server_config());
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        let bundled = root.join("bundled");
        copy_tree(&workspace().join("packs/builtin"), &bundled);
        std::fs::write(
            bundled.join("AGENTS.md"),
            "BUNDLED-RULES: the team's offline rules.\n",
        )
        .unwrap();
        for sub in ["home/.claude", "etc/claude-code", "project", "real-etc"] {
            std::fs::create_dir_all(root.join(sub)).unwrap();
        }
        std::fs::write(
            root.join("home/.claude/CLAUDE.md"),
            format!("{USER_TEXT}\n"),
        )
        .unwrap();
        std::fs::write(root.join("project/notes.txt"), NOTES).unwrap();
        let config = publisher.client_config(
            &packd.url,
            &format!(
                "builtin_dir = {:?}\n[targets]\n{targets}\n[targets.claude-code]\nuser_dir = {:?}\nmachine_dir = {:?}\n[targets.codex]\nuser_dir = {:?}\nmachine_dir = {:?}\n[targets.opencode]\nuser_dir = {:?}\n",
                bundled.display().to_string(),
                root.join("home/.claude").display().to_string(),
                root.join("etc/claude-code").display().to_string(),
                root.join("home/.codex").display().to_string(),
                root.join("etc/codex").display().to_string(),
                root.join("home/config/opencode").display().to_string(),
            ),
        );
        Machine {
            publisher,
            _data: data,
            packd,
            dir,
            config,
        }
    }

    fn root(&self) -> &Path {
        self.dir.path()
    }

    fn cache(&self) -> PathBuf {
        self.root().join("cache")
    }

    /// Publishes `version` of the team pack: its `AGENTS.md` says `TEAM-RULES-<version>`, it
    /// ships the skill `release-notes`, Claude Code settings that deny `cat` and Codex
    /// requirements that allow only the read-only sandbox.
    fn release(&self, version: &str) -> PathBuf {
        let path = self
            .publisher
            .build_edited(version, &format!("MARKER-{version}"), |src| {
                std::fs::write(
                    src.join("AGENTS.md"),
                    format!("TEAM-RULES-{version}: run the tests before every commit.\n"),
                )
                .unwrap();
                let skill = src.join("skills/release-notes");
                std::fs::create_dir_all(&skill).unwrap();
                std::fs::write(
                    skill.join("SKILL.md"),
                    format!(
                        "---\nname: release-notes\ndescription: SKILL-RELEASE-NOTES-{version} writes the release notes of a version\n---\nList the commits since the last tag.\n"
                    ),
                )
                .unwrap();
                std::fs::create_dir_all(src.join("codex")).unwrap();
                std::fs::write(
                    src.join("codex/requirements.toml"),
                    "allowed_sandbox_modes = [\"read-only\"]\n",
                )
                .unwrap();
                std::fs::create_dir_all(src.join("claude")).unwrap();
                std::fs::write(
                    src.join("claude/managed-settings.json"),
                    json!({"permissions": {"deny": ["Bash(cat:*)"]}}).to_string(),
                )
                .unwrap();
            });
        self.packd.upload(&self.publisher, &path);
        self.point_at(&path);
        path
    }

    /// Signs and publishes a channel document selecting `pack` for everyone.
    fn point_at(&self, pack: &Path) {
        self.packd.publish(
            &self.publisher,
            &self
                .publisher
                .sign(&[format!("*={}", pack.display())], "30d"),
        );
    }

    /// `pack-client refresh`, which installs and projects; its output.
    fn refresh(&self) -> Output {
        let mut cmd = client_cmd(&self.cache(), &self.config, "1.0.0");
        cmd.arg("refresh");
        cmd.output().unwrap()
    }

    /// `pack-client --json status`.
    fn status(&self) -> Value {
        let mut cmd = client_cmd(&self.cache(), &self.config, "1.0.0");
        cmd.args(["--json", "status"]);
        serde_json::from_str(&run(cmd)).unwrap()
    }

    /// A command running `exe` in a user and mount namespace whose `/etc/claude-code` and
    /// `/etc/codex` are the test's machine directories, and the rest of `/etc` the
    /// machine's.
    fn with_machine_etc(&self, exe: &Path) -> Command {
        let root = self.root();
        // `/etc` as the namespace sees it: every entry of the real one (bind-mounted at
        // `real-etc`), and the two machine directories.
        let farm = root.join(format!("etc-{}", rand::random::<u32>()));
        std::fs::create_dir(&farm).unwrap();
        let ours = ["claude-code", "codex"];
        for entry in std::fs::read_dir("/etc").unwrap().flatten() {
            let name = entry.file_name();
            if !ours.iter().any(|o| name == *o) {
                std::os::unix::fs::symlink(root.join("real-etc").join(&name), farm.join(&name))
                    .unwrap();
            }
        }
        for name in ours {
            std::fs::create_dir_all(root.join("etc").join(name)).unwrap();
            std::os::unix::fs::symlink(root.join("etc").join(name), farm.join(name)).unwrap();
        }
        let mut cmd = Command::new("unshare");
        cmd.args(["-rm", "sh", "-c"])
            .arg(r#"mount --bind /etc "$1" && mount --bind "$2" /etc && shift 2 && exec "$@""#)
            .arg("sh")
            .arg(root.join("real-etc"))
            .arg(&farm)
            .arg(exe);
        cmd
    }

    /// Runs `claude -p PROMPT ARGS…` against `model` in a namespace whose
    /// `/etc/claude-code` is the machine directory; the requests it sent.
    fn claude(&self, exe: &Path, model: &ChatServer, prompt: &str, args: &[&str]) -> Vec<Value> {
        let root = self.root();
        let before = model.requests().len();
        let mut cmd = self.with_machine_etc(exe);
        cmd.args(["-p", prompt])
            .args(args)
            .current_dir(root.join("project"))
            .env_clear()
            .env("PATH", "/usr/bin:/bin")
            .env("HOME", root.join("home"))
            .env("ANTHROPIC_BASE_URL", model.base_url.trim_end_matches("/v1"))
            .env("ANTHROPIC_API_KEY", "test")
            .env("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1")
            .env("DISABLE_AUTOUPDATER", "1")
            .env("HTTP_PROXY", "http://127.0.0.1:9")
            .env("HTTPS_PROXY", "http://127.0.0.1:9")
            .env("NO_PROXY", "127.0.0.1,localhost")
            .stdin(Stdio::null());
        let out = finished(cmd, "claude");
        assert!(
            out.status.success(),
            "claude failed ({}):\n{}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        let requests = model.requests()[before..].to_vec();
        assert!(!requests.is_empty(), "claude sent no request");
        requests
    }
}

impl Machine {
    /// Runs `codex exec PROMPT` with `$CODEX_HOME` at `home/.codex`, whose `config.toml`
    /// (the user's) names `model` as a Responses provider; the requests it sent.
    fn codex(&self, exe: &Path, model: &ChatServer, prompt: &str) -> Vec<Value> {
        self.codex_with(exe, model, prompt, &[], false).0
    }

    /// [`Machine::codex`] with `args` after `exec`, in a namespace whose `/etc/codex` is the
    /// machine directory when `machine_etc`; the requests and its output.
    fn codex_with(
        &self,
        exe: &Path,
        model: &ChatServer,
        prompt: &str,
        args: &[&str],
        machine_etc: bool,
    ) -> (Vec<Value>, Output) {
        let root = self.root();
        let codex_home = root.join("home/.codex");
        std::fs::create_dir_all(&codex_home).unwrap();
        std::fs::write(
            codex_home.join("config.toml"),
            format!(
                "model = \"scripted-model\"\nmodel_provider = \"scripted\"\n[model_providers.scripted]\nname = \"Scripted\"\nbase_url = {:?}\nwire_api = \"responses\"\n",
                model.base_url
            ),
        )
        .unwrap();
        let before = model.requests().len();
        let mut cmd = if machine_etc {
            self.with_machine_etc(exe)
        } else {
            Command::new(exe)
        };
        cmd.args(["exec", "--skip-git-repo-check"])
            .args(args)
            .arg(prompt)
            .current_dir(root.join("project"))
            .env_clear()
            .env("PATH", "/usr/bin:/bin")
            .env("HOME", root.join("home"))
            .env("CODEX_HOME", &codex_home)
            .env("HTTP_PROXY", "http://127.0.0.1:9")
            .env("HTTPS_PROXY", "http://127.0.0.1:9")
            .env("NO_PROXY", "127.0.0.1,localhost")
            .stdin(Stdio::null());
        let out = finished(cmd, "codex");
        assert!(
            out.status.success(),
            "codex failed ({}):\n{}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        let requests = model.requests()[before..].to_vec();
        assert!(!requests.is_empty(), "codex sent no request");
        (requests, out)
    }

    /// Every file and link under the test's home and machine directories: a link's
    /// target or a file's bytes, by path (Codex's own state under `.codex` left out).
    fn projected(&self) -> Vec<(PathBuf, String)> {
        let mut out = Vec::new();
        for path in walk_all(&self.root().join("home"))
            .into_iter()
            .chain(walk_all(&self.root().join("etc")))
        {
            let rel = path.strip_prefix(self.root()).unwrap().to_path_buf();
            let text = match std::fs::read_link(&path) {
                Ok(to) => format!("-> {}", to.display()),
                Err(_) => std::fs::read_to_string(&path).unwrap_or_default(),
            };
            out.push((rel, text));
        }
        out
    }
}

impl Machine {
    /// Runs `opencode run PROMPT` with its config directory at `home/config/opencode`, whose
    /// `opencode.json` (the user's) names `model` as an OpenAI-compatible provider; the
    /// requests it sent.
    fn opencode(&self, exe: &Path, model: &ChatServer, prompt: &str) -> Vec<Value> {
        let home = self.root().join("home");
        let dir = home.join("config/opencode");
        // OpenCode installs its plugin SDK into its config directory unless the lock file
        // there already lists it; nothing here needs it, and the test no registry.
        std::fs::create_dir_all(dir.join("node_modules")).unwrap();
        std::fs::write(
            dir.join("package-lock.json"),
            json!({"packages": {"": {"dependencies": {"@opencode-ai/plugin": OPENCODE_VERSION}}}})
                .to_string(),
        )
        .unwrap();
        let config = json!({
            "$schema": "https://opencode.ai/config.json",
            "model": "scripted/scripted-model",
            "provider": {"scripted": {
                "npm": "@ai-sdk/openai-compatible",
                "name": "Scripted",
                "options": {"baseURL": model.base_url, "apiKey": "test"},
                "models": {"scripted-model": {"name": "scripted-model"}},
            }},
        });
        std::fs::write(dir.join("opencode.json"), config.to_string()).unwrap();
        let before = model.requests().len();
        let mut cmd = Command::new(exe);
        cmd.args(["run", prompt])
            .current_dir(self.root().join("project"))
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("HOME", &home)
            .env("XDG_CONFIG_HOME", home.join("config"))
            .env("XDG_DATA_HOME", home.join("data"))
            .env("XDG_CACHE_HOME", home.join("cache"))
            .env("XDG_STATE_HOME", home.join("state"))
            .env("OPENCODE_DISABLE_AUTOUPDATE", "1")
            .env("OPENCODE_DISABLE_SHARE", "1")
            .env("OPENCODE_DISABLE_MODELS_FETCH", "1")
            .env("OPENCODE_DISABLE_LSP_DOWNLOAD", "1")
            .env("OPENCODE_DISABLE_DEFAULT_PLUGINS", "1")
            .env("OPENCODE_DISABLE_CLAUDE_CODE", "1")
            .env("HTTP_PROXY", "http://127.0.0.1:9")
            .env("HTTPS_PROXY", "http://127.0.0.1:9")
            .env("NO_PROXY", "127.0.0.1,localhost")
            .stdin(Stdio::null());
        let out = finished(cmd, "opencode");
        assert!(
            out.status.success(),
            "opencode failed ({}):\n{}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        let requests = model.requests()[before..].to_vec();
        assert!(!requests.is_empty(), "opencode sent no request");
        requests
    }
}

/// Files and links under `dir`, links not followed; Codex's own state left out.
fn walk_all(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return out;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let kind = entry.file_type().unwrap();
        if kind.is_dir() {
            if !path.ends_with(".codex/sessions")
                && !path.ends_with(".codex/log")
                && !path.ends_with(".codex/tmp")
                && !path.ends_with(".codex/.tmp")
            {
                out.extend(walk_all(&path));
            }
        } else if path
            .parent()
            .is_some_and(|p| p.ends_with("home/.codex") || p.ends_with("home/.claude"))
            && !matches!(
                path.file_name().and_then(|n| n.to_str()),
                Some("AGENTS.md" | "CLAUDE.md")
            )
        {
            // The agents' own files beside ours (history, auth, config).
        } else {
            out.push(path);
        }
    }
    out.sort();
    out
}

/// Runs `cmd` to its end, within two minutes.
fn finished(mut cmd: Command, what: &str) -> Output {
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pipe = |mut from: Box<dyn std::io::Read + Send>| {
        std::thread::spawn(move || {
            let mut bytes = Vec::new();
            let _ = from.read_to_end(&mut bytes);
            bytes
        })
    };
    let stdout = pipe(Box::new(child.stdout.take().unwrap()));
    let stderr = pipe(Box::new(child.stderr.take().unwrap()));
    let deadline = Instant::now() + Duration::from_secs(120);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{what} did not finish within two minutes");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    Output {
        status,
        stdout: stdout.join().unwrap(),
        stderr: stderr.join().unwrap(),
    }
}

/// Whether any of `requests` carries `text` anywhere (system prompt, reminders, tools).
fn sent(requests: &[Value], text: &str) -> bool {
    requests.iter().any(|r| r.to_string().contains(text))
}

/// The model: asked to use a tool, it runs `cat notes.txt` once, then answers.
fn claude_script(body: &Value) -> Reply {
    let messages = body["messages"].as_array().cloned().unwrap_or_default();
    let first = messages.first().map(Value::to_string).unwrap_or_default();
    let answered = messages
        .iter()
        .any(|m| m.to_string().contains("tool_result"));
    if first.contains("USE-A-TOOL") && !answered {
        return Reply::ToolCall {
            name: "Bash".to_string(),
            arguments: json!({"command": "cat notes.txt", "description": "Read the notes"}),
        };
    }
    Reply::Text("Done.".to_string())
}

#[test]
fn claude_code_reads_the_pack_pack_client_projects_and_enforces_its_settings() {
    let Some(claude) = npm_tool(
        "PROMPTPACK_CLAUDE",
        &format!("claude-code-{CLAUDE_VERSION}"),
        "claude",
        CLAUDE_VERSION,
    ) else {
        return;
    };
    if !namespaces() {
        return;
    }
    let mut machine = Machine::new();
    let model = ChatServer::start_on(Wire::Messages, claude_script);

    // packd down and nothing installed: the bundled team pack is projected, and sent.
    machine.packd.stop();
    let out = machine.refresh();
    assert!(!out.status.success(), "a refresh with packd down succeeded");
    let requests = machine.claude(&claude, &model, "Say hello.", &[]);
    assert!(
        sent(&requests, "BUNDLED-RULES"),
        "the bundled pack's text was not sent"
    );
    assert!(
        sent(&requests, USER_TEXT),
        "the user's own CLAUDE.md was not sent"
    );
    machine.packd.restart();

    // A release reaches the next request, with its skill; the user's text stays.
    let v1_1 = machine.release("1.1.0");
    let out = machine.refresh();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let requests = machine.claude(&claude, &model, "Say hello.", &[]);
    assert!(
        sent(&requests, "TEAM-RULES-1.1.0"),
        "the release's text was not sent"
    );
    assert!(!sent(&requests, "BUNDLED-RULES"));
    assert!(
        sent(&requests, USER_TEXT),
        "the user's own CLAUDE.md was not sent"
    );
    assert!(
        sent(&requests, "SKILL-RELEASE-NOTES-1.1.0"),
        "the pack's skill was not listed"
    );
    assert_eq!(
        std::fs::read_to_string(machine.root().join("home/.claude/CLAUDE.md")).unwrap(),
        format!("{USER_TEXT}\n"),
        "the user's own CLAUDE.md was changed"
    );

    // The managed settings the pack ships deny `cat`: Claude Code refuses the call, although
    // the command line allows Bash.
    let requests = machine.claude(
        &claude,
        &model,
        "USE-A-TOOL: read the notes.",
        &["--allowedTools", "Bash"],
    );
    let result = requests
        .iter()
        .flat_map(|r| r["messages"].as_array().cloned().unwrap_or_default())
        .flat_map(|m| m["content"].as_array().cloned().unwrap_or_default())
        .find(|part| part["type"] == "tool_result")
        .expect("no tool result reached the model");
    assert_eq!(result["is_error"], true, "{result}");
    assert!(
        result.to_string().contains("denied"),
        "the call was not refused: {result}"
    );
    assert!(!sent(&requests, "NOTES-SECRET"), "the denied command ran");

    // A newer release, then a rollback to 1.1.0: each reaches the next request.
    machine.release("1.2.0");
    assert!(machine.refresh().status.success());
    let requests = machine.claude(&claude, &model, "Say hello.", &[]);
    assert!(sent(&requests, "TEAM-RULES-1.2.0"));
    assert!(!sent(&requests, "TEAM-RULES-1.1.0"));
    machine.point_at(&v1_1);
    assert!(machine.refresh().status.success());
    let requests = machine.claude(&claude, &model, "Say hello.", &[]);
    assert!(
        sent(&requests, "TEAM-RULES-1.1.0"),
        "the rollback did not reach claude"
    );
    assert!(
        !sent(&requests, "TEAM-RULES-1.2.0"),
        "the rollback left 1.2.0 in"
    );

    // The status lists every projected path with its pack version.
    let status = machine.status();
    let placed = status["targets"]["placed"].as_array().unwrap();
    let managed = machine.root().join("etc/claude-code/managed-settings.json");
    assert!(
        placed
            .iter()
            .any(|p| p["path"] == managed.display().to_string()
                && p["from"][0] == "stable:claude/managed-settings.json@1.1.0"),
        "{placed:?}"
    );
    assert!(status["targets"]["refused"].as_array().unwrap().is_empty());
}

/// The model for Codex: it answers every request.
fn codex_script(_body: &Value) -> Reply {
    Reply::Text("Done.".to_string())
}

#[test]
fn codex_reads_the_pack_pack_client_projects_and_a_refused_document_or_tampered_pack_changes_nothing()
 {
    let Some(codex) = npm_tool(
        "PROMPTPACK_CODEX",
        &format!("codex-{CODEX_VERSION}"),
        "codex",
        CODEX_VERSION,
    ) else {
        return;
    };
    let mut machine = Machine::new();
    let model = ChatServer::start_on(Wire::Responses, codex_script);
    // The user's own AGENTS.md: pack-client owns one marked block in it.
    let own = "CODEX-USER-NOTES: prefer small commits.\n";
    std::fs::create_dir_all(machine.root().join("home/.codex")).unwrap();
    std::fs::write(machine.root().join("home/.codex/AGENTS.md"), own).unwrap();

    // packd down and nothing installed: the bundled team pack's text is sent.
    machine.packd.stop();
    assert!(!machine.refresh().status.success());
    let requests = machine.codex(&codex, &model, "Say hello.");
    assert!(
        sent(&requests, "BUNDLED-RULES"),
        "the bundled pack's text was not sent"
    );
    assert!(
        sent(&requests, "CODEX-USER-NOTES"),
        "the user's own text was not sent"
    );
    machine.packd.restart();

    // A release reaches the next request, its skill listed.
    let v1_1 = machine.release("1.1.0");
    let out = machine.refresh();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let requests = machine.codex(&codex, &model, "Say hello.");
    assert!(
        sent(&requests, "TEAM-RULES-1.1.0"),
        "the release's text was not sent"
    );
    assert!(!sent(&requests, "BUNDLED-RULES"));
    assert!(sent(&requests, "CODEX-USER-NOTES"));
    assert!(
        sent(&requests, "SKILL-RELEASE-NOTES-1.1.0"),
        "the pack's skill was not listed"
    );
    let agents_md = std::fs::read_to_string(machine.root().join("home/.codex/AGENTS.md")).unwrap();
    assert!(agents_md.starts_with(own), "{agents_md}");

    // A document the client refuses (expired by the client's clock) changes no projected
    // file.
    let before = machine.projected();
    let v1_2 = machine
        .publisher
        .build_edited("1.2.0", "MARKER-1.2.0", |src| {
            std::fs::write(src.join("AGENTS.md"), "TEAM-RULES-1.2.0\n").unwrap();
        });
    machine.packd.upload(&machine.publisher, &v1_2);
    machine.packd.publish(
        &machine.publisher,
        &machine
            .publisher
            .sign(&[format!("*={}", v1_2.display())], "1h"),
    );
    let later = time::OffsetDateTime::now_utc() + time::Duration::hours(2);
    let mut cmd = client_cmd(&machine.cache(), &machine.config, "1.0.0");
    cmd.arg("refresh").env(
        "PROMPTPACK_TEST_NOW",
        later
            .format(&time::format_description::well_known::Rfc3339)
            .unwrap(),
    );
    let out = cmd.output().unwrap();
    assert!(!out.status.success(), "an expired document was accepted");
    assert_eq!(
        machine.projected(),
        before,
        "a refused document changed a projected file"
    );
    let requests = machine.codex(&codex, &model, "Say hello.");
    assert!(sent(&requests, "TEAM-RULES-1.1.0"));

    // A pack whose bytes were changed in packd's storage after its document was signed:
    // refused at its hash, and no projected file changes either.
    let v1_3 = machine
        .publisher
        .build_edited("1.3.0", "MARKER-1.3.0", |src| {
            std::fs::write(src.join("AGENTS.md"), "TEAM-RULES-1.3.0\n").unwrap();
        });
    let sha = machine.packd.upload(&machine.publisher, &v1_3);
    machine.point_at(&v1_3);
    let blob = machine._data.path().join("blobs").join(&sha);
    let mut bytes = std::fs::read(&blob).unwrap();
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0x55;
    std::fs::write(&blob, bytes).unwrap();
    let out = machine.refresh();
    assert!(!out.status.success(), "a tampered pack was accepted");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains(&sha[..12])
            || String::from_utf8_lossy(&out.stderr).contains("sha256")
            || String::from_utf8_lossy(&out.stderr).contains("hash"),
        "refused for another reason: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        machine.projected(),
        before,
        "a tampered pack changed a projected file"
    );
    let requests = machine.codex(&codex, &model, "Say hello.");
    assert!(sent(&requests, "TEAM-RULES-1.1.0"));
    assert!(!sent(&requests, "TEAM-RULES-1.3.0"));

    // A rollback (a newer document naming 1.1.0 again after 1.2.0) takes 1.2.0 out.
    machine.point_at(&v1_2);
    assert!(machine.refresh().status.success());
    let requests = machine.codex(&codex, &model, "Say hello.");
    assert!(sent(&requests, "TEAM-RULES-1.2.0"));
    // 1.2.0 ships no skill: its link is gone.
    assert!(
        !sent(&requests, "SKILL-RELEASE-NOTES"),
        "a skill 1.2.0 does not ship was listed"
    );
    assert!(
        machine
            .root()
            .join("home/.codex/skills/release-notes")
            .symlink_metadata()
            .is_err()
    );
    machine.point_at(&v1_1);
    assert!(machine.refresh().status.success());
    let requests = machine.codex(&codex, &model, "Say hello.");
    assert!(
        sent(&requests, "TEAM-RULES-1.1.0"),
        "the rollback did not reach codex"
    );
    assert!(
        !sent(&requests, "TEAM-RULES-1.2.0"),
        "the rollback left 1.2.0 in"
    );
    assert!(sent(&requests, "CODEX-USER-NOTES"));
}

#[test]
fn opencode_reads_the_global_instructions_pack_client_projects() {
    let Some(opencode) = npm_tool(
        "PROMPTPACK_OPENCODE",
        &format!("opencode-{OPENCODE_VERSION}"),
        "opencode",
        OPENCODE_VERSION,
    ) else {
        return;
    };
    let machine = Machine::new();
    let model = ChatServer::start_on(Wire::Chat, |_| Reply::Text("Done.".to_string()));

    let v1_1 = machine.release("1.1.0");
    assert!(machine.refresh().status.success());
    let requests = machine.opencode(&opencode, &model, "Say hello.");
    assert!(
        sent(&requests, "TEAM-RULES-1.1.0"),
        "the release's text was not sent"
    );
    assert!(
        sent(&requests, "SKILL-RELEASE-NOTES-1.1.0"),
        "the pack's skill was not listed"
    );

    machine.release("1.2.0");
    assert!(machine.refresh().status.success());
    let requests = machine.opencode(&opencode, &model, "Say hello.");
    assert!(sent(&requests, "TEAM-RULES-1.2.0"));
    assert!(!sent(&requests, "TEAM-RULES-1.1.0"));
    machine.point_at(&v1_1);
    assert!(machine.refresh().status.success());
    let requests = machine.opencode(&opencode, &model, "Say hello.");
    assert!(
        sent(&requests, "TEAM-RULES-1.1.0"),
        "the rollback did not reach opencode"
    );
    assert!(
        !sent(&requests, "TEAM-RULES-1.2.0"),
        "the rollback left 1.2.0 in"
    );
}

/// The organisation's channel: its own publisher (keys) and packd, its pack saying
/// `ORG-RULES-<version>` and shipping the skill `org-style`.
struct Org {
    publisher: Publisher,
    _data: tempfile::TempDir,
    packd: Packd,
}

impl Org {
    fn start() -> Self {
        let publisher = Publisher::new();
        let data = tempfile::tempdir().unwrap();
        let packd = Packd::start(data.path(), &publisher.server_config());
        Org {
            publisher,
            _data: data,
            packd,
        }
    }

    /// Publishes `version` for everyone, its document valid for `expires`.
    fn release(&self, version: &str, expires: &str) {
        let pack = self
            .publisher
            .build_edited(version, &format!("ORG-MARKER-{version}"), |src| {
                std::fs::write(
                    src.join("AGENTS.md"),
                    format!("ORG-RULES-{version}: no secrets in logs.\n"),
                )
                .unwrap();
                let skill = src.join("skills/org-style");
                std::fs::create_dir_all(&skill).unwrap();
                std::fs::write(
                    skill.join("SKILL.md"),
                    "---\nname: org-style\ndescription: ORG-STYLE the house style\n---\nShort sentences.\n",
                )
                .unwrap();
            });
        self.packd.upload(&self.publisher, &pack);
        self.packd.publish(
            &self.publisher,
            &self
                .publisher
                .sign(&[format!("*={}", pack.display())], expires),
        );
    }
}

/// A machine whose one pack-client config follows two channels, the organisation's first
/// (`org`), then the team's (`team-payments`, the machine's own publisher and packd, with
/// its bundled pack), each with its own server and keys, projected into Codex.
fn org_and_team(org: &Org) -> Machine {
    let machine = Machine::new();
    let root = machine.root();
    let channel = |name: &str, publisher: &Publisher, server: &str, extra: &str| {
        format!(
            "[[channels]]\nname = {name:?}\nserver = {server:?}\nchannel = \"stable\"\npack = \"builtin\"\ntrusted_keys = [{:?}]\ncontent_keys = [{:?}]\n{extra}",
            publisher.keys().join("signing.pub").display().to_string(),
            publisher.keys().join("content.key").display().to_string(),
        )
    };
    let config = format!(
        "[updates]\nattempts = 1\n[targets.codex]\nuser_dir = {:?}\n{}{}",
        root.join("home/.codex").display().to_string(),
        channel("org", &org.publisher, &org.packd.url, ""),
        channel(
            "team-payments",
            &machine.publisher,
            &machine.packd.url,
            &format!(
                "builtin_dir = {:?}\n",
                root.join("bundled").display().to_string()
            )
        ),
    );
    std::fs::write(&machine.config, config).unwrap();
    machine
}

/// The text of Codex's AGENTS.md under the machine's home.
fn codex_agents_md(machine: &Machine) -> String {
    std::fs::read_to_string(machine.root().join("home/.codex/AGENTS.md")).unwrap_or_default()
}

/// Waits until Codex's AGENTS.md holds `first` before `second` (the projection follows the
/// link's move, which `run` logs); its text.
fn until_in_order(machine: &Machine, first: &str, second: &str) -> String {
    let started = Instant::now();
    loop {
        let text = codex_agents_md(machine);
        if in_order(&text, first, second) {
            return text;
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "{first} then {second} expected in AGENTS.md:\n{text}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Whether `first` and `second` are both in `text`, `first` before `second`.
fn in_order(text: &str, first: &str, second: &str) -> bool {
    matches!((text.find(first), text.find(second)), (Some(a), Some(b)) if a < b)
}

#[test]
fn an_organisation_and_a_team_channel_reach_codex_at_once_in_order() {
    let Some(codex) = npm_tool(
        "PROMPTPACK_CODEX",
        &format!("codex-{CODEX_VERSION}"),
        "codex",
        CODEX_VERSION,
    ) else {
        return;
    };
    let org = Org::start();
    org.release("3.0.0", "30d");
    let machine = org_and_team(&org);
    machine.release("1.1.0");

    // One `pack-client run` follows both channels: each its own refresh, watch and keys.
    let mut running = client_cmd(&machine.cache(), &machine.config, "1.0.0")
        .args(["--json", "run"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = running.stderr.take().unwrap();
    let (lines, logged) = std::sync::mpsc::channel::<Value>();
    std::thread::spawn(move || {
        use std::io::BufRead as _;
        for line in std::io::BufReader::new(stderr).lines() {
            let Ok(event) = serde_json::from_str(&line.unwrap()) else {
                continue;
            };
            if lines.send(event).is_err() {
                break;
            }
        }
    });
    // Waits for a `files_published` line of each (channel, version), which `run` logs once
    // that channel's link moved; the channels refresh side by side, in either order.
    let until_published = |wanted: &[(&str, &str)]| {
        let mut left: Vec<(&str, &str)> = wanted.to_vec();
        while !left.is_empty() {
            let event = logged
                .recv_timeout(Duration::from_secs(60))
                .unwrap_or_else(|_| panic!("run never published {left:?}"));
            if event["event"] != "files_published" {
                continue;
            }
            left.retain(|(channel, version)| {
                !(event["channel_name"] == *channel
                    && event["dir"].as_str().is_some_and(|d| d.contains(version)))
            });
        }
    };
    until_published(&[("org", "3.0.0"), ("team-payments", "1.1.0")]);
    until_in_order(&machine, "ORG-RULES-3.0.0", "TEAM-RULES-1.1.0");
    let requests = machine.codex(&codex, &model_for_codex(), "Say hello.");
    let text = requests
        .iter()
        .map(Value::to_string)
        .find(|r| r.contains("TEAM-RULES-1.1.0"))
        .expect("the team's text was not sent");
    assert!(
        in_order(&text, "ORG-RULES-3.0.0", "TEAM-RULES-1.1.0"),
        "the organisation's text did not come first: {text}"
    );
    assert!(
        sent(&requests, "ORG-STYLE"),
        "the org's skill was not listed"
    );
    assert!(sent(&requests, "SKILL-RELEASE-NOTES-1.1.0"));

    // The team's next release reaches the same process through its watch; the organisation's
    // text stays first.
    machine.packd.until_watching(1.0);
    machine.release("1.2.0");
    until_published(&[("team-payments", "1.2.0")]);
    let text = until_in_order(&machine, "ORG-RULES-3.0.0", "TEAM-RULES-1.2.0");
    assert!(
        in_order(&text, "ORG-RULES-3.0.0", "TEAM-RULES-1.2.0") && !text.contains("1.1.0"),
        "{text}"
    );
    running.kill().unwrap();
    running.wait().unwrap();

    // One status names both channels, and the block's origins in order.
    let status = machine.status();
    let channels = status["channels"].as_array().unwrap();
    let names: Vec<&Value> = channels.iter().map(|c| &c["name"]).collect();
    assert_eq!(names, [&json!("org"), &json!("team-payments")], "{status}");
    assert_eq!(channels[0]["serving"]["version"], "3.0.0");
    assert_eq!(channels[1]["serving"]["version"], "1.2.0");
    let agents_md = machine.root().join("home/.codex/AGENTS.md");
    let block = channels[1]["targets"]["placed"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["path"] == agents_md.display().to_string())
        .cloned()
        .unwrap_or_default();
    assert_eq!(
        block["from"],
        json!(["org:AGENTS.md@3.0.0", "team-payments:AGENTS.md@1.2.0"]),
        "{status}"
    );
}

#[test]
fn one_channels_failure_leaves_the_other_channels_files_as_they_were() {
    let mut org = Org::start();
    org.release("3.0.0", "30d");
    let machine = org_and_team(&org);
    machine.release("1.1.0");
    let refresh = |machine: &Machine, env: &[(&str, String)]| {
        let mut cmd = client_cmd(&machine.cache(), &machine.config, "1.0.0");
        cmd.arg("refresh").envs(env.iter().map(|(k, v)| (k, v)));
        cmd.output().unwrap()
    };
    let out = refresh(&machine, &[]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = codex_agents_md(&machine);
    assert!(
        in_order(&text, "ORG-RULES-3.0.0", "TEAM-RULES-1.1.0"),
        "{text}"
    );
    let skill = machine.root().join("home/.codex/skills/org-style");
    assert!(
        skill.join("SKILL.md").exists(),
        "the org's skill was not projected"
    );

    // The organisation's server is down: the refresh says so, and nothing projected changes.
    let before = machine.projected();
    org.packd.stop();
    let out = refresh(&machine, &[]);
    assert_eq!(
        out.status.code(),
        Some(3),
        "a failed channel must fail the refresh"
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("org: refresh failed"), "{stderr}");
    assert!(
        !stderr.contains("team-payments: refresh failed"),
        "{stderr}"
    );
    assert_eq!(
        machine.projected(),
        before,
        "a channel that failed changed projected files"
    );

    // Still down, while the team releases: the team's text moves, the organisation's stays
    // as it was projected (its text first, its skill in place).
    machine.release("1.2.0");
    let out = refresh(&machine, &[]);
    assert_eq!(out.status.code(), Some(3));
    let text = codex_agents_md(&machine);
    assert!(
        in_order(&text, "ORG-RULES-3.0.0", "TEAM-RULES-1.2.0")
            && !text.contains("TEAM-RULES-1.1.0"),
        "{text}"
    );
    assert!(
        skill.join("SKILL.md").exists(),
        "the org's skill went with its server"
    );

    // The other way round: the team's document is refused (expired by the client's clock),
    // the organisation's next release goes through, and the team's text stays.
    org.packd.restart();
    org.release("3.1.0", "30d");
    let v1_3 = machine
        .publisher
        .build_edited("1.3.0", "MARKER-1.3.0", |src| {
            std::fs::write(src.join("AGENTS.md"), "TEAM-RULES-1.3.0\n").unwrap();
        });
    machine.packd.upload(&machine.publisher, &v1_3);
    machine.packd.publish(
        &machine.publisher,
        &machine
            .publisher
            .sign(&[format!("*={}", v1_3.display())], "1h"),
    );
    let later = time::OffsetDateTime::now_utc() + time::Duration::hours(2);
    let later = later
        .format(&time::format_description::well_known::Rfc3339)
        .unwrap();
    let out = refresh(&machine, &[("PROMPTPACK_TEST_NOW", later)]);
    assert_eq!(
        out.status.code(),
        Some(3),
        "an expired document was accepted"
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("team-payments: refresh failed"), "{stderr}");
    assert!(!stderr.contains("org: refresh failed"), "{stderr}");
    let text = codex_agents_md(&machine);
    assert!(
        in_order(&text, "ORG-RULES-3.1.0", "TEAM-RULES-1.2.0")
            && !text.contains("ORG-RULES-3.0.0")
            && !text.contains("TEAM-RULES-1.3.0"),
        "{text}"
    );
    // The team's skill is the one it had.
    let skills = machine
        .root()
        .join("home/.codex/skills/release-notes/SKILL.md");
    assert!(
        std::fs::read_to_string(&skills)
            .unwrap()
            .contains("SKILL-RELEASE-NOTES-1.2.0")
    );
}

fn model_for_codex() -> ChatServer {
    ChatServer::start_on(Wire::Responses, codex_script)
}

#[test]
fn codex_enforces_the_requirements_the_pack_ships() {
    let Some(codex) = npm_tool(
        "PROMPTPACK_CODEX",
        &format!("codex-{CODEX_VERSION}"),
        "codex",
        CODEX_VERSION,
    ) else {
        return;
    };
    if !namespaces() {
        return;
    }
    let machine = Machine::new();
    let model = model_for_codex();
    let sandbox = |out: &Output| {
        let text = String::from_utf8_lossy(&out.stderr).into_owned()
            + &String::from_utf8_lossy(&out.stdout);
        text.lines()
            .find_map(|l| l.strip_prefix("sandbox: "))
            .and_then(|mode| mode.split_whitespace().next())
            .map(str::to_string)
            .unwrap_or_else(|| panic!("codex printed no sandbox line:\n{text}"))
    };
    let ask = ["--sandbox", "workspace-write"];
    // Nothing released yet: the bundled pack, which ships no requirements, is projected
    // (any pack-client command does it), and the sandbox asked for is the one used.
    machine.status();
    let (_, out) = machine.codex_with(&codex, &model, "Say hello.", &ask, true);
    assert_eq!(sandbox(&out), "workspace-write");

    // The release's requirements allow only read-only: Codex falls back to it and says why.
    machine.release("1.1.0");
    assert!(machine.refresh().status.success());
    assert_eq!(
        std::fs::read_link(machine.root().join("etc/codex/requirements.toml")).unwrap(),
        machine
            .cache()
            .join("files/current/codex/requirements.toml")
    );
    let (requests, out) = machine.codex_with(&codex, &model, "Say hello.", &ask, true);
    assert_eq!(sandbox(&out), "read-only");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("/etc/codex/requirements.toml"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(sent(&requests, "TEAM-RULES-1.1.0"));
}
