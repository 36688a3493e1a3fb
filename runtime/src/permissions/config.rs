//! The `[permissions]` table of config.toml, and the workspace's rules file.

use std::path::{Path, PathBuf};

use serde::Deserialize;

use super::trust::{self, Trust};
use super::{Approval, Origin, PermissionMode, Rule, RuleContext, Rules};

/// `[permissions]` as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Section {
    pub mode: Option<PermissionMode>,
    /// For interactive sessions; `agent exec` never asks unless `--approval ask`.
    pub approval: Option<Approval>,
    #[serde(default)]
    pub network: bool,
    #[serde(default)]
    pub writable_roots: Vec<String>,
    #[serde(default)]
    pub allow: Vec<String>,
    #[serde(default)]
    pub deny: Vec<String>,
    /// Workspaces whose `.agents/permissions.toml` may *allow* things (deny rules from
    /// any workspace always apply), while the file is the one trusted.
    #[serde(default)]
    pub trusted_workspaces: Vec<String>,
    /// Written by `agent trust`: the SHA-256 of each trusted rules file as the user
    /// trusted it, by the file's path.
    #[serde(default)]
    pub trusted_rules: std::collections::BTreeMap<String, String>,
}

#[derive(Debug, Default, Deserialize)]
struct File {
    #[serde(default)]
    permissions: Section,
}

/// A workspace's `.agents/permissions.toml`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct WorkspaceFile {
    #[serde(default)]
    allow: Vec<String>,
    #[serde(default)]
    deny: Vec<String>,
}

/// The workspace rules file, relative to the workspace.
pub const WORKSPACE_RULES: &str = ".agents/permissions.toml";
/// The most a workspace rules file may hold; it is a few lines.
pub const MAX_WORKSPACE_RULES_BYTES: u64 = 1024 * 1024;

/// The `[permissions]` table; other tables are left to their owners.
pub fn section(config_text: &str) -> Result<Section, String> {
    let file: File = toml::from_str(config_text).map_err(|e| format!("[permissions]: {e}"))?;
    Ok(file.permissions)
}

fn parse_all(
    texts: &[String],
    origin: &Origin,
    context: &RuleContext,
    known: &[&str],
) -> Result<Vec<Rule>, String> {
    texts
        .iter()
        .map(|t| Rule::parse(t, origin.clone(), context, known))
        .collect()
}

/// The user's rules from `[permissions]`.
pub fn user_rules(
    section: &Section,
    config_path: &Path,
    context: &RuleContext,
    known: &[&str],
) -> Result<Rules, String> {
    let origin = Origin::UserConfig(config_path.to_path_buf());
    Ok(Rules {
        allow: parse_all(&section.allow, &origin, context, known)?,
        deny: parse_all(&section.deny, &origin, context, known)?,
    })
}

/// What the workspace's rules file says, and whether its allow rules count.
#[derive(Debug, Default)]
pub struct WorkspaceRules {
    pub path: PathBuf,
    pub rules: Rules,
    /// Allow rules left out because the file is not one the user trusted.
    pub ignored_allow: Vec<String>,
    pub exists: bool,
    pub trust: Trust,
}

/// The workspace's rules file, read once: the SHA-256 of its bytes and the rules
/// parsed from those same bytes.
#[derive(Debug)]
pub struct WorkspaceFileRead {
    pub path: PathBuf,
    pub sha256: String,
    pub allow: Vec<Rule>,
    pub deny: Vec<Rule>,
}

/// Reads `<workspace>/.agents/permissions.toml` (at most
/// [`MAX_WORKSPACE_RULES_BYTES`]), hashes it and parses it; `None` when there is none.
pub fn read_workspace_file(
    context: &RuleContext,
    known: &[&str],
) -> Result<Option<WorkspaceFileRead>, String> {
    use std::io::Read as _;
    let path = context.workspace.join(WORKSPACE_RULES);
    let fail = |e: String| format!("{}: {e}", path.display());
    let file = match std::fs::File::open(&path) {
        Ok(file) => file,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(fail(e.to_string())),
    };
    let mut bytes = Vec::new();
    file.take(MAX_WORKSPACE_RULES_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| fail(e.to_string()))?;
    if bytes.len() as u64 > MAX_WORKSPACE_RULES_BYTES {
        return Err(fail(format!(
            "larger than {MAX_WORKSPACE_RULES_BYTES} bytes; a rules file is a few lines"
        )));
    }
    let sha256 = pack_format::sha256_hex(&bytes);
    let text = std::str::from_utf8(&bytes).map_err(|e| fail(e.to_string()))?;
    let file: WorkspaceFile = toml::from_str(text).map_err(|e| fail(e.to_string()))?;
    let origin = Origin::Workspace(path.clone());
    let deny = parse_all(&file.deny, &origin, context, known).map_err(fail)?;
    let allow = parse_all(&file.allow, &origin, context, known).map_err(fail)?;
    Ok(Some(WorkspaceFileRead {
        path,
        sha256,
        allow,
        deny,
    }))
}

/// The workspace's rules. Its deny rules always apply; its allow rules only while the
/// file is byte for byte the one the user trusted (`agent trust`), since a cloned
/// repository, a `git pull` or a sandboxed command must not be able to grant anything.
pub fn workspace_rules(
    context: &RuleContext,
    section: &Section,
    known: &[&str],
) -> Result<WorkspaceRules, String> {
    let Some(file) = read_workspace_file(context, known)? else {
        return Ok(WorkspaceRules {
            path: context.workspace.join(WORKSPACE_RULES),
            ..Default::default()
        });
    };
    let trust = trust::trust_of(section, context, &file.sha256);
    let (allow, ignored_allow) = if trust.allows() {
        (file.allow, Vec::new())
    } else {
        (Vec::new(), file.allow.into_iter().map(|r| r.text).collect())
    };
    Ok(WorkspaceRules {
        path: file.path,
        rules: Rules {
            allow,
            deny: file.deny,
        },
        ignored_allow,
        exists: true,
        trust,
    })
}
