//! Skills: `SKILL.md` files with `name` and `description` frontmatter, from three places.
//! The pack ships some (`skills/<name>/SKILL.md`); the user adds their own under
//! `<data_dir>/skills/<name>/SKILL.md`, and a project under
//! `<workspace>/.agents/skills/<name>/SKILL.md`. A later source replaces an earlier one of
//! the same name: project over user over pack.
//!
//! The system prompt lists names and descriptions only; the `skill` tool hands the body
//! over when the model asks, with relative paths made absolute so the files a skill points
//! at can be read from any working directory.

use std::path::{Path, PathBuf};

use pack_serving::Snapshot;
use serde::Deserialize;

use crate::error::PromptError;

/// Skill files larger than this are skipped with a warning.
pub const SKILL_FILE_MAX_BYTES: u64 = 256 * 1024;
/// Where a project keeps its skills, relative to the workspace root.
pub const PROJECT_SKILLS_DIR: &str = ".agents/skills";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SkillOrigin {
    Pack,
    User,
    Project,
}

/// One skill.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Skill {
    pub name: String,
    pub description: String,
    pub body: String,
    /// The directory holding `SKILL.md`; pack skills have none.
    pub dir: Option<PathBuf>,
    pub origin: SkillOrigin,
}

#[derive(Deserialize)]
struct Frontmatter {
    name: String,
    description: String,
}

/// Splits and checks a `SKILL.md`: `(name, description, body)`.
pub fn parse(text: &str) -> Result<(String, String, String), String> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let rest = text
        .strip_prefix("---\n")
        .or_else(|| text.strip_prefix("---\r\n"))
        .ok_or("expected YAML frontmatter with name and description")?;
    let (yaml, body) = rest
        .split_once("\n---")
        .ok_or("the frontmatter is not closed by a `---` line")?;
    let body = body.split_once('\n').map_or("", |(_, b)| b);
    let fm: Frontmatter = serde_norway::from_str(yaml).map_err(|e| e.to_string())?;
    if fm.name.trim().is_empty() || fm.description.trim().is_empty() {
        return Err("name and description must not be empty".to_string());
    }
    Ok((
        fm.name.trim().to_string(),
        fm.description.trim().to_string(),
        body.to_string(),
    ))
}

/// The pack's skills.
pub fn from_pack(snapshot: &Snapshot) -> Result<Vec<Skill>, PromptError> {
    let mut skills = Vec::new();
    for key in snapshot.keys() {
        if !(key.starts_with("skills/") && key.ends_with("/SKILL.md")) {
            continue;
        }
        let text = std::str::from_utf8(snapshot.read(key)?).map_err(|_| PromptError::NotUtf8 {
            key: key.to_string(),
        })?;
        let (name, description, body) = parse(text).map_err(|reason| PromptError::BadPackFile {
            key: key.to_string(),
            reason,
        })?;
        skills.push(Skill {
            name,
            description,
            body,
            dir: None,
            origin: SkillOrigin::Pack,
        });
    }
    Ok(skills)
}

/// Skills on disk: the user's (`<data_dir>/skills`), then the project's. A broken file is
/// skipped with a warning, never fatal: one bad skill must not stop a session.
pub fn from_disk(data_dir: &Path, workspace: &Path) -> (Vec<Skill>, Vec<String>) {
    let mut skills = Vec::new();
    let mut warnings = Vec::new();
    for (root, origin) in [
        (data_dir.join("skills"), SkillOrigin::User),
        (workspace.join(PROJECT_SKILLS_DIR), SkillOrigin::Project),
    ] {
        let Ok(entries) = std::fs::read_dir(&root) else {
            continue;
        };
        let mut dirs: Vec<PathBuf> = entries.flatten().map(|e| e.path()).collect();
        dirs.sort();
        for dir in dirs {
            let file = dir.join("SKILL.md");
            let Ok(meta) = std::fs::metadata(&file) else {
                continue;
            };
            if meta.len() > SKILL_FILE_MAX_BYTES {
                warnings.push(format!(
                    "{}: larger than {SKILL_FILE_MAX_BYTES} bytes; skipped",
                    file.display()
                ));
                continue;
            }
            let parsed = std::fs::read_to_string(&file)
                .map_err(|e| e.to_string())
                .and_then(|text| parse(&text));
            match parsed {
                Ok((name, description, body)) => skills.push(Skill {
                    name,
                    description,
                    body,
                    dir: Some(std::path::absolute(&dir).unwrap_or(dir)),
                    origin,
                }),
                Err(reason) => warnings.push(format!("{}: {reason}; skipped", file.display())),
            }
        }
    }
    for warning in &warnings {
        tracing::warn!("{warning}");
    }
    (skills, warnings)
}

/// Pack skills overridden by disk skills of the same name, in name order, limited to
/// `allowed` when the agent names its skills.
pub fn merge(
    pack: Vec<Skill>,
    disk: &[Skill],
    allowed: Option<&std::collections::BTreeSet<String>>,
) -> Vec<Skill> {
    let mut by_name = std::collections::BTreeMap::new();
    for skill in pack.into_iter().chain(disk.iter().cloned()) {
        by_name.insert(skill.name.clone(), skill);
    }
    by_name
        .into_values()
        .filter(|s| allowed.is_none_or(|a| a.contains(&s.name)))
        .collect()
}

/// The body the `skill` tool returns: relative link targets and relative paths in code
/// spans that name a file of the skill become absolute.
pub fn expand(skill: &Skill) -> String {
    let Some(dir) = &skill.dir else {
        return skill.body.clone();
    };
    let is_relative = |target: &str| {
        !target.is_empty()
            && !target.starts_with('/')
            && !target.starts_with('#')
            && !target.starts_with('~')
            && !target.contains("://")
            && !target.starts_with("mailto:")
            && !Path::new(target).is_absolute()
    };
    let absolute = |target: &str| {
        dir.join(target.trim_start_matches("./"))
            .display()
            .to_string()
    };
    let mut out = String::with_capacity(skill.body.len());
    let mut rest = skill.body.as_str();
    // Markdown links: `](target)` and `](target "title")`.
    while let Some(at) = rest.find("](") {
        out.push_str(&rest[..at + 2]);
        rest = &rest[at + 2..];
        let end = rest.find([')', ' ']).unwrap_or(rest.len());
        let target = &rest[..end];
        if is_relative(target) {
            out.push_str(&absolute(target));
        } else {
            out.push_str(target);
        }
        rest = &rest[end..];
    }
    out.push_str(rest);
    // Code spans naming an existing file or directory of the skill.
    let mut result = String::with_capacity(out.len());
    let mut parts = out.split('`');
    if let Some(first) = parts.next() {
        result.push_str(first);
    }
    for (i, part) in parts.enumerate() {
        result.push('`');
        let inside_span = i % 2 == 0;
        if inside_span
            && is_relative(part)
            && !part.contains(char::is_whitespace)
            && dir.join(part.trim_start_matches("./")).exists()
        {
            result.push_str(&absolute(part));
        } else {
            result.push_str(part);
        }
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn links_and_code_spans_become_absolute() {
        let dir = tempfile_dir();
        std::fs::create_dir_all(dir.join("scripts")).unwrap();
        std::fs::write(dir.join("scripts/check.sh"), "").unwrap();
        let skill = Skill {
            name: "x".into(),
            description: "d".into(),
            body: "See [the guide](docs/guide.md) and [site](https://x.org).\nRun `scripts/check.sh` then `cargo test`.\n".into(),
            dir: Some(dir.clone()),
            origin: SkillOrigin::Project,
        };
        let out = expand(&skill);
        let d = dir.display();
        assert_eq!(
            out,
            format!(
                "See [the guide]({d}/docs/guide.md) and [site](https://x.org).\nRun `{d}/scripts/check.sh` then `cargo test`.\n"
            )
        );
        std::fs::remove_dir_all(dir).unwrap();
    }

    fn tempfile_dir() -> PathBuf {
        let dir = std::env::temp_dir().join(format!("skills-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }
}
