//! The plain-files layout: which coding agent reads which file of a pack.
//!
//! A pack of the `files` contract (and the plain files beside the templates of any pack)
//! holds files that coding agents read as they are: instructions, skills, sub-agents,
//! commands and settings fragments. This module is the one table of where each file goes:
//! `packer build` prints it per file, and the client's targets project files by it.
//!
//! | pack path                       | what it is                       | read by                      |
//! |---------------------------------|----------------------------------|------------------------------|
//! | `AGENTS.md`                     | the team's instructions          | Claude Code, Codex, OpenCode |
//! | `CLAUDE.md`                     | Claude Code's own instructions   | Claude Code                  |
//! | `skills/<name>/SKILL.md`        | a skill                          | Claude Code, Codex, OpenCode |
//! | `skills/<name>/<any path>`      | a file a skill ships beside it   | Claude Code, Codex, OpenCode |
//! | `agents/<name>.md`              | a sub-agent definition           | Claude Code, OpenCode        |
//! | `commands/<name>.md`            | a slash command / custom prompt  | Claude Code, Codex, OpenCode |
//! | `claude/managed-settings.json`  | Claude Code managed settings     | Claude Code                  |
//! | `codex/requirements.toml`       | Codex managed requirements       | Codex                        |
//! | anything else                   | data no agent reads              | none                         |
//!
//! When a pack ships `CLAUDE.md`, Claude Code reads it instead of `AGENTS.md`; Codex and
//! OpenCode still read `AGENTS.md` ([`Role::readers`] takes that into account).
//!
//! A `<name>` is one path segment: `agents/team/reviewer.md` is not an agent (nested
//! directories are data), which also keeps the agent schema's templates
//! (`agents/mavis/tui.hbs`) out of this table.

use std::fmt;

/// A coding agent that reads files from a pack.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Target {
    ClaudeCode,
    Codex,
    OpenCode,
}

impl Target {
    /// Every target, in the order messages list them.
    pub const ALL: [Target; 3] = [Target::ClaudeCode, Target::Codex, Target::OpenCode];

    /// The name config files and messages use: `claude-code`, `codex`, `opencode`.
    pub fn name(self) -> &'static str {
        match self {
            Target::ClaudeCode => "claude-code",
            Target::Codex => "codex",
            Target::OpenCode => "opencode",
        }
    }

    /// The target called `name` ([`Target::name`]), if any.
    pub fn from_name(name: &str) -> Option<Target> {
        Target::ALL.into_iter().find(|target| target.name() == name)
    }
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// What one pack file is, by its path ([`Role::of`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Role {
    /// `AGENTS.md`: the team's instructions.
    Instructions,
    /// `CLAUDE.md`: Claude Code's instructions, in place of `AGENTS.md`.
    ClaudeInstructions,
    /// `skills/<name>/SKILL.md`.
    Skill { name: String },
    /// `skills/<skill>/<path>`: a file shipped beside a skill's `SKILL.md`.
    SkillFile { skill: String },
    /// `agents/<name>.md`.
    Agent { name: String },
    /// `commands/<name>.md`.
    Command { name: String },
    /// `claude/managed-settings.json`.
    ClaudeSettings,
    /// `codex/requirements.toml`.
    CodexRequirements,
    /// Any other file: no agent reads it.
    Data,
}

/// Path of the team's instructions.
pub const INSTRUCTIONS: &str = "AGENTS.md";
/// Path of Claude Code's own instructions.
pub const CLAUDE_INSTRUCTIONS: &str = "CLAUDE.md";
/// Path of Claude Code's managed settings fragment.
pub const CLAUDE_SETTINGS: &str = "claude/managed-settings.json";
/// Path of Codex's managed requirements.
pub const CODEX_REQUIREMENTS: &str = "codex/requirements.toml";

impl Role {
    /// The role of the pack file at `path` (a pack key: `/`-separated, relative).
    pub fn of(path: &str) -> Role {
        match path {
            INSTRUCTIONS => return Role::Instructions,
            CLAUDE_INSTRUCTIONS => return Role::ClaudeInstructions,
            CLAUDE_SETTINGS => return Role::ClaudeSettings,
            CODEX_REQUIREMENTS => return Role::CodexRequirements,
            _ => {}
        }
        let segments: Vec<&str> = path.split('/').collect();
        match segments.as_slice() {
            ["skills", name, "SKILL.md"] if !name.is_empty() => Role::Skill {
                name: (*name).to_string(),
            },
            ["skills", name, rest @ ..]
                if !name.is_empty() && !rest.is_empty() && rest.iter().all(|s| !s.is_empty()) =>
            {
                Role::SkillFile {
                    skill: (*name).to_string(),
                }
            }
            ["agents", file] => match md_stem(file) {
                Some(name) => Role::Agent { name },
                None => Role::Data,
            },
            ["commands", file] => match md_stem(file) {
                Some(name) => Role::Command { name },
                None => Role::Data,
            },
            _ => Role::Data,
        }
    }

    /// The targets that read a file of this role. `pack_has_claude_md`: whether the pack
    /// ships `CLAUDE.md`, which Claude Code then reads instead of `AGENTS.md`.
    pub fn readers(&self, pack_has_claude_md: bool) -> &'static [Target] {
        const ALL: &[Target] = &Target::ALL;
        match self {
            Role::Instructions if pack_has_claude_md => &[Target::Codex, Target::OpenCode],
            Role::Instructions => ALL,
            Role::ClaudeInstructions => &[Target::ClaudeCode],
            Role::Skill { .. } | Role::SkillFile { .. } | Role::Command { .. } => ALL,
            Role::Agent { .. } => &[Target::ClaudeCode, Target::OpenCode],
            Role::ClaudeSettings => &[Target::ClaudeCode],
            Role::CodexRequirements => &[Target::Codex],
            Role::Data => &[],
        }
    }

    /// What a reader calls a file of this role, for `packer build`'s listing.
    pub fn describe(&self) -> String {
        match self {
            Role::Instructions => "instructions".to_string(),
            Role::ClaudeInstructions => "Claude Code instructions".to_string(),
            Role::Skill { name } => format!("skill '{name}'"),
            Role::SkillFile { skill } => format!("file of skill '{skill}'"),
            Role::Agent { name } => format!("agent '{name}'"),
            Role::Command { name } => format!("command '{name}'"),
            Role::ClaudeSettings => "Claude Code managed settings".to_string(),
            Role::CodexRequirements => "Codex managed requirements".to_string(),
            Role::Data => "data".to_string(),
        }
    }
}

/// `name` for `name.md` with a non-empty name.
fn md_stem(file: &str) -> Option<String> {
    file.strip_suffix(".md")
        .filter(|stem| !stem.is_empty())
        .map(str::to_string)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_path_of_the_table_has_its_role_and_readers() {
        use Target::{ClaudeCode, Codex, OpenCode};
        let cases: &[(&str, Role, &[Target])] = &[
            (
                "AGENTS.md",
                Role::Instructions,
                &[ClaudeCode, Codex, OpenCode],
            ),
            ("CLAUDE.md", Role::ClaudeInstructions, &[ClaudeCode]),
            (
                "skills/review/SKILL.md",
                Role::Skill {
                    name: "review".into(),
                },
                &[ClaudeCode, Codex, OpenCode],
            ),
            (
                "skills/review/scripts/run.sh",
                Role::SkillFile {
                    skill: "review".into(),
                },
                &[ClaudeCode, Codex, OpenCode],
            ),
            (
                "agents/reviewer.md",
                Role::Agent {
                    name: "reviewer".into(),
                },
                &[ClaudeCode, OpenCode],
            ),
            (
                "commands/ship.md",
                Role::Command {
                    name: "ship".into(),
                },
                &[ClaudeCode, Codex, OpenCode],
            ),
            (
                "claude/managed-settings.json",
                Role::ClaudeSettings,
                &[ClaudeCode],
            ),
            ("codex/requirements.toml", Role::CodexRequirements, &[Codex]),
            ("notes/readme.txt", Role::Data, &[]),
            ("agents/mavis/tui.hbs", Role::Data, &[]),
            ("agents/team/reviewer.md", Role::Data, &[]),
            ("agents/.md", Role::Data, &[]),
            ("commands/ship.txt", Role::Data, &[]),
            ("skills/SKILL.md", Role::Data, &[]),
            ("docs/AGENTS.md", Role::Data, &[]),
        ];
        for (path, role, readers) in cases {
            assert_eq!(&Role::of(path), role, "{path}");
            assert_eq!(role.readers(false), *readers, "{path}");
        }
    }

    #[test]
    fn claude_md_takes_agents_md_away_from_claude_code_only() {
        assert_eq!(
            Role::Instructions.readers(true),
            [Target::Codex, Target::OpenCode]
        );
        assert_eq!(Role::ClaudeInstructions.readers(true), [Target::ClaudeCode]);
    }

    #[test]
    fn target_names_round_trip() {
        for target in Target::ALL {
            assert_eq!(Target::from_name(target.name()), Some(target));
        }
        assert_eq!(Target::from_name("claude"), None);
    }
}
