//! Tools and features an agent may use, and how they narrow.
//!
//! Four steps, each of which can only take things away:
//! 1. config defaults (`[agents.default]`): a missing list means everything, an empty list
//!    means nothing;
//! 2. the agent's ceiling (its `agent.md` frontmatter): tools are intersected, features
//!    AND-ed, so a ceiling never grants what the config withheld;
//! 3. the occasion: a delegated child loses delegation, so helpers never fan out;
//! 4. the host profile: the command-line host has no scheduling, and its memory is the
//!    workspace's notes.
//!
//! The ceiling also caps the permission mode an agent runs in (`permissions: read-only`
//! for `explore` and `plan`); the session's mode narrows it further (the runtime's
//! permissions).

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

use crate::permission_mode::PermissionMode;
use crate::wildcard::Wildcard;

pub use crate::wildcard::MCP_PREFIX;

/// The capability-listed tools the runtime implements. A prompt may only mention a tool the
/// model is offered, so one left out of this list reads as off; the runtime checks its tool
/// registry against it.
pub const IMPLEMENTED: [ToolId; 12] = ToolId::ALL;

/// A built-in tool.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ToolId {
    Read,
    Write,
    Edit,
    Bash,
    TaskQuery,
    TaskOutput,
    TaskStop,
    Grep,
    Glob,
    Todowrite,
    WebFetch,
    Skill,
}

impl ToolId {
    pub const ALL: [ToolId; 12] = [
        ToolId::Read,
        ToolId::Write,
        ToolId::Edit,
        ToolId::Bash,
        ToolId::TaskQuery,
        ToolId::TaskOutput,
        ToolId::TaskStop,
        ToolId::Grep,
        ToolId::Glob,
        ToolId::Todowrite,
        ToolId::WebFetch,
        ToolId::Skill,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            ToolId::Read => "read",
            ToolId::Write => "write",
            ToolId::Edit => "edit",
            ToolId::Bash => "bash",
            ToolId::TaskQuery => "task_query",
            ToolId::TaskOutput => "task_output",
            ToolId::TaskStop => "task_stop",
            ToolId::Grep => "grep",
            ToolId::Glob => "glob",
            ToolId::Todowrite => "todowrite",
            ToolId::WebFetch => "web_fetch",
            ToolId::Skill => "skill",
        }
    }

    /// Parses a tool id; the error lists the valid ones.
    pub fn parse(name: &str) -> Result<ToolId, String> {
        ToolId::ALL
            .into_iter()
            .find(|t| t.as_str() == name)
            .ok_or_else(|| {
                let known: Vec<&str> = ToolId::ALL.iter().map(|t| t.as_str()).collect();
                format!("unknown tool {name:?}; known tools: {}", known.join(", "))
            })
    }

    /// Parses a list of tool ids.
    pub fn parse_list(names: &[String]) -> Result<BTreeSet<ToolId>, String> {
        names.iter().map(|n| ToolId::parse(n)).collect()
    }
}

/// A switchable feature.
///
/// There is no web search: no search provider is built in, so there is no `web_search`
/// tool or feature, and the contract's `features.web_search` is always false.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Feature {
    Delegation,
    Memory,
    Persona,
}

impl Feature {
    pub const ALL: [Feature; 3] = [Feature::Delegation, Feature::Memory, Feature::Persona];

    pub fn as_str(self) -> &'static str {
        match self {
            Feature::Delegation => "delegation",
            Feature::Memory => "memory",
            Feature::Persona => "persona",
        }
    }

    pub fn parse(name: &str) -> Result<Feature, String> {
        Feature::ALL
            .into_iter()
            .find(|f| f.as_str() == name)
            .ok_or_else(|| {
                let known: Vec<&str> = Feature::ALL.iter().map(|f| f.as_str()).collect();
                format!(
                    "unknown feature {name:?}; known features: {}",
                    known.join(", ")
                )
            })
    }
}

/// Feature switches. `Default` turns everything on: an unset config grants everything.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Features {
    pub delegation: bool,
    pub memory: bool,
    pub persona: bool,
}

impl Default for Features {
    fn default() -> Self {
        Features {
            delegation: true,
            memory: true,
            persona: true,
        }
    }
}

impl Features {
    pub fn get(&self, feature: Feature) -> bool {
        match feature {
            Feature::Delegation => self.delegation,
            Feature::Memory => self.memory,
            Feature::Persona => self.persona,
        }
    }

    fn set(&mut self, feature: Feature, on: bool) {
        match feature {
            Feature::Delegation => self.delegation = on,
            Feature::Memory => self.memory = on,
            Feature::Persona => self.persona = on,
        }
    }

    fn and(self, other: Features) -> Features {
        Features {
            delegation: self.delegation && other.delegation,
            memory: self.memory && other.memory,
            persona: self.persona && other.persona,
        }
    }
}

/// Which MCP tools (`mcp__<server>__<tool>`) an agent may use. Every narrowing layer adds
/// a rule and a tool is allowed only when each rule allows it, so a layer can take MCP
/// tools away but never add one.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct McpAccess {
    pub rules: Vec<McpRule>,
}

/// One layer's word on MCP tools. A pattern is read as a permission rule's tool is
/// ([`Wildcard::tool`]): an exact tool name, a server (`mcp__time`, meaning all its tools),
/// or a pattern where `*` matches any text (`mcp__*`, `mcp__*__read*`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct McpRule {
    /// Patterns a tool must match; `None` lets every MCP tool through.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allow: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub deny: Vec<String>,
}

impl McpRule {
    fn allows(&self, tool: &str) -> bool {
        let named = |p: &String| Wildcard::tool(p).matches(tool);
        self.allow
            .as_ref()
            .is_none_or(|allow| allow.iter().any(named))
            && !self.deny.iter().any(named)
    }
}

impl McpAccess {
    pub fn allows(&self, tool: &str) -> bool {
        self.rules.iter().all(|rule| rule.allows(tool))
    }
}

/// Splits a `tools` list into built-in tool ids and MCP patterns (`mcp__…`).
pub fn split_tool_list(names: &[String]) -> Result<(BTreeSet<ToolId>, Vec<String>), String> {
    let mut builtin = BTreeSet::new();
    let mut mcp = Vec::new();
    for name in names {
        if name.starts_with(MCP_PREFIX) {
            mcp.push(name.clone());
        } else {
            builtin.insert(ToolId::parse(name)?);
        }
    }
    Ok((builtin, mcp))
}

/// What an agent may use.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Capabilities {
    pub tools: BTreeSet<ToolId>,
    pub features: Features,
    /// The widest permission mode the agent may run in; `None`: whatever the session's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub permissions: Option<PermissionMode>,
    #[serde(default)]
    pub mcp: McpAccess,
}

impl Default for Capabilities {
    fn default() -> Self {
        Capabilities::everything()
    }
}

impl Capabilities {
    pub fn everything() -> Self {
        Capabilities {
            tools: ToolId::ALL.into_iter().collect(),
            features: Features::default(),
            permissions: None,
            mcp: McpAccess::default(),
        }
    }

    pub fn has(&self, tool: ToolId) -> bool {
        self.tools.contains(&tool)
    }
}

/// The most an agent may ever use, from its `agent.md` frontmatter. No file, no ceiling.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Ceiling {
    /// Allowed tools; `None` leaves the tools as configured.
    pub tools: Option<BTreeSet<ToolId>>,
    pub disabled_features: BTreeSet<Feature>,
    /// The widest permission mode; `None` leaves the session's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub permissions: Option<PermissionMode>,
    /// Which MCP tools the agent may use.
    #[serde(default)]
    pub mcp: McpRule,
}

impl Ceiling {
    /// The ceiling's features, as switches to AND with.
    fn features(&self) -> Features {
        let mut features = Features::default();
        for feature in &self.disabled_features {
            features.set(*feature, false);
        }
        features
    }
}

/// Why the agent is running.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Occasion {
    /// The top of a session.
    Root,
    /// A delegated task started by another agent.
    TaskChild,
}

/// The host the runtime serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Profile {
    /// The `agent` command line: no memory store (its memory layer is the workspace's
    /// notes), no scheduling.
    Cli,
}

/// The outcome of narrowing.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Resolved {
    pub capabilities: Capabilities,
    /// Whether the host stores memory at all (separate from the agent's `memory` feature).
    pub memory_enabled: bool,
    /// Whether the host can schedule runs.
    pub scheduling: bool,
}

/// Applies the four narrowing steps in order.
pub fn resolve(
    defaults: &Capabilities,
    ceiling: Option<&Ceiling>,
    occasion: Occasion,
    profile: Profile,
) -> Resolved {
    let mut capabilities = defaults.clone();
    if let Some(ceiling) = ceiling {
        if let Some(allowed) = &ceiling.tools {
            capabilities.tools.retain(|tool| allowed.contains(tool));
        }
        capabilities.features = capabilities.features.and(ceiling.features());
        capabilities.permissions = match (capabilities.permissions, ceiling.permissions) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        capabilities.mcp.rules.push(ceiling.mcp.clone());
    }
    match occasion {
        Occasion::Root => {}
        Occasion::TaskChild => capabilities.features.delegation = false,
    }
    let (memory_enabled, scheduling) = match profile {
        // The command line keeps no memory store of its own; the `memory` feature stays as
        // narrowed, and its memory layer is the workspace's notes (`record_note`).
        Profile::Cli => (false, false),
    };
    Resolved {
        capabilities,
        memory_enabled,
        scheduling,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn allowing(patterns: &[&str]) -> McpAccess {
        McpAccess {
            rules: vec![McpRule {
                allow: Some(patterns.iter().map(|p| p.to_string()).collect()),
                deny: Vec::new(),
            }],
        }
    }

    /// The forms docs/AGENT.md promises for a `tools` list: a tool, a server, a wildcard.
    #[test]
    fn a_tools_list_names_mcp_tools_exactly_by_server_or_by_wildcard() {
        let tool = "mcp__time__get_current_time";
        for (pattern, allowed) in [
            ("mcp__time__get_current_time", true),
            ("mcp__time__get_current", false),
            ("mcp__time", true),
            ("mcp__tim", false),
            ("mcp__timer", false),
            ("mcp__*", true),
            ("mcp__ti*", true),
            ("*", true),
            ("mcp__*__get_current_time", true),
            ("mcp__*__convert_time", false),
        ] {
            assert_eq!(allowing(&[pattern]).allows(tool), allowed, "{pattern}");
        }
        assert!(allowing(&["mcp__ti*"]).allows("mcp__timer__x"));
        assert!(!allowing(&["mcp__time"]).allows("mcp__timer__x"));
    }

    #[test]
    fn every_layer_must_allow_and_a_deny_wins() {
        let mut access = allowing(&["mcp__*"]);
        access.rules.push(McpRule {
            allow: None,
            deny: vec!["mcp__time".to_string()],
        });
        assert!(access.allows("mcp__everything__echo"));
        assert!(!access.allows("mcp__time__get_current_time"));
        assert!(!allowing(&[]).allows("mcp__everything__echo"));
        assert!(McpAccess::default().allows("mcp__everything__echo"));
    }
}
