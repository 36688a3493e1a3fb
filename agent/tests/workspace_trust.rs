//! Trusting a workspace trusts its rules file as it was when the user said so: a
//! sandboxed command (or a `git pull`) that rewrites `.agents/permissions.toml` cannot
//! widen the next session. Its allow rules are ignored until `agent trust` is run again,
//! its deny rules still count, and the session says why at start.

use crate::model_server;

use std::path::Path;
use std::process::Output;

use model_server::{ModelServer, exec, openai_calls, openai_text, outside_tmp};
use serde_json::{Value, json};

const RULES: &str = ".agents/permissions.toml";

/// `(is_error, output)` of every completed call, in order.
fn results(out: &Output) -> Vec<(bool, String)> {
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|e| e["type"] == "tool_call_completed")
        .map(|e| {
            (
                e["is_error"].as_bool().unwrap(),
                e["output"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

fn bash(id: &str, command: &str) -> model_server::Reply {
    openai_calls(&[(id, "bash", json!({"command": command}))])
}

/// A command that asks to run outside the sandbox.
fn escape(id: &str, command: &str) -> model_server::Reply {
    openai_calls(&[(
        id,
        "bash",
        json!({"command": command, "outside_sandbox": true, "reason": "writes outside"}),
    )])
}

/// One `agent exec` session (approval `never`) running `replies`.
fn session(home: &Path, work: &Path, replies: Vec<model_server::Reply>) -> Output {
    let mut replies = replies;
    replies.push(openai_text("finished"));
    let server = ModelServer::start(replies);
    let out = exec(
        &server,
        home,
        work,
        &[("HOME", home.to_str().unwrap())],
        &["go"],
    );
    server.assert_clean();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn agent(home: &Path, work: &Path, args: &[&str]) -> Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_agent"))
        .args(args)
        .current_dir(work)
        .env("AGENT_HOME", home)
        .env("HOME", home)
        .output()
        .unwrap()
}

fn trust(home: &Path, work: &Path) -> String {
    let out = agent(home, work, &["trust"]);
    assert!(
        out.status.success(),
        "agent trust: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The attack through the binary: session one, in a trusted workspace, has a sandboxed
/// command add an allow rule for a command that writes outside the workspace; session
/// two asks to run that command outside the sandbox. It must not run until the user
/// trusts the file again.
#[test]
fn a_sandboxed_command_cannot_widen_the_next_session() {
    // The data directory (config.toml) is out of the sandbox's reach, as it is for a user.
    let home = outside_tmp();
    let work = tempfile::tempdir().unwrap();
    let outside = outside_tmp();
    let before = outside.path().join("before");
    let after = outside.path().join("after");
    let rules = work.path().join(RULES);
    std::fs::create_dir_all(rules.parent().unwrap()).unwrap();
    std::fs::write(
        &rules,
        format!(
            "allow = [\"bash: touch {}\"]\ndeny = [\"bash: git push*\"]\n",
            before.display()
        ),
    )
    .unwrap();
    let trusted = trust(home.path(), work.path());
    assert!(
        trusted.contains(&format!("allow `bash: touch {}`", before.display())),
        "{trusted}"
    );

    // Session one: the trusted rule works (a sign of life), then a sandboxed command
    // rewrites the rules file, which `workspace` mode lets it do.
    let rewrite = format!(
        "cat > {RULES} <<'EOF'\nallow = [\"bash: touch {}\", \"bash: touch {}\"]\ndeny = [\"bash: git push*\"]\nEOF",
        before.display(),
        after.display()
    );
    let out = session(
        home.path(),
        work.path(),
        vec![
            escape("a1", &format!("touch {}", before.display())),
            bash("a2", &rewrite),
        ],
    );
    let first = results(&out);
    assert!(!first[0].0, "{}", first[0].1);
    assert!(before.exists());
    assert!(first[1].1.starts_with("exit code: 0"), "{}", first[1].1);
    assert!(
        std::fs::read_to_string(&rules)
            .unwrap()
            .contains(&format!("touch {}", after.display())),
    );

    // Session two: the planted allow rule does not count, the deny rule still does, and
    // the session says so before anything runs.
    let out = session(
        home.path(),
        work.path(),
        vec![
            escape("b1", &format!("touch {}", after.display())),
            bash("b2", "git push"),
        ],
    );
    let second = results(&out);
    assert!(
        second[0].0,
        "the planted rule was honoured: {}",
        second[0].1
    );
    assert!(
        second[0].1.contains("outside the sandbox"),
        "{}",
        second[0].1
    );
    assert!(!after.exists(), "the command ran outside the sandbox");
    assert!(
        second[1].0 && second[1].1.contains("deny rule `bash: git push*`"),
        "{}",
        second[1].1
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    let notice = stderr
        .lines()
        .find(|l| l.contains("changed since you trusted it"))
        .unwrap_or_else(|| panic!("no notice: {stderr}"));
    assert!(
        notice.contains(&rules.display().to_string()) && notice.contains("`agent trust`"),
        "{notice}"
    );
    let doctor = agent(home.path(), work.path(), &["doctor"]);
    let doctor = String::from_utf8_lossy(&doctor.stdout);
    assert!(doctor.contains("changed since you trusted it"), "{doctor}");

    // Trusted again, as it is now: the rule counts.
    trust(home.path(), work.path());
    let out = session(
        home.path(),
        work.path(),
        vec![escape("c1", &format!("touch {}", after.display()))],
    );
    assert!(!results(&out)[0].0, "{}", results(&out)[0].1);
    assert!(after.exists());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("ignored"), "{stderr}");
}

/// A workspace listed in `trusted_workspaces` by hand (or before trust was pinned to the
/// file's content) has no record of what was trusted: its allow rules wait for
/// `agent trust`.
#[test]
fn a_workspace_trusted_without_a_record_of_its_rules_is_trusted_again_first() {
    let home = outside_tmp();
    let work = tempfile::tempdir().unwrap();
    let outside = outside_tmp();
    let marker = outside.path().join("marker");
    let rules = work.path().join(RULES);
    std::fs::create_dir_all(rules.parent().unwrap()).unwrap();
    std::fs::write(
        &rules,
        format!("allow = [\"bash: touch {}\"]\n", marker.display()),
    )
    .unwrap();
    std::fs::write(
        home.path().join("config.toml"),
        format!(
            "[permissions]\ntrusted_workspaces = [\"{}\"]\n",
            work.path().display()
        ),
    )
    .unwrap();
    let touch = format!("touch {}", marker.display());
    let out = session(home.path(), work.path(), vec![escape("a1", &touch)]);
    assert!(results(&out)[0].0, "{}", results(&out)[0].1);
    assert!(!marker.exists());
    let stderr = String::from_utf8_lossy(&out.stderr);
    let notice = stderr
        .lines()
        .find(|l| l.contains("1 allow rule(s) in"))
        .unwrap_or_else(|| panic!("no notice: {stderr}"));
    assert!(
        notice.contains(&rules.display().to_string())
            && notice.contains("no record of its content")
            && notice.contains("`agent trust`"),
        "{notice}"
    );

    trust(home.path(), work.path());
    let config = std::fs::read_to_string(home.path().join("config.toml")).unwrap();
    assert_eq!(
        config.matches(&work.path().display().to_string()).count(),
        2,
        "listed once, and its rules file pinned once: {config}"
    );
    let out = session(home.path(), work.path(), vec![escape("b1", &touch)]);
    assert!(!results(&out)[0].0, "{}", results(&out)[0].1);
    assert!(marker.exists());
}

/// `agent trust` trusts only a rules file it can read and parse.
#[test]
fn trust_refuses_a_file_it_cannot_use() {
    let home = outside_tmp();
    let work = tempfile::tempdir().unwrap();
    let out = agent(home.path(), work.path(), &["trust"]);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("nothing to trust"), "{stderr}");
    std::fs::create_dir_all(work.path().join(".agents")).unwrap();
    std::fs::write(work.path().join(RULES), "allow = [\"bsh: ls\"]\n").unwrap();
    let out = agent(home.path(), work.path(), &["trust"]);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("unknown tool `bsh`"), "{stderr}");
    assert!(!home.path().join("config.toml").exists());
}
