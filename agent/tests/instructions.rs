//! One test per instruction-file rule. The files are data: they reach the prompt as
//! written, each within a 32 KiB budget and all of them within 64 KiB.

use crate::common;

use std::path::Path;

use agent_runtime::config::Config;
use agent_runtime::instructions::{
    INSTRUCTIONS_MAX_BYTES, INSTRUCTIONS_TOTAL_BYTES, Instructions, Sources, Switches,
};
use common::Turn;

/// A data dir and a workspace, each in its own temporary directory.
struct Dirs {
    data: tempfile::TempDir,
    work: tempfile::TempDir,
}

impl Dirs {
    fn new() -> Dirs {
        Dirs {
            data: tempfile::tempdir().unwrap(),
            work: tempfile::tempdir().unwrap(),
        }
    }

    fn global(&self) -> std::path::PathBuf {
        self.data.path().join("AGENTS.md")
    }

    fn project(&self, name: &str) -> std::path::PathBuf {
        self.work.path().join(name)
    }

    fn read(&self) -> Instructions {
        Instructions::read(&Sources::new(&self.global(), self.work.path()))
    }

    fn prompt(&self) -> String {
        let mut turn = Turn::new("mavis");
        turn.instructions = self.read();
        turn.render().text
    }
}

fn write(path: &Path, text: &str) {
    std::fs::write(path, text).unwrap();
}

#[test]
fn no_instruction_files_means_no_preamble() {
    let dirs = Dirs::new();
    let text = dirs.prompt();
    assert!(!text.contains("# Instructions"), "{text}");
}

#[test]
fn both_project_files_present_uses_claude_md_only() {
    let dirs = Dirs::new();
    write(&dirs.global(), "Global: answer in British English.");
    write(
        &dirs.project("CLAUDE.md"),
        "From CLAUDE.md: run `make check`.",
    );
    write(
        &dirs.project("AGENTS.md"),
        "From AGENTS.md: never used here.",
    );
    let text = dirs.prompt();
    assert!(text.contains("# Instructions"));
    assert!(text.contains("From CLAUDE.md: run `make check`."));
    assert!(!text.contains("From AGENTS.md"));
    // Global first, then project, then the environment.
    let global = text.find("Global: answer").unwrap();
    let project = text.find("From CLAUDE.md").unwrap();
    let env = text.find("# Environment").unwrap();
    assert!(global < project && project < env);
}

#[test]
fn whitespace_only_claude_md_falls_through_to_agents_md() {
    let dirs = Dirs::new();
    write(&dirs.project("CLAUDE.md"), "  \n\t\n");
    write(&dirs.project("AGENTS.md"), "Use tabs.");
    let read = dirs.read();
    let project = &read.project[0];
    assert_eq!(project.path, dirs.project("AGENTS.md"));
    assert_eq!(project.text, "Use tabs.");
}

#[test]
fn outside_a_repository_only_the_working_directory_is_read() {
    let dirs = Dirs::new();
    std::fs::create_dir(dirs.work.path().join("sub")).unwrap();
    write(&dirs.project("AGENTS.md"), "above");
    write(&dirs.work.path().join("sub/AGENTS.md"), "nested");
    let inner = Instructions::read(&Sources::new(&dirs.global(), &dirs.work.path().join("sub")));
    let texts: Vec<&str> = inner.project.iter().map(|f| f.text.as_str()).collect();
    assert_eq!(texts, ["nested"], "no .git: nothing above is read");
    let outer = dirs.read();
    let texts: Vec<&str> = outer.project.iter().map(|f| f.text.as_str()).collect();
    assert_eq!(texts, ["above"], "subdirectories are not searched");
}

/// 40 KiB of text whose 32 KiB budget ends in the middle of a 3-byte character, with no
/// newline anywhere near the end of the budget.
fn multibyte_at_the_cut() -> String {
    let mut text = String::from("# Project rules\n");
    while text.len() < INSTRUCTIONS_MAX_BYTES - 2 {
        text.push('a');
    }
    // Bytes 32766..32769 hold '€' (3 bytes), so the budget splits it.
    text.push('€');
    while text.len() < 40 * 1024 {
        text.push_str("é€");
    }
    text
}

#[test]
fn oversize_project_file_is_cut_at_a_char_boundary_with_a_note_and_a_warning() {
    let dirs = Dirs::new();
    let original = multibyte_at_the_cut();
    assert!(!original.is_char_boundary(INSTRUCTIONS_MAX_BYTES));
    write(&dirs.project("AGENTS.md"), &original);
    let read = dirs.read();
    let project = read.project[0].clone();
    assert_eq!(project.truncated_from, Some(original.len() as u64));
    let (kept, note) = project.text.split_once("\n\n[").expect("note appended");
    assert_eq!(
        kept.len(),
        INSTRUCTIONS_MAX_BYTES - 2,
        "stops before the split '€'"
    );
    assert!(original.starts_with(kept));
    assert!(note.contains("Read the file itself"), "{note}");
    assert!(note.contains(&original.len().to_string()));
    assert_eq!(read.warnings.len(), 1);
    assert!(read.warnings[0].contains("AGENTS.md"));
    // The warning reaches the turn's metadata too.
    let mut turn = Turn::new("mavis");
    turn.instructions = read;
    let prompt = turn.render();
    assert_eq!(prompt.metadata.warnings.len(), 1);
    assert!(prompt.text.contains(kept));
}

#[test]
fn oversize_project_file_backs_off_to_a_newline_in_the_last_fifth() {
    let dirs = Dirs::new();
    let mut text = String::new();
    let mut n = 0;
    while text.len() < 40 * 1024 {
        text.push_str(&format!("- rule number {n} with some words after it\n"));
        n += 1;
    }
    write(&dirs.project("CLAUDE.md"), &text);
    let project = dirs.read().project.remove(0);
    let (kept, _) = project.text.split_once("\n\n[").unwrap();
    assert!(kept.len() <= INSTRUCTIONS_MAX_BYTES);
    assert!(kept.len() >= INSTRUCTIONS_MAX_BYTES * 4 / 5);
    assert!(
        kept.ends_with("after it"),
        "cut at a line end: {:?}",
        &kept[kept.len() - 20..]
    );
    assert!(text.starts_with(&format!("{kept}\n")));
}

#[test]
fn a_newline_before_the_last_fifth_is_not_used() {
    let dirs = Dirs::new();
    // One newline early on, then a single long line past the budget.
    let text = format!("intro\n{}", "x".repeat(40 * 1024));
    write(&dirs.project("AGENTS.md"), &text);
    let project = dirs.read().project.remove(0);
    let (kept, _) = project.text.split_once("\n\n[").unwrap();
    assert_eq!(kept.len(), INSTRUCTIONS_MAX_BYTES);
}

#[test]
fn oversize_global_file_is_dropped_whole() {
    let dirs = Dirs::new();
    write(&dirs.global(), &"g".repeat(40 * 1024));
    write(&dirs.project("AGENTS.md"), "project stays");
    let read = dirs.read();
    assert!(read.global.is_none());
    assert_eq!(read.warnings.len(), 1);
    assert!(read.warnings[0].contains("left out"), "{:?}", read.warnings);
    let mut turn = Turn::new("mavis");
    turn.instructions = read;
    let text = turn.render().text;
    assert!(!text.contains("ggg"));
    assert!(text.contains("project stays"));
}

#[test]
fn a_global_file_of_exactly_the_budget_is_kept() {
    let dirs = Dirs::new();
    write(&dirs.global(), &"g".repeat(INSTRUCTIONS_MAX_BYTES));
    assert!(dirs.read().global.is_some());
}

#[test]
fn unreadable_files_are_skipped() {
    let dirs = Dirs::new();
    // A directory where a file is expected cannot be read, even by root (unlike chmod 000).
    std::fs::create_dir(dirs.global()).unwrap();
    std::fs::create_dir(dirs.project("CLAUDE.md")).unwrap();
    write(&dirs.project("AGENTS.md"), "readable fallback");
    let read = dirs.read();
    assert!(read.global.is_none());
    assert_eq!(read.project[0].text, "readable fallback");
    assert!(read.warnings.is_empty());
}

#[test]
fn template_syntax_in_instruction_files_appears_verbatim() {
    let dirs = Dirs::new();
    let body = "Write {{x}} and {{#if persona}}never{{/if}} literally; {{> partial}} too.";
    write(&dirs.project("AGENTS.md"), body);
    write(&dirs.global(), "global {{nope}}");
    let text = dirs.prompt();
    assert!(text.contains(body), "{text}");
    assert!(text.contains("global {{nope}}"));
}

/// A repository (`.git` at `repo/`) inside a directory that has instruction files of its
/// own, which no session in the repository should read.
struct Repo {
    outer: tempfile::TempDir,
    data: tempfile::TempDir,
}

impl Repo {
    fn new() -> Repo {
        let outer = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(outer.path().join("repo/.git")).unwrap();
        std::fs::create_dir_all(outer.path().join("repo/src/parser")).unwrap();
        write(&outer.path().join("AGENTS.md"), "Above the repository.");
        Repo {
            outer,
            data: tempfile::tempdir().unwrap(),
        }
    }

    fn root(&self) -> std::path::PathBuf {
        self.outer.path().join("repo")
    }

    fn sources(&self, cwd: &str) -> Sources {
        Sources::new(&self.data.path().join("AGENTS.md"), &self.root().join(cwd))
    }
}

fn texts(files: &[agent_runtime::instructions::InstructionFile]) -> Vec<&str> {
    files.iter().map(|f| f.text.as_str()).collect()
}

#[test]
fn started_in_a_subdirectory_the_files_from_the_worktree_root_down_are_read() {
    let repo = Repo::new();
    write(&repo.root().join("AGENTS.md"), "Root: run `make check`.");
    write(&repo.root().join("src/CLAUDE.md"), "Src: no unwrap.");
    write(
        &repo.root().join("src/AGENTS.md"),
        "Src AGENTS.md: not read.",
    );
    write(
        &repo.root().join("src/parser/AGENTS.md"),
        "Parser: errors, not panics.",
    );
    let read = Instructions::read(&repo.sources("src/parser"));
    assert_eq!(
        texts(&read.project),
        [
            "Root: run `make check`.",
            "Src: no unwrap.",
            "Parser: errors, not panics."
        ],
        "root first, CLAUDE.md over AGENTS.md in each directory, nothing above the root"
    );
    let mut turn = Turn::new("mavis");
    turn.instructions = read;
    let text = turn.render().text;
    let root = text.find("Root: run").unwrap();
    let src = text.find("Src: no unwrap").unwrap();
    let parser = text.find("Parser: errors").unwrap();
    assert!(root < src && src < parser, "{text}");
    assert!(text.contains(&format!(
        "Contents of {}:",
        repo.root().join("src/parser/AGENTS.md").display()
    )));
    assert!(!text.contains("Above the repository"), "{text}");
}

#[test]
fn a_git_file_marks_the_root_of_a_linked_worktree() {
    let outer = tempfile::tempdir().unwrap();
    let root = outer.path().join("wt");
    std::fs::create_dir_all(root.join("crates/a")).unwrap();
    write(&root.join(".git"), "gitdir: /elsewhere/.git/worktrees/wt\n");
    write(&root.join("AGENTS.md"), "Worktree rule.");
    let read = Instructions::read(&Sources::new(
        &outer.path().join("none"),
        &root.join("crates/a"),
    ));
    assert_eq!(texts(&read.project), ["Worktree rule."]);
}

#[test]
fn every_file_is_cut_at_its_own_cap_and_all_of_them_at_the_total() {
    let repo = Repo::new();
    // Four directories of 30 KiB each: two fit whole, the third is cut where the 64 KiB
    // run out, the fourth is left out and named.
    let line = "- a rule of this directory, one of many\n";
    let body = |tag: &str| {
        let mut text = format!("{tag}\n");
        while text.len() < 30 * 1024 {
            text.push_str(line);
        }
        text
    };
    std::fs::create_dir_all(repo.root().join("a/b/c")).unwrap();
    for (dir, tag) in [("", "ROOT"), ("a", "A"), ("a/b", "B"), ("a/b/c", "C")] {
        write(&repo.root().join(dir).join("AGENTS.md"), &body(tag));
    }
    // A nested file over the per-file cap is cut like the root's.
    std::fs::create_dir_all(repo.root().join("big")).unwrap();
    write(&repo.root().join("big/AGENTS.md"), &"x\n".repeat(20 * 1024));
    let big = Instructions::read(&repo.sources("big"));
    assert_eq!(big.project[1].truncated_from, Some(40 * 1024));

    let read = Instructions::read(&repo.sources("a/b/c"));
    assert_eq!(read.project.len(), 3, "{:?}", texts(&read.project));
    assert!(read.project[0].truncated_from.is_none());
    assert!(read.project[1].truncated_from.is_none());
    let third = &read.project[2];
    assert!(third.text.starts_with("B\n"));
    assert!(
        third.text.contains("continues beyond this point"),
        "{}",
        third.text
    );
    let kept: usize = read
        .project
        .iter()
        .map(|f| {
            f.text
                .split_once("\n\n[")
                .map_or(f.text.len(), |(k, _)| k.len())
        })
        .sum();
    assert!(kept <= INSTRUCTIONS_TOTAL_BYTES, "{kept}");
    assert!(kept >= INSTRUCTIONS_TOTAL_BYTES - 1024, "{kept}");
    let c = repo.root().join("a/b/c/AGENTS.md");
    assert_eq!(read.left_out.len(), 1);
    assert_eq!(read.left_out[0].path, c);
    assert!(
        read.warnings.iter().any(|w| w.contains("left out")),
        "{:?}",
        read.warnings
    );

    let mut turn = Turn::new("mavis");
    turn.instructions = read;
    let text = turn.render().text;
    assert!(
        !text.contains("\nC\n"),
        "the fourth file's text is not in the prompt"
    );
    assert!(
        text.contains(&format!("- {} ({} bytes)", c.display(), body("C").len())),
        "the note names what was left out: {text}"
    );
}

#[test]
fn without_a_global_agents_md_the_home_claude_md_is_used() {
    let dirs = Dirs::new();
    let home = tempfile::tempdir().unwrap();
    std::fs::create_dir(home.path().join(".claude")).unwrap();
    write(&home.path().join(".claude/CLAUDE.md"), "From ~/.claude.");
    let mut sources = Sources::new(&dirs.global(), dirs.work.path());
    sources.home = Some(home.path().to_path_buf());
    let global = |sources: &Sources| Instructions::read(sources).global.map(|f| f.text);
    assert_eq!(global(&sources).as_deref(), Some("From ~/.claude."));
    write(&dirs.global(), "  \n");
    assert_eq!(
        global(&sources).as_deref(),
        Some("From ~/.claude."),
        "an empty data-directory file does not hide the fallback"
    );
    write(&dirs.global(), "From the data directory.");
    assert_eq!(
        global(&sources).as_deref(),
        Some("From the data directory.")
    );
}

#[test]
fn configured_paths_and_globs_are_read_after_the_project_files_inside_the_workspace() {
    let repo = Repo::new();
    std::fs::create_dir_all(repo.root().join("docs")).unwrap();
    std::fs::create_dir_all(repo.root().join("rules/old")).unwrap();
    write(&repo.root().join("AGENTS.md"), "Root rule.");
    write(&repo.root().join("docs/conventions.md"), "Conventions.");
    write(&repo.root().join("rules/b.md"), "Rule B.");
    write(&repo.root().join("rules/a.md"), "Rule A.");
    write(
        &repo.root().join("rules/old/c.md"),
        "Not matched by rules/*.md.",
    );
    write(
        &repo.outer.path().join("secret.md"),
        "Outside the workspace.",
    );
    let extra = tempfile::tempdir().unwrap();
    write(
        &extra.path().join("team.md"),
        "Team-wide, by absolute path.",
    );
    let config = Config::parse(&format!(
        "instructions = [\"docs/conventions.md\", \"rules/*.md\", \"../secret.md\", \"{}\", \"AGENTS.md\"]\n",
        extra.path().join("*.md").display()
    ))
    .unwrap();
    let mut sources = repo.sources("src");
    sources.configured = config.instructions;
    let read = Instructions::read(&sources);
    assert_eq!(texts(&read.project), ["Root rule."]);
    assert_eq!(
        texts(&read.configured),
        [
            "Conventions.",
            "Rule A.",
            "Rule B.",
            "Team-wide, by absolute path."
        ],
        "in the order listed, a glob's matches sorted, the root AGENTS.md not twice"
    );
    assert!(
        read.warnings
            .iter()
            .any(|w| w.contains("../secret.md") && w.contains("outside the workspace")),
        "{:?}",
        read.warnings
    );
    let mut turn = Turn::new("mavis");
    turn.instructions = read;
    let text = turn.render().text;
    let root = text.find("Root rule.").unwrap();
    let conventions = text.find("Conventions.").unwrap();
    assert!(root < conventions && conventions < text.find("# Environment").unwrap());
    assert!(!text.contains("Outside the workspace"));

    let bad = Config::parse("instructions = [\"rules/[a.md\"]\n").unwrap_err();
    assert!(
        bad.contains("instructions") && bad.contains("rules/[a.md"),
        "{bad}"
    );
}

#[test]
fn the_claude_md_switch_reads_agents_md_everywhere_and_skips_the_home_fallback() {
    let repo = Repo::new();
    write(&repo.root().join("CLAUDE.md"), "Claude rule.");
    write(&repo.root().join("AGENTS.md"), "Agents rule.");
    let home = tempfile::tempdir().unwrap();
    std::fs::create_dir(home.path().join(".claude")).unwrap();
    write(&home.path().join(".claude/CLAUDE.md"), "Home Claude rule.");
    let mut sources = repo.sources("src");
    sources.home = Some(home.path().to_path_buf());
    sources.switches = Switches::from_env(|name| {
        (name == "OPENCODE_DISABLE_CLAUDE_CODE").then(|| "1".to_string())
    });
    let read = Instructions::read(&sources);
    assert_eq!(texts(&read.project), ["Agents rule."]);
    assert!(read.global.is_none(), "{:?}", read.global);
}

/// `agent prompt` started in a subdirectory of a repository, with `env`.
fn prompt_in(repo: &Repo, cwd: &str, env: &[(&str, &str)]) -> String {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_agent"))
        .args(["prompt", "--cwd"])
        .arg(repo.root().join(cwd))
        .env("AGENT_HOME", repo.data.path())
        .env("HOME", repo.data.path())
        .env_remove("OPENCODE_DISABLE_CLAUDE_CODE")
        .env_remove("OPENCODE_DISABLE_CLAUDE_CODE_PROMPT")
        .env_remove("OPENCODE_DISABLE_PROJECT_CONFIG")
        .envs(env.iter().copied())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn the_project_switch_leaves_the_project_files_out_of_a_real_prompt() {
    let repo = Repo::new();
    write(&repo.root().join("AGENTS.md"), "Root rule.");
    write(&repo.root().join("src/AGENTS.md"), "Src rule.");
    write(&repo.data.path().join("AGENTS.md"), "Global rule.");
    let text = prompt_in(&repo, "src", &[]);
    assert!(
        text.contains("Global rule.") && text.contains("Root rule.") && text.contains("Src rule."),
        "{text}"
    );
    let text = prompt_in(&repo, "src", &[("OPENCODE_DISABLE_PROJECT_CONFIG", "true")]);
    assert!(text.contains("Global rule."), "{text}");
    assert!(
        !text.contains("Root rule.") && !text.contains("Src rule."),
        "{text}"
    );
}
