//! The agents on disk for one session: the user's custom agents
//! (`<data dir>/agents/<name>/agent.md`), a trusted workspace's
//! (`<workspace>/.agents/agents/<name>/agent.md`), and the user's choice of model for
//! each built-in agent (`<data dir>/agents/.builtin/<name>/agent.md`, whose `model` is
//! the only key read).

use std::collections::BTreeMap;
use std::path::Path;

use pack_client::Snapshot;

use crate::agents::{
    AgentDefinition, BUILTIN_AGENTS, PLAN, canonical_name, load_agents_dir, read_builtin_mirror,
};
use crate::error::{AgentFileError, PromptError};

/// A workspace's custom agents, relative to the workspace.
pub const WORKSPACE_AGENTS: &str = ".agents/agents";
/// The mirror of the built-in agents, inside the data directory's `agents`.
pub const BUILTIN_MIRROR: &str = ".builtin";

/// Every agent definition a session can use besides the pack's, and what the user should
/// hear about the files.
#[derive(Debug, Clone, Default)]
pub struct Roster {
    /// Custom agents, sorted by name.
    pub custom: Vec<AgentDefinition>,
    /// The model each built-in agent runs on, where the user chose one.
    pub builtin_models: BTreeMap<String, String>,
    /// Files that could not be loaded.
    pub errors: Vec<AgentFileError>,
    /// What was accepted but not used, one line each.
    pub notes: Vec<String>,
}

impl Roster {
    /// The data directory's agents (`agents_dir` is `<data dir>/agents`).
    pub fn load(agents_dir: &Path) -> Roster {
        let loaded = load_agents_dir(agents_dir);
        let mut roster = Roster {
            custom: loaded.agents,
            builtin_models: BTreeMap::new(),
            errors: loaded.errors,
            notes: loaded.notes,
        };
        roster.read_mirror(&agents_dir.join(BUILTIN_MIRROR));
        roster
    }

    /// The `model` of each `.builtin/<name>/agent.md`.
    fn read_mirror(&mut self, mirror: &Path) {
        let Ok(entries) = std::fs::read_dir(mirror) else {
            return;
        };
        let mut dirs: Vec<_> = entries.flatten().map(|e| e.path()).collect();
        dirs.sort();
        for dir in dirs {
            let path = dir.join("agent.md");
            if !path.is_file() {
                continue;
            }
            let Some(name) = dir.file_name().and_then(|n| n.to_str()) else {
                continue;
            };
            let name = canonical_name(name);
            if !BUILTIN_AGENTS.contains(&name) && name != PLAN {
                self.notes.push(format!(
                    "{}: {name:?} is not a built-in agent; the file is ignored (custom agents live in the agents directory itself)",
                    path.display()
                ));
                continue;
            }
            match read_builtin_mirror(&path) {
                Ok((model, ignored)) => {
                    if !ignored.is_empty() {
                        let keys: Vec<String> = ignored.iter().map(|k| format!("`{k}`")).collect();
                        self.notes.push(format!(
                            "{}: {} ignored; only `model` of a built-in agent can be changed",
                            path.display(),
                            keys.join(", ")
                        ));
                    }
                    if let Some(model) = model {
                        self.builtin_models.insert(name.to_string(), model);
                    }
                }
                Err(e) => {
                    tracing::warn!("{e}");
                    self.errors.push(e);
                }
            }
        }
    }

    /// This roster with a workspace's agents (`.agents/agents/`) when `trusted`: a
    /// repository someone else wrote should not bring prompts that run as the user's
    /// agents until the user says it may. They take the place of the user's agents of
    /// the same name, as the project's files are the more specific ones. An untrusted
    /// workspace that has some gets a note saying why they are not used.
    pub fn with_workspace(&self, workspace: &Path, trusted: bool) -> Roster {
        let dir = workspace.join(WORKSPACE_AGENTS);
        let mut roster = self.clone();
        if !dir.is_dir() {
            return roster;
        }
        if !trusted {
            roster.notes.push(format!(
                "the agents in {} are not used: this workspace is not trusted (list it under [permissions] trusted_workspaces in config.toml to use them)",
                dir.display()
            ));
            return roster;
        }
        let loaded = load_agents_dir(&dir);
        for agent in loaded.agents {
            roster.custom.retain(|a| a.name != agent.name);
            roster.custom.push(agent);
        }
        roster.custom.sort_by(|a, b| a.name.cmp(&b.name));
        roster.errors.extend(loaded.errors);
        roster.notes.extend(loaded.notes);
        roster
    }

    /// The model the user chose for a built-in agent.
    pub fn builtin_model(&self, name: &str) -> Option<&str> {
        self.builtin_models
            .get(canonical_name(name))
            .map(String::as_str)
    }

    /// A built-in agent as the snapshot describes it, running on the user's choice of
    /// model when there is one.
    pub fn builtin(
        &self,
        name: &str,
        snapshot: &Snapshot,
    ) -> Option<Result<AgentDefinition, PromptError>> {
        let definition = AgentDefinition::builtin(name, snapshot)?;
        Some(definition.map(|mut definition| {
            if let Some(model) = self.builtin_model(&definition.name) {
                definition.model = Some(model.to_string());
            }
            definition
        }))
    }
}
