//! What a delegated child is told about where its task came from.

use serde::{Deserialize, Serialize};

/// Where a delegated task came from: shown to the child as its session context.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionContext {
    pub task_id: String,
    pub parent_agent: String,
    /// The task as the parent wrote it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task: Option<String>,
    /// Files the parent session had written when it delegated.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub files: Vec<std::path::PathBuf>,
    /// The most model calls the task may take, as its prompt says.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_steps: Option<u32>,
    /// The most bytes of the final message the parent receives, as its prompt says.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub handoff_bytes: Option<usize>,
}
