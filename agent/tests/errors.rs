//! What a person sees when `agent` fails: one `error:` line with the cause once (a model
//! server that is not running says "Connection refused"), no backtrace even with
//! `RUST_BACKTRACE=1`, no colour codes when stderr is not a terminal, exit code 1.

use crate::ports;

use std::path::Path;
use std::process::{Command, Output};

fn agent(home: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_agent"))
        .args(args)
        .current_dir(home)
        .env("AGENT_HOME", home)
        .env("RUST_BACKTRACE", "1")
        .env_remove("NO_COLOR")
        .env_remove("AGENT_BASE_URL")
        .env_remove("AGENT_MODEL")
        .env_remove("AGENT_API")
        .env_remove("AGENT_API_KEY")
        .output()
        .unwrap()
}

fn assert_no_report_noise(text: &str) {
    for noise in ["Caused by", "Stack backtrace", "Error: ", "\u{1b}["] {
        assert!(!text.contains(noise), "{noise:?} in {text}");
    }
}

#[test]
fn exec_without_a_model_server_says_connection_refused_once() {
    let home = tempfile::tempdir().unwrap();
    let port = ports::unassigned_port();
    std::fs::write(
        home.path().join("config.toml"),
        format!(
            "provider = \"local\"\n[providers.local]\napi = \"openai\"\n\
             base_url = \"http://127.0.0.1:{port}/v1\"\nmodel = \"m\"\nmax_retries = 1\n\
             max_retry_wait_secs = 0\n"
        ),
    )
    .unwrap();
    let out = agent(home.path(), &["exec", "hello"]);
    assert_eq!(out.status.code(), Some(1));
    let text = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_no_report_noise(&text);
    let url = format!("http://127.0.0.1:{port}/v1/chat/completions");
    let errors: Vec<&str> = text.lines().filter(|l| l.starts_with("error:")).collect();
    // Nothing listens on this machine: no retries, the fix at once.
    assert_eq!(
        errors,
        [format!(
            "error: cannot reach {url}: Connection refused (os error 111): no model server \
             listens there; start one (for llama.cpp: `llama-server -m model.gguf --jinja --port \
             PORT`) or point --base-url, AGENT_BASE_URL or `base_url` in config.toml at the one \
             that runs"
        )]
    );
    assert!(!text.contains("error sending request"), "{text}");
    let last = text.lines().last().unwrap();
    assert!(
        last.starts_with("session ") && last.contains("saved; continue with `agent exec --resume "),
        "{text}"
    );
}

#[test]
fn exec_without_a_model_configured_is_one_line() {
    let home = tempfile::tempdir().unwrap();
    let out = agent(home.path(), &["exec", "hello"]);
    assert_eq!(out.status.code(), Some(1));
    // Everything missing at once.
    assert_eq!(
        String::from_utf8_lossy(&out.stderr),
        "error: model provider: `base_url` and `model` are not set: pass --base-url URL and \
         --model NAME, set AGENT_BASE_URL and AGENT_MODEL, or set `base_url` and `model` under \
         [providers.<id>] in config.toml\n"
    );
}

#[test]
fn packs_refresh_without_a_server_running_says_connection_refused_once() {
    let home = tempfile::tempdir().unwrap();
    let port = ports::unassigned_port();
    std::fs::write(
        home.path().join("config.toml"),
        format!("[updates]\nserver = \"http://127.0.0.1:{port}\"\nattempts = 1\n"),
    )
    .unwrap();
    let out = agent(home.path(), &["packs", "refresh"]);
    // 3: the refresh failed and the previous pack still serves (docs/CLIENT.md, exit codes).
    assert_eq!(out.status.code(), Some(3));
    assert_eq!(
        String::from_utf8_lossy(&out.stderr),
        format!(
            "refresh failed: request to http://127.0.0.1:{port}/v1/channels/stable failed: \
             Connection refused (os error 111)\n"
        )
    );
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("serving: builtin 0.0.0 (builtin)"),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    // Another process sees the failure, with its kind.
    let status = agent(home.path(), &["packs", "status", "--json"]);
    let status: serde_json::Value = serde_json::from_slice(&status.stdout).unwrap();
    assert_eq!(status["last_failure"]["kind"], "unreachable", "{status}");
    assert!(
        status["last_error"]
            .as_str()
            .is_some_and(|e| e.contains("Connection refused")),
        "{status}"
    );
}

#[test]
fn a_missing_trusted_key_file_names_the_path_tried() {
    let home = tempfile::tempdir().unwrap();
    std::fs::write(
        home.path().join("config.toml"),
        "[updates]\nserver = \"http://127.0.0.1:1\"\ntrusted_keys = [\"keys/signing.pub\"]\n",
    )
    .unwrap();
    let out = agent(home.path(), &["packs", "status"]);
    assert_eq!(out.status.code(), Some(1));
    let text = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_no_report_noise(&text);
    let home = std::path::absolute(home.path()).unwrap();
    assert!(
        text.contains(&format!(
            "trusted key \"keys/signing.pub\": key file {}/keys/signing.pub: no such file \
             (relative key paths resolve against {})\n",
            home.display(),
            home.display()
        )),
        "{text}"
    );
    assert_eq!(text.lines().count(), 1, "{text}");
}

#[test]
fn a_missing_trusted_key_still_renders_the_builtin_pack_and_says_why() {
    let home = tempfile::tempdir().unwrap();
    std::fs::write(
        home.path().join("config.toml"),
        "[updates]\nserver = \"http://127.0.0.1:1\"\ntrusted_keys = [\"keys/signing.pub\"]\n",
    )
    .unwrap();
    let out = agent(home.path(), &["prompt"]);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(!out.stdout.is_empty());
    assert_no_report_noise(&stderr);
    let warning = stderr.lines().next().unwrap();
    assert!(
        warning.contains(
            " WARN prompt pack updates are off for this run, serving the built-in pack: "
        ) && warning.contains("keys/signing.pub: no such file"),
        "{stderr}"
    );
    assert!(
        stderr.contains("\npack builtin 0.0.0 (builtin) "),
        "{stderr}"
    );
}

/// Runs `agent exec hello` on a pseudo-terminal (python3's `pty`), returning what it showed.
fn exec_on_a_terminal(home: &Path, no_color: bool) -> String {
    const DRIVER: &str = r#"
import os, pty, sys
pid, fd = pty.fork()
if pid == 0:
    os.execv(sys.argv[1], [sys.argv[1], "exec", "hello"])
seen = b""
while True:
    try:
        chunk = os.read(fd, 4096)
    except OSError:
        break
    if not chunk:
        break
    seen += chunk
os.waitpid(pid, 0)
sys.stdout.write(seen.decode(errors="replace"))
"#;
    let mut command = Command::new("python3");
    command
        .args(["-c", DRIVER, env!("CARGO_BIN_EXE_agent")])
        .env("AGENT_HOME", home)
        .env("TERM", "xterm")
        .env_remove("NO_COLOR")
        .env_remove("AGENT_BASE_URL")
        .env_remove("AGENT_MODEL");
    if no_color {
        command.env("NO_COLOR", "1");
    }
    let out = command.output().unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn colour_only_on_a_terminal_and_never_with_no_color() {
    let home = tempfile::tempdir().unwrap();
    // A model server that is busy: every call answers 503, which is retried with a warning
    // (a refused connection on this machine is not retried: it fails at once).
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        use std::io::{BufRead as _, Read as _, Write as _};
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let mut reader = std::io::BufReader::new(stream.try_clone().unwrap());
            let mut length = 0;
            let mut line = String::new();
            while reader.read_line(&mut line).is_ok_and(|n| n > 2) {
                if let Some(value) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                    length = value.trim().parse().unwrap_or(0);
                }
                line.clear();
            }
            let mut body = vec![0; length];
            let _ = reader.read_exact(&mut body);
            let _ = stream.write_all(
                b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 4\r\nConnection: close\r\n\r\nbusy",
            );
        }
    });
    std::fs::write(
        home.path().join("config.toml"),
        format!(
            "provider = \"local\"\n[providers.local]\napi = \"openai\"\n\
             base_url = \"http://127.0.0.1:{port}/v1\"\nmodel = \"m\"\nmax_retries = 1\n\
             max_retry_wait_secs = 0\n"
        ),
    )
    .unwrap();
    // The retry warning is logged; on a terminal it is coloured...
    let coloured = exec_on_a_terminal(home.path(), false);
    assert!(
        coloured.contains("model call failed, retrying"),
        "{coloured}"
    );
    assert!(coloured.contains("\u{1b}["), "{coloured}");
    // ...unless NO_COLOR is set.
    let plain = exec_on_a_terminal(home.path(), true);
    assert!(plain.contains("model call failed, retrying"), "{plain}");
    assert!(!plain.contains("\u{1b}["), "{plain}");
}

#[test]
fn a_pack_directory_with_problems_lists_every_one() {
    let home = tempfile::tempdir().unwrap();
    let pack = home.path().join("review");
    let builtin = Path::new(env!("CARGO_MANIFEST_DIR")).join("../packs/builtin");
    copy_dir(&builtin, &pack);
    // The same reader as `packer build`: a good directory renders as the remote pack.
    let out = agent(home.path(), &["prompt", "--pack", pack.to_str().unwrap()]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!out.stdout.is_empty());

    let link = pack.join("shared/alias.hbs");
    std::os::unix::fs::symlink(pack.join("shared/persona.hbs"), &link).unwrap();
    let reserved = pack.join("PACK-INDEX.json");
    std::fs::write(&reserved, "{}").unwrap();
    let out = agent(home.path(), &["prompt", "--pack", pack.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    let text = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_no_report_noise(&text);
    assert!(text.contains("2 problem(s)"), "{text}");
    assert!(
        text.contains(&format!("{}: is a symbolic link", link.display())),
        "{text}"
    );
    assert!(
        text.contains(&format!("{}: unsafe name in a pack", reserved.display())),
        "{text}"
    );
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).unwrap();
        }
    }
}

#[test]
fn doctor_reports_the_model_and_the_pack_updates_not_only_the_sandbox() {
    // Nothing configured: each part says what is missing and where to set it.
    let home = tempfile::tempdir().unwrap();
    let out = agent(home.path(), &["doctor"]);
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let config = home.path().join("config.toml");
    assert!(
        text.contains(
            "\nmodel: not configured: `base_url` and `model` are not set: pass --base-url URL and \
             --model NAME, set AGENT_BASE_URL and AGENT_MODEL, or set `base_url` and `model` \
             under [providers.<id>] in config.toml\n"
        ),
        "{text}"
    );
    assert!(
        text.contains(&format!(
            "\nprompt packs: the built-in pack serves; updates off (no [updates] server in {})\n",
            config.display()
        )),
        "{text}"
    );

    // Configured: what exec would call, and where its prompts come from.
    std::fs::write(
        &config,
        "provider = \"local\"\n[providers.local]\napi = \"openai\"\n\
         base_url = \"http://127.0.0.1:8080/v1\"\nmodel = \"qwen3\"\n\
         [updates]\nserver = \"http://127.0.0.1:8470\"\npack = \"prompts\"\nwatch = false\n",
    )
    .unwrap();
    let out = agent(home.path(), &["doctor"]);
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        text.contains(
            "\nmodel: qwen3 at http://127.0.0.1:8080/v1 (openai API, provider local, no API \
             key); `agent exec` fails at once if nothing listens there\n"
        ),
        "{text}"
    );
    assert!(
        text.contains(&format!(
            "\nprompt packs: pack prompts from http://127.0.0.1:8470, channel stable; \
             auto-update on, watch off\n  trusted keys: none, so every channel document is \
             refused: add the publisher's signing.pub to `trusted_keys` under [updates] in {}\n",
            config.display()
        )),
        "{text}"
    );
}
