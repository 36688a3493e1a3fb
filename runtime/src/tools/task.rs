//! `task`: hands a self-contained task to a child agent and returns its handoff.

use schemars::JsonSchema;
use serde::Deserialize;

use super::{Call, DelegateRequest, Gate, Tool, ToolContext, ToolError, ToolResult};
use crate::permissions::Access;

#[derive(Deserialize, JsonSchema)]
pub(super) struct Args {
    /// The helper: explore, worker, verifier or a custom agent.
    agent: String,
    /// The whole task, self-contained: goal, scope, known files, the answer you expect.
    task: String,
}

pub(super) struct Task;

impl Tool for Task {
    type Args = Args;

    fn name(&self) -> &'static str {
        "task"
    }

    fn gate(&self) -> Gate {
        Gate::Delegation
    }

    fn read_only(&self) -> bool {
        false
    }

    fn access(&self, _context: &ToolContext, _args: &Args) -> Access {
        Access::Own
    }

    async fn run(&self, call: Call<'_>, args: Args) -> ToolResult {
        let Some(delegate) = &call.context.delegate else {
            return Err(ToolError::new("delegation is not available"));
        };
        let request = DelegateRequest {
            agent: args.agent,
            task: args.task,
            files: call.context.written(),
            policy: call.toolbox.policy().clone(),
        };
        delegate.delegate(request, call.cancel).await
    }
}
