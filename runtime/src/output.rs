//! What a tool hands back, and keeping it within a budget. A leaf: the toolbox and the MCP
//! client both return a [`ToolOutput`] and cut long text with [`cut_middle`], so neither
//! names the other for it.

/// What a tool hands back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolOutput {
    pub content: String,
    /// The call failed; the content says why and what to do instead.
    pub is_error: bool,
}

impl ToolOutput {
    pub fn ok(content: impl Into<String>) -> ToolOutput {
        ToolOutput {
            content: content.into(),
            is_error: false,
        }
    }

    pub fn error(content: impl Into<String>) -> ToolOutput {
        ToolOutput {
            content: content.into(),
            is_error: true,
        }
    }
}

/// Cuts `text` to about `max` bytes by removing its middle, where the least useful part of
/// a long file or log usually is, and says how much was removed. Cuts fall on line
/// boundaries when one is near, and always on character boundaries.
pub fn cut_middle(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_string();
    }
    let half = max / 2;
    let mut head = floor_boundary(text, half);
    if let Some(nl) = text[..head].rfind('\n')
        && nl >= head / 2
    {
        head = nl + 1;
    }
    let mut tail = ceil_boundary(text, text.len() - half);
    if let Some(nl) = text[tail..].find('\n')
        && nl <= half / 2
    {
        tail += nl + 1;
    }
    let kept = head + (text.len() - tail);
    format!(
        "{}\n… [cut: the original was {} bytes ({} lines); kept {kept} bytes, the first {head} and the last {}] …\n{}",
        &text[..head],
        text.len(),
        text.lines().count(),
        text.len() - tail,
        &text[tail..]
    )
}

fn floor_boundary(text: &str, mut at: usize) -> usize {
    while !text.is_char_boundary(at) {
        at -= 1;
    }
    at
}

fn ceil_boundary(text: &str, mut at: usize) -> usize {
    while !text.is_char_boundary(at) {
        at += 1;
    }
    at
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_both_ends_and_reports_sizes() {
        let text: String = (0..1000).map(|i| format!("line {i} ü\n")).collect();
        let cut = cut_middle(&text, 2000);
        assert!(cut.len() < 2200);
        assert!(cut.starts_with("line 0 ü\n"));
        assert!(cut.ends_with("line 999 ü\n"));
        assert!(cut.contains(&format!(
            "the original was {} bytes (1000 lines)",
            text.len()
        )));
        assert_eq!(cut_middle("short", 10), "short");
    }
}
