//! `packer diff` through the real binary, on copies of the built-in pack: what a publisher
//! sees before a release, and the exit status CI reads (0 same, 1 differs, 2 trouble).

use crate::common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use common::{assert_ok, s, stderr, stdout};
use tempfile::TempDir;

fn packer(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_packer"))
        .args(args)
        .env_remove("PROMPTPACK_KEY_PASSWORD")
        .env_remove("SOURCE_DATE_EPOCH")
        .output()
        .expect("packer runs")
}

#[track_caller]
fn assert_exit(output: &Output, code: i32) {
    assert_eq!(
        output.status.code(),
        Some(code),
        "stdout:\n{}\nstderr:\n{}",
        stdout(output),
        stderr(output)
    );
}

/// The built-in pack copied twice, as `old/` and `new/` ([`Packs::old`], [`Packs::newer`]),
/// and a key directory.
struct Packs {
    dir: TempDir,
}

impl Packs {
    fn copied() -> Packs {
        let packs = Packs {
            dir: tempfile::tempdir().unwrap(),
        };
        let builtin = Path::new(env!("CARGO_MANIFEST_DIR")).join("../packs/builtin");
        copy_dir(&builtin, &packs.old());
        copy_dir(&builtin, &packs.newer());
        assert_ok(&packer(&["keygen", "--dir", s(&packs.keys())]));
        packs
    }

    fn old(&self) -> PathBuf {
        self.dir.path().join("old")
    }

    fn newer(&self) -> PathBuf {
        self.dir.path().join("new")
    }

    fn keys(&self) -> PathBuf {
        self.dir.path().join("keys")
    }

    /// Seals `dir` as `<dir>.pack` with the fixture's key.
    fn seal(&self, dir: &Path) -> PathBuf {
        let out = dir.with_extension("pack");
        assert_ok(&packer(&[
            "build",
            s(dir),
            "--version",
            "1.4.0",
            "--keys",
            s(&self.keys()),
            "-o",
            s(&out),
        ]));
        out
    }

    /// Replaces `from` with `to` in a file of `new/`.
    fn edit(&self, file: &str, from: &str, to: &str) {
        let path = self.newer().join(file);
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(text.contains(from), "{file} holds {from:?}");
        std::fs::write(&path, text.replacen(from, to, 1)).unwrap();
    }
}

/// The regular files under `dir`, as `packer diff` counts a directory pack.
fn count_files(dir: &Path) -> usize {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|entry| {
            let entry = entry.unwrap();
            if entry.file_type().unwrap().is_dir() {
                count_files(&entry.path())
            } else {
                1
            }
        })
        .sum()
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

/// The agent/mode of every `prompt …` heading, in order.
fn prompt_headings(out: &str) -> Vec<String> {
    out.lines()
        .filter_map(|line| line.strip_prefix("prompt "))
        .map(|rest| rest.split(' ').next().unwrap().to_string())
        .collect()
}

#[test]
fn identical_packs_are_the_same_and_exit_0() {
    let packs = Packs::copied();
    let out = packer(&["diff", s(&packs.old()), s(&packs.newer())]);
    assert_exit(&out, 0);
    let text = stdout(&out);
    let files = count_files(&packs.old());
    // Five agents (mavis, explore, worker, verifier, plan) in three prompt modes.
    let expected = format!("no differences: {files} files and 15 rendered prompts are the same");
    assert!(text.contains(&expected), "{text}");
    assert!(!text.contains("\n--- "), "no diff is printed: {text}");
    assert_eq!(stderr(&out), "");
}

#[test]
fn a_changed_template_shows_its_diff_and_the_rendered_prompts_of_the_agents_that_use_it() {
    let packs = Packs::copied();
    packs.edit(
        "agents/worker/system.hbs",
        "You are `worker`",
        "Keep notes under {{data_dir}}/notes.\nYou are `worker`",
    );
    let out = packer(&["diff", s(&packs.old()), s(&packs.newer())]);
    assert_exit(&out, 1);
    let text = stdout(&out);

    // The file diff shows the template source.
    assert!(
        text.contains("--- old/agents/worker/system.hbs\n+++ new/agents/worker/system.hbs\n@@"),
        "{text}"
    );
    assert!(
        text.contains("\n+Keep notes under {{data_dir}}/notes.\n"),
        "{text}"
    );
    // The prompt diffs show what the model would read: the variable rendered from the
    // sample context, for worker in each mode and for nobody else.
    assert_eq!(
        prompt_headings(&text),
        ["worker/tui", "worker/coding", "worker/work"],
        "{text}"
    );
    assert!(
        text.contains("prompt worker/tui (reads changed agents/worker/system.hbs)\n--- old prompt worker/tui\n+++ new prompt worker/tui\n@@"),
        "{text}"
    );
    assert!(
        text.contains("\n+Keep notes under /home/dev/.local/share/promptpack/notes.\n"),
        "{text}"
    );
    assert!(
        text.ends_with(
            "files: 1 changed, 0 added, 0 removed; prompts: 3 of 15 differ (model default)\n"
        ),
        "{text}"
    );
}

#[test]
fn a_shared_template_changes_the_prompt_of_every_agent_that_renders_it() {
    let packs = Packs::copied();
    let rules = std::fs::read_to_string(packs.newer().join("shared/runtime_rules.hbs")).unwrap();
    std::fs::write(
        packs.newer().join("shared/runtime_rules.hbs"),
        format!("{rules}\nNever push to main.\n"),
    )
    .unwrap();
    let out = packer(&["diff", s(&packs.old()), s(&packs.newer())]);
    assert_exit(&out, 1);
    let text = stdout(&out);
    assert_eq!(prompt_headings(&text).len(), 15, "{text}");
    assert!(
        text.contains("prompt mavis/coding (reads changed shared/runtime_rules.hbs)"),
        "{text}"
    );
    assert!(text.contains("prompts: 15 of 15 differ"), "{text}");
}

#[test]
fn an_added_file_no_prompt_reads_still_makes_the_packs_differ() {
    let packs = Packs::copied();
    std::fs::write(
        packs.newer().join("CHANGELOG.txt"),
        "1.4.0: shorter rules\n",
    )
    .unwrap();
    let out = packer(&["diff", s(&packs.old()), s(&packs.newer())]);
    assert_exit(&out, 1);
    let text = stdout(&out);
    assert!(
        text.contains(
            "--- /dev/null\n+++ new/CHANGELOG.txt\n@@ -0,0 +1 @@\n+1.4.0: shorter rules\n"
        ),
        "{text}"
    );
    assert!(prompt_headings(&text).is_empty(), "{text}");
    assert!(
        text.contains("files: 0 changed, 1 added, 0 removed; prompts: 0 of 15 differ"),
        "{text}"
    );
}

#[test]
fn a_sealed_pack_and_its_source_directory_compare_equal() {
    let packs = Packs::copied();
    let sealed = packs.seal(&packs.old());
    for (old, new) in [(&sealed, &packs.old()), (&packs.newer(), &sealed)] {
        let out = packer(&["diff", s(old), s(new), "--keys", s(&packs.keys())]);
        assert_exit(&out, 0);
        assert!(stdout(&out).contains("no differences"), "{}", stdout(&out));
    }
    // Two seals of one directory differ byte for byte (fresh key and nonce) yet not in content.
    let again = packs.seal(&packs.newer());
    let out = packer(&["diff", s(&sealed), s(&again), "--keys", s(&packs.keys())]);
    assert_exit(&out, 0);
    assert!(
        stdout(&out).starts_with(&format!(
            "old: {} (old 1.4.0, schema 1, sha256 ",
            s(&sealed)
        )),
        "{}",
        stdout(&out)
    );
}

#[test]
fn a_sealed_pack_against_an_edited_directory_shows_the_edit() {
    let packs = Packs::copied();
    let sealed = packs.seal(&packs.old());
    packs.edit("agents/mavis/tui.hbs", "", "Say hello first.\n");
    let out = packer(&[
        "diff",
        s(&sealed),
        s(&packs.newer()),
        "--keys",
        s(&packs.keys()),
    ]);
    assert_exit(&out, 1);
    // The plan agent renders the orchestrator's terminal persona too.
    assert_eq!(
        prompt_headings(&stdout(&out)),
        ["mavis/tui", "plan/tui"],
        "{}",
        stdout(&out)
    );
}

#[test]
fn quiet_prints_nothing_and_json_says_what_differs() {
    let packs = Packs::copied();
    packs.edit("agents/explore/system.hbs", "", "Be brief.\n");
    let quiet = packer(&["diff", "--quiet", s(&packs.old()), s(&packs.newer())]);
    assert_exit(&quiet, 1);
    assert_eq!(stdout(&quiet), "");
    assert_eq!(stderr(&quiet), "");

    let out = packer(&["--json", "diff", s(&packs.old()), s(&packs.newer())]);
    assert_exit(&out, 1);
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["differs"], true);
    assert_eq!(doc["files"][0]["path"], "agents/explore/system.hbs");
    assert_eq!(doc["files"][0]["change"], "changed");
    let differing: Vec<String> = doc["prompts"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["differs"] == true)
        .map(|p| {
            format!(
                "{}/{}",
                p["agent"].as_str().unwrap(),
                p["mode"].as_str().unwrap()
            )
        })
        .collect();
    assert_eq!(differing, ["explore/tui", "explore/coding", "explore/work"]);
    assert_eq!(doc["prompts"].as_array().unwrap().len(), 15);
}

#[test]
fn a_sealed_pack_without_a_key_is_an_error_that_says_to_give_one() {
    let packs = Packs::copied();
    let sealed = packs.seal(&packs.old());
    let out = packer(&["diff", s(&sealed), s(&packs.newer())]);
    assert_exit(&out, 2);
    assert_eq!(
        stderr(&out),
        format!(
            "error: OLD {} is a sealed pack: give --keys DIR (or --content-key FILE) with its \
             content key to open it\n",
            s(&sealed)
        )
    );
    assert_eq!(stdout(&out), "");
}

#[test]
fn a_pack_sealed_for_another_key_is_an_error() {
    let packs = Packs::copied();
    let sealed = packs.seal(&packs.old());
    let other = packs.dir.path().join("other-keys");
    assert_ok(&packer(&["keygen", "--dir", s(&other)]));
    let out = packer(&["diff", s(&packs.newer()), s(&sealed), "--keys", s(&other)]);
    assert_exit(&out, 2);
    let err = stderr(&out);
    assert!(
        err.starts_with(&format!(
            "error: NEW {} does not open: no content key for this pack",
            s(&sealed)
        )),
        "{err}"
    );
}

#[test]
fn an_unreadable_pack_is_an_error() {
    let packs = Packs::copied();
    let garbage = packs.dir.path().join("garbage.pack");
    std::fs::write(&garbage, b"not a pack at all").unwrap();
    let out = packer(&[
        "diff",
        s(&garbage),
        s(&packs.newer()),
        "--keys",
        s(&packs.keys()),
    ]);
    assert_exit(&out, 2);
    assert!(
        stderr(&out).starts_with(&format!("error: OLD {} does not open: ", s(&garbage))),
        "{}",
        stderr(&out)
    );

    let missing = packs.dir.path().join("missing.pack");
    let out = packer(&["diff", s(&packs.old()), s(&missing)]);
    assert_exit(&out, 2);
    assert_eq!(
        stderr(&out),
        format!(
            "error: NEW {} does not exist; give a sealed pack file or a pack directory\n",
            s(&missing)
        )
    );
}

#[test]
fn a_directory_with_a_template_outside_the_contract_is_an_error() {
    let packs = Packs::copied();
    packs.edit("agents/verifier/system.hbs", "", "{{no_such_variable}}\n");
    let out = packer(&["diff", s(&packs.old()), s(&packs.newer())]);
    assert_exit(&out, 2);
    let err = stderr(&out);
    assert!(
        err.starts_with(&format!("error: NEW {}", s(&packs.newer()))),
        "{err}"
    );
    assert!(
        err.contains("agents/verifier/system.hbs:1: unknown variable 'no_such_variable'"),
        "{err}"
    );
}
