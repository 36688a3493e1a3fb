//! Agent definitions: the built-in roster (whose ceilings ship in the pack) and custom
//! agent files (`<dir>/<name>/agent.md`; the runtime's roster says which directories).

use std::collections::BTreeSet;
use std::io::Read;
use std::path::{Path, PathBuf};

use pack_serving::Snapshot;
use serde::{Deserialize, Serialize};

use crate::capabilities::{Ceiling, Feature, McpRule, ToolId, split_tool_list};
use crate::error::{AgentFileError, PromptError};
use crate::mode::PromptMode;

/// The built-in agents, orchestrator first.
pub const BUILTIN_AGENTS: [&str; 4] = ["mavis", "explore", "worker", "verifier"];
/// The agent that talks to the user.
pub const ORCHESTRATOR: &str = "mavis";
/// Plan mode's agent: the orchestrator's prompt under a read-only ceiling.
pub const PLAN: &str = "plan";
/// What the orchestrator used to be called; still accepted wherever an agent is named.
pub const ORCHESTRATOR_OLD_NAME: &str = "main";

/// An agent's name as the runtime knows it: `main` is the old name of `mavis`.
pub fn canonical_name(name: &str) -> &str {
    if name == ORCHESTRATOR_OLD_NAME {
        ORCHESTRATOR
    } else {
        name
    }
}

/// The model an agent asks for, if any: `inherit` (as Claude Code writes it) means the
/// session's own.
fn own_model(model: Option<String>) -> Option<String> {
    model.filter(|m| !m.trim().is_empty() && m.trim() != "inherit")
}
/// A custom agent file larger than this is refused.
pub const AGENT_FILE_MAX_BYTES: u64 = 1024 * 1024;

/// What an agent is for, which decides the shared layers it gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// Talks to the user and delegates.
    Orchestrator,
    /// Does delegated work and reports back.
    Subagent,
}

/// Where an agent's core prompt comes from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum CorePrompt {
    /// A template in the pack: `agents/<name>/<mode>.hbs` for the orchestrator,
    /// `agents/<name>/system.hbs` for the others.
    Builtin,
    /// The body of a custom agent file, used as written (it is data, not a template).
    Custom { path: PathBuf, body: String },
    /// A built-in agent's core template as it was when its task session started, with the
    /// pack it came from: a resumed helper renders this text whatever pack is current.
    Frozen {
        key: String,
        template: String,
        pack: PackIdentity,
    },
}

/// Which pack a frozen template came from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PackIdentity {
    pub name: String,
    pub version: String,
    pub sha256: String,
}

/// One agent.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AgentDefinition {
    pub name: String,
    pub description: String,
    pub role: Role,
    pub model: Option<String>,
    pub ceiling: Option<Ceiling>,
    /// Skills this agent may see; `None` means every skill in the pack.
    pub skills: Option<BTreeSet<String>>,
    pub core: CorePrompt,
}

impl AgentDefinition {
    /// The pack key of the core template, for built-in agents.
    pub fn template_key(&self, mode: PromptMode) -> Option<String> {
        match (&self.core, self.role) {
            (CorePrompt::Custom { .. }, _) => None,
            (CorePrompt::Frozen { key, .. }, _) => Some(key.clone()),
            // Plan mode thinks with the orchestrator's prompt; the reminders say what differs.
            (CorePrompt::Builtin, Role::Orchestrator) if self.name == PLAN => {
                Some(format!("agents/{ORCHESTRATOR}/{mode}.hbs"))
            }
            (CorePrompt::Builtin, Role::Orchestrator) => {
                Some(format!("agents/{}/{mode}.hbs", self.name))
            }
            (CorePrompt::Builtin, Role::Subagent) => {
                Some(format!("agents/{}/system.hbs", self.name))
            }
        }
    }

    /// This definition with its core template taken out of `snapshot`, for a task
    /// session to keep: a built-in agent's template text and the pack's identity. Custom
    /// and already frozen definitions, and a template the pack lacks, stay as they are.
    pub fn frozen(mut self, mode: PromptMode, snapshot: &Snapshot) -> AgentDefinition {
        if self.core != CorePrompt::Builtin {
            return self;
        }
        let Some(key) = self.template_key(mode) else {
            return self;
        };
        let Some(template) = snapshot
            .get(&key)
            .and_then(|bytes| std::str::from_utf8(bytes).ok())
        else {
            return self;
        };
        let meta = snapshot.meta();
        self.core = CorePrompt::Frozen {
            template: template.to_string(),
            key,
            pack: PackIdentity {
                name: meta.name.clone(),
                version: meta.version.to_string(),
                sha256: meta.sha256.clone(),
            },
        };
        self
    }

    /// A built-in agent as the snapshot describes it: its ceiling is the frontmatter of
    /// `agents/<name>/agent.md`, and no such file means no ceiling (except for `plan`,
    /// which is read-only whatever the pack says).
    pub fn builtin(
        name: &str,
        snapshot: &Snapshot,
    ) -> Option<Result<AgentDefinition, PromptError>> {
        let name = canonical_name(name);
        let definition = AgentDefinition::from_pack(name, snapshot)?;
        if name != PLAN {
            return Some(definition);
        }
        Some(definition.map(|mut def| {
            let read_only = crate::permission_mode::PermissionMode::ReadOnly;
            let ceiling = def.ceiling.get_or_insert_with(Ceiling::default);
            ceiling.permissions = Some(ceiling.permissions.map_or(read_only, |p| p.min(read_only)));
            def
        }))
    }

    fn from_pack(name: &str, snapshot: &Snapshot) -> Option<Result<AgentDefinition, PromptError>> {
        if !BUILTIN_AGENTS.contains(&name) && name != PLAN {
            return None;
        }
        let role = if name == ORCHESTRATOR || name == PLAN {
            Role::Orchestrator
        } else {
            Role::Subagent
        };
        let key = format!("agents/{name}/agent.md");
        let mut definition = AgentDefinition {
            name: name.to_string(),
            description: String::new(),
            role,
            model: None,
            ceiling: None,
            skills: None,
            core: CorePrompt::Builtin,
        };
        let Some(bytes) = snapshot.get(&key) else {
            return Some(Ok(definition));
        };
        let parsed = std::str::from_utf8(bytes)
            .map_err(|_| PromptError::NotUtf8 { key: key.clone() })
            .and_then(|text| {
                parse_agent_file(text).map_err(|(field, reason)| PromptError::BadPackFile {
                    key: key.clone(),
                    reason: match field {
                        Some(field) => format!("field `{field}`: {reason}"),
                        None => reason,
                    },
                })
            });
        Some(parsed.map(|file| {
            definition.description = file.frontmatter.description.unwrap_or_default();
            definition.model = own_model(file.frontmatter.model);
            definition.ceiling = Some(file.ceiling);
            definition.skills = file.frontmatter.skills.map(|s| s.into_iter().collect());
            definition
        }))
    }
}

/// The frontmatter of an `agent.md`. Files written for other agents (Claude Code, Kimi)
/// load too: their camelCase keys are aliases.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct Frontmatter {
    name: Option<String>,
    description: Option<String>,
    model: Option<String>,
    #[serde(default, deserialize_with = "tool_list")]
    tools: Option<Vec<String>>,
    #[serde(default, alias = "disallowedTools", deserialize_with = "tool_list")]
    disallowed_tools: Option<Vec<String>>,
    #[serde(alias = "disabledFeatures")]
    disabled_features: Option<Vec<String>>,
    skills: Option<Vec<String>>,
    /// The widest permission mode the agent may run in: read-only, workspace or full.
    permissions: Option<crate::permission_mode::PermissionMode>,
    /// MCP servers the agent may use, by name: all their tools.
    #[serde(alias = "mcpServers")]
    mcp_servers: Option<Vec<String>>,
    /// Reasoning effort (`low`, `medium`, `high`), as other agents' files carry it.
    /// Accepted so such files load; this runtime does not pass it to the model.
    #[allow(dead_code)]
    effort: Option<String>,
    /// Claude Code's display colour; accepted and ignored.
    #[allow(dead_code)]
    color: Option<String>,
}

/// A tool list as a YAML list, or as Claude Code writes it: one comma-separated string.
fn tool_list<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Vec<String>>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum List {
        Items(Vec<String>),
        Text(String),
    }
    Ok(Option::<List>::deserialize(d)?.map(|list| match list {
        List::Items(items) => items,
        List::Text(text) => text
            .split(',')
            .map(|t| t.trim().to_string())
            .filter(|t| !t.is_empty())
            .collect(),
    }))
}

struct AgentFile {
    frontmatter: Frontmatter,
    ceiling: Ceiling,
    body: String,
    /// Extension keys (`x-mavis`, any `x-…`) other agents keep in their files; accepted
    /// and not used.
    ignored: Vec<String>,
}

/// Takes the extension keys (`x-…`) out of a frontmatter mapping, returning the YAML left
/// and the keys taken. Files without any go to the parser exactly as written, so its
/// errors keep their line numbers.
fn strip_extensions(yaml: &str) -> (std::borrow::Cow<'_, str>, Vec<String>) {
    let Ok(serde_norway::Value::Mapping(mut mapping)) = serde_norway::from_str(yaml) else {
        return (yaml.into(), Vec::new());
    };
    let ignored: Vec<String> = mapping
        .keys()
        .filter_map(serde_norway::Value::as_str)
        .filter(|key| key.starts_with("x-"))
        .map(str::to_string)
        .collect();
    if ignored.is_empty() {
        return (yaml.into(), ignored);
    }
    for key in &ignored {
        mapping.remove(key.as_str());
    }
    match serde_norway::to_string(&mapping) {
        Ok(rest) => (rest.into(), ignored),
        Err(_) => (yaml.into(), Vec::new()),
    }
}

/// Splits `---\nYAML\n---\nbody` into the YAML and the body.
fn split_frontmatter(text: &str) -> Result<(&str, &str), (Option<String>, String)> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let no_frontmatter = || {
        (
            None,
            "expected YAML frontmatter between `---` lines at the top of the file".to_string(),
        )
    };
    let rest = text
        .strip_prefix("---\n")
        .or_else(|| text.strip_prefix("---\r\n"))
        .ok_or_else(no_frontmatter)?;
    let end = rest.find("\n---").ok_or_else(no_frontmatter)?;
    let after = &rest[end + 4..];
    let body = after
        .strip_prefix("\r\n")
        .or_else(|| after.strip_prefix('\n'))
        .unwrap_or(after);
    Ok((&rest[..end], body))
}

/// Splits `---\nYAML\n---\nbody` and checks the fields. Errors carry the field to blame.
fn parse_agent_file(text: &str) -> Result<AgentFile, (Option<String>, String)> {
    let (yaml, body) = split_frontmatter(text)?;
    let (yaml, ignored) = strip_extensions(yaml);
    let frontmatter: Frontmatter = if yaml.trim().is_empty() {
        Frontmatter::default()
    } else {
        serde_norway::from_str(&yaml).map_err(|e| {
            let message = e.to_string();
            // serde reports unknown and mistyped fields by name; surface that name as the
            // field so the error reads the same as the ones below.
            let field = message
                .split('`')
                .nth(1)
                .filter(|_| message.starts_with("unknown field"))
                .map(str::to_string)
                .or_else(|| {
                    message
                        .split_once(':')
                        .map(|(f, _)| f.trim().to_string())
                        .filter(|f| !f.contains(' '))
                });
            (field, message)
        })?
    };
    let tools = frontmatter
        .tools
        .as_deref()
        .map(split_tool_list)
        .transpose()
        .map_err(|e| (Some("tools".to_string()), e))?;
    let disallowed = frontmatter
        .disallowed_tools
        .as_deref()
        .map(split_tool_list)
        .transpose()
        .map_err(|e| (Some("disallowed_tools".to_string()), e))?;
    // MCP tools: an allow list names the ones it allows (none named, none allowed), and
    // `mcp_servers` allows whole servers; without either, every MCP tool is allowed.
    let mut mcp = McpRule::default();
    let servers = frontmatter.mcp_servers.as_ref().map(|names| {
        names
            .iter()
            .map(|n| format!("{}{n}", crate::capabilities::MCP_PREFIX))
            .collect::<Vec<_>>()
    });
    match (&tools, servers) {
        (None, None) => {}
        (tools, servers) => {
            let mut allow = servers.unwrap_or_default();
            if let Some((_, patterns)) = tools {
                allow.extend(patterns.iter().cloned());
            }
            mcp.allow = Some(allow);
        }
    }
    if let Some((_, patterns)) = &disallowed {
        mcp.deny = patterns.clone();
    }
    let tools = tools.map(|(builtin, _)| builtin);
    let disallowed = disallowed.map(|(builtin, _)| builtin);
    let disabled_features = frontmatter
        .disabled_features
        .iter()
        .flatten()
        .map(|f| Feature::parse(f))
        .collect::<Result<BTreeSet<_>, _>>()
        .map_err(|e| (Some("disabled_features".to_string()), e))?;
    // A deny list alone still narrows: start from every tool and take it away.
    let tools = match (tools, disallowed) {
        (tools, None) => tools,
        (tools, Some(deny)) => {
            let base = tools.unwrap_or_else(|| ToolId::ALL.into_iter().collect());
            Some(base.difference(&deny).copied().collect())
        }
    };
    Ok(AgentFile {
        ceiling: Ceiling {
            tools,
            disabled_features,
            permissions: frontmatter.permissions,
            mcp,
        },
        frontmatter,
        body: body.to_string(),
        ignored,
    })
}

/// Custom agents found in `agents_dir`, sorted by name, and one error per file that could
/// not be loaded. A bad file never stops the others from loading.
pub fn load_custom_agents(agents_dir: &Path) -> (Vec<AgentDefinition>, Vec<AgentFileError>) {
    let loaded = load_agents_dir(agents_dir);
    for note in &loaded.notes {
        tracing::debug!("{note}");
    }
    (loaded.agents, loaded.errors)
}

/// The agents of one directory, what failed to load, and what was accepted but ignored.
#[derive(Debug, Default)]
pub struct LoadedAgents {
    pub agents: Vec<AgentDefinition>,
    pub errors: Vec<AgentFileError>,
    /// One line per file with extension keys (`x-mavis`, …) that were ignored.
    pub notes: Vec<String>,
}

/// Loads every `<agents_dir>/<name>/agent.md`, sorted by name. Dot directories (the
/// `.builtin` mirror) are not custom agents.
pub fn load_agents_dir(agents_dir: &Path) -> LoadedAgents {
    let mut loaded = LoadedAgents::default();
    let entries = match std::fs::read_dir(agents_dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return loaded,
        Err(e) => {
            loaded.errors.push(AgentFileError {
                path: agents_dir.to_path_buf(),
                field: None,
                reason: e.to_string(),
            });
            return loaded;
        }
    };
    let mut dirs: Vec<PathBuf> = entries
        .filter_map(Result::ok)
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .map(|e| e.path())
        .collect();
    dirs.sort();
    for dir in dirs {
        let Some(dir_name) = dir.file_name().and_then(|n| n.to_str()) else {
            continue;
        };
        // `.builtin` and other dot directories belong to the runtime, not the user.
        if dir_name.starts_with('.') {
            continue;
        }
        let path = dir.join("agent.md");
        if !path.exists() {
            continue;
        }
        match load_agent_file(&path, dir_name) {
            Ok((agent, ignored)) => {
                if !ignored.is_empty() {
                    loaded.notes.push(ignored_note(&path, &ignored));
                }
                loaded.agents.push(agent);
            }
            Err(e) => {
                tracing::warn!("{e}");
                loaded.errors.push(e);
            }
        }
    }
    loaded
}

/// What the user hears about extension keys this runtime does not use.
pub(crate) fn ignored_note(path: &Path, keys: &[String]) -> String {
    let keys: Vec<String> = keys.iter().map(|k| format!("`{k}`")).collect();
    format!(
        "{}: {} ignored (extension keys of other agents; this runtime does not use them)",
        path.display(),
        keys.join(", ")
    )
}

/// An agent file's text, within [`AGENT_FILE_MAX_BYTES`].
fn read_agent_text(path: &Path) -> Result<String, AgentFileError> {
    let fail = |reason: String| AgentFileError {
        path: path.to_path_buf(),
        field: None,
        reason,
    };
    let file = std::fs::File::open(path).map_err(|e| fail(e.to_string()))?;
    let mut bytes = Vec::new();
    // Read one byte past the cap so an oversize file is detected without reading it all.
    file.take(AGENT_FILE_MAX_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| fail(e.to_string()))?;
    if bytes.len() as u64 > AGENT_FILE_MAX_BYTES {
        return Err(fail(format!(
            "larger than the {AGENT_FILE_MAX_BYTES}-byte limit for agent files"
        )));
    }
    String::from_utf8(bytes).map_err(|_| fail("not UTF-8".to_string()))
}

/// The model a built-in agent's mirror file (`.builtin/<name>/agent.md`) chooses, and the
/// other frontmatter keys it carries, which are ignored: only the model of a built-in
/// agent is the user's to change. `None` for `inherit` or no `model`.
pub fn read_builtin_mirror(path: &Path) -> Result<(Option<String>, Vec<String>), AgentFileError> {
    let fail = |field: Option<&str>, reason: String| AgentFileError {
        path: path.to_path_buf(),
        field: field.map(str::to_string),
        reason,
    };
    let text = read_agent_text(path)?;
    let (yaml, _body) =
        split_frontmatter(&text).map_err(|(field, reason)| fail(field.as_deref(), reason))?;
    let mapping = match serde_norway::from_str::<serde_norway::Value>(yaml) {
        Ok(serde_norway::Value::Mapping(mapping)) => mapping,
        Ok(serde_norway::Value::Null) => serde_norway::Mapping::new(),
        Ok(_) => return Err(fail(None, "the frontmatter is not a mapping".to_string())),
        Err(e) => return Err(fail(None, e.to_string())),
    };
    let mut model = None;
    let mut ignored = Vec::new();
    for (key, value) in &mapping {
        match (key.as_str(), value) {
            (Some("model"), serde_norway::Value::String(m)) => model = Some(m.clone()),
            (Some("model"), serde_norway::Value::Null) => {}
            (Some("model"), other) => {
                return Err(fail(
                    Some("model"),
                    format!("expected a model id, found {other:?}"),
                ));
            }
            (Some(other), _) => ignored.push(other.to_string()),
            (None, _) => ignored.push(format!("{key:?}")),
        }
    }
    Ok((own_model(model), ignored))
}

/// Loads one custom agent file; `dir_name` is the name of the directory holding it.
pub fn load_custom_agent(path: &Path, dir_name: &str) -> Result<AgentDefinition, AgentFileError> {
    load_agent_file(path, dir_name).map(|(agent, _ignored)| agent)
}

/// One custom agent file and the extension keys it carried.
fn load_agent_file(
    path: &Path,
    dir_name: &str,
) -> Result<(AgentDefinition, Vec<String>), AgentFileError> {
    let fail = |field: Option<&str>, reason: String| AgentFileError {
        path: path.to_path_buf(),
        field: field.map(str::to_string),
        reason,
    };
    let text = read_agent_text(path)?;
    let file = parse_agent_file(&text).map_err(|(field, reason)| fail(field.as_deref(), reason))?;
    let fm = file.frontmatter;
    if fm.disabled_features.is_some() {
        return Err(fail(
            Some("disabled_features"),
            "only built-in agents set features; use `tools` and `disallowed_tools`".to_string(),
        ));
    }
    let name = fm.name.unwrap_or_else(|| dir_name.to_string());
    if name != dir_name {
        return Err(fail(
            Some("name"),
            format!("{name:?} does not match the directory name {dir_name:?}"),
        ));
    }
    if BUILTIN_AGENTS.contains(&name.as_str()) || name == ORCHESTRATOR_OLD_NAME || name == PLAN {
        return Err(fail(
            Some("name"),
            format!("{name:?} is the name of a built-in agent"),
        ));
    }
    let description = fm
        .description
        .filter(|d| !d.trim().is_empty())
        .ok_or_else(|| {
            fail(
                Some("description"),
                "required and must not be empty".to_string(),
            )
        })?;
    if file.body.trim().is_empty() {
        return Err(fail(
            None,
            "the body (the agent's system prompt) is empty".to_string(),
        ));
    }
    let agent = AgentDefinition {
        name,
        description,
        role: Role::Subagent,
        model: own_model(fm.model),
        ceiling: Some(file.ceiling),
        skills: fm.skills.map(|s| s.into_iter().collect()),
        core: CorePrompt::Custom {
            path: path.to_path_buf(),
            body: file.body,
        },
    };
    Ok((agent, file.ignored))
}
