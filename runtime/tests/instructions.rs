//! One test per instruction-file rule. The files are data: they reach the prompt as
//! written, within a 32 KiB budget.

mod common;

use std::path::Path;

use agent_runtime::instructions::{INSTRUCTIONS_MAX_BYTES, Instructions};
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
        Instructions::read(&self.global(), self.work.path())
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
    let project = read.project.expect("AGENTS.md used");
    assert_eq!(project.path, dirs.project("AGENTS.md"));
    assert_eq!(project.text, "Use tabs.");
}

#[test]
fn only_the_workspace_root_is_read() {
    let dirs = Dirs::new();
    std::fs::create_dir(dirs.work.path().join("sub")).unwrap();
    write(&dirs.work.path().join("sub/AGENTS.md"), "nested");
    let inner = Instructions::read(&dirs.global(), &dirs.work.path().join("sub"));
    assert!(inner.project.is_some(), "the root given is the one read");
    let outer = dirs.read();
    assert!(outer.project.is_none(), "subdirectories are not searched");
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
    let project = read.project.clone().expect("project file used");
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
    let project = dirs.read().project.unwrap();
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
    let project = dirs.read().project.unwrap();
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
    assert_eq!(read.project.unwrap().text, "readable fallback");
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
