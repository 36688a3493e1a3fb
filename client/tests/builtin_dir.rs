//! `[updates] builtin_dir`: an app's own bundled prompts, read from a directory when the
//! client opens, serve where the compiled-in pack would — and a directory that would not
//! build as `packs/builtin` stops the client with every problem named.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn pack_client(dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_pack-client"))
        .args(["--cache", "cache", "--config", "client.toml"])
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap()
}

fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_tree(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).unwrap();
        }
    }
}

/// A config naming `bundled/` (relative to the config file), and that directory: the
/// repository's built-in pack with a line added to the memory template and an extra file.
fn app() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let bundled = dir.path().join("bundled");
    copy_tree(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("../packs/builtin"),
        &bundled,
    );
    let memory = bundled.join("shared/memory.hbs");
    let text = std::fs::read_to_string(&memory).unwrap();
    std::fs::write(&memory, format!("{text}\nBUNDLED BY THE APP\n")).unwrap();
    std::fs::create_dir_all(bundled.join("opencode")).unwrap();
    std::fs::write(
        bundled.join("opencode/system.md"),
        "You are the app's agent.\n",
    )
    .unwrap();
    std::fs::write(
        dir.path().join("client.toml"),
        "[updates]\nbuiltin_dir = \"bundled\"\n",
    )
    .unwrap();
    (dir, bundled)
}

#[test]
fn the_bundled_directory_serves_instead_of_the_compiled_in_pack() {
    let (dir, _) = app();
    let out = pack_client(
        dir.path(),
        &[
            "render",
            "shared/memory.hbs",
            "--vars",
            r#"{"data_dir": "/d"}"#,
        ],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("BUNDLED BY THE APP"));

    let out = pack_client(dir.path(), &["show", "opencode/system.md"]);
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "You are the app's agent.\n"
    );

    // Its digest is its own, not the compiled-in pack's.
    let status = |dir: &Path| -> serde_json::Value {
        serde_json::from_slice(&pack_client(dir, &["--json", "status"]).stdout).unwrap()
    };
    let bundled = status(dir.path());
    let plain = tempfile::tempdir().unwrap();
    std::fs::write(plain.path().join("client.toml"), "").unwrap();
    let compiled_in = status(plain.path());
    assert_eq!(bundled["serving"]["source"], "builtin");
    assert_ne!(
        bundled["serving"]["sha256"],
        compiled_in["serving"]["sha256"]
    );
}

#[test]
fn the_compiled_in_files_from_a_directory_give_the_compiled_in_digest() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("client.toml"),
        format!(
            "[updates]\nbuiltin_dir = {:?}\n",
            Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../packs/builtin")
                .display()
                .to_string()
        ),
    )
    .unwrap();
    let from_dir: serde_json::Value =
        serde_json::from_slice(&pack_client(dir.path(), &["--json", "status"]).stdout).unwrap();
    let plain = tempfile::tempdir().unwrap();
    std::fs::write(plain.path().join("client.toml"), "").unwrap();
    let compiled_in: serde_json::Value =
        serde_json::from_slice(&pack_client(plain.path(), &["--json", "status"]).stdout).unwrap();
    assert_eq!(
        from_dir["serving"]["sha256"],
        compiled_in["serving"]["sha256"]
    );
}

#[test]
fn a_bundled_directory_missing_a_required_template_stops_the_client_naming_it() {
    let (dir, bundled) = app();
    std::fs::remove_file(bundled.join("shared/persona.hbs")).unwrap();
    let out = pack_client(dir.path(), &["status"]);
    assert_eq!(out.status.code(), Some(1));
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(said.contains("built-in pack"), "{said}");
    assert!(said.contains("shared/persona.hbs"), "{said}");
    assert!(said.contains("missing"), "{said}");
}

#[test]
fn a_bundled_template_outside_the_contract_stops_the_client_naming_it() {
    let (dir, bundled) = app();
    std::fs::write(bundled.join("shared/memory.hbs"), "{{no_such_variable}}\n").unwrap();
    let out = pack_client(dir.path(), &["status"]);
    assert_eq!(out.status.code(), Some(1));
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(said.contains("shared/memory.hbs"), "{said}");
    assert!(said.contains("no_such_variable"), "{said}");
}

#[test]
fn a_bundled_directory_that_does_not_exist_is_named() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("client.toml"),
        "[updates]\nbuiltin_dir = \"nowhere\"\n",
    )
    .unwrap();
    let out = pack_client(dir.path(), &["status"]);
    assert_eq!(out.status.code(), Some(1));
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(
        said.contains("nowhere") && said.contains("not a directory"),
        "{said}"
    );
}

/// A directory of `files` (path, text) beside a config with `updates` in `[updates]`.
fn plain(updates: &str, files: &[(&str, &str)]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for (path, text) in files {
        let path = dir.path().join("bundled").join(path);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }
    std::fs::write(
        dir.path().join("client.toml"),
        format!("[updates]\nbuiltin_dir = \"bundled\"\n{updates}\n[files]\n"),
    )
    .unwrap();
    dir
}

#[test]
fn a_client_of_plain_files_serves_a_bundled_directory_of_them_checked_as_packer_would() {
    // The first start with nothing cached is managed: the bundled plain files serve, with no
    // template anywhere.
    let dir = plain(
        "contract = \"files\"",
        &[
            ("AGENTS.md", "Team rules.\n"),
            (
                "skills/review/SKILL.md",
                "---\nname: review\ndescription: Review a diff.\n---\nRead it.\n",
            ),
        ],
    );
    let out = pack_client(dir.path(), &["status"]);
    assert!(out.status.success(), "{out:?}");
    assert_eq!(
        std::fs::read_to_string(dir.path().join("cache/files/current/AGENTS.md")).unwrap(),
        "Team rules.\n"
    );
    // Without `contract = "files"` the same directory is held to the agent's contract.
    std::fs::write(
        dir.path().join("client.toml"),
        "[updates]\nbuiltin_dir = \"bundled\"\n",
    )
    .unwrap();
    let out = pack_client(dir.path(), &["status"]);
    assert_eq!(out.status.code(), Some(1));
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(said.contains("missing; the runtime renders it"), "{said}");

    // A malformed skill stops the client, named as packer names it.
    let dir = plain(
        "contract = \"files\"",
        &[(
            "skills/review/SKILL.md",
            "---\nname: reviews\ndescription: d\n---\n",
        )],
    );
    let out = pack_client(dir.path(), &["status"]);
    assert_eq!(out.status.code(), Some(1));
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(
        said.contains(
            "skills/review/SKILL.md:1: skill name 'reviews' does not match its directory \
             'skills/review'"
        ),
        "{said}"
    );
}

#[test]
fn an_app_contract_comes_from_the_bundled_directory_or_the_config() {
    let contract = r#"{"templates": ["main.hbs"], "variables": {"user": "string"}}"#;
    // In the bundled directory: no setting needed.
    let dir = plain(
        "",
        &[("contract.json", contract), ("main.hbs", "Hi {{user}}.")],
    );
    let out = pack_client(
        dir.path(),
        &["render", "main.hbs", "--vars", r#"{"user": "Ada"}"#],
    );
    assert!(out.status.success(), "{out:?}");
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim_end(), "Hi Ada.");
    // Given by the config, the bundled directory is held to it.
    let dir = plain(
        "contract = \"app-contract.json\"",
        &[("main.hbs", "Hi {{name}}.")],
    );
    std::fs::write(dir.path().join("app-contract.json"), contract).unwrap();
    let out = pack_client(dir.path(), &["status"]);
    assert_eq!(out.status.code(), Some(1));
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(
        said.contains("main.hbs:1: unknown variable 'name'"),
        "{said}"
    );
    // A contract value that is neither a kind nor a readable file.
    let dir = plain("contract = \"agents\"", &[("AGENTS.md", "x")]);
    let out = pack_client(dir.path(), &["status"]);
    assert_eq!(out.status.code(), Some(1));
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(
        said.contains("give \"agent\", \"files\" or the path of an app contract file"),
        "{said}"
    );
}
