//! `packer build --contract agent|app|files`: what each contract requires, what it checks,
//! and what the build says about it, through the real binary.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use common::{assert_fails, assert_ok, s, stderr, stdout, write_required_templates};
use tempfile::TempDir;

fn packer(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_packer"))
        .args(args)
        .env_remove("PROMPTPACK_KEY_PASSWORD")
        .env_remove("SOURCE_DATE_EPOCH")
        .output()
        .expect("packer runs")
}

struct Fixture {
    dir: TempDir,
}

impl Fixture {
    fn new() -> Fixture {
        let fixture = Fixture {
            dir: tempfile::tempdir().unwrap(),
        };
        assert_ok(&packer(&["keygen", "--dir", s(&fixture.path("keys"))]));
        fixture
    }

    fn path(&self, relative: &str) -> PathBuf {
        self.dir.path().join(relative)
    }

    fn write(&self, relative: &str, text: &str) {
        let path = self.path(relative);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }

    /// `packer build DIR --version 1.0.0 --keys keys -o OUT EXTRA...`.
    fn build(&self, dir: &str, extra: &[&str]) -> Output {
        let pack_dir = self.path(dir);
        let out = self.path(&format!("{dir}.pack"));
        let keys = self.path("keys");
        let mut args = vec![
            "build",
            s(&pack_dir),
            "--version",
            "1.0.0",
            "--keys",
            s(&keys),
            "-o",
            s(&out),
            "--force",
        ];
        args.extend_from_slice(extra);
        packer(&args)
    }

    fn verify(&self, dir: &str) -> Output {
        let pack = self.path(&format!("{dir}.pack"));
        packer(&["verify", "--keys", s(&self.path("keys")), s(&pack)])
    }

    /// A good pack of every kind of plain file.
    fn plain_files(&self) {
        self.write("files/AGENTS.md", "# Team rules\nRun the tests.\n");
        self.write(
            "files/skills/review/SKILL.md",
            "---\nname: review\ndescription: Review a diff for bugs.\n---\nRead the diff.\n",
        );
        self.write("files/skills/review/checklist.md", "- tests\n");
        self.write(
            "files/agents/reviewer.md",
            "---\nname: reviewer\ndescription: Reviews code.\n---\nYou review.\n",
        );
        self.write("files/commands/ship.md", "Ship $ARGUMENTS.\n");
        self.write(
            "files/claude/managed-settings.json",
            "{\"permissions\": {\"deny\": [\"Bash(rm:*)\"]}}\n",
        );
        self.write(
            "files/codex/requirements.toml",
            "allowed_approval_policies = [\"on-request\"]\n",
        );
        self.write("files/notes/why.txt", "{{not a template}}\n");
    }
}

fn header_schema(pack: &Path) -> u64 {
    let bytes = std::fs::read(pack).unwrap();
    let (header, _) = pack_format::read_header(&bytes, &pack_format::Limits::DEFAULT).unwrap();
    u64::from(header.schema)
}

#[test]
fn a_files_pack_builds_and_says_which_agent_reads_each_file() {
    let fixture = Fixture::new();
    fixture.plain_files();
    let output = fixture.build("files", &["--contract", "files"]);
    assert_ok(&output);
    let out = stdout(&output);
    assert!(
        out.contains("schema    1000\ncontract  plain files\n"),
        "{out}"
    );
    let listing = out.split("read by\n").nth(1).expect("a read-by listing");
    let expected = [
        "  AGENTS.md                     claude-code, codex, opencode (instructions)",
        "  agents/reviewer.md            claude-code, opencode (agent 'reviewer')",
        "  claude/managed-settings.json  claude-code (Claude Code managed settings)",
        "  codex/requirements.toml       codex (Codex managed requirements)",
        "  commands/ship.md              claude-code, codex, opencode (command 'ship')",
        "  notes/why.txt                 no agent (data)",
        "  skills/review/SKILL.md        claude-code, codex, opencode (skill 'review')",
        "  skills/review/checklist.md    claude-code, codex, opencode (file of skill 'review')",
    ];
    assert_eq!(listing.lines().collect::<Vec<_>>(), expected);
    assert_eq!(header_schema(&fixture.path("files.pack")), 1000);
    // What a client would check, packer verify checks too.
    assert_ok(&fixture.verify("files"));

    // CLAUDE.md takes AGENTS.md away from Claude Code only.
    fixture.write("files/CLAUDE.md", "# Claude only\n");
    let output = fixture.build("files", &["--contract", "files", "--json"]);
    assert_ok(&output);
    let json: serde_json::Value = serde_json::from_str(&stdout(&output)).unwrap();
    assert_eq!(json["contract"], "files");
    assert_eq!(
        json["read_by"]["AGENTS.md"],
        serde_json::json!(["codex", "opencode"])
    );
    assert_eq!(
        json["read_by"]["CLAUDE.md"],
        serde_json::json!(["claude-code"])
    );
}

#[test]
fn a_files_pack_needs_no_template_but_its_templates_must_parse() {
    let fixture = Fixture::new();
    fixture.write("files/AGENTS.md", "Rules.\n");
    fixture.write("files/anything.hbs", "Hello {{whoever.they.are}}\n");
    assert_ok(&fixture.build("files", &["--contract", "files"]));
    fixture.write("files/broken.hbs", "ok\n{{#if x}}never closed\n");
    let output = fixture.build("files", &["--contract", "files"]);
    assert_fails(&output);
    let err = stderr(&output);
    assert!(
        err.contains("broken.hbs:2: template does not parse"),
        "{err}"
    );
    assert!(err.contains("1 problem(s) in"), "{err}");
}

#[test]
fn malformed_plain_files_fail_the_build_with_file_line_and_fix() {
    let cases: &[(&str, &str, &str)] = &[
        (
            "skills/review/SKILL.md",
            "---\nname: reviews\ndescription: d\n---\n",
            "skills/review/SKILL.md:1: skill name 'reviews' does not match its directory \
             'skills/review'\n    hint: name: review (the skill's directory)\n",
        ),
        (
            "skills/review/SKILL.md",
            "No front matter.\n",
            "skills/review/SKILL.md:1: a skill starts with front matter (---, name:, \
             description:, ---)\n    hint: begin the file with:\n---\nname: review\n\
             description: what the skill does and when to use it\n---\n",
        ),
        (
            "agents/reviewer.md",
            "---\nname: reviewer\n---\n",
            "agents/reviewer.md:1: front matter has no 'description'\n    hint: description: \
             when to use this agent\n",
        ),
        (
            "claude/managed-settings.json",
            "{\n  \"permissions\": [\n}\n",
            "claude/managed-settings.json:3: not valid JSON: expected value at line 3 column 1\n    \
             hint: fix the syntax; `python3 -m json.tool FILE` shows the same place\n",
        ),
        (
            "claude/managed-settings.json",
            "\"deny\"\n",
            "claude/managed-settings.json:1: settings must be a JSON object, found a string\n    \
             hint: wrap the settings in { ... }\n",
        ),
    ];
    for (path, text, expected) in cases {
        let fixture = Fixture::new();
        fixture.write("files/AGENTS.md", "Rules.\n");
        fixture.write(&format!("files/{path}"), text);
        let output = fixture.build("files", &["--contract", "files"]);
        assert_fails(&output);
        let err = stderr(&output);
        let shown = format!("{}/{expected}", s(&fixture.path("files")));
        assert!(err.starts_with(&shown), "{path}: {err}\nexpected: {shown}");
        assert!(
            err.contains("error: 1 problem(s) in") && err.contains("nothing was written"),
            "{err}"
        );
        assert!(!fixture.path("files.pack").exists());
    }
    // TOML: the line of the problem.
    let fixture = Fixture::new();
    fixture.write("files/codex/requirements.toml", "a = 1\nb = = 2\n");
    let output = fixture.build("files", &["--contract", "files"]);
    assert_fails(&output);
    let err = stderr(&output);
    assert!(
        err.contains("codex/requirements.toml:2: not valid TOML: "),
        "{err}"
    );
}

#[test]
fn the_agent_contract_leaves_plain_files_alone_as_before() {
    // A schema-1 pack with a skill the files contract would refuse still builds: the
    // agent contract checks templates only, as it always has.
    let fixture = Fixture::new();
    write_required_templates(&fixture.path("agentpack"));
    fixture.write("agentpack/skills/x/SKILL.md", "no front matter\n");
    let output = fixture.build("agentpack", &[]);
    assert_ok(&output);
    let out = stdout(&output);
    assert!(out.contains("schema    1\nformat    2\n"), "{out}");
    assert!(!out.contains("read by"), "{out}");
    assert_eq!(header_schema(&fixture.path("agentpack.pack")), 1);
    let output = fixture.build("agentpack", &["--contract", "agent", "--schema", "2"]);
    assert_fails(&output);
    assert_eq!(
        stderr(&output),
        "error: schema 2 is not known to this packer; it knows schema 1\n"
    );
}

#[test]
fn an_app_pack_ships_its_contract_and_is_held_to_it() {
    let fixture = Fixture::new();
    fixture.write("app/prompts/agents/main/system.hbs", "You help {{user}}.\n");
    let output = fixture.build("app", &["--contract", "app"]);
    assert_fails(&output);
    assert!(
        stderr(&output).contains(
            "/app/contract.json, which does not exist; write it there (it ships in the pack)"
        ),
        "{}",
        stderr(&output)
    );
    fixture.write(
        "app/contract.json",
        r#"{"templates": ["prompts/agents/main/system.hbs", "prompts/agents/main/tools.hbs"],
            "variables": {"user": "string"}}"#,
    );
    let output = fixture.build("app", &["--contract", "app"]);
    assert_fails(&output);
    let err = stderr(&output);
    assert!(
        err.contains(
            "/app/prompts/agents/main/tools.hbs: missing; contract.json lists it in \
             \"templates\", so the app renders it and clients refuse a pack without it"
        ),
        "{err}"
    );
    fixture.write(
        "app/prompts/agents/main/tools.hbs",
        "Tools for {{users}}.\n",
    );
    let output = fixture.build("app", &["--contract", "app"]);
    assert_fails(&output);
    let err = stderr(&output);
    assert!(
        err.contains("/app/prompts/agents/main/tools.hbs:1: unknown variable 'users'"),
        "{err}"
    );
    fixture.write("app/prompts/agents/main/tools.hbs", "Tools for {{user}}.\n");
    let output = fixture.build("app", &["--contract", "app"]);
    assert_ok(&output);
    assert!(
        stdout(&output).contains("schema    1001\ncontract  app contract (contract.json)\n"),
        "{}",
        stdout(&output)
    );
    assert_eq!(header_schema(&fixture.path("app.pack")), 1001);
    assert_ok(&fixture.verify("app"));

    let output = fixture.build("app", &["--contract", "app", "--schema", "1"]);
    assert_fails(&output);
    assert_eq!(
        stderr(&output),
        "error: --schema 1 names an agent schema, and --contract app declares no agent schema; \
         leave out --schema (or use --contract agent)\n"
    );
    fixture.write("app/contract.json", r#"{"variables": {"user": "int"}}"#);
    let output = fixture.build("app", &["--contract", "app"]);
    assert_fails(&output);
    let err = stderr(&output);
    assert!(
        err.contains("contract.json is not an app contract; fix it and build again"),
        "{err}"
    );
    assert!(
        err.contains("expected \"string\" or \"bool\", found \"int\""),
        "{err}"
    );
}
