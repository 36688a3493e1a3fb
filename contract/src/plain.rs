//! The checks of a `files` pack's plain files, by their role in [`crate::layout`]: the
//! front matter of skills and agents, the syntax of settings fragments. What an agent would
//! refuse or misread is refused at build and install, with the file, the line and the fix.
//!
//! Skill limits are the strictest the three agents document, so a skill that passes loads
//! in every one of them: a name of 1-64 lowercase letters, digits and single hyphens (no
//! hyphen at either end) that matches its directory, and a one-line description of 1-500
//! characters (Codex's limit; Claude Code and OpenCode allow 1,024).

use pack_format::FileProblem;
use serde_json::Value;

use crate::layout::Role;

/// Longest skill name any of the three agents accepts.
pub const MAX_SKILL_NAME: usize = 64;
/// Longest skill description all three agents accept.
pub const MAX_SKILL_DESCRIPTION: usize = 500;

/// Problems of the plain file at `path`, by its role; none for a file no agent reads.
pub fn check_plain_file(path: &str, bytes: &[u8]) -> Vec<FileProblem> {
    let role = Role::of(path);
    let needs_text = matches!(
        role,
        Role::Instructions
            | Role::ClaudeInstructions
            | Role::Skill { .. }
            | Role::Agent { .. }
            | Role::Command { .. }
            | Role::ClaudeSettings
            | Role::CodexRequirements
    );
    if !needs_text {
        return Vec::new();
    }
    let text = match std::str::from_utf8(bytes) {
        Ok(text) => text,
        Err(e) => {
            return vec![FileProblem::new(format!(
                "not UTF-8 (invalid byte at offset {}); agents read this file as UTF-8 text",
                e.valid_up_to()
            ))];
        }
    };
    let result = match &role {
        Role::Skill { name } => check_skill(name, text),
        Role::Agent { name } => check_agent(name, text),
        Role::Command { .. } => front_matter(text).map(drop),
        Role::ClaudeSettings => check_json_object(text),
        Role::CodexRequirements => check_toml(text),
        Role::Instructions | Role::ClaudeInstructions | Role::SkillFile { .. } | Role::Data => {
            Ok(())
        }
    };
    match result {
        Ok(()) => Vec::new(),
        Err(problem) => vec![problem],
    }
}

fn problem(line: usize, message: impl Into<String>, hint: Option<&str>) -> FileProblem {
    FileProblem {
        line: Some(line),
        message: message.into(),
        hint: hint.map(str::to_string),
    }
}

/// The YAML front matter of a Markdown file (`---` on the first line, up to the next
/// `---` line), as a map; `None` when the file has none.
fn front_matter(text: &str) -> Result<Option<serde_json::Map<String, Value>>, FileProblem> {
    let mut lines = text.split_inclusive('\n');
    match lines.next() {
        Some(first) if first.trim_end() == "---" => {}
        _ => return Ok(None),
    }
    let mut yaml = String::new();
    let mut closed = false;
    for line in lines {
        if line.trim_end() == "---" {
            closed = true;
            break;
        }
        yaml.push_str(line);
    }
    if !closed {
        return Err(problem(
            1,
            "front matter opened with --- is never closed",
            Some("end the front matter with a line holding only ---"),
        ));
    }
    if yaml.trim().is_empty() {
        return Ok(Some(serde_json::Map::new()));
    }
    match serde_norway::from_str::<Value>(&yaml) {
        Ok(Value::Object(map)) => Ok(Some(map)),
        Ok(other) => Err(problem(
            2,
            format!(
                "front matter must be a YAML mapping (key: value lines), found {}",
                kind_of(&other)
            ),
            None,
        )),
        Err(e) => {
            // The YAML starts on the file's second line.
            let line = e.location().map_or(2, |at| at.line() + 1);
            Err(problem(
                line,
                format!("front matter is not valid YAML: {e}"),
                Some("quote a value that holds ': ' or starts with a special character"),
            ))
        }
    }
}

fn kind_of(value: &Value) -> &'static str {
    match value {
        Value::Null => "nothing",
        Value::Bool(_) => "a bool",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "a mapping",
    }
}

/// The string field `key` of `map`, trimmed; an error naming it when absent, empty or not
/// a string.
fn required_string<'m>(
    map: &'m serde_json::Map<String, Value>,
    key: &str,
    hint: &str,
) -> Result<&'m str, FileProblem> {
    match map.get(key) {
        Some(Value::String(value)) if !value.trim().is_empty() => Ok(value.trim()),
        Some(Value::String(_)) => Err(problem(
            1,
            format!("front matter '{key}' is empty"),
            Some(hint),
        )),
        Some(other) => Err(problem(
            1,
            format!(
                "front matter '{key}' must be a string, found {}",
                kind_of(other)
            ),
            Some(hint),
        )),
        None => Err(problem(
            1,
            format!("front matter has no '{key}'"),
            Some(hint),
        )),
    }
}

fn check_skill(dir: &str, text: &str) -> Result<(), FileProblem> {
    let Some(map) = front_matter(text)? else {
        return Err(problem(
            1,
            "a skill starts with front matter (---, name:, description:, ---)",
            Some(&format!(
                "begin the file with:\n---\nname: {dir}\ndescription: what the skill does and when to use it\n---"
            )),
        ));
    };
    let name_hint = format!("name: {dir} (the skill's directory)");
    let name = required_string(&map, "name", &name_hint)?;
    if name != dir {
        return Err(problem(
            1,
            format!("skill name '{name}' does not match its directory 'skills/{dir}'"),
            Some(&name_hint),
        ));
    }
    let well_formed = name.len() <= MAX_SKILL_NAME
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !name.starts_with('-')
        && !name.ends_with('-')
        && !name.contains("--");
    if !well_formed {
        return Err(problem(
            1,
            format!(
                "skill name '{name}' must be 1-{MAX_SKILL_NAME} lowercase letters, digits and \
                 single hyphens, with no hyphen at either end"
            ),
            Some("rename the directory and the name together, e.g. code-review"),
        ));
    }
    let description = required_string(
        &map,
        "description",
        "description: what the skill does and when to use it",
    )?;
    if description.contains('\n') {
        return Err(problem(
            1,
            "skill description must be one line",
            Some("write it on one line; the body of SKILL.md holds the details"),
        ));
    }
    let chars = description.chars().count();
    if chars > MAX_SKILL_DESCRIPTION {
        return Err(problem(
            1,
            format!(
                "skill description is {chars} characters, over the {MAX_SKILL_DESCRIPTION} \
                 every agent accepts"
            ),
            Some("shorten it; the body of SKILL.md holds the details"),
        ));
    }
    Ok(())
}

fn check_agent(file: &str, text: &str) -> Result<(), FileProblem> {
    let Some(map) = front_matter(text)? else {
        return Err(problem(
            1,
            "an agent definition starts with front matter (---, name:, description:, ---)",
            Some(&format!(
                "begin the file with:\n---\nname: {file}\ndescription: when to use this agent\n---"
            )),
        ));
    };
    let name_hint = format!("name: {file} (the file's name without .md)");
    let name = required_string(&map, "name", &name_hint)?;
    if name != file {
        return Err(problem(
            1,
            format!("agent name '{name}' does not match its file 'agents/{file}.md'"),
            Some(&name_hint),
        ));
    }
    required_string(&map, "description", "description: when to use this agent")?;
    Ok(())
}

fn check_json_object(text: &str) -> Result<(), FileProblem> {
    match serde_json::from_str::<Value>(text) {
        Ok(Value::Object(_)) => Ok(()),
        Ok(other) => Err(problem(
            1,
            format!("settings must be a JSON object, found {}", kind_of(&other)),
            Some("wrap the settings in { ... }"),
        )),
        Err(e) => Err(problem(
            e.line().max(1),
            format!("not valid JSON: {e}"),
            Some("fix the syntax; `python3 -m json.tool FILE` shows the same place"),
        )),
    }
}

fn check_toml(text: &str) -> Result<(), FileProblem> {
    match text.parse::<toml::Table>() {
        Ok(_) => Ok(()),
        Err(e) => {
            let line = e.span().map_or(1, |span| {
                text[..span.start.min(text.len())].matches('\n').count() + 1
            });
            Err(problem(
                line,
                format!("not valid TOML: {}", e.message()),
                Some("fix the syntax at that line"),
            ))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shown(path: &str, text: &str) -> Vec<String> {
        check_plain_file(path, text.as_bytes())
            .into_iter()
            .map(|p| {
                format!(
                    "{}: {}{}",
                    p.line.map_or("-".to_string(), |l| l.to_string()),
                    p.message,
                    p.hint.map(|h| format!(" ({h})")).unwrap_or_default()
                )
            })
            .collect()
    }

    #[test]
    fn good_files_pass() {
        let skill = "---\nname: code-review\ndescription: Review a diff for bugs.\n---\nBody\n";
        assert!(shown("skills/code-review/SKILL.md", skill).is_empty());
        let agent =
            "---\nname: reviewer\ndescription: Reviews code.\nmodel: sonnet\n---\nYou review.\n";
        assert!(shown("agents/reviewer.md", agent).is_empty());
        assert!(shown("commands/ship.md", "Ship it: $ARGUMENTS\n").is_empty());
        assert!(shown("commands/ship.md", "---\ndescription: Ship\n---\nShip.\n").is_empty());
        assert!(
            shown(
                "claude/managed-settings.json",
                r#"{"permissions": {"deny": ["Bash"]}}"#
            )
            .is_empty()
        );
        assert!(
            shown(
                "codex/requirements.toml",
                "allowed_sandbox_modes = [\"read-only\"]\n"
            )
            .is_empty()
        );
        assert!(shown("AGENTS.md", "# Team rules\n").is_empty());
        assert!(shown("notes/anything.bin", "\u{0}\u{1}").is_empty());
    }

    #[test]
    fn malformed_skills_say_what_and_how() {
        assert_eq!(
            shown("skills/review/SKILL.md", "Just text\n"),
            [
                "1: a skill starts with front matter (---, name:, description:, ---) (begin the file with:\n---\nname: review\ndescription: what the skill does and when to use it\n---)"
            ]
        );
        assert_eq!(
            shown(
                "skills/review/SKILL.md",
                "---\nname: other\ndescription: d\n---\n"
            ),
            [
                "1: skill name 'other' does not match its directory 'skills/review' (name: review (the skill's directory))"
            ]
        );
        assert_eq!(
            shown("skills/review/SKILL.md", "---\nname: review\n---\n"),
            [
                "1: front matter has no 'description' (description: what the skill does and when to use it)"
            ]
        );
        assert_eq!(
            shown(
                "skills/review/SKILL.md",
                "---\nname: review\ndescription: \"  \"\n---\n"
            ),
            [
                "1: front matter 'description' is empty (description: what the skill does and when to use it)"
            ]
        );
        assert_eq!(
            shown(
                "skills/Review/SKILL.md",
                "---\nname: Review\ndescription: d\n---\n"
            ),
            [
                "1: skill name 'Review' must be 1-64 lowercase letters, digits and single hyphens, with no hyphen at either end (rename the directory and the name together, e.g. code-review)"
            ]
        );
        let long = "x".repeat(501);
        assert_eq!(
            shown(
                "skills/r/SKILL.md",
                &format!("---\nname: r\ndescription: {long}\n---\n")
            ),
            [
                "1: skill description is 501 characters, over the 500 every agent accepts (shorten it; the body of SKILL.md holds the details)"
            ]
        );
        let at_limit = "x".repeat(500);
        assert!(
            shown(
                "skills/r/SKILL.md",
                &format!("---\nname: r\ndescription: {at_limit}\n---\n")
            )
            .is_empty()
        );
        assert_eq!(
            shown("skills/r/SKILL.md", "---\nname: r\ndescription: d\n"),
            [
                "1: front matter opened with --- is never closed (end the front matter with a line holding only ---)"
            ]
        );
        let bad_yaml = shown(
            "skills/r/SKILL.md",
            "---\nname: r\ndescription: a: b: c\n---\n",
        );
        assert_eq!(bad_yaml.len(), 1);
        assert!(
            bad_yaml[0].starts_with("3: front matter is not valid YAML: "),
            "{bad_yaml:?}"
        );
    }

    #[test]
    fn malformed_agents_and_settings_say_where() {
        assert_eq!(
            shown("agents/reviewer.md", "---\ndescription: d\n---\n"),
            ["1: front matter has no 'name' (name: reviewer (the file's name without .md))"]
        );
        assert_eq!(
            shown("agents/reviewer.md", "---\nname: reviewer\n---\n"),
            ["1: front matter has no 'description' (description: when to use this agent)"]
        );
        let json = shown(
            "claude/managed-settings.json",
            "{\n  \"permissions\": {\n    \"deny\": [\"Bash\",]\n  }\n}\n",
        );
        assert_eq!(json.len(), 1);
        assert!(json[0].starts_with("3: not valid JSON: "), "{json:?}");
        assert_eq!(
            shown("claude/managed-settings.json", "[]"),
            ["1: settings must be a JSON object, found a list (wrap the settings in { ... })"]
        );
        let toml = shown("codex/requirements.toml", "a = 1\nb = [\n");
        assert_eq!(toml.len(), 1);
        assert!(toml[0].starts_with("2: not valid TOML: "), "{toml:?}");
        assert_eq!(
            check_plain_file("AGENTS.md", b"ok\xff")[0].message,
            "not UTF-8 (invalid byte at offset 2); agents read this file as UTF-8 text"
        );
    }
}
