//! The runtime's part of the config file: capability defaults every agent inherits.
//!
//! ```toml
//! [agents.default]
//! tools = ["read", "grep", "glob"]   # unset: every tool; []: none
//! [agents.default.features]
//! memory = false                     # unset features stay on
//! ```
//!
//! ```toml
//! instructions = ["docs/conventions.md", "rules/*.md"]   # more instruction files
//! ```
//!
//! `instructions` are paths and globs, relative to the workspace (the worktree root) and
//! kept inside it, unless absolute or under `~/`; see [`crate::instructions`].
//!
//! A `tools` list may name MCP tools too (`mcp__time__get_current_time`, a whole server
//! as `mcp__time`, or `mcp__*`); a list that names none allows none. The servers
//! themselves are `[mcp_servers.<name>]` tables, read by [`mcp`].

pub mod mcp;

use std::collections::BTreeMap;

use serde::Deserialize;

use crate::capabilities::{
    Capabilities, Feature, Features, McpAccess, McpRule, ToolId, split_tool_list,
};

/// The config file is shared with other parts of the agent, so unknown top-level sections
/// are left alone; inside `[agents.default]` a typo is an error.
#[derive(Debug, Default, Deserialize)]
struct ConfigFile {
    #[serde(default)]
    agents: AgentsSection,
    #[serde(default)]
    mcp_servers: BTreeMap<String, mcp::Entry>,
    #[serde(default)]
    instructions: Vec<String>,
}

#[derive(Debug, Default, Deserialize)]
struct AgentsSection {
    default: Option<AgentDefaults>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct AgentDefaults {
    tools: Option<Vec<String>>,
    #[serde(default)]
    features: BTreeMap<String, bool>,
}

/// The runtime's settings.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Config {
    /// What every agent may use before its ceiling applies.
    pub defaults: Capabilities,
    /// `[mcp_servers.<name>]`, in name order.
    pub mcp_servers: Vec<mcp::McpServerConfig>,
    /// More instruction files: paths and globs, in the order they go into the prompt.
    pub instructions: Vec<String>,
}

impl Config {
    pub fn parse(text: &str) -> Result<Config, String> {
        let file: ConfigFile = toml::from_str(text).map_err(|e| e.to_string())?;
        let mcp_servers = mcp::parse(file.mcp_servers)?;
        for entry in &file.instructions {
            if entry.trim().is_empty() {
                return Err("instructions: an entry is empty".to_string());
            }
            crate::instructions::sources::check_glob(entry)
                .map_err(|e| format!("instructions: {e}"))?;
        }
        let instructions = file.instructions;
        let Some(defaults) = file.agents.default else {
            return Ok(Config {
                defaults: Capabilities::default(),
                mcp_servers,
                instructions,
            });
        };
        // A list names the MCP tools it allows too (`mcp__time`, `mcp__*`); without one
        // every MCP tool is allowed.
        let (tools, mcp) = match &defaults.tools {
            None => (ToolId::ALL.into_iter().collect(), McpAccess::default()),
            Some(names) => {
                let (tools, patterns) =
                    split_tool_list(names).map_err(|e| format!("[agents.default] tools: {e}"))?;
                let rule = McpRule {
                    allow: Some(patterns),
                    deny: Vec::new(),
                };
                (tools, McpAccess { rules: vec![rule] })
            }
        };
        let mut features = Features::default();
        for (name, on) in &defaults.features {
            let feature =
                Feature::parse(name).map_err(|e| format!("[agents.default.features]: {e}"))?;
            match feature {
                Feature::Delegation => features.delegation = *on,
                Feature::Memory => features.memory = *on,
                Feature::Persona => features.persona = *on,
            }
        }
        Ok(Config {
            defaults: Capabilities {
                tools,
                features,
                mcp,
                permissions: None,
            },
            mcp_servers,
            instructions,
        })
    }
}
