//! `[files]` in the config and `pack-client render` with no server: a bad table is refused
//! with what was wrong and where, the view of the built-in pack appears on first use, and
//! `--vars` reads JSON from the argument, a file or stdin.

use std::io::Write as _;
use std::path::Path;
use std::process::{Command, Output, Stdio};

fn pack_client(dir: &Path, args: &[&str], stdin: Option<&str>) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_pack-client"))
        .args(["--cache", "cache", "--config", "client.toml"])
        .args(args)
        .current_dir(dir)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut input = child.stdin.take().unwrap();
    input.write_all(stdin.unwrap_or("").as_bytes()).unwrap();
    drop(input);
    child.wait_with_output().unwrap()
}

fn with_config(text: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("client.toml"), text).unwrap();
    dir
}

#[test]
fn a_bad_files_table_is_refused_with_the_key_and_the_allowed_range() {
    let dir = with_config("[files]\ngrace_secs = 0\n");
    let out = pack_client(dir.path(), &["status"], None);
    assert_eq!(out.status.code(), Some(1));
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(
        said.contains(
            "client.toml: [files]: grace_secs must be between 1 and 604800 (a week), found 0"
        ),
        "{said}"
    );
    assert!(!dir.path().join("cache/files").exists());

    let dir = with_config("[files]\nlink = \"../elsewhere\"\n");
    let out = pack_client(dir.path(), &["status"], None);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("[files]: invalid link"));

    let dir = with_config("[files]\ngrace = 5\n");
    let out = pack_client(dir.path(), &["status"], None);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown field `grace`"));
}

#[test]
fn the_view_of_the_builtin_pack_appears_on_first_use_under_the_configured_link() {
    let dir = with_config("[files]\nlink = \"prompts\"\n");
    let out = pack_client(dir.path(), &["status"], None);
    assert!(out.status.success(), "{out:?}");
    let link = dir.path().join("cache/files/prompts");
    let target = std::fs::read_link(&link).unwrap();
    assert!(
        target.to_string_lossy().starts_with("builtin-0.0.0-"),
        "{}",
        target.display()
    );
    let said = String::from_utf8_lossy(&out.stdout);
    let resolved = std::fs::canonicalize(&link).unwrap();
    assert!(
        said.contains(&format!(
            "files     {} -> {}",
            std::path::absolute(&link).unwrap().display(),
            resolved.display()
        )),
        "{said}"
    );
    // Turned off again: nothing moves, nothing new is written.
    std::fs::write(dir.path().join("client.toml"), "[files]\nenabled = false\n").unwrap();
    let out = pack_client(dir.path(), &["--json", "status"], None);
    let status: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(status["files"], serde_json::Value::Null);
    assert_eq!(std::fs::read_link(&link).unwrap(), target);
}

#[test]
fn render_reads_its_variables_from_the_argument_a_file_or_stdin() {
    let dir = with_config("");
    std::fs::write(
        dir.path().join("vars.json"),
        r#"{"data_dir": "/from/file"}"#,
    )
    .unwrap();
    for (vars, stdin, expected) in [
        (r#"{"data_dir": "/from/arg"}"#, None, "/from/arg"),
        ("@vars.json", None, "/from/file"),
        ("-", Some(r#"{"data_dir": "/from/stdin"}"#), "/from/stdin"),
    ] {
        let out = pack_client(
            dir.path(),
            &["render", "shared/memory.hbs", "--vars", vars],
            stdin,
        );
        assert!(out.status.success(), "{vars}: {out:?}");
        let text = String::from_utf8(out.stdout).unwrap();
        assert!(
            text.contains(&format!("(stored under {expected})")),
            "{text}"
        );
    }
    // Held to the contract: the names it lists, the shapes it gives.
    for (vars, said) in [
        (
            r#"{"data_dir": 5}"#,
            "data_dir must be a string, found a number",
        ),
        (
            r#"{"data-dir": "/x"}"#,
            "data-dir is not in the contract; the top level has ",
        ),
    ] {
        let out = pack_client(
            dir.path(),
            &["render", "shared/memory.hbs", "--vars", vars],
            None,
        );
        assert_eq!(out.status.code(), Some(1), "{vars}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.starts_with("error: --vars: variables do not fit the contract of schema 1: ")
                && stderr.contains(said),
            "{stderr}"
        );
        assert!(out.stdout.is_empty());
    }
    let out = pack_client(
        dir.path(),
        &["render", "shared/memory.hbs", "--vars", "@missing.json"],
        None,
    );
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("missing.json: No such file"));
    let out = pack_client(
        dir.path(),
        &["render", "shared/memory.hbs", "--vars", "\"just a string\""],
        None,
    );
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr)
            .contains("must be a JSON object of variables, found a string")
    );
}
