//! Permission modes, rules and helpers through the real `agent exec` and the scripted
//! model: what is refused says which rule refused it, deny beats allow, a workspace cannot
//! grant itself anything, and a helper never gets more than its parent.

use crate::model_server;

use std::path::{Path, PathBuf};
use std::process::Output;

use model_server::{ModelServer, exec, openai_calls, openai_text, outside_tmp};
use serde_json::{Value, json};

/// `(tool, is_error, output)` of every completed call, in order.
fn results(out: &Output) -> Vec<(String, bool, String)> {
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|e| e["type"] == "tool_call_completed")
        .map(|e| {
            (
                e["name"].as_str().unwrap().to_string(),
                e["is_error"].as_bool().unwrap(),
                e["output"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

fn config(home: &Path, text: &str) {
    std::fs::write(home.join("config.toml"), text).unwrap();
}

fn write_call(id: &str, path: &Path) -> (String, String, Value) {
    (
        id.to_string(),
        "write".to_string(),
        json!({"path": path, "content": "x\n"}),
    )
}

fn calls(list: &[(String, String, Value)]) -> model_server::Reply {
    let borrowed: Vec<(&str, &str, Value)> = list
        .iter()
        .map(|(id, name, args)| (id.as_str(), name.as_str(), args.clone()))
        .collect();
    openai_calls(&borrowed)
}

fn run(home: &Path, work: &Path, replies: Vec<model_server::Reply>, args: &[&str]) -> Output {
    let server = ModelServer::start(replies);
    let out = exec(&server, home, work, &[], args);
    server.assert_clean();
    out
}

#[test]
fn read_only_refuses_write_and_names_the_mode_and_where_it_was_set() {
    let home = tempfile::tempdir().unwrap();
    let work = tempfile::tempdir().unwrap();
    let target = work.path().join("new.txt");
    let out = run(
        home.path(),
        work.path(),
        vec![calls(&[write_call("w1", &target)]), openai_text("ok")],
        &["--permissions", "read-only", "write it"],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let results = results(&out);
    let (_, is_error, message) = &results[0];
    assert!(*is_error, "{message}");
    assert!(
        message.contains("the `read-only` mode allows no writes (set by --permissions)"),
        "{message}"
    );
    assert!(message.contains("approval policy is `never`"), "{message}");
    assert!(
        message.contains(&format!("write: {}", target.display())),
        "{message}"
    );
    assert!(!target.exists());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("permissions: read-only · approval never"),
        "{stderr}"
    );
}

#[test]
fn workspace_mode_writes_inside_and_refuses_outside() {
    let home = tempfile::tempdir().unwrap();
    let work = tempfile::tempdir().unwrap();
    let outside = outside_tmp();
    let inside = work.path().join("sub/in.txt");
    let beyond = outside.path().join("out.txt");
    let out = run(
        home.path(),
        work.path(),
        vec![
            calls(&[write_call("w1", &inside)]),
            calls(&[write_call("w2", &beyond)]),
            openai_text("ok"),
        ],
        &["write both"],
    );
    let results = results(&out);
    assert!(!results[0].1, "{}", results[0].2);
    assert_eq!(std::fs::read_to_string(&inside).unwrap(), "x\n");
    assert!(results[1].1);
    assert!(
        results[1]
            .2
            .contains("outside the `workspace` mode (the default for `agent exec`)"),
        "{}",
        results[1].2
    );
    assert!(!beyond.exists());
}

/// A symlink in the workspace that points outside is judged by where it points, also
/// when its target does not exist yet (writing through it would create the target).
#[test]
fn a_link_out_of_the_workspace_does_not_carry_writes_out() {
    let home = tempfile::tempdir().unwrap();
    let work = tempfile::tempdir().unwrap();
    let outside = outside_tmp();
    std::os::unix::fs::symlink(outside.path(), work.path().join("escape")).unwrap();
    let dangling = outside.path().join("created-through-a-link.txt");
    std::os::unix::fs::symlink(&dangling, work.path().join("notes.txt")).unwrap();
    let out = run(
        home.path(),
        work.path(),
        vec![
            calls(&[write_call("w1", &work.path().join("escape/planted.txt"))]),
            calls(&[write_call("w2", &work.path().join("notes.txt"))]),
            openai_text("ok"),
        ],
        &["write"],
    );
    let results = results(&out);
    assert!(results[0].1, "{}", results[0].2);
    assert!(!outside.path().join("planted.txt").exists());
    assert!(results[1].1, "{}", results[1].2);
    assert!(
        results[1].2.contains("outside the `workspace` mode"),
        "{}",
        results[1].2
    );
    assert!(!dangling.exists());
}

#[test]
fn deny_beats_allow() {
    let home = tempfile::tempdir().unwrap();
    let work = tempfile::tempdir().unwrap();
    let outside = outside_tmp();
    let dir = outside.path().display();
    config(
        home.path(),
        &format!(
            "[permissions]\nallow = [\"write: {dir}/*\"]\ndeny = [\"write: {dir}/secret*\", \"write: *.env\"]\n"
        ),
    );
    let allowed = outside.path().join("notes.txt");
    let denied = outside.path().join("secret.txt");
    let inside_env = work.path().join(".env");
    // A link with an innocent name is judged by what it points at.
    std::os::unix::fs::symlink(&inside_env, work.path().join("settings")).unwrap();
    let disguised = work.path().join("settings");
    let out = run(
        home.path(),
        work.path(),
        vec![
            calls(&[write_call("w1", &allowed)]),
            calls(&[write_call("w2", &denied)]),
            calls(&[write_call("w3", &inside_env)]),
            calls(&[write_call("w4", &disguised)]),
            openai_text("ok"),
        ],
        &["write"],
    );
    let results = results(&out);
    // The allow rule carries a write outside the workspace...
    assert!(!results[0].1, "{}", results[0].2);
    assert!(allowed.exists());
    // ...but the more specific deny rule wins over it,
    assert!(results[1].1);
    assert!(
        results[1]
            .2
            .contains(&format!("refused by the deny rule `write: {dir}/secret*`")),
        "{}",
        results[1].2
    );
    assert!(results[1].2.contains("config.toml"), "{}", results[1].2);
    assert!(!denied.exists());
    // and a deny rule refuses even what the mode allows.
    assert!(
        results[2].1 && results[2].2.contains("`write: *.env`"),
        "{}",
        results[2].2
    );
    assert!(
        results[3].1 && results[3].2.contains("`write: *.env`"),
        "a link got a denied write through: {}",
        results[3].2
    );
    assert!(!inside_env.exists());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&format!("write allowed by the rule `write: {dir}/*`")),
        "{stderr}"
    );
}

/// The workspace's rules file can deny, but allows only once the user trusts it
/// (`agent trust`); and the agent's file tools cannot rewrite it.
#[test]
fn a_workspace_cannot_grant_itself_anything() {
    let home = tempfile::tempdir().unwrap();
    let work = tempfile::tempdir().unwrap();
    let outside = outside_tmp();
    let beyond = outside.path().join("granted.txt");
    std::fs::create_dir_all(work.path().join(".agents")).unwrap();
    let rules = work.path().join(".agents/permissions.toml");
    std::fs::write(
        &rules,
        format!(
            "allow = [\"write: {}/*\"]\ndeny = [\"write: *.lock\"]\n",
            outside.path().display()
        ),
    )
    .unwrap();
    let script = |id: &str| {
        vec![
            calls(&[write_call(&format!("{id}1"), &beyond)]),
            calls(&[write_call(
                &format!("{id}2"),
                &work.path().join("Cargo.lock"),
            )]),
            calls(&[write_call(&format!("{id}3"), &rules)]),
            openai_text("ok"),
        ]
    };
    let out = run(home.path(), work.path(), script("a"), &["go"]);
    let first = results(&out);
    assert!(first[0].1, "untrusted allow rule used: {}", first[0].2);
    assert!(!beyond.exists());
    assert!(
        first[1].1 && first[1].2.contains("`write: *.lock`"),
        "{}",
        first[1].2
    );
    assert!(
        first[2].1 && first[2].2.contains("permission rules"),
        "{}",
        first[2].2
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("1 allow rule(s) in"), "{stderr}");

    // Trusted (as the file is now): the allow rule counts; the rules file stays the
    // user's to change.
    let trusted = std::process::Command::new(env!("CARGO_BIN_EXE_agent"))
        .arg("trust")
        .current_dir(work.path())
        .env("AGENT_HOME", home.path())
        .output()
        .unwrap();
    assert!(
        trusted.status.success(),
        "{}",
        String::from_utf8_lossy(&trusted.stderr)
    );
    let out = run(home.path(), work.path(), script("b"), &["go"]);
    let second = results(&out);
    assert!(!second[0].1, "{}", second[0].2);
    assert!(beyond.exists());
    assert!(second[2].1, "{}", second[2].2);
    assert!(std::fs::read_to_string(&rules).unwrap().contains("allow"));
}

/// A helper runs with its parent's mode at most: a worker, and a custom agent whose file
/// asks for `full`, both stay read-only under a read-only parent.
#[test]
fn a_helper_cannot_widen_its_parents_mode() {
    let home = tempfile::tempdir().unwrap();
    let work = tempfile::tempdir().unwrap();
    let agents = home.path().join("agents/fixer");
    std::fs::create_dir_all(&agents).unwrap();
    std::fs::write(
        agents.join("agent.md"),
        "---\ndescription: Fixes things.\npermissions: full\n---\nYou fix things.\n",
    )
    .unwrap();
    let by_worker = work.path().join("worker.txt");
    let by_fixer = work.path().join("fixer.txt");
    let out = run(
        home.path(),
        work.path(),
        vec![
            openai_calls(&[(
                "m1",
                "task",
                json!({"agent": "worker", "task": "Write worker.txt."}),
            )]),
            calls(&[write_call("c1", &by_worker)]),
            openai_text("could not write"),
            openai_calls(&[(
                "m2",
                "task",
                json!({"agent": "fixer", "task": "Write fixer.txt."}),
            )]),
            calls(&[write_call("c2", &by_fixer)]),
            openai_text("could not write either"),
            openai_text("Neither helper could write."),
        ],
        &["--permissions", "read-only", "delegate"],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!by_worker.exists() && !by_fixer.exists());
    // The helpers' own sessions hold the refusals.
    for n in [1, 2] {
        let session = std::fs::read_dir(home.path().join("sessions"))
            .unwrap()
            .map(|e| e.unwrap().path())
            .find(|p| p.to_string_lossy().ends_with(&format!(".task-{n}.jsonl")))
            .unwrap();
        let text = std::fs::read_to_string(&session).unwrap();
        assert!(
            text.contains(
                "the `read-only` mode allows no writes (inherited from mavis, set by --permissions)"
            ),
            "{text}"
        );
    }
}

#[test]
fn yolo_is_full_and_says_so_loudly() {
    let home = tempfile::tempdir().unwrap();
    let work = tempfile::tempdir().unwrap();
    let outside = outside_tmp();
    let beyond = outside.path().join("yolo.txt");
    let out = run(
        home.path(),
        work.path(),
        vec![calls(&[write_call("w1", &beyond)]), openai_text("ok")],
        &["--yolo", "write"],
    );
    assert!(!results(&out)[0].1);
    assert!(beyond.exists());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("--yolo: NO SANDBOX, NO QUESTIONS"),
        "{stderr}"
    );
}

#[test]
fn bad_rules_stop_the_run_with_the_file_and_the_rule() {
    let home = tempfile::tempdir().unwrap();
    let work = tempfile::tempdir().unwrap();
    config(home.path(), "[permissions]\ndeny = [\"bsh: rm*\"]\n");
    let server = ModelServer::start(vec![]);
    let out = exec(&server, home.path(), work.path(), &[], &["go"]);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("config.toml"), "{stderr}");
    assert!(stderr.contains("unknown tool `bsh`"), "{stderr}");
    assert!(server.requests().is_empty());

    let config_path: PathBuf = home.path().join("config.toml");
    std::fs::write(&config_path, "[permissions]\nmode = \"everything\"\n").unwrap();
    let out = exec(&server, home.path(), work.path(), &[], &["go"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && stderr.contains("unknown variant `everything`"),
        "{stderr}"
    );
}

/// The `toml` blocks of a Markdown section, in order.
fn toml_blocks(doc: &str, heading: &str) -> Vec<String> {
    let start = doc
        .find(heading)
        .unwrap_or_else(|| panic!("no {heading:?}"));
    let section = &doc[start + heading.len()..];
    let section = &section[..section.find("\n## ").unwrap_or(section.len())];
    section
        .split("```toml\n")
        .skip(1)
        .map(|b| b[..b.find("```").unwrap()].to_string())
        .collect()
}

/// The configuration the README and docs/SAFETY.md show is accepted as written, and
/// `agent doctor` reports it back with where each rule came from.
#[test]
fn the_documented_config_works_as_written() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    let safety = std::fs::read_to_string(root.join("docs/SAFETY.md")).unwrap();
    let readme_blocks = toml_blocks(&readme, "## Safety");
    let doc_blocks = toml_blocks(&safety, "## Rules");
    let web_blocks = toml_blocks(&safety, "## `web_fetch`");
    assert_eq!(
        (readme_blocks.len(), doc_blocks.len(), web_blocks.len()),
        (1, 2, 1)
    );
    for (config_text, workspace_rules) in [
        (readme_blocks[0].clone(), None),
        (
            format!("{}\n{}", doc_blocks[0], web_blocks[0]),
            Some(doc_blocks[1].clone()),
        ),
    ] {
        let home = tempfile::tempdir().unwrap();
        let work = tempfile::tempdir().unwrap();
        config(home.path(), &config_text);
        if let Some(rules) = workspace_rules {
            std::fs::create_dir_all(work.path().join(".agents")).unwrap();
            std::fs::write(work.path().join(".agents/permissions.toml"), rules).unwrap();
        }
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_agent"))
            .arg("doctor")
            .current_dir(work.path())
            .env("AGENT_HOME", home.path())
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{config_text}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(stdout.contains("deny `bash: git push*` (from "), "{stdout}");
        assert!(stdout.contains("sandbox: Landlock ABI"), "{stdout}");
        assert!(
            stdout.contains("unattended (`agent exec`): workspace"),
            "{stdout}"
        );
    }
}
