//! A pack declares its contract, and a client installs only what keeps it: through the real
//! `packer`, a real packd on loopback and `pack-client` processes. An app with its own
//! contract (from its built-in directory's `contract.json`) installs app packs whose
//! `contract.json` fits it and renders them held to it; it refuses a pack whose contract
//! disagrees, and packs of the agent's or the plain-files contract. A client of plain files
//! installs a pack of them; the agent's client refuses it as an unknown schema, as every
//! client from before the contract kinds does.

use std::path::{Path, PathBuf};
use std::process::Output;

use promptpack_tests::*;

const APP_CONTRACT: &str =
    r#"{"templates": ["prompts/agents/main/system.hbs"], "variables": {"user": "string"}}"#;

struct World {
    publisher: Publisher,
    _data: tempfile::TempDir,
    packd: Packd,
    cache: tempfile::TempDir,
    config: PathBuf,
    sequence: std::cell::Cell<u64>,
}

fn world(extra_config: &str) -> World {
    let publisher = Publisher::new();
    let data = tempfile::tempdir().unwrap();
    let packd = Packd::start(data.path(), &publisher.server_config());
    let config = publisher.client_config(&packd.url, extra_config);
    World {
        publisher,
        _data: data,
        packd,
        cache: tempfile::tempdir().unwrap(),
        config,
        sequence: std::cell::Cell::new(0),
    }
}

/// Writes `files` (path, text) into a new directory under the publisher's scratch space.
fn tree(root: &Path, files: &[(&str, &str)]) -> PathBuf {
    for (path, text) in files {
        let path = root.join(path);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }
    root.to_path_buf()
}

impl World {
    /// `packer build` of `files` as pack `builtin` `version` with `args`, uploaded.
    fn pack(&self, version: &str, args: &[&str], files: &[(&str, &str)]) -> PathBuf {
        let src = tree(
            &self.publisher.dir.path().join(format!("src-{version}")),
            files,
        );
        let out = self.publisher.dir.path().join(format!("p-{version}.pack"));
        let mut cmd = packer();
        cmd.arg("build").arg(&src);
        cmd.args(["--name", "builtin", "--version", version, "--keys"]);
        cmd.arg(self.publisher.keys())
            .arg("-o")
            .arg(&out)
            .args(args);
        run(cmd);
        self.packd.upload(&self.publisher, &out);
        out
    }

    fn release(&self, pack: &Path) {
        let sequence = self.sequence.get() + 1;
        self.sequence.set(sequence);
        let entry = format!("*={}", pack.display());
        self.packd.publish(
            &self.publisher,
            &self.publisher.sign_sequence(sequence, &[entry], "30d"),
        );
    }

    fn client(&self, args: &[&str]) -> Output {
        let mut cmd = client_cmd(self.cache.path(), &self.config, "1.0.0");
        cmd.args(args);
        cmd.output().unwrap()
    }

    /// `pack-client --json refresh`.
    fn refresh(&self) -> serde_json::Value {
        serde_json::from_slice(&self.client(&["--json", "refresh"]).stdout).unwrap()
    }

    fn serving(&self) -> String {
        let out = self.client(&["--json", "status"]);
        let status: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        format!(
            "{} {}",
            status["serving"]["source"].as_str().unwrap(),
            status["serving"]["version"].as_str().unwrap()
        )
    }
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn an_app_installs_only_packs_that_keep_its_contract_and_renders_held_to_it() {
    // The app's bundled prompts declare its contract: no other setting.
    let bundled = tempfile::tempdir().unwrap();
    tree(
        bundled.path(),
        &[
            ("contract.json", APP_CONTRACT),
            ("prompts/agents/main/system.hbs", "You help {{user}}."),
        ],
    );
    let w = world(&format!(
        "builtin_dir = {:?}\n",
        bundled.path().display().to_string()
    ));
    assert_eq!(w.serving(), "builtin 0.0.0");
    let render =
        |vars: &str| w.client(&["render", "prompts/agents/main/system.hbs", "--vars", vars]);
    let out = render(r#"{"user": "Ada"}"#);
    assert_eq!(text(&out.stdout).trim_end(), "You help Ada.", "{out:?}");

    // A pack of the app's contract installs and renders.
    let good = w.pack(
        "1.0.0",
        &["--contract", "app"],
        &[
            ("contract.json", APP_CONTRACT),
            (
                "prompts/agents/main/system.hbs",
                "Release 1 helps {{user}}.",
            ),
        ],
    );
    w.release(&good);
    let refreshed = w.refresh();
    assert_eq!(refreshed["ok"], true, "{refreshed}");
    assert_eq!(w.serving(), "remote 1.0.0");
    let out = render(r#"{"user": "Ada"}"#);
    assert_eq!(
        text(&out.stdout).trim_end(),
        "Release 1 helps Ada.",
        "{out:?}"
    );
    // Renders are held to the pack's contract.
    let out = render(r#"{"usr": "Ada"}"#);
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains(
            "--vars: variables do not fit the contract of the pack's contract.json: usr is not \
             in the contract; the top level has user"
        ),
        "{out:?}"
    );

    // A pack whose own contract reads a variable the app never passes builds (it is
    // consistent with itself) but never installs here.
    let wider = r#"{"templates": ["prompts/agents/main/system.hbs"], "variables": {"user": "string", "team": "string"}}"#;
    let disagrees = w.pack(
        "2.0.0",
        &["--contract", "app"],
        &[
            ("contract.json", wider),
            ("prompts/agents/main/system.hbs", "{{team}} helps {{user}}."),
        ],
    );
    w.release(&disagrees);
    let refreshed = w.refresh();
    assert_eq!(refreshed["ok"], false, "{refreshed}");
    let error = refreshed["error"].as_str().unwrap();
    assert!(
        error.contains(
            "its contract.json disagrees with the app's contract: the pack's contract has \
             variable 'team', which the app does not pass (under the top level it passes user)"
        ),
        "{error}"
    );
    assert_eq!(w.serving(), "remote 1.0.0");

    // The agent's pack and a pack of plain files are not this app's: refused before
    // download, as a schema it does not know.
    let agent = w.publisher.build("3.0.0", "AGENT");
    w.packd.upload(&w.publisher, &agent);
    w.release(&agent);
    let refreshed = w.refresh();
    assert_eq!(
        refreshed["error"], "pack targets template schema 1; this client knows [1001]",
        "{refreshed}"
    );
    let files = w.pack(
        "4.0.0",
        &["--contract", "files"],
        &[("AGENTS.md", "Rules.\n")],
    );
    w.release(&files);
    let refreshed = w.refresh();
    assert_eq!(
        refreshed["error"], "pack targets template schema 1000; this client knows [1001]",
        "{refreshed}"
    );
    assert_eq!(w.serving(), "remote 1.0.0");
}

#[test]
fn a_client_of_plain_files_installs_them_and_the_agents_client_refuses_them() {
    let w = world("contract = \"files\"\n[files]\n");
    let files = w.pack(
        "1.0.0",
        &["--contract", "files"],
        &[
            ("AGENTS.md", "# Team rules\nMARKER-1\n"),
            (
                "skills/review/SKILL.md",
                "---\nname: review\ndescription: Review a diff.\n---\nRead it.\n",
            ),
        ],
    );
    w.release(&files);
    let refreshed = w.refresh();
    assert_eq!(refreshed["ok"], true, "{refreshed}");
    assert_eq!(w.serving(), "remote 1.0.0");
    let agents_md = w.cache.path().join("files/current/AGENTS.md");
    assert_eq!(
        std::fs::read_to_string(&agents_md).unwrap(),
        "# Team rules\nMARKER-1\n"
    );
    // The agent's pack is not a pack of plain files.
    let agent = w.publisher.build("2.0.0", "AGENT");
    w.packd.upload(&w.publisher, &agent);
    w.release(&agent);
    assert_eq!(
        w.refresh()["error"],
        "pack targets template schema 1; this client knows [1000]"
    );
    assert_eq!(w.serving(), "remote 1.0.0");

    // A client of the agent's contract (the default, and every client from before the
    // contract kinds) refuses the plain files as an unknown schema and keeps what it has.
    let agent_client = world("");
    let files = agent_client.pack(
        "1.0.0",
        &["--contract", "files"],
        &[("AGENTS.md", "Rules.\n")],
    );
    agent_client.release(&files);
    let refreshed = agent_client.refresh();
    assert_eq!(
        refreshed["error"], "pack targets template schema 1000; this client knows [1]",
        "{refreshed}"
    );
    assert_eq!(agent_client.serving(), "builtin 0.0.0");
}
