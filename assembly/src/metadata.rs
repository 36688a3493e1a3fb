//! What every turn records about its prompt.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::mode::PromptMode;

/// The pack a prompt was rendered from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PackRef {
    pub name: String,
    pub version: String,
    /// `remote` or `builtin`.
    pub source: String,
    pub sha256: String,
}

/// Prompt metadata of one turn.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PromptMetadata {
    /// The template schema (variable contract) the pack was rendered against.
    pub schema_version: u32,
    pub mode: PromptMode,
    pub agent: String,
    pub model: String,
    pub pack: PackRef,
    /// SHA-256 of every pack file the prompt used, by key.
    pub templates: BTreeMap<String, String>,
    /// SHA-256 of the rendered prompt.
    pub prompt_sha256: String,
    /// Set when the captured remote pack failed and the prompt came from the built-in one.
    pub fallback: Option<String>,
    /// Things the user should know (an instruction file cut or left out).
    pub warnings: Vec<String>,
    /// Set when a task session's built-in agent rendered its core from the template frozen
    /// when the session started, not from `pack`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub frozen: Option<Box<FrozenCore>>,
}

/// The frozen core template a prompt was rendered from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FrozenCore {
    /// The template's key in the pack it came from.
    pub key: String,
    /// SHA-256 of the template text.
    pub sha256: String,
    pub pack: crate::agents::PackIdentity,
}
