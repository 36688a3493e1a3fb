//! `skill`: the body of one skill from the catalog in the system prompt.

use schemars::JsonSchema;
use serde::Deserialize;

use super::{Call, Gate, Tool, ToolContext, ToolError, ToolResult};
use crate::capabilities::ToolId;
use crate::permissions::Access;

#[derive(Deserialize, JsonSchema)]
pub(super) struct Args {
    /// A skill from the catalog in the system prompt.
    name: String,
}

pub(super) struct SkillTool;

impl Tool for SkillTool {
    type Args = Args;

    fn name(&self) -> &'static str {
        "skill"
    }

    fn gate(&self) -> Gate {
        Gate::Tool(ToolId::Skill)
    }

    fn read_only(&self) -> bool {
        true
    }

    fn access(&self, _context: &ToolContext, _args: &Args) -> Access {
        Access::Own
    }

    async fn run(&self, call: Call<'_>, args: Args) -> ToolResult {
        let skills = call.toolbox.skills();
        let name = &args.name;
        let Some(skill) = skills.iter().find(|s| &s.name == name) else {
            let names: Vec<&str> = skills.iter().map(|s| s.name.as_str()).collect();
            return Err(ToolError::new(if names.is_empty() {
                format!("unknown skill {name:?}; no skills are available in this session")
            } else {
                format!(
                    "unknown skill {name:?}; the available skills are: {}",
                    names.join(", ")
                )
            }));
        };
        let location = match &skill.dir {
            Some(dir) => format!(" (files in {})", dir.display()),
            None => String::new(),
        };
        Ok(format!(
            "<skill name=\"{}\"{location}>\n{}\n</skill>",
            skill.name,
            crate::skills::expand(skill).trim()
        ))
    }
}
