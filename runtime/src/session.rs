//! Task sessions freeze the agent definition and prompt mode they started with, so a
//! resumed task keeps behaving the way it was asked to, whatever changed on disk since.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

pub use prompt_assembly::session::SessionContext;

use crate::agents::AgentDefinition;
use crate::error::RuntimeError;
use crate::mode::PromptMode;

/// A task session as stored in `<data_dir>/sessions/<id>.json`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskSession {
    pub id: String,
    pub mode: PromptMode,
    pub agent: AgentDefinition,
    pub context: SessionContext,
}

impl TaskSession {
    /// The frozen agent definition, provided the session is resumed in the mode it was
    /// started with.
    pub fn resume(&self, mode: PromptMode) -> Result<&AgentDefinition, RuntimeError> {
        if self.mode != mode {
            return Err(RuntimeError::ModeMismatch {
                session: self.id.clone(),
                frozen: self.mode,
                requested: mode,
            });
        }
        Ok(&self.agent)
    }

    pub fn path(sessions_dir: &Path, id: &str) -> PathBuf {
        sessions_dir.join(format!("{id}.json"))
    }

    pub fn save(&self, sessions_dir: &Path) -> Result<(), RuntimeError> {
        let path = TaskSession::path(sessions_dir, &self.id);
        let fail = |reason: String| RuntimeError::Session {
            path: path.clone(),
            reason,
        };
        let text = serde_json::to_string_pretty(self).map_err(|e| fail(e.to_string()))?;
        std::fs::create_dir_all(sessions_dir).map_err(|e| fail(e.to_string()))?;
        // Written whole, so a crash never leaves half a session behind.
        crate::data_dir::write_whole(&path, text.as_bytes()).map_err(|e| fail(e.to_string()))
    }

    pub fn load(sessions_dir: &Path, id: &str) -> Result<TaskSession, RuntimeError> {
        let path = TaskSession::path(sessions_dir, id);
        let fail = |reason: String| RuntimeError::Session {
            path: path.clone(),
            reason,
        };
        let text = std::fs::read_to_string(&path).map_err(|e| fail(e.to_string()))?;
        serde_json::from_str(&text).map_err(|e| fail(e.to_string()))
    }
}
