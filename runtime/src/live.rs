//! Live context: the instruction files, skills and workspace notes on disk, re-read when
//! they change.
//!
//! Before each model call the loop asks [`LiveContext::current`], which looks at every file
//! the context came from (and every skill directory) by modification time and size, and
//! reads them again only when one of those changed, appeared or went away. A user editing
//! AGENTS.md or adding a skill mid-session sees it take effect on the next call.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::SystemTime;

use crate::instructions::{Instructions, Sources};
use crate::skills::{self, Skill};

/// Where the skills on disk live, under the data directory and the workspace.
const SKILL_ROOTS: [&str; 2] = ["skills", ".agents/skills"];

/// The most bytes of workspace notes the memory layer of the prompt carries.
pub const MEMORY_MAX_BYTES: usize = 4096;

/// What a file looked like: `None` when it does not exist.
type Stamp = Option<(SystemTime, u64)>;

fn stamp(path: &Path) -> Stamp {
    let meta = std::fs::metadata(path).ok()?;
    Some((
        meta.modified().unwrap_or(SystemTime::UNIX_EPOCH),
        meta.len(),
    ))
}

/// The instruction files and skills of one session.
#[derive(Debug)]
pub struct LiveContext {
    /// Where the instruction files are looked for; its working directory is the
    /// workspace the project's skills come from.
    sources: Sources,
    data_dir: PathBuf,
    /// The workspace's notes (`record_note`), which feed the prompt's memory layer.
    notes_file: Option<PathBuf>,
    state: Mutex<State>,
}

/// The context of one model call.
#[derive(Debug, Clone)]
pub struct Current {
    pub instructions: Arc<Instructions>,
    pub skills: Arc<Vec<Skill>>,
    /// The workspace's notes, newest first, within [`MEMORY_MAX_BYTES`].
    pub memory: Option<Arc<str>>,
}

#[derive(Debug)]
struct State {
    stamps: Vec<(PathBuf, Stamp)>,
    current: Current,
}

impl LiveContext {
    /// Reads everything once.
    pub fn new(sources: Sources, data_dir: &Path, notes_file: Option<&Path>) -> LiveContext {
        let live = LiveContext {
            sources,
            data_dir: data_dir.to_path_buf(),
            notes_file: notes_file.map(Path::to_path_buf),
            state: Mutex::new(State {
                stamps: Vec::new(),
                current: Current {
                    instructions: Arc::default(),
                    skills: Arc::default(),
                    memory: None,
                },
            }),
        };
        let fresh = live.read();
        *live.state.lock().unwrap_or_else(PoisonError::into_inner) = fresh;
        live
    }

    /// The context as it is on disk now, re-read only if a file changed since last time.
    pub fn current(&self) -> Current {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        if self.stamps() != state.stamps {
            tracing::debug!("instruction files, skills or notes changed; reading them again");
            *state = self.read();
        }
        state.current.clone()
    }

    fn read(&self) -> State {
        // Stamps first: a change landing while reading shows up on the next call.
        let stamps = self.stamps();
        let instructions = Instructions::read(&self.sources);
        let (skills, _warnings) = skills::from_disk(&self.data_dir, &self.sources.cwd);
        let memory =
            self.notes_file
                .as_deref()
                .and_then(|file| match crate::tools::load_notes(file) {
                    Ok(notes) => memory_text(&notes, MEMORY_MAX_BYTES).map(Arc::from),
                    Err(e) => {
                        tracing::warn!("workspace notes left out of the prompt: {e}");
                        None
                    }
                });
        State {
            stamps,
            current: Current {
                instructions: Arc::new(instructions),
                skills: Arc::new(skills),
                memory,
            },
        }
    }

    /// Every file the context is read from, with its stamp: the instruction files (those
    /// read and those that would be, were they there), each skill root, and each skill
    /// directory's `SKILL.md`.
    fn stamps(&self) -> Vec<(PathBuf, Stamp)> {
        let mut files = self.sources.watched();
        files.extend(self.notes_file.iter().cloned());
        for (base, root) in [
            (&self.data_dir, SKILL_ROOTS[0]),
            (&self.sources.cwd, SKILL_ROOTS[1]),
        ] {
            let root = base.join(root);
            if let Ok(entries) = std::fs::read_dir(&root) {
                let mut dirs: Vec<PathBuf> = entries.flatten().map(|e| e.path()).collect();
                dirs.sort();
                files.extend(dirs.into_iter().map(|d| d.join("SKILL.md")));
            }
            files.push(root);
        }
        files
            .into_iter()
            .map(|path| {
                let stamp = stamp(&path);
                (path, stamp)
            })
            .collect()
    }
}

/// Notes newest first, one line each, as many as fit in `budget` bytes; the rest are
/// counted, so the model knows to ask `recall_notes` for them.
pub fn memory_text(notes: &[crate::tools::Note], budget: usize) -> Option<String> {
    if notes.is_empty() {
        return None;
    }
    let mut text = String::new();
    let mut shown = 0;
    for note in notes.iter().rev() {
        let line = format!(
            "- ({}) {}\n",
            note.category,
            note.content.replace('\n', " ")
        );
        if text.len() + line.len() > budget {
            break;
        }
        text.push_str(&line);
        shown += 1;
    }
    let left = notes.len() - shown;
    if left > 0 {
        text.push_str(&format!(
            "({left} older notes are not shown; recall_notes lists them all.)\n"
        ));
    }
    Some(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_edited_agents_md_and_a_new_skill_are_picked_up() {
        let data = tempfile::tempdir().unwrap();
        let work = tempfile::tempdir().unwrap();
        std::fs::write(work.path().join("AGENTS.md"), "Use tabs.").unwrap();
        let sources = Sources::new(&data.path().join("AGENTS.md"), work.path());
        let live = LiveContext::new(sources, data.path(), None);
        let first = live.current();
        assert_eq!(first.instructions.project[0].text, "Use tabs.");
        assert!(first.skills.is_empty());
        // Same stamps: the very same values come back, nothing is read again.
        assert!(Arc::ptr_eq(
            &first.instructions,
            &live.current().instructions
        ));

        std::fs::write(work.path().join("AGENTS.md"), "Use spaces, four.").unwrap();
        let dir = work.path().join(".agents/skills/deploy");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(
            dir.join("SKILL.md"),
            "---\nname: deploy\ndescription: Ships it.\n---\nRun make deploy.\n",
        )
        .unwrap();
        let second = live.current();
        assert_eq!(second.instructions.project[0].text, "Use spaces, four.");
        assert_eq!(second.skills[0].name, "deploy");
    }

    #[test]
    fn notes_fill_the_memory_newest_first_within_the_budget() {
        let note = |n: usize| crate::tools::Note {
            at: String::new(),
            category: "build".to_string(),
            content: format!("note {n}"),
        };
        let notes: Vec<_> = (0..100).map(note).collect();
        let text = memory_text(&notes, 200).unwrap();
        assert!(text.starts_with("- (build) note 99\n"), "{text}");
        assert!(text.len() < 260, "{}", text.len());
        assert!(text.contains("older notes are not shown"), "{text}");
        assert_eq!(memory_text(&[], 200), None);
    }
}
