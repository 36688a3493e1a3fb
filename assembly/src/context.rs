//! The variables templates see: exactly the runtime's variable contract
//! (`contract/schema-1.json`), nothing more and nothing less.
//!
//! Handlebars 6 strict mode errors on a missing `{{x}}` but not on `{{#if x}}`: the `if`
//! and `unless` helpers treat a missing value as false. The pack validator already refuses
//! templates that name variables outside the contract, in conditions too; [`conforms`]
//! closes the other side by refusing to render with a context that lacks any contract
//! variable. Together they make a missing variable an error everywhere.

use pack_contract::{Contract, Shape};
use serde::Serialize;
use serde_json::{Map, Value};

use crate::capabilities::{IMPLEMENTED, Resolved, ToolId};
use crate::error::PromptError;

/// A skill as the catalog shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SkillEntry {
    pub name: String,
    pub description: String,
}

/// A custom agent the orchestrator can hand tasks to, as its prompt lists it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct AgentEntry {
    pub name: String,
    pub description: String,
}

/// A connected MCP server's instructions. The text is the server's: data passed into the
/// template, never compiled as one.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct McpServerEntry {
    pub name: String,
    pub instructions: String,
}

/// A session's MCP servers as the prompt sees them. The runtime's live servers implement it,
/// so assembly reads their instructions turn by turn without linking an MCP client.
pub trait McpInstructions: std::fmt::Debug + Sync {
    /// The instructions of ready servers with at least one tool `allowed` lets through; a
    /// server whose tools are all withheld says nothing to the model.
    fn prompt_entries(&self, allowed: &dyn Fn(&str) -> bool) -> Vec<McpServerEntry>;
}

/// Everything that decides the template variables of one turn.
pub struct ContextInputs<'a> {
    pub resolved: &'a Resolved,
    pub persona: &'a str,
    pub data_dir: &'a str,
    pub role_directory: &'a str,
    pub skills: &'a [SkillEntry],
    /// Custom agents the agent can delegate to (empty without delegation).
    pub custom_agents: &'a [AgentEntry],
    /// MCP servers with instructions whose tools the agent is offered.
    pub mcp_servers: &'a [McpServerEntry],
    pub interactive: bool,
    pub task_child: bool,
    pub cli: bool,
}

/// Which shared layer a render is for; `None` for every template that is not the shared
/// context template.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layer {
    Base,
    Worker,
    Root,
    Branch,
}

/// Builds the context as JSON, with every layer flag off.
pub fn build(inputs: &ContextInputs<'_>) -> Value {
    let caps = &inputs.resolved.capabilities;
    // A flag is on only for a tool the model is offered: allowed *and* implemented, so a
    // template never tells the model to use a tool it does not have (`web_fetch`).
    let tools: Map<String, Value> = ToolId::ALL
        .into_iter()
        .map(|t| {
            let offered = caps.has(t) && IMPLEMENTED.contains(&t);
            (t.as_str().to_string(), Value::Bool(offered))
        })
        .collect();
    let features = &caps.features;
    serde_json::json!({
        "persona": inputs.persona,
        "data_dir": inputs.data_dir,
        "role_directory": inputs.role_directory,
        "tools": tools,
        "features": {
            "delegation": features.delegation,
            "memory": features.memory,
            "persona": features.persona,
            // Schema 1 names it; the runtime has no search provider, so no prompt may
            // promise a search.
            "web_search": false,
        },
        "memory": { "enabled": inputs.resolved.memory_enabled },
        "surface": {
            "interactive": inputs.interactive,
            "task_child": inputs.task_child,
            "cli": inputs.cli,
        },
        "layer": { "base": false, "worker": false, "root": false, "branch": false },
        "skills": inputs.skills,
        "custom_agents": inputs.custom_agents,
        "mcp_servers": inputs.mcp_servers,
    })
}

/// Sets the layer flags for one render of the shared context template.
pub fn set_layer(context: &mut Value, layer: Option<Layer>) {
    let flags = [
        ("base", Layer::Base),
        ("worker", Layer::Worker),
        ("root", Layer::Root),
        ("branch", Layer::Branch),
    ];
    if let Some(object) = context.get_mut("layer").and_then(Value::as_object_mut) {
        for (name, flag) in flags {
            object.insert(name.to_string(), Value::Bool(layer == Some(flag)));
        }
    }
}

/// Checks that `context` holds every variable of `contract` with the right type.
pub fn conforms(context: &Value, contract: &Contract) -> Result<(), PromptError> {
    let fail = |path: &str, problem: String| PromptError::Context {
        schema: contract.schema(),
        path: path.to_string(),
        problem,
    };
    fn walk(
        at: &str,
        value: &Value,
        shape: &Shape,
        fail: &dyn Fn(&str, String) -> PromptError,
    ) -> Result<(), PromptError> {
        match (shape, value) {
            (Shape::String, Value::String(_)) | (Shape::Bool, Value::Bool(_)) => Ok(()),
            (Shape::Object(fields), Value::Object(map)) => {
                for (name, field) in fields {
                    let path = if at.is_empty() {
                        name.clone()
                    } else {
                        format!("{at}.{name}")
                    };
                    match map.get(name) {
                        Some(v) => walk(&path, v, field, fail)?,
                        None => return Err(fail(&path, "is missing".to_string())),
                    }
                }
                Ok(())
            }
            (Shape::List(item), Value::Array(items)) => {
                for (i, v) in items.iter().enumerate() {
                    walk(&format!("{at}[{i}]"), v, item, fail)?;
                }
                Ok(())
            }
            (shape, value) => Err(fail(at, format!("should be {shape:?} but is {value}"))),
        }
    }
    for (name, shape) in contract.variables() {
        match context.get(name) {
            Some(value) => walk(name, value, shape, &fail)?,
            None => return Err(fail(name, "is missing".to_string())),
        }
    }
    Ok(())
}
