//! Targets: the pack the file view serves, projected into the places a coding agent reads
//! (Claude Code, Codex CLI, OpenCode), at user level and machine level.
//!
//! ```text
//! ~/.claude/skills/review        -> <cache>/files/current/skills/review     a link we own
//! ~/.claude/agents/auditor.md    -> <cache>/files/current/agents/auditor.md
//! /etc/claude-code/managed-settings.json -> <cache>/files/current/claude/managed-settings.json
//! ~/.claude/CLAUDE.md            the user's file; we own one marked block in it:
//!     <!-- promptpack: begin ... -->
//!     @<cache>/files/current/CLAUDE.md
//!     <!-- promptpack: end -->
//! ```
//!
//! Every link goes through the view's link (`current`), never to a version directory, so the
//! one link swap of an install, rollback or fallback switches every projected file at once.
//! Claude Code imports a file (`@path`) from the user's CLAUDE.md, so a block there holds
//! import lines and moves with the link too. The managed CLAUDE.md (Claude Code sends it as
//! written), Codex's and OpenCode's AGENTS.md do not import: their block holds the text
//! itself and is written again when the pack changes.
//!
//! What is ours: a link whose target is under a view's link, and the lines between the two
//! markers. Anything else at a path a pack wants is the user's: it is left as it is and the
//! path is refused with the reason, which the status shows. Paths a newer pack no longer
//! ships are removed (links) or emptied (blocks); the record of what was placed is
//! `<cache>/targets.json`.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// The record of what a projection placed, under the cache.
pub const RECORD: &str = crate::config::TARGETS_RECORD;
/// The first line of a block we own in a user's file.
pub const BLOCK_BEGIN: &str =
    "<!-- promptpack: begin (written by pack-client; edits between these lines are replaced) -->";
/// The last line of a block we own.
pub const BLOCK_END: &str = "<!-- promptpack: end -->";

pub use crate::config::{Agent, Target};

/// A pack to project: the file view's link of one channel (absolute), in combination order
/// (the organisation's before the team's).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PackSource {
    pub channel: String,
    pub link: PathBuf,
}

/// One path a projection placed, as the record and the status show it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Placed {
    pub path: PathBuf,
    pub agent: Agent,
    pub kind: PlaceKind,
    /// What it shows: `channel:key@version` for each pack file in it.
    pub from: Vec<String>,
    /// The file did not exist before a block was written into it: it goes when the block does.
    #[serde(default)]
    pub created: bool,
    /// For a link: where it points.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<PathBuf>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PlaceKind {
    Link,
    Block,
}

impl std::fmt::Display for PlaceKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            PlaceKind::Link => "link",
            PlaceKind::Block => "block",
        })
    }
}

/// A path a pack wants that was left as it was, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Refused {
    pub path: PathBuf,
    pub reason: String,
}

/// The outcome of one projection: what is in place now and what was refused.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Projection {
    pub placed: Vec<Placed>,
    pub refused: Vec<Refused>,
}

/// What one pack file becomes for one agent.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Want {
    /// A link at the path to `source link / key`.
    Link { source: usize, key: String },
    /// A block of instruction text: imports (Claude Code) or the text itself.
    Block {
        parts: Vec<(usize, String)>,
        import: bool,
    },
}

/// One pack as the view shows it: its version and its file keys.
#[derive(Debug, Clone)]
struct Shown {
    version: String,
    keys: BTreeSet<String>,
    /// The names ([`OVERRIDABLE`]) a channel later in the order may ship instead.
    overridable: BTreeSet<String>,
}

/// A pack file listing, one a line, the names of the pack (`skills/review`,
/// `agents/auditor.md`, `commands/ship.md`) that a channel later in the order may ship
/// instead: the organisation's default that a team may replace.
pub const OVERRIDABLE: &str = "overridable.txt";

fn read_shown(link: &Path) -> Result<Shown, String> {
    let path = link.join(crate::files::MANIFEST);
    let text = std::fs::read(&path).map_err(|e| format!("reading {}: {e}", path.display()))?;
    #[derive(Deserialize)]
    struct Manifest {
        version: String,
        files: BTreeMap<String, String>,
    }
    let manifest: Manifest =
        serde_json::from_slice(&text).map_err(|e| format!("reading {}: {e}", path.display()))?;
    let overridable = if manifest.files.contains_key(OVERRIDABLE) {
        let path = link.join(OVERRIDABLE);
        std::fs::read_to_string(&path)
            .map_err(|e| format!("reading {}: {e}", path.display()))?
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty() && !l.starts_with('#'))
            .map(str::to_string)
            .collect()
    } else {
        BTreeSet::new()
    };
    Ok(Shown {
        version: manifest.version,
        keys: manifest.files.into_keys().collect(),
        overridable,
    })
}

/// Everything `target` should hold for `packs`, by path. A path two packs both want as a
/// link is refused (neither is placed).
fn plan(
    target: &Target,
    channels: &[&str],
    packs: &[Option<Shown>],
    refused: &mut Vec<Refused>,
) -> BTreeMap<PathBuf, Want> {
    use pack_contract::layout::Role;
    let user = &target.user_dir;
    // Where each kind of file goes for this agent (the layout table says which agent reads
    // which file; this says where it looks).
    let (commands, managed) = match target.agent {
        Agent::Claude => (
            user.join("commands"),
            target
                .machine_dir
                .as_ref()
                .map(|m| m.join("managed-settings.json")),
        ),
        Agent::Codex => (
            user.join("prompts"),
            target
                .machine_dir
                .as_ref()
                .map(|m| m.join("requirements.toml")),
        ),
        Agent::OpenCode => (user.join("commands"), None),
    };
    let reader = target.agent.layout();
    // A path with the pack files (channel, key) that want it; a set, as every file of a
    // skill names the skill's directory.
    let mut links: BTreeMap<PathBuf, BTreeSet<(usize, String)>> = BTreeMap::new();
    let mut parts = Vec::new();
    for (source, pack) in packs.iter().enumerate() {
        let Some(pack) = pack else { continue };
        let has_claude_md = pack
            .keys
            .contains(pack_contract::layout::CLAUDE_INSTRUCTIONS);
        for key in &pack.keys {
            let role = Role::of(key);
            if !role.readers(has_claude_md).contains(&reader) {
                continue;
            }
            let mut add = |path: PathBuf, key: String| {
                links.entry(path).or_default().insert((source, key));
            };
            match role {
                Role::Instructions | Role::ClaudeInstructions => {
                    parts.push((source, key.clone()));
                }
                Role::Skill { name } | Role::SkillFile { skill: name } => {
                    add(user.join("skills").join(&name), format!("skills/{name}"));
                }
                Role::Agent { name } => {
                    add(user.join("agents").join(format!("{name}.md")), key.clone())
                }
                Role::Command { name } => add(commands.join(format!("{name}.md")), key.clone()),
                Role::ClaudeSettings | Role::CodexRequirements => {
                    if let Some(path) = &managed {
                        add(path.clone(), key.clone());
                    }
                }
                Role::Data => {}
            }
        }
    }
    let mut wants = BTreeMap::new();
    for (path, from) in links {
        let mut from: Vec<(usize, String)> = from.into_iter().collect();
        // The last channel wins when every earlier one marked the name overridable.
        let overridden = from.split_last().is_some_and(|(_, earlier)| {
            earlier.iter().all(|(source, key)| {
                packs[*source]
                    .as_ref()
                    .is_some_and(|p| p.overridable.contains(key))
            })
        });
        if overridden {
            from.drain(..from.len() - 1);
        }
        if from.len() > 1 {
            let names: Vec<String> = from
                .iter()
                .map(|(source, key)| format!("{} ships {key}", channels[*source]))
                .collect();
            refused.push(Refused {
                path,
                reason: format!(
                    "{} for it; a name may come from one channel only: left as it was",
                    names.join(" and ")
                ),
            });
            continue;
        }
        if let Some((source, key)) = from.pop() {
            wants.insert(path, Want::Link { source, key });
        }
    }
    if !parts.is_empty() {
        let file = match target.agent {
            Agent::Claude => match &target.machine_dir {
                Some(machine) => machine.join("CLAUDE.md"),
                None => user.join("CLAUDE.md"),
            },
            Agent::Codex | Agent::OpenCode => user.join("AGENTS.md"),
        };
        wants.insert(
            file,
            Want::Block {
                parts,
                // Claude Code follows `@` imports in the user's CLAUDE.md, not in the
                // managed one, which it sends as written.
                import: target.agent == Agent::Claude && target.machine_dir.is_none(),
            },
        );
    }
    wants
}

/// Projects `sources` (in order) into every target, removes what they no longer ship, and
/// writes the record to `record`. Never writes a path it does not own; a refused or failed
/// path is listed with its reason and keeps what it had.
///
/// The channels one process follows share the targets and the record: their projections
/// run one at a time, so none reads the record while another rewrites it.
pub fn project(targets: &[Target], sources: &[PackSource], record: &Path) -> Projection {
    static PROJECTING: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _one_at_a_time = PROJECTING
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let before = load_record(record);
    let mut refused = Vec::new();
    let packs: Vec<Option<Shown>> = sources
        .iter()
        .map(|source| match read_shown(&source.link) {
            Ok(shown) => Some(shown),
            Err(reason) => {
                refused.push(Refused {
                    path: source.link.clone(),
                    reason: format!(
                        "channel {}: {reason}; its files are not projected",
                        source.channel
                    ),
                });
                None
            }
        })
        .collect();
    let ours = |path: &Path| -> bool {
        sources.iter().any(|s| path.starts_with(&s.link))
            || before.iter().any(|p| p.target.as_deref() == Some(path))
    };
    let mut placed = Vec::new();
    let mut wanted = BTreeSet::new();
    for target in targets {
        let mut conflicts = Vec::new();
        let channels: Vec<&str> = sources.iter().map(|s| s.channel.as_str()).collect();
        let wants = plan(target, &channels, &packs, &mut conflicts);
        // A path two packs want keeps what it had.
        for conflict in conflicts {
            if let Some(was) = before.iter().find(|p| p.path == conflict.path) {
                placed.push(was.clone());
            }
            wanted.insert(conflict.path.clone());
            refused.push(conflict);
        }
        for (path, want) in wants {
            wanted.insert(path.clone());
            let was = before.iter().find(|p| p.path == path);
            let result = match &want {
                Want::Link { source, key } => {
                    let to = sources[*source].link.join(key);
                    place_link(&path, &to, &ours).map(|()| Placed {
                        path: path.clone(),
                        agent: target.agent,
                        kind: PlaceKind::Link,
                        from: vec![describe(&sources[*source], &packs[*source], key)],
                        created: false,
                        target: Some(to),
                    })
                }
                Want::Block { parts, import } => {
                    block_text(sources, parts, *import).and_then(|text| {
                        let created = place_block(&path, &text)?;
                        Ok(Placed {
                            path: path.clone(),
                            agent: target.agent,
                            kind: PlaceKind::Block,
                            from: parts
                                .iter()
                                .map(|(s, key)| describe(&sources[*s], &packs[*s], key))
                                .collect(),
                            created: created || was.is_some_and(|w| w.created),
                            target: None,
                        })
                    })
                }
            };
            match result {
                Ok(entry) => placed.push(entry),
                Err(reason) => {
                    refused.push(Refused {
                        path: path.clone(),
                        reason,
                    });
                    // What is still there from before stays ours.
                    if let Some(was) = was.filter(|w| still_there(w)) {
                        placed.push(was.clone());
                    }
                }
            }
        }
    }
    // Remove what no pack wants any more. A path whose pack could not be read keeps its
    // place: an unreadable view is not a pack that stopped shipping a file.
    let unreadable: Vec<&str> = sources
        .iter()
        .zip(&packs)
        .filter(|(_, p)| p.is_none())
        .map(|(s, _)| s.channel.as_str())
        .collect();
    for was in &before {
        if wanted.contains(&was.path) {
            continue;
        }
        let from_unreadable = was.from.iter().any(|f| {
            unreadable
                .iter()
                .any(|c| f.split_once(':').is_some_and(|(ch, _)| ch == *c))
        });
        let managed_here = targets.iter().any(|t| t.agent == was.agent);
        if from_unreadable && managed_here {
            placed.push(was.clone());
            continue;
        }
        let removed = match was.kind {
            PlaceKind::Link => remove_link(&was.path, &ours),
            PlaceKind::Block => remove_block(&was.path, was.created),
        };
        if let Err(reason) = removed {
            refused.push(Refused {
                path: was.path.clone(),
                reason,
            });
            placed.push(was.clone());
        }
    }
    if let Err(e) = save_record(record, &placed) {
        refused.push(Refused {
            path: record.to_path_buf(),
            reason: format!("could not save the record of projected files: {e}"),
        });
    }
    Projection { placed, refused }
}

/// Whether what `placed` records is still at its path (a link still naming its target, a
/// file for a block): the user may have replaced it since.
fn still_there(placed: &Placed) -> bool {
    match placed.kind {
        PlaceKind::Link => std::fs::read_link(&placed.path).ok() == placed.target,
        PlaceKind::Block => placed.path.is_file(),
    }
}

fn describe(source: &PackSource, pack: &Option<Shown>, key: &str) -> String {
    let version = pack.as_ref().map_or("?", |p| p.version.as_str());
    format!("{}:{key}@{version}", source.channel)
}

/// The projections this record lists (empty when there is none or it cannot be read).
pub fn load_record(record: &Path) -> Vec<Placed> {
    std::fs::read(record)
        .ok()
        .and_then(|bytes| serde_json::from_slice(&bytes).ok())
        .unwrap_or_default()
}

fn save_record(record: &Path, placed: &[Placed]) -> std::io::Result<()> {
    let mut bytes = serde_json::to_vec_pretty(placed).map_err(std::io::Error::other)?;
    bytes.push(b'\n');
    if load_record(record) == placed && record.exists() {
        return Ok(());
    }
    std::fs::create_dir_all(pack_format::atomic::parent_dir(record))?;
    pack_format::atomic::write(record, &bytes)
}

/// The block's lines (without the markers).
fn block_text(
    sources: &[PackSource],
    parts: &[(usize, String)],
    import: bool,
) -> Result<String, String> {
    let mut text = String::new();
    for (source, key) in parts {
        let path = sources[*source].link.join(key);
        if import {
            text.push_str(&format!("@{}\n", path.display()));
        } else {
            let body = std::fs::read_to_string(&path)
                .map_err(|e| format!("reading {}: {e}", path.display()))?;
            text.push_str(&body);
            if !body.ends_with('\n') {
                text.push('\n');
            }
        }
    }
    Ok(text)
}

/// Makes `path` a link to `to`, unless something not ours is there.
fn place_link(path: &Path, to: &Path, ours: &dyn Fn(&Path) -> bool) -> Result<(), String> {
    match std::fs::symlink_metadata(path) {
        Ok(meta) if meta.file_type().is_symlink() => {
            let now = std::fs::read_link(path).map_err(|e| format!("reading the link: {e}"))?;
            if now == to {
                return Ok(());
            }
            if !ours(&now) {
                return Err(format!(
                    "a link to {} is there, not ours: left as it is; remove it to let the pack's file in",
                    now.display()
                ));
            }
        }
        Ok(meta) => {
            let what = if meta.is_dir() { "directory" } else { "file" };
            return Err(format!(
                "a {what} the user owns is there: left as it is; move it away to let the pack's file in"
            ));
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(format!("checking it: {e}")),
    }
    let parent = pack_format::atomic::parent_dir(path);
    std::fs::create_dir_all(&parent).map_err(|e| format!("creating {}: {e}", parent.display()))?;
    // The new link beside the old, renamed over it: a reader sees one or the other.
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = parent.join(format!(
        ".{name}.tmp-{}-{:08x}",
        std::process::id(),
        rand::random::<u32>()
    ));
    std::os::unix::fs::symlink(to, &tmp).map_err(|e| format!("linking: {e}"))?;
    if let Err(e) = std::fs::rename(&tmp, path) {
        let _ = std::fs::remove_file(&tmp);
        return Err(format!("placing the link: {e}"));
    }
    Ok(())
}

fn remove_link(path: &Path, ours: &dyn Fn(&Path) -> bool) -> Result<(), String> {
    match std::fs::read_link(path) {
        Ok(to) if ours(&to) => {
            std::fs::remove_file(path).map_err(|e| format!("removing the link: {e}"))
        }
        // Replaced by the user since: theirs now.
        Ok(_) => Ok(()),
        Err(_) => Ok(()),
    }
}

/// Where our block is in `text`: the line range of the markers, inclusive.
fn find_block(lines: &[&str]) -> Result<Option<(usize, usize)>, String> {
    let begins: Vec<usize> = (0..lines.len())
        .filter(|i| lines[*i] == BLOCK_BEGIN)
        .collect();
    let ends: Vec<usize> = (0..lines.len())
        .filter(|i| lines[*i] == BLOCK_END)
        .collect();
    match (begins.as_slice(), ends.as_slice()) {
        ([], []) => Ok(None),
        ([begin], [end]) if begin < end => Ok(Some((*begin, *end))),
        _ => Err(format!(
            "its promptpack block is damaged ({} begin and {} end lines): left as it is; remove the marker lines to let pack-client write the block again",
            begins.len(),
            ends.len()
        )),
    }
}

/// Reads the user's file for a block (`None`: there is none). Refuses a link: we never
/// write through one.
fn read_user_file(path: &Path) -> Result<Option<(String, u32)>, String> {
    use std::os::unix::fs::PermissionsExt as _;
    match std::fs::symlink_metadata(path) {
        Ok(meta) if meta.file_type().is_symlink() => Err(
            "a link is there: pack-client does not write through links; left as it is".to_string(),
        ),
        Ok(meta) if meta.is_file() => {
            let text = std::fs::read_to_string(path)
                .map_err(|e| format!("reading it: {e}; left as it is"))?;
            Ok(Some((text, meta.permissions().mode() & 0o7777)))
        }
        Ok(_) => Err("something other than a file is there: left as it is".to_string()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(format!("checking it: {e}")),
    }
}

/// Writes our block into the file at `path` (appended, or in place of the old block),
/// keeping every other line. Returns whether the file was created.
fn place_block(path: &Path, body: &str) -> Result<bool, String> {
    let existing = read_user_file(path)?;
    let mut block = format!("{BLOCK_BEGIN}\n{body}{BLOCK_END}\n");
    let (text, mode, created) = match &existing {
        None => (block, None, true),
        Some((text, mode)) => {
            let lines: Vec<&str> = text.split_inclusive('\n').map(trim_eol).collect();
            let raw: Vec<&str> = text.split_inclusive('\n').collect();
            let new = match find_block(&lines)? {
                Some((begin, end)) => {
                    if end + 1 == raw.len() && !raw[end].ends_with('\n') {
                        block.pop();
                    }
                    let mut out: String = raw[..begin].concat();
                    out.push_str(&block);
                    out.push_str(&raw[end + 1..].concat());
                    out
                }
                None => {
                    let mut out = text.clone();
                    if !out.is_empty() && !out.ends_with('\n') {
                        out.push('\n');
                    }
                    if !out.is_empty() {
                        out.push('\n');
                    }
                    out.push_str(&block);
                    out
                }
            };
            if new == *text {
                return Ok(false);
            }
            (new, Some(*mode), false)
        }
    };
    if created {
        let parent = pack_format::atomic::parent_dir(path);
        std::fs::create_dir_all(&parent)
            .map_err(|e| format!("creating {}: {e}", parent.display()))?;
    }
    let staged = pack_format::atomic::stage(path, text.as_bytes(), mode)
        .map_err(|e| format!("writing it: {e}"))?;
    if created {
        // Created only if nothing appeared there since the check.
        match staged
            .commit_new()
            .map_err(|e| format!("writing it: {e}"))?
        {
            pack_format::atomic::Placed::Yes => Ok(true),
            pack_format::atomic::Placed::Taken => {
                Err("a file appeared there while it was written: left as it is".to_string())
            }
        }
    } else {
        commit_unless_edited(staged, path, text_read(&existing))?;
        Ok(false)
    }
}

fn text_read(existing: &Option<(String, u32)>) -> &str {
    existing.as_ref().map_or("", |(text, _)| text.as_str())
}

/// Puts `staged` in place of the user's file at `path` only if the file still holds `read`,
/// the text the new one was made from: an edit the user saved meanwhile is kept, and the
/// next projection writes the block again into it.
fn commit_unless_edited(
    staged: pack_format::atomic::Staged,
    path: &Path,
    read: &str,
) -> Result<(), String> {
    let now = read_user_file(path)?;
    if now.as_ref().map(|(text, _)| text.as_str()) != Some(read) {
        return Err(
            "the file changed while the block was written: left as it is (the next projection \
             tries again)"
                .to_string(),
        );
    }
    staged.commit().map_err(|e| format!("writing it: {e}"))
}

fn trim_eol(line: &str) -> &str {
    line.strip_suffix('\n')
        .map(|l| l.strip_suffix('\r').unwrap_or(l))
        .unwrap_or(line)
}

/// Takes our block out of the file (and the blank line we put before it); removes the file
/// when we created it and nothing else is left.
fn remove_block(path: &Path, created: bool) -> Result<(), String> {
    let Some((text, mode)) = read_user_file(path)? else {
        return Ok(());
    };
    let lines: Vec<&str> = text.split_inclusive('\n').map(trim_eol).collect();
    let raw: Vec<&str> = text.split_inclusive('\n').collect();
    let Some((mut begin, end)) = find_block(&lines)? else {
        return Ok(());
    };
    if begin > 0 && lines[begin - 1].is_empty() {
        begin -= 1;
    }
    let mut rest: String = raw[..begin].concat();
    rest.push_str(&raw[end + 1..].concat());
    if created && rest.trim().is_empty() {
        return std::fs::remove_file(path).map_err(|e| format!("removing it: {e}"));
    }
    let staged = pack_format::atomic::stage(path, rest.as_bytes(), Some(mode))
        .map_err(|e| format!("writing it: {e}"))?;
    commit_unless_edited(staged, path, &text)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::FilesConfig;
    use crate::files::{FileView, Published};
    use crate::snapshot::{Snapshot, SnapshotMeta, Source};
    use proptest::prelude::*;
    use std::time::{Duration, SystemTime};

    fn pack(version: &str, files: &[(&str, String)]) -> Snapshot {
        let meta = SnapshotMeta {
            name: "team".to_string(),
            version: version.parse().unwrap(),
            sequence: 1,
            source: Source::Remote,
            sha256: pack_format::sha256_hex(
                format!(
                    "{version}{:?}",
                    files.iter().map(|f| f.0).collect::<Vec<_>>()
                )
                .as_bytes(),
            ),
            schema: 1,
        };
        Snapshot::new(
            meta,
            files
                .iter()
                .map(|(k, v)| (k.to_string(), v.clone().into_bytes())),
        )
        .unwrap()
    }

    /// A cache with a file view, the places of one machine, and the targets there.
    struct Machine {
        _dir: tempfile::TempDir,
        root: PathBuf,
        view: FileView,
        targets: Vec<Target>,
        tick: u64,
    }

    impl Machine {
        fn new() -> Self {
            let dir = tempfile::tempdir().unwrap();
            let root = dir.path().canonicalize().unwrap();
            let view = FileView::new(&root.join("cache"), &FilesConfig::default());
            let targets = vec![
                Target {
                    agent: Agent::Claude,
                    user_dir: root.join("home/.claude"),
                    machine_dir: Some(root.join("etc/claude-code")),
                },
                Target {
                    agent: Agent::Codex,
                    user_dir: root.join("home/.codex"),
                    machine_dir: None,
                },
                Target {
                    agent: Agent::OpenCode,
                    user_dir: root.join("home/.config/opencode"),
                    machine_dir: None,
                },
            ];
            Machine {
                _dir: dir,
                root,
                view,
                targets,
                tick: 0,
            }
        }

        fn claude_user_only(mut self) -> Self {
            self.targets[0].machine_dir = None;
            self
        }

        fn install(&mut self, snapshot: &Snapshot) -> Projection {
            self.publish(snapshot);
            self.project()
        }

        /// Moves this cache's view to `snapshot`, projecting nothing.
        fn publish(&mut self, snapshot: &Snapshot) {
            self.tick += 1;
            let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000 + self.tick);
            let published = self.view.publish(snapshot, now, || true).unwrap();
            assert!(matches!(published, Published::Current { .. }));
        }

        fn project(&self) -> Projection {
            project(&self.targets, &[self.source()], &self.record())
        }

        fn source(&self) -> PackSource {
            PackSource {
                channel: "team".to_string(),
                link: self.view.link_path(),
            }
        }

        fn record(&self) -> PathBuf {
            self.root.join("cache").join(RECORD)
        }

        fn home(&self, rel: &str) -> PathBuf {
            self.root.join("home").join(rel)
        }
    }

    fn text(path: &Path) -> String {
        std::fs::read_to_string(path).unwrap()
    }

    fn full_pack(version: &str) -> Snapshot {
        pack(
            version,
            &[
                ("AGENTS.md", format!("team rules {version}\n")),
                (
                    "skills/review/SKILL.md",
                    format!("review skill {version}\n"),
                ),
                ("skills/review/checklist.md", "check\n".to_string()),
                ("agents/auditor.md", format!("auditor {version}\n")),
                ("commands/ship.md", format!("ship {version}\n")),
                ("claude/managed-settings.json", "{}\n".to_string()),
                ("codex/requirements.toml", "\n".to_string()),
            ],
        )
    }

    #[test]
    fn a_pack_lands_in_every_agents_places_and_a_switch_moves_them_all() {
        let mut m = Machine::new();
        std::fs::create_dir_all(m.home(".claude")).unwrap();
        std::fs::write(m.home(".claude/CLAUDE.md"), "my own notes\n").unwrap();
        let projection = m.install(&full_pack("1.0.0"));
        assert!(projection.refused.is_empty(), "{:?}", projection.refused);
        let link = m.view.link_path();
        for (path, key) in [
            (m.home(".claude/skills/review"), "skills/review"),
            (m.home(".claude/agents/auditor.md"), "agents/auditor.md"),
            (m.home(".claude/commands/ship.md"), "commands/ship.md"),
            (m.home(".codex/skills/review"), "skills/review"),
            (m.home(".codex/prompts/ship.md"), "commands/ship.md"),
            (m.home(".config/opencode/skills/review"), "skills/review"),
            (
                m.home(".config/opencode/agents/auditor.md"),
                "agents/auditor.md",
            ),
            (
                m.home(".config/opencode/commands/ship.md"),
                "commands/ship.md",
            ),
            (
                m.root.join("etc/claude-code/managed-settings.json"),
                "claude/managed-settings.json",
            ),
        ] {
            assert_eq!(
                std::fs::read_link(&path).unwrap(),
                link.join(key),
                "{}",
                path.display()
            );
        }
        assert_eq!(
            text(&m.home(".claude/skills/review/SKILL.md")),
            "review skill 1.0.0\n"
        );
        // The managed CLAUDE.md holds the text (Claude Code does not follow imports
        // there); the user's own file is not touched when a machine directory is set.
        assert_eq!(
            text(&m.root.join("etc/claude-code/CLAUDE.md")),
            format!("{BLOCK_BEGIN}\nteam rules 1.0.0\n{BLOCK_END}\n")
        );
        assert_eq!(text(&m.home(".claude/CLAUDE.md")), "my own notes\n");
        assert_eq!(
            text(&m.home(".codex/AGENTS.md")),
            format!("{BLOCK_BEGIN}\nteam rules 1.0.0\n{BLOCK_END}\n")
        );
        // The status lists every path with the version it shows.
        assert!(
            projection
                .placed
                .iter()
                .all(|p| p.from[0].ends_with("@1.0.0"))
        );
        assert_eq!(projection.placed.len(), 12);

        m.install(&full_pack("2.0.0"));
        assert_eq!(
            text(&m.home(".claude/skills/review/SKILL.md")),
            "review skill 2.0.0\n"
        );
        assert_eq!(
            text(&m.home(".config/opencode/agents/auditor.md")),
            "auditor 2.0.0\n"
        );
        assert!(text(&m.home(".codex/AGENTS.md")).contains("team rules 2.0.0\n"));
        assert!(text(&m.home(".config/opencode/AGENTS.md")).contains("team rules 2.0.0\n"));
        let record = load_record(&m.record());
        assert!(record.iter().all(|p| p.from[0].ends_with("@2.0.0")));
    }

    #[test]
    fn a_block_is_not_written_over_an_edit_the_user_saved_meanwhile() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("AGENTS.md");
        std::fs::write(&path, "mine\n").unwrap();
        let staged = pack_format::atomic::stage(&path, b"mine\n\nours\n", Some(0o644)).unwrap();
        std::fs::write(&path, "mine, edited\n").unwrap();
        let err = commit_unless_edited(staged, &path, "mine\n").unwrap_err();
        assert!(
            err.contains("the file changed while the block was written"),
            "{err}"
        );
        assert_eq!(text(&path), "mine, edited\n");
        // No temporary file is left beside it.
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
        // Unchanged, the staged text takes its place.
        let staged = pack_format::atomic::stage(&path, b"mine, edited\n\nours\n", None).unwrap();
        commit_unless_edited(staged, &path, "mine, edited\n").unwrap();
        assert_eq!(text(&path), "mine, edited\n\nours\n");
    }

    #[test]
    fn the_users_claude_md_keeps_its_text_around_our_block() {
        let mut m = Machine::new().claude_user_only();
        std::fs::create_dir_all(m.home(".claude")).unwrap();
        std::fs::write(m.home(".claude/CLAUDE.md"), "my own notes").unwrap();
        m.install(&full_pack("1.0.0"));
        let import = format!("@{}", m.view.link_path().join("AGENTS.md").display());
        assert_eq!(
            text(&m.home(".claude/CLAUDE.md")),
            format!("my own notes\n\n{BLOCK_BEGIN}\n{import}\n{BLOCK_END}\n")
        );
        // The user writes after our block; a new pack keeps it.
        let mut edited = text(&m.home(".claude/CLAUDE.md"));
        edited.push_str("later notes\n");
        std::fs::write(m.home(".claude/CLAUDE.md"), &edited).unwrap();
        m.install(&pack(
            "2.0.0",
            &[("CLAUDE.md", "claude rules\n".to_string())],
        ));
        let claude = format!("@{}", m.view.link_path().join("CLAUDE.md").display());
        assert_eq!(
            text(&m.home(".claude/CLAUDE.md")),
            format!("my own notes\n\n{BLOCK_BEGIN}\n{claude}\n{BLOCK_END}\nlater notes\n")
        );
        // A pack with no instructions takes the block out and leaves the user's file.
        m.install(&pack("3.0.0", &[("commands/x.md", "x\n".to_string())]));
        assert_eq!(
            text(&m.home(".claude/CLAUDE.md")),
            "my own notes\nlater notes\n"
        );
        // The file Codex reads was ours alone: it goes.
        assert!(!m.home(".codex/AGENTS.md").exists());
    }

    #[test]
    fn a_newer_pack_takes_away_what_it_no_longer_ships() {
        let mut m = Machine::new();
        m.install(&full_pack("1.0.0"));
        let p = m.install(&pack(
            "2.0.0",
            &[("skills/other/SKILL.md", "o\n".to_string())],
        ));
        assert!(p.refused.is_empty(), "{:?}", p.refused);
        for gone in [
            m.home(".claude/skills/review"),
            m.home(".claude/agents/auditor.md"),
            m.home(".codex/prompts/ship.md"),
            m.root.join("etc/claude-code/managed-settings.json"),
            m.root.join("etc/claude-code/CLAUDE.md"),
        ] {
            assert!(
                gone.symlink_metadata().is_err(),
                "{} stayed",
                gone.display()
            );
        }
        assert_eq!(text(&m.home(".claude/skills/other/SKILL.md")), "o\n");
        assert_eq!(p.placed.len(), 3);
    }

    #[test]
    fn what_the_user_owns_is_refused_with_the_reason_and_left_as_it_is() {
        let mut m = Machine::new();
        std::fs::create_dir_all(m.home(".claude/agents")).unwrap();
        std::fs::write(m.home(".claude/agents/auditor.md"), "mine\n").unwrap();
        std::fs::create_dir_all(m.home(".codex")).unwrap();
        std::os::unix::fs::symlink("/etc/hostname", m.home(".codex/AGENTS.md")).unwrap();
        let p = m.install(&full_pack("1.0.0"));
        let refused: BTreeMap<PathBuf, String> =
            p.refused.into_iter().map(|r| (r.path, r.reason)).collect();
        assert!(refused[&m.home(".claude/agents/auditor.md")].contains("the user owns"));
        assert!(refused[&m.home(".codex/AGENTS.md")].contains("does not write through links"));
        assert_eq!(text(&m.home(".claude/agents/auditor.md")), "mine\n");
        assert_eq!(
            std::fs::read_link(m.home(".codex/AGENTS.md")).unwrap(),
            Path::new("/etc/hostname")
        );
        // The rest landed.
        assert!(m.home(".claude/skills/review/SKILL.md").exists());
    }

    #[test]
    fn two_channels_combine_in_order_and_a_name_both_ship_is_refused() {
        let mut org = Machine::new().claude_user_only();
        // With nothing placed before, a name both ship is placed from neither.
        let fresh = Machine::new().claude_user_only();
        let mut team = Machine::new().claude_user_only();
        org.install(&pack(
            "1.0.0",
            &[
                ("AGENTS.md", "org rules\n".to_string()),
                ("skills/shared/SKILL.md", "org\n".to_string()),
                ("commands/org.md", "org\n".to_string()),
            ],
        ));
        team.install(&pack(
            "4.0.0",
            &[
                ("AGENTS.md", "team rules\n".to_string()),
                ("skills/shared/SKILL.md", "team\n".to_string()),
                ("commands/team.md", "team\n".to_string()),
            ],
        ));
        let sources = [
            PackSource {
                channel: "org".to_string(),
                link: org.view.link_path(),
            },
            PackSource {
                channel: "team".to_string(),
                link: team.view.link_path(),
            },
        ];
        let p = project(&fresh.targets, &sources, &fresh.record());
        assert!(
            fresh
                .home(".claude/skills/shared")
                .symlink_metadata()
                .is_err()
        );
        assert_eq!(text(&fresh.home(".claude/commands/org.md")), "org\n");
        assert!(
            p.refused
                .iter()
                .any(|r| r.reason.contains("one channel only"))
        );
        // Marked overridable by the organisation, the team's wins.
        let marked = Machine::new().claude_user_only();
        let mut org_marked = Machine::new().claude_user_only();
        org_marked.install(&pack(
            "1.0.1",
            &[
                ("skills/shared/SKILL.md", "org\n".to_string()),
                (
                    OVERRIDABLE,
                    "# a team may replace these\nskills/shared\n".to_string(),
                ),
            ],
        ));
        let p = project(
            &marked.targets,
            &[
                PackSource {
                    channel: "org".to_string(),
                    link: org_marked.view.link_path(),
                },
                sources[1].clone(),
            ],
            &marked.record(),
        );
        assert!(p.refused.is_empty(), "{:?}", p.refused);
        assert_eq!(
            text(&marked.home(".claude/skills/shared/SKILL.md")),
            "team\n"
        );
        let p = project(&team.targets, &sources, &team.record());
        assert_eq!(
            text(&team.home(".codex/AGENTS.md")),
            format!("{BLOCK_BEGIN}\norg rules\nteam rules\n{BLOCK_END}\n")
        );
        assert_eq!(
            text(&team.home(".claude/CLAUDE.md")),
            format!(
                "{BLOCK_BEGIN}\n@{}\n@{}\n{BLOCK_END}\n",
                org.view.link_path().join("AGENTS.md").display(),
                team.view.link_path().join("AGENTS.md").display()
            )
        );
        assert_eq!(text(&team.home(".claude/commands/org.md")), "org\n");
        assert_eq!(text(&team.home(".claude/commands/team.md")), "team\n");
        // The team's projection alone had placed its `shared`: the conflict keeps it.
        assert_eq!(text(&team.home(".claude/skills/shared/SKILL.md")), "team\n");
        assert!(
            p.refused
                .iter()
                .any(|r| r.path == team.home(".claude/skills/shared")
                    && r.reason.contains("one channel only")),
            "{:?}",
            p.refused
        );
    }

    /// What the user may have at a path before pack-client ever runs.
    #[derive(Debug, Clone)]
    enum UserEntry {
        File(String),
        Link(String),
    }

    /// Places a pack may want, and some it never does.
    const USER_PATHS: &[&str] = &[
        ".claude/CLAUDE.md",
        ".claude/skills/a",
        ".claude/skills/b/SKILL.md",
        ".claude/agents/a.md",
        ".claude/commands/b.md",
        ".claude/settings.json",
        ".codex/AGENTS.md",
        ".codex/prompts/a.md",
        ".codex/skills/c",
        ".config/opencode/AGENTS.md",
        ".config/opencode/agents/b.md",
        ".config/opencode/opencode.json",
    ];

    fn user_entry() -> impl Strategy<Value = Option<UserEntry>> {
        prop_oneof![
            Just(None),
            "[a-z \n]{0,30}".prop_map(|t| Some(UserEntry::File(t))),
            "/[a-z]{1,8}".prop_map(|t| Some(UserEntry::Link(t))),
        ]
    }

    fn generated_pack() -> impl Strategy<Value = Vec<(String, String)>> {
        let names = ["a", "b", "c"];
        (
            proptest::sample::subsequence(names.to_vec(), 0..=3),
            proptest::sample::subsequence(names.to_vec(), 0..=3),
            proptest::sample::subsequence(names.to_vec(), 0..=3),
            any::<bool>(),
            any::<bool>(),
            "[a-z]{1,6}",
        )
            .prop_map(|(skills, agents, commands, agents_md, claude_md, word)| {
                let mut files = vec![("system.md".to_string(), format!("{word}\n"))];
                for s in skills {
                    files.push((
                        format!("skills/{s}/SKILL.md"),
                        format!("skill {s} {word}\n"),
                    ));
                }
                for a in agents {
                    files.push((format!("agents/{a}.md"), format!("agent {a} {word}\n")));
                }
                for c in commands {
                    files.push((format!("commands/{c}.md"), format!("command {c} {word}\n")));
                }
                if agents_md {
                    files.push(("AGENTS.md".to_string(), format!("rules {word}\n")));
                }
                if claude_md {
                    files.push(("CLAUDE.md".to_string(), format!("claude {word}\n")));
                }
                files
            })
    }

    /// Every file and link under `dir`, by path: a link's target or a file's text.
    fn tree(dir: &Path, out: &mut BTreeMap<PathBuf, String>) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            let kind = entry.file_type().unwrap();
            if kind.is_symlink() {
                out.insert(
                    path.clone(),
                    format!("-> {}", std::fs::read_link(&path).unwrap().display()),
                );
            } else if kind.is_dir() {
                tree(&path, out);
            } else {
                out.insert(path.clone(), text(&path));
            }
        }
    }

    fn outside_block(text: &str) -> Vec<String> {
        let mut inside = false;
        let mut lines = Vec::new();
        for line in text.lines() {
            if line == BLOCK_BEGIN {
                inside = true;
            } else if line == BLOCK_END {
                inside = false;
            } else if !inside && !line.is_empty() {
                lines.push(line.to_string());
            }
        }
        lines
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

        /// Never touches a file it does not own (a user's block file keeps every line it
        /// had), and after each install every path it owns shows the installed pack and
        /// nothing the installed pack does not ship is left.
        #[test]
        fn never_touches_what_it_does_not_own_and_leaves_nothing_stale(
            user in proptest::collection::vec(user_entry(), USER_PATHS.len()),
            packs in proptest::collection::vec(generated_pack(), 1..4),
        ) {
            let mut m = Machine::new().claude_user_only();
            let mut mine = BTreeMap::new();
            for (rel, entry) in USER_PATHS.iter().zip(&user) {
                let Some(entry) = entry else { continue };
                let path = m.home(rel);
                std::fs::create_dir_all(path.parent().unwrap()).unwrap();
                match entry {
                    UserEntry::File(t) => std::fs::write(&path, t).unwrap(),
                    UserEntry::Link(to) => std::os::unix::fs::symlink(to, &path).unwrap(),
                }
                mine.insert(path, entry.clone());
            }
            let link = m.view.link_path();
            for (i, files) in packs.iter().enumerate() {
                let refs: Vec<(&str, String)> =
                    files.iter().map(|(k, v)| (k.as_str(), v.clone())).collect();
                let snapshot = pack(&format!("{}.0.0", i + 1), &refs);
                let projection = m.install(&snapshot);
                let mut on_disk = BTreeMap::new();
                tree(&m.root.join("home"), &mut on_disk);
                for (path, entry) in &mine {
                    match entry {
                        UserEntry::Link(to) => prop_assert_eq!(
                            std::fs::read_link(path).unwrap(), PathBuf::from(to)
                        ),
                        UserEntry::File(t) => prop_assert_eq!(
                            outside_block(&text(path)),
                            outside_block(t),
                            "{}", path.display()
                        ),
                    }
                }
                let placed: BTreeSet<&PathBuf> = projection.placed.iter().map(|p| &p.path).collect();
                for (path, what) in &on_disk {
                    if mine.contains_key(path) {
                        continue;
                    }
                    let Some(to) = what.strip_prefix("-> ") else {
                        // A file we created holds our block only.
                        prop_assert!(placed.contains(path), "{} is not recorded", path.display());
                        prop_assert!(what.starts_with(BLOCK_BEGIN), "{}", what);
                        continue;
                    };
                    // Every link of ours names a key the installed pack ships.
                    let key = Path::new(to).strip_prefix(&link).unwrap();
                    let key = key.to_string_lossy();
                    prop_assert!(
                        snapshot.keys().iter().any(|k| *k == key || k.starts_with(&format!("{key}/"))),
                        "{} -> {key}, which {} does not ship", path.display(), snapshot.version()
                    );
                    prop_assert!(placed.contains(path));
                }
                // Every placed path is there.
                for p in &projection.placed {
                    prop_assert!(p.path.symlink_metadata().is_ok(), "{}", p.path.display());
                }
            }
        }

        /// Two channels projected together: at every step one installs a generated pack
        /// and the other fails (its link stays). Whatever the moving channel ships, every
        /// path the still channel alone had placed keeps its link or its part of the block,
        /// and the organisation's text stays before the team's.
        #[test]
        fn a_channel_that_does_not_move_keeps_every_file_it_projected(
            first in (generated_pack(), generated_pack()),
            steps in proptest::collection::vec((any::<bool>(), generated_pack()), 1..5),
        ) {
            let mut views = [Machine::new(), Machine::new()];
            let places = Machine::new().claude_user_only();
            let sources: Vec<PackSource> = ["org", "team"]
                .iter()
                .zip(&views)
                .map(|(channel, m)| PackSource {
                    channel: channel.to_string(),
                    link: m.view.link_path(),
                })
                .collect();
            let snapshot = |i: usize, version: String, files: &[(String, String)]| {
                let mut files: Vec<(&str, String)> =
                    files.iter().map(|(k, v)| (k.as_str(), v.clone())).collect();
                // Each channel's instruction text says whose it is.
                for (key, text) in &mut files {
                    if *key == "AGENTS.md" {
                        *text = format!("{} {text}", sources[i].channel);
                    }
                }
                pack(&version, &files)
            };
            views[0].publish(&snapshot(0, "1.0.0".to_string(), &first.0));
            views[1].publish(&snapshot(1, "2.0.0".to_string(), &first.1));
            let mut before = project(&places.targets, &sources, &places.record());
            for (step, (org_moves, files)) in steps.iter().enumerate() {
                let (moving, still) = if *org_moves { (0, 1) } else { (1, 0) };
                let version = format!("{}.{}.0", moving + 1, step + 1);
                views[moving].publish(&snapshot(moving, version, files));
                let after = project(&places.targets, &sources, &places.record());
                let origin = |from: &str| from.split_once(':').map(|(c, _)| c.to_string());
                let still_name = &sources[still].channel;
                for was in &before.placed {
                    let only_still = was.from.iter().all(|f| origin(f).as_ref() == Some(still_name));
                    let now = after.placed.iter().find(|p| p.path == was.path);
                    match was.kind {
                        PlaceKind::Link if only_still => {
                            let now = now.map(|p| &p.target);
                            prop_assert_eq!(now, Some(&was.target), "{} lost its link", was.path.display());
                            let on_disk = std::fs::read_link(&was.path).ok();
                            prop_assert_eq!(on_disk.as_ref(), was.target.as_ref());
                        }
                        PlaceKind::Link => {}
                        PlaceKind::Block => {
                            let kept: Vec<&String> = was
                                .from
                                .iter()
                                .filter(|f| origin(f).as_ref() == Some(still_name))
                                .collect();
                            let now_from: Vec<&String> = now
                                .map(|p| p.from.iter().filter(|f| origin(f).as_ref() == Some(still_name)).collect())
                                .unwrap_or_default();
                            prop_assert_eq!(&now_from, &kept, "{}", was.path.display());
                            let text = std::fs::read_to_string(&was.path).unwrap_or_default();
                            if text.contains("org rules") && text.contains("team rules") {
                                prop_assert!(text.find("org rules") < text.find("team rules"), "{}", text);
                            }
                        }
                    }
                }
                before = after;
            }
        }
    }
}
