//! Trust in a workspace's rules file, pinned to its content.
//!
//! A workspace's `.agents/permissions.toml` may allow calls outside the mode, and an allow
//! rule is what lets a command leave the sandbox without asking. The workspace can change
//! that file itself: a sandboxed command in `workspace` mode may write anywhere below it,
//! and a `git pull` may bring another one. So, as direnv's `allow` does, trust goes to the
//! file as it is: `agent trust` records the SHA-256 of its bytes in config.toml, and its
//! allow rules count only while the file hashes the same. Its deny rules always count.

use std::path::PathBuf;

use super::config::{self, Section, WORKSPACE_RULES};
use super::{RuleContext, normalise, real_path};

/// Whether a workspace's allow rules count, and if not, why.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Trust {
    /// The workspace is below none of `trusted_workspaces`.
    #[default]
    NotListed,
    /// Listed, but nothing records which content was trusted: listed by hand, or trusted
    /// before trust was pinned to the file. Counts as changed.
    NotRecorded,
    /// Listed, and the file is not the one the user trusted.
    Changed,
    /// Listed, and the file is byte for byte the one the user trusted.
    Pinned,
}

impl Trust {
    /// The file's allow rules count.
    pub fn allows(self) -> bool {
        match self {
            Trust::Pinned => true,
            Trust::NotListed | Trust::NotRecorded | Trust::Changed => false,
        }
    }

    /// Why the allow rules are left out, for the notice at start and `agent doctor`;
    /// `None` when they count.
    pub fn why_ignored(self) -> Option<&'static str> {
        match self {
            Trust::NotListed => Some("this workspace is not trusted"),
            Trust::NotRecorded => Some(
                "the workspace is listed in `trusted_workspaces` with no record of its content (trusted before trust was pinned to the file)",
            ),
            Trust::Changed => Some("the file changed since you trusted it"),
            Trust::Pinned => None,
        }
    }
}

/// Whether the workspace is one of `trusted_workspaces` (or below one).
pub fn is_listed(section: &Section, context: &RuleContext) -> bool {
    let here = real_path(&context.workspace);
    section
        .trusted_workspaces
        .iter()
        .any(|t| here.starts_with(real_path(&context.expand(t))))
}

/// Where `agent trust` records the workspace's rules file: its path, with the links of
/// the workspace's path resolved.
pub fn rules_key(context: &RuleContext) -> PathBuf {
    real_path(&context.workspace).join(WORKSPACE_RULES)
}

/// The record for this workspace's rules file, under whatever spelling of its path.
fn recorded<'s>(section: &'s Section, context: &RuleContext) -> Option<&'s str> {
    let key = rules_key(context);
    section
        .trusted_rules
        .iter()
        .find(|(path, _)| normalise(&context.expand(path)) == key)
        .map(|(_, sha256)| sha256.as_str())
}

/// How far the workspace's rules file, whose bytes hash to `sha256`, is trusted.
pub fn trust_of(section: &Section, context: &RuleContext, sha256: &str) -> Trust {
    if !is_listed(section, context) {
        return Trust::NotListed;
    }
    match recorded(section, context) {
        None => Trust::NotRecorded,
        Some(pinned) if pinned.trim().eq_ignore_ascii_case(sha256) => Trust::Pinned,
        Some(_) => Trust::Changed,
    }
}

/// config.toml's text with the workspace trusted as its rules file is now: the workspace
/// added to `trusted_workspaces` unless it is below an entry already, and the file's
/// SHA-256 recorded under `[permissions.trusted_rules]` (replacing an older record). The
/// file is edited as TOML, so the user's comments and layout survive.
pub fn record(config_text: &str, context: &RuleContext, sha256: &str) -> Result<String, String> {
    let section = config::section(config_text)?;
    let mut doc: toml_edit::DocumentMut = config_text
        .parse()
        .map_err(|e: toml_edit::TomlError| e.to_string())?;
    let permissions = doc
        .entry("permissions")
        .or_insert_with(toml_edit::table)
        .as_table_mut()
        .ok_or("`permissions` is not written as a [permissions] table")?;
    if !is_listed(&section, context) {
        permissions
            .entry("trusted_workspaces")
            .or_insert_with(|| toml_edit::value(toml_edit::Array::new()))
            .as_array_mut()
            .ok_or("`trusted_workspaces` under [permissions] is not a list")?
            .push(real_path(&context.workspace).display().to_string());
    }
    let pins = permissions
        .entry("trusted_rules")
        .or_insert_with(toml_edit::table)
        .as_table_like_mut()
        .ok_or("`trusted_rules` under [permissions] is not a table")?;
    let key = rules_key(context);
    let older: Vec<String> = pins
        .iter()
        .map(|(path, _)| path.to_string())
        .filter(|path| normalise(&context.expand(path)) == key)
        .collect();
    for path in older {
        pins.remove(&path);
    }
    pins.insert(&key.display().to_string(), toml_edit::value(sha256));
    Ok(doc.to_string())
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;

    fn at(workspace: &Path) -> RuleContext {
        RuleContext {
            workspace: workspace.to_path_buf(),
            home: None,
        }
    }

    #[test]
    fn trust_follows_the_recorded_hash() {
        let dir = tempfile::tempdir().unwrap();
        let context = at(dir.path());
        let text = record("# mine\n[updates]\npin = \"1.0.0\"\n", &context, "ab12").unwrap();
        assert!(
            text.starts_with("# mine\n[updates]\npin = \"1.0.0\"\n"),
            "{text}"
        );
        let section = config::section(&text).unwrap();
        assert_eq!(trust_of(&section, &context, "AB12"), Trust::Pinned);
        assert_eq!(trust_of(&section, &context, "cd34"), Trust::Changed);
        let listed_only = config::section(&format!(
            "[permissions]\ntrusted_workspaces = [\"{}\"]\n",
            dir.path().display()
        ))
        .unwrap();
        assert_eq!(trust_of(&listed_only, &context, "ab12"), Trust::NotRecorded);
        let other = tempfile::tempdir().unwrap();
        assert_eq!(
            trust_of(&section, &at(other.path()), "ab12"),
            Trust::NotListed
        );
    }

    #[test]
    fn trusting_again_replaces_the_record_and_lists_the_workspace_once() {
        let dir = tempfile::tempdir().unwrap();
        let context = at(dir.path());
        let once = record("", &context, "ab12").unwrap();
        let twice = record(&once, &context, "cd34").unwrap();
        let section = config::section(&twice).unwrap();
        assert_eq!(section.trusted_workspaces.len(), 1, "{twice}");
        assert_eq!(section.trusted_rules.len(), 1, "{twice}");
        assert_eq!(trust_of(&section, &context, "cd34"), Trust::Pinned);
        assert_eq!(trust_of(&section, &context, "ab12"), Trust::Changed);
    }
}
