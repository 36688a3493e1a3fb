//! Session transcripts: `<data_dir>/sessions/<id>.jsonl`, one record per line, appended as
//! the run goes, so a crash or Ctrl-C loses at most the line being written.
//!
//! The first record describes the session; then, per turn, the prompt metadata, every
//! message, and the turn's usage. Loading rebuilds the conversation and repairs a tail
//! cut short: a half-written last line is dropped, and tool calls left without results
//! get one saying the run stopped, so the next request is well formed.

use std::io::Write;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::error::RuntimeError;
use crate::metadata::PromptMetadata;
use crate::mode::PromptMode;
use crate::provider::{Message, Usage};

/// The session's first record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionHeader {
    pub id: String,
    pub created_at: String,
    pub agent: String,
    pub mode: PromptMode,
    pub provider: String,
    pub model: String,
    pub cwd: PathBuf,
}

/// One line of the transcript.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Record {
    Session(SessionHeader),
    Turn {
        turn: u32,
        prompt: PromptMetadata,
    },
    Message {
        message: Message,
    },
    Usage {
        turn: u32,
        usage: Usage,
        stop_reason: Option<String>,
    },
    /// The user stopped the run during this turn.
    Interrupted {
        turn: u32,
    },
    /// The first `covered` messages were summarised; the model sees the summary instead.
    Compaction {
        covered: usize,
        summary: String,
    },
    /// The user switched the session's agent, prompt mode or model (REPL `/agent`,
    /// `/mode`, `/model`); it holds from the next turn on. The fields are the session's
    /// settings after the switch.
    Steer {
        /// The last turn before the switch.
        after_turn: u32,
        agent: String,
        mode: PromptMode,
        model: String,
    },
}

/// The result text given to a call whose result never arrived.
pub const NO_RESULT: &str = "no result: the run stopped before this call finished";

/// An open transcript, appending.
#[derive(Debug)]
pub struct Transcript {
    path: PathBuf,
    file: std::fs::File,
    line: Vec<u8>,
}

/// A stored session, loaded for `--resume`.
#[derive(Debug, Clone)]
pub struct StoredSession {
    pub header: SessionHeader,
    pub messages: Vec<Message>,
    /// The last turn number used.
    pub turns: u32,
    /// The latest compaction, to be restored on resume.
    pub compaction: Option<crate::compaction::Compaction>,
}

impl Transcript {
    pub fn path(sessions_dir: &Path, id: &str) -> PathBuf {
        sessions_dir.join(format!("{id}.jsonl"))
    }

    /// A new session id: sortable by time, unique enough for one user's machine.
    pub fn new_id() -> String {
        let now = time::OffsetDateTime::now_utc();
        let nanos = now.unix_timestamp_nanos();
        format!(
            "{:04}{:02}{:02}-{:02}{:02}{:02}-{:06x}",
            now.year(),
            u8::from(now.month()),
            now.day(),
            now.hour(),
            now.minute(),
            now.second(),
            ((nanos / 1000) as u64 ^ u64::from(std::process::id()).rotate_left(20)) & 0xff_ffff
        )
    }

    /// Starts a transcript with its header.
    pub fn create(sessions_dir: &Path, header: &SessionHeader) -> Result<Transcript, RuntimeError> {
        let path = Transcript::path(sessions_dir, &header.id);
        let fail = |e: std::io::Error| RuntimeError::Session {
            path: path.clone(),
            reason: e.to_string(),
        };
        std::fs::create_dir_all(sessions_dir).map_err(fail)?;
        let file = std::fs::OpenOptions::new()
            .create_new(true)
            .append(true)
            .open(&path)
            .map_err(fail)?;
        let mut transcript = Transcript {
            path,
            file,
            line: Vec::new(),
        };
        transcript.append(&Record::Session(header.clone()))?;
        Ok(transcript)
    }

    /// Loads a stored session and opens it for appending.
    pub fn resume(
        sessions_dir: &Path,
        id: &str,
    ) -> Result<(Transcript, StoredSession), RuntimeError> {
        let path = Transcript::path(sessions_dir, id);
        let fail = |reason: String| RuntimeError::Session {
            path: path.clone(),
            reason,
        };
        // Helpers' sessions are `<parent>.task-<n>`: a dot, but never a leading one or `..`.
        if id.is_empty()
            || id.starts_with('.')
            || id.contains("..")
            || !id
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '.')
        {
            return Err(fail(format!("{id:?} is not a session id")));
        }
        let text = std::fs::read_to_string(&path).map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => {
                let known = list(sessions_dir);
                fail(format!(
                    "no such session; recent sessions: {}",
                    if known.is_empty() {
                        "none".to_string()
                    } else {
                        known.join(", ")
                    }
                ))
            }
            _ => fail(e.to_string()),
        })?;
        let mut header = None;
        let mut messages = Vec::new();
        let mut turns = 0;
        let mut compaction = None;
        let mut valid_len = 0;
        for (n, line) in text.split_inclusive('\n').enumerate() {
            if !line.ends_with('\n') {
                tracing::warn!(session = id, "dropping a half-written last line");
                break;
            }
            let record: Record =
                serde_json::from_str(line).map_err(|e| fail(format!("line {}: {e}", n + 1)))?;
            valid_len += line.len();
            match record {
                Record::Session(h) => header = Some(h),
                Record::Turn { turn, .. }
                | Record::Usage { turn, .. }
                | Record::Interrupted { turn } => turns = turns.max(turn),
                Record::Message { message } => messages.push(message),
                Record::Compaction { covered, summary } => {
                    compaction = Some(crate::compaction::Compaction { covered, summary })
                }
                // A resumed session goes on as it was last steered.
                Record::Steer {
                    agent, mode, model, ..
                } => {
                    if let Some(header) = &mut header {
                        header.agent = agent;
                        header.mode = mode;
                        header.model = model;
                    }
                }
            }
        }
        let header = header.ok_or_else(|| fail("no session record".into()))?;
        let file = std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .map_err(|e| fail(e.to_string()))?;
        // Cut a torn tail so new records start on a line of their own.
        file.set_len(valid_len as u64)
            .map_err(|e| fail(e.to_string()))?;
        let mut transcript = Transcript {
            path,
            file,
            line: Vec::new(),
        };
        for missing in unanswered(&messages) {
            let message = Message::Tool {
                call_id: missing.0,
                name: missing.1,
                content: NO_RESULT.to_string(),
                is_error: true,
            };
            transcript.append(&Record::Message {
                message: message.clone(),
            })?;
            messages.push(message);
        }
        Ok((
            transcript,
            StoredSession {
                header,
                messages,
                turns,
                compaction,
            },
        ))
    }

    /// Appends one record as one write, so a line is either all there or torn at the end.
    pub fn append(&mut self, record: &Record) -> Result<(), RuntimeError> {
        self.line.clear();
        serde_json::to_writer(&mut self.line, record).map_err(|e| RuntimeError::Session {
            path: self.path.clone(),
            reason: e.to_string(),
        })?;
        self.line.push(b'\n');
        self.file
            .write_all(&self.line)
            .map_err(|e| RuntimeError::Session {
                path: self.path.clone(),
                reason: e.to_string(),
            })
    }

    pub fn file_path(&self) -> &Path {
        &self.path
    }
}

/// Calls of the last assistant message that have no result.
fn unanswered(messages: &[Message]) -> Vec<(String, String)> {
    let Some(last_assistant) = messages
        .iter()
        .rposition(|m| matches!(m, Message::Assistant { .. }))
    else {
        return Vec::new();
    };
    let Message::Assistant { tool_calls, .. } = &messages[last_assistant] else {
        return Vec::new();
    };
    tool_calls
        .iter()
        .filter(|call| {
            !messages[last_assistant..]
                .iter()
                .any(|m| matches!(m, Message::Tool { call_id, .. } if *call_id == call.id))
        })
        .map(|call| (call.id.clone(), call.name.clone()))
        .collect()
}

/// Session ids in the directory, newest first, at most ten.
fn list(sessions_dir: &Path) -> Vec<String> {
    let mut ids: Vec<String> = std::fs::read_dir(sessions_dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            e.file_name()
                .to_str()
                .and_then(|n| n.strip_suffix(".jsonl"))
                .map(str::to_string)
        })
        .collect();
    ids.sort();
    ids.reverse();
    ids.truncate(10);
    ids
}
