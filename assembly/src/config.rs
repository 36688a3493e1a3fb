//! The runtime's part of the config file: capability defaults every agent inherits.
//!
//! ```toml
//! [agents.default]
//! tools = ["read", "grep", "glob"]   # unset: every tool; []: none; `bash` brings
//!                                    # task_query, task_output and task_stop with it
//! max_steps = 30                     # each helper's model calls (default 30)
//! handoff_bytes = 97500              # each helper's final message, as the parent gets it
//! [agents.default.features]
//! memory = false                     # unset features stay on
//! [agents.worker]                    # one helper's own limits
//! max_steps = 60
//! ```
//!
//! ```toml
//! instructions = ["docs/conventions.md", "rules/*.md", "https://example.com/rules.md"]
//! instruction_files = ["AGENTS.md", "CLAUDE.md"]   # per directory, first non-empty wins
//! ```
//!
//! `instructions` are paths and globs, relative to the workspace (the worktree root) and
//! kept inside it, unless absolute or under `~/`, and `http(s)://` URLs the host fetches;
//! see [`crate::instructions`].
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

/// The tools that follow and stop the commands `bash` starts in the background: a `tools`
/// list that allows `bash` allows these too.
pub const BASH_COMPANIONS: [ToolId; 3] = [ToolId::TaskQuery, ToolId::TaskOutput, ToolId::TaskStop];

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
    instruction_files: Option<Vec<String>>,
}

#[derive(Debug, Default, Deserialize)]
struct AgentsSection {
    default: Option<AgentDefaults>,
    /// `[agents.<name>]`: one agent's limits as a helper.
    #[serde(flatten)]
    named: BTreeMap<String, HelperLimits>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct AgentDefaults {
    tools: Option<Vec<String>>,
    #[serde(default)]
    features: BTreeMap<String, bool>,
    max_steps: Option<u32>,
    handoff_bytes: Option<usize>,
}

/// The most model calls a helper takes when nothing sets its own.
pub const HELPER_MAX_STEPS: u32 = 30;
/// The longest handoff a helper's final message makes when nothing sets its own, in bytes
/// (about 24,000 tokens). A parent with a small context takes less: see
/// [`Config::helper_limits`].
pub const HELPER_HANDOFF_BYTES: usize = 97_500;

/// What a helper may spend, set in `[agents.default]` for every helper and in
/// `[agents.<name>]` for one.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HelperLimits {
    /// The most model calls the helper may take.
    pub max_steps: Option<u32>,
    /// The most bytes of the helper's final message the parent receives.
    pub handoff_bytes: Option<usize>,
}

impl HelperLimits {
    fn check(&self, table: &str) -> Result<(), String> {
        if self.max_steps == Some(0) || self.handoff_bytes == Some(0) {
            return Err(format!(
                "{table}: max_steps and handoff_bytes must be above 0 (leave one out for the default: {HELPER_MAX_STEPS} steps, {HELPER_HANDOFF_BYTES} bytes)"
            ));
        }
        Ok(())
    }
}

/// The limits one helper runs under.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HelperBudget {
    pub max_steps: u32,
    pub handoff_bytes: usize,
}

/// The runtime's settings.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Config {
    /// What every agent may use before its ceiling applies.
    pub defaults: Capabilities,
    /// `[mcp_servers.<name>]`, in name order.
    pub mcp_servers: Vec<mcp::McpServerConfig>,
    /// More instruction files: paths, globs and `http(s)://` URLs, in the order they go
    /// into the prompt.
    pub instructions: Vec<String>,
    /// The names tried in each project directory, in order; `None` is
    /// [`crate::instructions::PROJECT_FILES`].
    pub instruction_files: Option<Vec<String>>,
    /// `[agents.default]`'s helper limits.
    pub helper_defaults: HelperLimits,
    /// `[agents.<name>]`'s, by agent name.
    pub helpers: BTreeMap<String, HelperLimits>,
}

impl Config {
    pub fn parse(text: &str) -> Result<Config, String> {
        let file: ConfigFile = toml::from_str(text).map_err(|e| e.to_string())?;
        let mcp_servers = mcp::parse(file.mcp_servers)?;
        for entry in &file.instructions {
            if entry.trim().is_empty() {
                return Err("instructions: an entry is empty".to_string());
            }
            if crate::instructions::is_url(entry) {
                continue;
            }
            crate::instructions::sources::check_glob(entry)
                .map_err(|e| format!("instructions: {e}"))?;
        }
        let instructions = file.instructions;
        let instruction_files = file.instruction_files;
        for name in instruction_files.iter().flatten() {
            check_file_name(name)?;
        }
        let helpers = file.agents.named;
        for (name, limits) in &helpers {
            limits.check(&format!("[agents.{name}]"))?;
        }
        let Some(defaults) = file.agents.default else {
            return Ok(Config {
                defaults: Capabilities::default(),
                mcp_servers,
                instructions,
                instruction_files,
                helper_defaults: HelperLimits::default(),
                helpers,
            });
        };
        let helper_defaults = HelperLimits {
            max_steps: defaults.max_steps,
            handoff_bytes: defaults.handoff_bytes,
        };
        helper_defaults.check("[agents.default]")?;
        // A list names the MCP tools it allows too (`mcp__time`, `mcp__*`); without one
        // every MCP tool is allowed.
        let (tools, mcp) = match &defaults.tools {
            None => (ToolId::ALL.into_iter().collect(), McpAccess::default()),
            Some(names) => {
                let (mut tools, patterns) =
                    split_tool_list(names).map_err(|e| format!("[agents.default] tools: {e}"))?;
                // Lists written before background commands existed name `bash` alone; a
                // command it starts in the background could then never be read or stopped.
                if tools.contains(&ToolId::Bash) {
                    tools.extend(BASH_COMPANIONS);
                }
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
            instruction_files,
            helper_defaults,
            helpers,
        })
    }

    /// The limits `agent` runs under as a helper: its own `[agents.<name>]`, else
    /// `[agents.default]`, else [`HELPER_MAX_STEPS`] and [`HELPER_HANDOFF_BYTES`]. The
    /// handoff never takes more than about a quarter of the parent's context of
    /// `context_tokens` (four bytes a token).
    pub fn helper_limits(&self, agent: &str, context_tokens: u64) -> HelperBudget {
        let own = self.helpers.get(agent).copied().unwrap_or_default();
        let max_steps = own
            .max_steps
            .or(self.helper_defaults.max_steps)
            .unwrap_or(HELPER_MAX_STEPS);
        let handoff_bytes = own
            .handoff_bytes
            .or(self.helper_defaults.handoff_bytes)
            .unwrap_or(HELPER_HANDOFF_BYTES)
            .min(usize::try_from(context_tokens).unwrap_or(usize::MAX));
        HelperBudget {
            max_steps,
            handoff_bytes,
        }
    }

    /// The names tried in each project directory, in order.
    pub fn instruction_files(&self) -> Vec<String> {
        self.instruction_files
            .clone()
            .unwrap_or_else(crate::instructions::sources::default_names)
    }
}

/// An `instruction_files` entry is a file name looked up in each directory: no path.
fn check_file_name(name: &str) -> Result<(), String> {
    let bad = if name.trim().is_empty() {
        Some("is empty")
    } else if name.contains(['/', '\\']) || name == "." || name == ".." {
        Some("is a path; list file names, which are looked up in every directory")
    } else if name.len() > crate::instructions::NAME_MAX {
        Some("is longer than a file name can be")
    } else {
        None
    };
    match bad {
        Some(why) => Err(format!(
            "instruction_files: {name:?} {why} (for example instruction_files = [\"AGENTS.md\", \"CLAUDE.md\"])"
        )),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bash_brings_the_task_tools_and_nothing_else_does() {
        let with = Config::parse("[agents.default]\ntools = [\"read\", \"bash\"]").unwrap();
        for tool in BASH_COMPANIONS {
            assert!(with.defaults.tools.contains(&tool), "{tool:?}");
        }
        assert!(!with.defaults.tools.contains(&ToolId::Write));
        let without = Config::parse("[agents.default]\ntools = [\"read\"]").unwrap();
        assert!(
            BASH_COMPANIONS
                .iter()
                .all(|tool| !without.defaults.tools.contains(tool))
        );
    }

    #[test]
    fn helper_limits_come_from_the_agent_then_the_defaults() {
        let config = Config::parse(
            "[agents.default]\nmax_steps = 12\n[agents.worker]\nmax_steps = 60\nhandoff_bytes = 4000\n",
        )
        .unwrap();
        let worker = config.helper_limits("worker", 200_000);
        assert_eq!((worker.max_steps, worker.handoff_bytes), (60, 4000));
        let explore = config.helper_limits("explore", 200_000);
        assert_eq!(
            (explore.max_steps, explore.handoff_bytes),
            (12, HELPER_HANDOFF_BYTES)
        );
        // A small parent context narrows the handoff.
        assert_eq!(config.helper_limits("explore", 8_192).handoff_bytes, 8_192);
        let none = Config::parse("").unwrap().helper_limits("worker", 200_000);
        assert_eq!(none.max_steps, HELPER_MAX_STEPS);
        let err = Config::parse("[agents.worker]\nmax_steps = 0\n").unwrap_err();
        assert!(
            err.contains("[agents.worker]") && err.contains("above 0"),
            "{err}"
        );
        let err = Config::parse("[agents.worker]\nmax_step = 5\n").unwrap_err();
        assert!(err.contains("max_step"), "{err}");
    }

    #[test]
    fn instruction_urls_and_file_names() {
        let config = Config::parse(
            "instructions = [\"https://example.com/rules.md?v=2\"]\ninstruction_files = [\"AGENTS.md\", \"CONTEXT.md\"]\n",
        )
        .unwrap();
        assert_eq!(config.instructions, ["https://example.com/rules.md?v=2"]);
        assert_eq!(config.instruction_files(), ["AGENTS.md", "CONTEXT.md"]);
        assert_eq!(
            Config::parse("").unwrap().instruction_files(),
            ["CLAUDE.md", "AGENTS.md", "CONTEXT.md"]
        );
        for bad in ["\"\"", "\"a/AGENTS.md\"", "\"..\""] {
            let err = Config::parse(&format!("instruction_files = [{bad}]")).unwrap_err();
            assert!(err.starts_with("instruction_files:"), "{err}");
        }
    }
}
