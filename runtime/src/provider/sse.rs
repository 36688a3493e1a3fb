//! A small Server-Sent Events parser: bytes in, `(event, data)` pairs out.
//!
//! Only what model APIs use: `event:` and `data:` fields, comments, and any of the three
//! line endings the spec allows. Lines and events are capped, because the bytes come from
//! the network.

/// One dispatched event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SseEvent {
    /// The `event:` field; `None` when the server sent only data (OpenAI does).
    pub event: Option<String>,
    /// The `data:` lines joined with `\n`.
    pub data: String,
}

/// The largest event accepted. A model's single delta is tiny; a server sending more than
/// this without a blank line is broken or hostile.
pub const MAX_EVENT_BYTES: usize = 8 * 1024 * 1024;

#[derive(Debug, thiserror::Error)]
#[error("server-sent event larger than {MAX_EVENT_BYTES} bytes")]
pub struct SseTooLarge;

/// Incremental parser. Feed it chunks as they arrive; it returns the events they complete.
#[derive(Debug, Default)]
pub struct SseParser {
    line: Vec<u8>,
    /// The previous chunk ended in `\r`: a `\n` starting the next one belongs to it.
    after_cr: bool,
    event: Option<String>,
    data: String,
    has_data: bool,
}

impl SseParser {
    pub fn new() -> Self {
        SseParser::default()
    }

    pub fn feed(&mut self, chunk: &[u8]) -> Result<Vec<SseEvent>, SseTooLarge> {
        let mut out = Vec::new();
        for &byte in chunk {
            if self.after_cr {
                self.after_cr = false;
                if byte == b'\n' {
                    continue;
                }
            }
            match byte {
                b'\n' | b'\r' => {
                    self.after_cr = byte == b'\r';
                    let line = std::mem::take(&mut self.line);
                    if let Some(event) = self.line_done(&line) {
                        out.push(event);
                    }
                }
                _ => {
                    if self.line.len() + self.data.len() >= MAX_EVENT_BYTES {
                        return Err(SseTooLarge);
                    }
                    self.line.push(byte);
                }
            }
        }
        Ok(out)
    }

    /// The stream ended: an event the server did not close with a blank line still counts.
    pub fn finish(&mut self) -> Option<SseEvent> {
        let line = std::mem::take(&mut self.line);
        if !line.is_empty() {
            let _ = self.line_done(&line);
        }
        self.dispatch()
    }

    fn line_done(&mut self, line: &[u8]) -> Option<SseEvent> {
        if line.is_empty() {
            return self.dispatch();
        }
        if line[0] == b':' {
            return None;
        }
        let text = String::from_utf8_lossy(line);
        let (field, value) = match text.split_once(':') {
            Some((field, value)) => (field, value.strip_prefix(' ').unwrap_or(value)),
            None => (text.as_ref(), ""),
        };
        match field {
            "event" => self.event = Some(value.to_string()),
            "data" => {
                if self.has_data {
                    self.data.push('\n');
                }
                self.data.push_str(value);
                self.has_data = true;
            }
            // `id` and `retry` matter for browsers reconnecting, not for one model call.
            _ => {}
        }
        None
    }

    fn dispatch(&mut self) -> Option<SseEvent> {
        let event = self.event.take();
        if !self.has_data {
            return None;
        }
        self.has_data = false;
        Some(SseEvent {
            event,
            data: std::mem::take(&mut self.data),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_split_across_chunks_and_line_endings() {
        let mut p = SseParser::new();
        let mut all = p.feed(b"event: ping\r").unwrap();
        all.extend(p.feed(b"\ndata: {\"a\":1}\r\n\r\n: comment\n").unwrap());
        all.extend(p.feed(b"data: x\ndata:y\n\ndata: tail").unwrap());
        all.extend(p.finish());
        assert_eq!(
            all,
            vec![
                SseEvent {
                    event: Some("ping".into()),
                    data: "{\"a\":1}".into()
                },
                SseEvent {
                    event: None,
                    data: "x\ny".into()
                },
                SseEvent {
                    event: None,
                    data: "tail".into()
                },
            ]
        );
    }
}
