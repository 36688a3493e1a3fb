//! A call to an MCP server's tool, as the toolbox runs it: the same permission check as a
//! built-in tool, with what the call touches taken from the server's word.

use crate::mcp::McpToolHandle;
use crate::permissions::Access;

use super::{BoxFuture, Call, Prepared, ToolContext, ToolOutput};

/// A served tool's call. Its arguments are the server's to read: they are checked as a
/// JSON object only once the permissions let the call through.
pub(super) struct McpCall<'a> {
    tool: &'a McpToolHandle,
    arguments: &'a str,
}

impl<'a> McpCall<'a> {
    pub(super) fn new(tool: &'a McpToolHandle, arguments: &'a str) -> McpCall<'a> {
        McpCall { tool, arguments }
    }
}

impl<'a> Prepared<'a> for McpCall<'a> {
    /// The runtime cannot see inside another program's tool: one its server marks
    /// read-only counts as a read, any other is inside the `full` mode only.
    fn access(&self, _context: &ToolContext) -> Access {
        if self.tool.tool().read_only {
            Access::Read(None)
        } else {
            Access::External
        }
    }

    fn preview(&self, _context: &ToolContext) -> Option<String> {
        Some(format!("arguments: {}", self.arguments))
    }

    fn run(self: Box<Self>, call: Call<'a>) -> BoxFuture<'a, ToolOutput> {
        Box::pin(self.tool.call(self.arguments, call.cancel))
    }
}
