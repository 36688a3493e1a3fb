//! Live context through the real binary: instruction files and skills changed mid-run are
//! in the next request, a nested AGENTS.md arrives with the first read below it, the
//! workspace's notes feed the memory layer, and the model is warned before its step limit.

use crate::model_server;

use model_server::{ModelServer, exec, openai_calls, openai_text, system_of};
use serde_json::json;

fn tool_results(request: &model_server::Recorded) -> Vec<String> {
    request.body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| m["content"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn instruction_files_skills_and_notes_changed_mid_run_are_in_the_next_request() {
    let home = tempfile::tempdir().unwrap();
    let work = tempfile::tempdir().unwrap();
    std::fs::write(work.path().join("AGENTS.md"), "Indent with tabs.\n").unwrap();
    let skill = work.path().join(".agents/skills/deploy");
    let script = format!(
        "printf 'Indent with four spaces.\\n' > AGENTS.md && mkdir -p {dir} && printf -- '---\\nname: deploy\\ndescription: Ships the build to staging.\\n---\\nRun make deploy.\\n' > {dir}/SKILL.md",
        dir = skill.display()
    );
    let server = ModelServer::start(vec![
        openai_calls(&[("b1", "bash", json!({"command": script}))]),
        openai_calls(&[(
            "n1",
            "record_note",
            json!({"content": "The tests need REDIS_URL set.", "category": "build"}),
        )]),
        openai_text("done"),
    ]);
    let out = exec(&server, home.path(), work.path(), &[], &["set things up"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let requests = server.requests();
    let first = system_of(&requests[0]);
    assert!(first.contains("Indent with tabs."), "{first}");
    assert!(!first.contains("# Memory"), "no notes yet: {first}");
    let second = system_of(&requests[1]);
    assert!(
        second.contains("Indent with four spaces.") && !second.contains("Indent with tabs."),
        "{second}"
    );
    assert!(
        second.contains("deploy"),
        "the new skill is in the catalog: {second}"
    );
    let third = system_of(&requests[2]);
    assert!(third.contains("# Memory"), "{third}");
    assert!(
        third.contains("- (build) The tests need REDIS_URL set."),
        "{third}"
    );
}

#[test]
fn a_nested_agents_md_arrives_once_with_the_first_read_below_it() {
    let home = tempfile::tempdir().unwrap();
    let work = tempfile::tempdir().unwrap();
    let sub = work.path().join("crates/parser");
    std::fs::create_dir_all(&sub).unwrap();
    std::fs::write(
        sub.join("AGENTS.md"),
        "Parser rule: no panics, return errors.\n",
    )
    .unwrap();
    std::fs::write(sub.join("lib.rs"), "pub fn parse() {}\n").unwrap();
    std::fs::write(sub.join("error.rs"), "pub enum Error {}\n").unwrap();
    std::fs::write(work.path().join("top.rs"), "fn main() {}\n").unwrap();
    let read = |id: &str, path: &std::path::Path| {
        (id.to_string(), json!({"path": path.display().to_string()}))
    };
    let (a, a_args) = read("r1", &work.path().join("top.rs"));
    let (b, b_args) = read("r2", &sub.join("lib.rs"));
    let (c, c_args) = read("r3", &sub.join("error.rs"));
    let server = ModelServer::start(vec![
        openai_calls(&[(&a, "read", a_args)]),
        openai_calls(&[(&b, "read", b_args)]),
        openai_calls(&[(&c, "read", c_args)]),
        openai_text("read them"),
    ]);
    let out = exec(&server, home.path(), work.path(), &[], &["read the parser"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let results = tool_results(server.requests().last().unwrap());
    assert!(!results[0].contains("Parser rule"), "{}", results[0]);
    assert!(
        results[1].contains("<system-reminder>")
            && results[1].contains(&format!(
                "Instructions from {}",
                sub.join("AGENTS.md").display()
            ))
            && results[1].contains("Parser rule: no panics"),
        "{}",
        results[1]
    );
    assert!(
        !results[2].contains("Parser rule"),
        "attached once per session: {}",
        results[2]
    );
}

#[test]
fn the_model_is_warned_two_steps_before_its_step_limit() {
    let home = tempfile::tempdir().unwrap();
    let work = tempfile::tempdir().unwrap();
    let replies = (0..4)
        .map(|i| openai_calls(&[(&format!("g{i}"), "glob", json!({"pattern": "*"}))]))
        .collect();
    let server = ModelServer::start(replies);
    let out = exec(
        &server,
        home.path(),
        work.path(),
        &[],
        &["--max-steps", "4", "keep globbing"],
    );
    assert!(!out.status.success(), "the step limit ends the run");
    let requests = server.requests();
    let warned = |i: usize| {
        requests[i].body["messages"]
            .to_string()
            .contains("You have 2 model calls left")
    };
    assert!(!warned(1));
    assert!(warned(2), "{}", requests[2].body["messages"]);
}

#[test]
fn a_helper_reads_instruction_files_as_they_are_when_it_starts_and_at_each_turn() {
    let home = tempfile::tempdir().unwrap();
    let work = tempfile::tempdir().unwrap();
    std::fs::write(work.path().join("AGENTS.md"), "Indent with tabs.\n").unwrap();
    let rewrite = |text: &str| json!({"command": format!("printf '{text}\\n' > AGENTS.md")});
    let server = ModelServer::start(vec![
        // The parent edits AGENTS.md after its session started, then starts a helper.
        openai_calls(&[("b1", "bash", rewrite("Indent with four spaces."))]),
        openai_calls(&[(
            "t1",
            "task",
            json!({"agent": "worker", "task": "Tidy the indentation."}),
        )]),
        // The helper edits it again mid-run.
        openai_calls(&[("b2", "bash", rewrite("Indent with two spaces."))]),
        openai_text("Tidied."),
        openai_text("The worker tidied it."),
    ]);
    let out = exec(&server, home.path(), work.path(), &[], &["tidy up"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    server.assert_clean();
    let requests = server.requests();
    assert!(system_of(&requests[0]).contains("Indent with tabs."));
    let helper_first = system_of(&requests[2]);
    assert!(helper_first.contains("You are `worker`"), "{helper_first}");
    assert!(
        helper_first.contains("Indent with four spaces.")
            && !helper_first.contains("Indent with tabs."),
        "the helper starts with the file as it is now: {helper_first}"
    );
    let helper_second = system_of(&requests[3]);
    assert!(
        helper_second.contains("Indent with two spaces.")
            && !helper_second.contains("Indent with four spaces."),
        "and reads it again when it changes: {helper_second}"
    );
}
