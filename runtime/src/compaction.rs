//! Compaction: when the conversation nears the model's context window, older history is
//! replaced by a summary written with the pack's compaction prompt.
//!
//! The stored history is never rewritten. A compaction is a marker — how many of the
//! original messages the summary covers — and every later compaction summarises from the
//! original messages again, never from an earlier summary, so the task's details do not
//! blur a little more each time. The system prompt is rebuilt every step anyway; the most
//! recent messages are kept as they are, and the cut never falls between a tool call and
//! its result. Reminders are left out of the summary: they are restated after compaction.
//!
//! Before a summary is written, old tool outputs are trimmed: a long result before the
//! recent messages keeps its start and its end, with a line saying how much of the middle
//! was cut. That alone often makes room, at no model call. A trim is a marker too (the
//! index it reaches), so every later request shows the same trimmed history and the
//! server's prompt cache keeps matching it.

use serde::{Deserialize, Serialize};

use crate::provider::{Message, ToolSpec};
use crate::reminders::is_reminder;
use crate::tools::cut_middle;

/// The pack file holding the summariser's instructions.
pub const COMPACTION_PROMPT: &str = "shared/compaction.md";
/// How the summary is introduced to the model.
pub const SUMMARY_HEADING: &str =
    "[Summary of the earlier conversation, written by the runtime when the context filled up]";
/// Longest transcript text sent to the summariser.
const MAX_SUMMARY_INPUT: usize = 400_000;
/// Longest tool result kept in that text.
const MAX_RESULT_CHARS: usize = 2_000;

/// Old tool outputs longer than this many bytes are trimmed before any summary.
pub const TRIM_ABOVE: usize = 4_000;
/// What a trimmed output keeps: this many bytes of its start, and as many of its end.
pub const TRIM_KEEP: usize = 1_000;

/// One compaction: the first `covered` original messages are replaced by `summary`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Compaction {
    pub covered: usize,
    pub summary: String,
}

/// A rough token count (four bytes a token), for deciding when to compact before the
/// server has reported usage.
pub fn estimate_tokens(system: &str, messages: &[Message], tools: &[ToolSpec]) -> u64 {
    let mut bytes = system.len();
    for m in messages {
        bytes += match m {
            Message::User { content } => content.len(),
            Message::Assistant {
                content,
                tool_calls,
                ..
            } => {
                content.len()
                    + tool_calls
                        .iter()
                        .map(|c| c.name.len() + c.arguments.len())
                        .sum::<usize>()
            }
            Message::Tool { content, .. } => content.len(),
        } + 16;
    }
    for t in tools {
        bytes += t.name.len() + t.description.len() + t.parameters.to_string().len();
    }
    (bytes / 4) as u64
}

/// What the model sees: the summary, then the original messages it does not cover, the
/// tool outputs among the first `trimmed` of them trimmed.
pub fn view(original: &[Message], compaction: Option<&Compaction>, trimmed: usize) -> Vec<Message> {
    let mut out = Vec::with_capacity(original.len() + 1);
    let start = match compaction {
        Some(c) if c.covered <= original.len() => {
            out.push(Message::User {
                content: format!("{SUMMARY_HEADING}\n\n{}", c.summary.trim()),
            });
            c.covered
        }
        _ => 0,
    };
    for (index, message) in original.iter().enumerate().skip(start) {
        match message {
            Message::Tool {
                call_id,
                name,
                content,
                is_error,
            } if index < trimmed => out.push(Message::Tool {
                call_id: call_id.clone(),
                name: name.clone(),
                content: trimmed_output(content).unwrap_or_else(|| content.clone()),
                is_error: *is_error,
            }),
            _ => out.push(message.clone()),
        }
    }
    out
}

/// A tool output past [`TRIM_ABOVE`] bytes as its first and last [`TRIM_KEEP`] bytes with
/// a line between saying what was cut; `None` for a shorter one.
pub fn trimmed_output(content: &str) -> Option<String> {
    if content.len() <= TRIM_ABOVE {
        return None;
    }
    let mut head = TRIM_KEEP;
    while !content.is_char_boundary(head) {
        head -= 1;
    }
    let mut tail = content.len() - TRIM_KEEP;
    while !content.is_char_boundary(tail) {
        tail += 1;
    }
    let cut = tail - head;
    Some(format!(
        "{}\n[… {cut} bytes (about {} tokens) cut from the middle of this old tool output to make room in the context; its first {head} and last {} bytes are kept. Run the tool again if you need the rest. …]\n{}",
        &content[..head],
        cut / 4,
        content.len() - tail,
        &content[tail..]
    ))
}

/// How many tool outputs among `messages` trimming would cut.
pub fn trimmable(messages: &[Message]) -> usize {
    messages
        .iter()
        .filter(|m| matches!(m, Message::Tool { content, .. } if content.len() > TRIM_ABOVE))
        .count()
}

/// Where to cut so about `keep_recent` messages stay: moved earlier until the first kept
/// message is not a tool result, so every kept result has its call. `None` when there is
/// nothing (new) to summarise.
pub fn cut_point(original: &[Message], keep_recent: usize, already: usize) -> Option<usize> {
    let mut cut = original.len().checked_sub(keep_recent)?;
    while cut > 0 && matches!(original[cut], Message::Tool { .. }) {
        cut -= 1;
    }
    (cut > already).then_some(cut)
}

/// The messages to summarise as plain text, reminders left out.
pub fn transcript_text(messages: &[Message]) -> String {
    let mut out = String::new();
    for m in messages {
        match m {
            Message::User { content } if is_reminder(content) => {}
            Message::User { content } => out.push_str(&format!("USER:\n{}\n\n", content.trim())),
            Message::Assistant {
                content,
                tool_calls,
                ..
            } => {
                if !content.trim().is_empty() {
                    out.push_str(&format!("ASSISTANT:\n{}\n\n", content.trim()));
                }
                for call in tool_calls {
                    out.push_str(&format!("TOOL CALL {}: {}\n\n", call.name, call.arguments));
                }
            }
            Message::Tool {
                name,
                content,
                is_error,
                ..
            } => {
                let kind = if *is_error {
                    "TOOL ERROR"
                } else {
                    "TOOL RESULT"
                };
                out.push_str(&format!(
                    "{kind} {name}:\n{}\n\n",
                    cut_middle(content.trim(), MAX_RESULT_CHARS)
                ));
            }
        }
    }
    cut_middle(&out, MAX_SUMMARY_INPUT)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::provider::ToolCall;

    fn call(id: &str) -> Message {
        Message::Assistant {
            content: String::new(),
            reasoning: None,
            tool_calls: vec![ToolCall {
                id: id.into(),
                name: "read".into(),
                arguments: "{}".into(),
            }],
        }
    }

    fn result(id: &str) -> Message {
        Message::Tool {
            call_id: id.into(),
            name: "read".into(),
            content: "x".into(),
            is_error: false,
        }
    }

    #[test]
    fn the_cut_never_separates_a_call_from_its_result() {
        let user = Message::User {
            content: "go".into(),
        };
        let history = vec![user, call("a"), result("a"), call("b"), result("b")];
        // Keeping one message would start at b's result; the cut moves to b's call.
        assert_eq!(cut_point(&history, 1, 0), Some(3));
        assert_eq!(cut_point(&history, 2, 0), Some(3));
        assert_eq!(cut_point(&history, 3, 0), Some(1));
        assert_eq!(cut_point(&history, 3, 1), None);
        let v = view(
            &history,
            Some(&Compaction {
                covered: 3,
                summary: "did a".into(),
            }),
            0,
        );
        assert_eq!(v.len(), 3);
        assert!(matches!(&v[0], Message::User { content } if content.ends_with("did a")));
    }

    #[test]
    fn old_long_outputs_keep_their_ends() {
        let long = |id: &str, text: String| Message::Tool {
            call_id: id.into(),
            name: "read".into(),
            content: text,
            is_error: false,
        };
        // Multi-byte characters around both cuts.
        let body = format!("START{}{}END", "é".repeat(3_000), "x".repeat(3_000));
        let history = vec![
            call("a"),
            long("a", body.clone()),
            call("b"),
            long("b", body.clone()),
        ];
        let v = view(&history, None, 2);
        let Message::Tool { content, .. } = &v[1] else {
            panic!("not a tool result");
        };
        assert!(content.starts_with("START"), "{content}");
        assert!(content.ends_with("xxxEND"), "{content}");
        assert!(content.contains("cut from the middle of this old tool output"));
        assert!(content.len() < 2 * TRIM_KEEP + 300, "{}", content.len());
        // Past the trimmed range the output is whole.
        assert!(matches!(&v[3], Message::Tool { content, .. } if *content == body));
        assert_eq!(trimmable(&history), 2);
        assert_eq!(trimmed_output("short"), None);
    }
}
