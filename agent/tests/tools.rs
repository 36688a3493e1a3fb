//! The tools as the model uses them: matching levels and errors of `edit`, CRLF files,
//! `read` pages and cuts, `bash` exit codes and timeouts, ignore-aware `grep` / `glob`.

use std::sync::Arc;
use std::time::Duration;

use agent_runtime::Capabilities;
use agent_runtime::permissions::{
    Approval, Origin, PermissionMode, Permissions, Policy, Rules, Settings,
};
use agent_runtime::provider::ToolCall;
use agent_runtime::tools::{MatchLevel, ToolContext, ToolLimits, ToolOutput, Toolbox, apply_edit};
use serde_json::json;

fn toolbox(dir: &std::path::Path, limits: ToolLimits) -> Toolbox {
    let context = ToolContext::new(dir.to_path_buf(), Policy::unrestricted(dir.to_path_buf()))
        .with_limits(limits);
    Toolbox::new(&Capabilities::everything(), Arc::new(context))
}

async fn call(tools: &Toolbox, name: &str, args: serde_json::Value) -> ToolOutput {
    let (_tx, rx) = tokio::sync::watch::channel(false);
    let call = ToolCall {
        id: "c1".into(),
        name: name.into(),
        arguments: args.to_string(),
    };
    tools.run(&call, rx).await
}

#[test]
fn edit_exact() {
    let out = apply_edit(
        "let a = 1;\nlet b = 2;\n",
        "let b = 2;",
        "let b = 3;",
        false,
    )
    .unwrap();
    assert_eq!(out.text, "let a = 1;\nlet b = 3;\n");
    assert_eq!(out.level, MatchLevel::Exact);
}

#[test]
fn edit_newline_normalised_keeps_crlf() {
    let file = "one\r\ntwo\r\nthree\r\n";
    let out = apply_edit(file, "one\ntwo\n", "uno\ndos\n", false).unwrap();
    assert_eq!(out.level, MatchLevel::Newlines);
    assert_eq!(out.text, "uno\r\ndos\r\nthree\r\n");
}

#[test]
fn edit_exact_in_crlf_file_converts_the_replacement() {
    let out = apply_edit("a\r\nb\r\n", "b", "b\nc", false).unwrap();
    assert_eq!(out.level, MatchLevel::Exact);
    assert_eq!(out.text, "a\r\nb\r\nc\r\n");
}

#[test]
fn edit_whitespace_insensitive() {
    let file = "fn main() {\n    call(a,  b);\n}\n";
    let out = apply_edit(file, "call(a, b);", "call(b, a);", false).unwrap();
    assert_eq!(out.level, MatchLevel::Whitespace);
    assert_eq!(out.text, "fn main() {\n    call(b, a);\n}\n");
}

#[test]
fn edit_line_by_line_reindents_and_drops_read_prefixes() {
    let file = "def f():\n    if x:\n        return 1\n    return 2\n";
    // Copied from `read` output, indentation lost: only a line-level match finds it.
    let out = apply_edit(
        file,
        "2|if x:\n3|    return 1",
        "2|if y:\n3|    return 3",
        false,
    )
    .unwrap();
    assert_eq!(out.level, MatchLevel::Lines);
    assert_eq!(
        out.text,
        "def f():\n    if y:\n        return 3\n    return 2\n"
    );
}

#[test]
fn edit_ambiguity_names_the_lines() {
    let file = "x = 1\ny = 2\nx = 1\n";
    let err = apply_edit(file, "x = 1", "x = 9", false).unwrap_err();
    assert!(err.contains("matches 2 places"), "{err}");
    assert!(err.contains("lines 1, 3"), "{err}");
    let out = apply_edit(file, "x = 1", "x = 9", true).unwrap();
    assert_eq!(
        (out.text.as_str(), out.replaced),
        ("x = 9\ny = 2\nx = 9\n", 2)
    );
}

#[test]
fn edit_no_match_says_where_the_first_line_is() {
    let err = apply_edit("a\nb\nc\n", "b\nzzz", "q", false).unwrap_err();
    assert!(err.contains("not found"), "{err}");
    assert!(err.contains("line 2"), "{err}");
}

#[tokio::test]
async fn edit_tool_requires_a_read_and_keeps_crlf_on_disk() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("win.txt");
    std::fs::write(&path, "alpha\r\nbeta\r\n").unwrap();
    let tools = toolbox(dir.path(), ToolLimits::default());
    let args = json!({"path": path, "old_text": "beta\n", "new_text": "gamma\ndelta\n"});
    let out = call(&tools, "edit", args.clone()).await;
    assert!(
        out.is_error && out.content.contains("read it first"),
        "{out:?}"
    );
    let read = call(&tools, "read", json!({"path": path})).await;
    assert_eq!(read.content, "1|alpha\n2|beta\n");
    let out = call(&tools, "edit", args).await;
    assert!(!out.is_error, "{out:?}");
    assert_eq!(
        std::fs::read(&path).unwrap(),
        b"alpha\r\ngamma\r\ndelta\r\n"
    );
}

#[tokio::test]
async fn read_pages_and_cuts_in_the_middle() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("big.txt");
    let text: String = (1..=500).map(|i| format!("row {i}\n")).collect();
    std::fs::write(&path, &text).unwrap();
    let limits = ToolLimits {
        read_bytes: 1000,
        ..ToolLimits::default()
    };
    let tools = toolbox(dir.path(), limits);
    let page = call(
        &tools,
        "read",
        json!({"path": path, "offset": 10, "limit": 2}),
    )
    .await;
    assert_eq!(
        page.content,
        "10|row 10\n11|row 11\n(lines 10-11 of 500; continue with offset=12)\n"
    );
    let whole = call(&tools, "read", json!({"path": path})).await;
    assert!(whole.content.starts_with("1|row 1\n"));
    assert!(whole.content.contains("500|row 500\n"));
    assert!(
        whole.content.contains("[cut: the original was"),
        "{}",
        whole.content
    );
    let dir_read = call(&tools, "read", json!({"path": dir.path()})).await;
    assert!(dir_read.is_error && dir_read.content.contains("glob"));
}

#[tokio::test]
async fn write_creates_parents_and_protects_unread_files() {
    let dir = tempfile::tempdir().unwrap();
    let tools = toolbox(dir.path(), ToolLimits::default());
    let out = call(
        &tools,
        "write",
        json!({"path": "a/b/new.txt", "content": "hi\n"}),
    )
    .await;
    assert!(!out.is_error, "{out:?}");
    assert_eq!(
        std::fs::read_to_string(dir.path().join("a/b/new.txt")).unwrap(),
        "hi\n"
    );
    std::fs::write(dir.path().join("old.txt"), "keep").unwrap();
    let out = call(&tools, "write", json!({"path": "old.txt", "content": "x"})).await;
    assert!(out.is_error, "{out:?}");
    assert_eq!(
        std::fs::read_to_string(dir.path().join("old.txt")).unwrap(),
        "keep"
    );
}

#[tokio::test]
async fn bash_reports_exit_codes_and_times_out() {
    let dir = tempfile::tempdir().unwrap();
    let tools = toolbox(dir.path(), ToolLimits::default());
    let out = call(
        &tools,
        "bash",
        json!({"command": "echo out; echo err >&2; exit 3"}),
    )
    .await;
    assert_eq!(out.content, "exit code: 3\nstdout:\nout\nstderr:\nerr\n");
    let started = std::time::Instant::now();
    let out = call(
        &tools,
        "bash",
        json!({"command": "sleep 30", "timeout_ms": 200}),
    )
    .await;
    assert!(
        out.is_error && out.content.contains("timed out after 200 ms"),
        "{out:?}"
    );
    assert!(started.elapsed() < Duration::from_secs(10));
    let big = call(&tools, "bash", json!({"command": "seq 1 100000"})).await;
    assert!(big.content.len() < 40_000 && big.content.contains("[cut:"));
    assert!(big.content.contains("100000\n"));
}

#[tokio::test]
async fn grep_and_glob_honour_gitignore() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    std::fs::create_dir_all(root.join("src")).unwrap();
    std::fs::create_dir_all(root.join("target")).unwrap();
    std::fs::write(root.join(".gitignore"), "target/\n").unwrap();
    std::fs::write(root.join("src/lib.rs"), "fn needle() {}\n").unwrap();
    std::fs::write(root.join("src/notes.md"), "needle in notes\n").unwrap();
    std::fs::write(root.join("target/gen.rs"), "fn needle() {}\n").unwrap();
    let tools = toolbox(root, ToolLimits::default());
    let out = call(
        &tools,
        "grep",
        json!({"pattern": "needle", "include": "*.rs"}),
    )
    .await;
    assert_eq!(
        out.content,
        format!(
            "{}:1: fn needle() {{}}\n",
            root.join("src/lib.rs").display()
        )
    );
    let out = call(&tools, "glob", json!({"pattern": "**/*.rs"})).await;
    assert_eq!(
        out.content,
        format!("{}\n", root.join("src/lib.rs").display())
    );
    let out = call(&tools, "grep", json!({"pattern": "("})).await;
    assert!(out.is_error && out.content.contains("invalid regular expression"));
}

#[tokio::test]
async fn mistakes_come_back_with_the_valid_choices() {
    let dir = tempfile::tempdir().unwrap();
    let caps = Capabilities {
        tools: [agent_runtime::ToolId::Read, agent_runtime::ToolId::Grep].into(),
        ..Capabilities::everything()
    };
    let context = ToolContext::new(
        dir.path().to_path_buf(),
        Policy::unrestricted(dir.path().to_path_buf()),
    );
    let tools = Toolbox::new(&caps, Arc::new(context));
    let out = call(&tools, "bash", json!({"command": "true"})).await;
    assert!(out.is_error);
    assert!(
        out.content.contains("available are: read, grep"),
        "{}",
        out.content
    );
    let out = call(&tools, "read", json!({"file": "x"})).await;
    assert!(
        out.is_error && out.content.contains("missing field `path`"),
        "{}",
        out.content
    );
    let full = toolbox(dir.path(), ToolLimits::default());
    let out = call(
        &full,
        "todowrite",
        json!({"items": [{"text": "a", "status": "started"}]}),
    )
    .await;
    assert!(
        out.is_error && out.content.contains("in_progress"),
        "{}",
        out.content
    );
}

/// The schemas the model reads are derived from the argument types the tools parse.
#[test]
fn tool_schemas_say_what_the_parsers_accept() {
    let dir = tempfile::tempdir().unwrap();
    let tools = toolbox(dir.path(), ToolLimits::default());
    let specs = tools.specs(&pack_client::builtin::snapshot()).unwrap();
    let names: Vec<&str> = specs.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, tools.names());
    assert!(names.contains(&"web_fetch"), "{names:?}");
    let schema = |name: &str| {
        specs
            .iter()
            .find(|s| s.name == name)
            .unwrap_or_else(|| panic!("{name} offered"))
            .parameters
            .clone()
    };
    let read = schema("read");
    assert_eq!(read["type"], "object");
    assert_eq!(read["required"], json!(["path"]));
    assert_eq!(read["properties"]["offset"]["type"], "integer");
    assert_eq!(read["properties"]["offset"]["minimum"], 1);
    assert_eq!(
        read["properties"]["path"]["description"],
        "Absolute path of the file."
    );
    assert_eq!(schema("web_fetch")["required"], json!(["url"]));
    let bash = schema("bash");
    assert_eq!(bash["properties"]["outside_sandbox"]["type"], "boolean");
    assert_eq!(bash["required"], json!(["command"]));
    let todo = schema("todowrite");
    assert_eq!(
        todo["properties"]["items"]["items"]["properties"]["status"]["enum"],
        json!(["pending", "in_progress", "done"])
    );
    for spec in &specs {
        let text = spec.parameters.to_string();
        // Optional fields are left out, never sent as null; nothing refers elsewhere.
        assert!(!text.contains("null"), "{}: {text}", spec.name);
        assert!(!text.contains("$ref"), "{}: {text}", spec.name);
    }
}

/// A tool context has no policy of its own: the one it is built with decides every call.
#[tokio::test]
async fn a_tool_context_runs_under_the_policy_it_is_given() {
    let work = tempfile::tempdir().unwrap();
    let elsewhere = tempfile::tempdir().unwrap();
    let settings = Settings {
        mode: PermissionMode::Workspace,
        mode_origin: Origin::Default("this test"),
        approval: Approval::Never,
        approval_origin: Origin::Default("this test"),
        network: false,
        writable: Vec::new(),
        rules: Rules::default(),
        protected: Vec::new(),
    };
    let permissions = Permissions::new(
        work.path().to_path_buf(),
        settings,
        agent_runtime::sandbox::Sandbox::Unavailable {
            reason: "not needed".to_string(),
        },
        None,
    );
    let policy = Policy::new(Arc::new(permissions));
    let context = ToolContext::new(work.path().to_path_buf(), policy);
    let tools = Toolbox::new(&Capabilities::everything(), Arc::new(context));
    let inside = work.path().join("in.txt");
    let out = call(&tools, "write", json!({"path": inside, "content": "x"})).await;
    assert!(!out.is_error, "{}", out.content);
    let beyond = elsewhere.path().join("out.txt");
    let out = call(&tools, "write", json!({"path": beyond, "content": "x"})).await;
    assert!(
        out.is_error
            && out
                .content
                .contains("outside the `workspace` mode (the default for this test)"),
        "{}",
        out.content
    );
    assert!(!beyond.exists());
}
