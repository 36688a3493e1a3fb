//! Keeping tool output within a budget.

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

/// Most lines of a diff shown when the user is asked about a change.
const DIFF_LINES: usize = 400;

/// A unified diff of `old` → `new` for `path`, at most [`DIFF_LINES`] lines.
pub fn diff(path: &std::path::Path, old: &str, new: &str) -> String {
    let shown = path.display().to_string();
    let text = similar::TextDiff::from_lines(old, new)
        .unified_diff()
        .context_radius(3)
        .header(&shown, &shown)
        .to_string();
    let total = text.lines().count();
    if total <= DIFF_LINES {
        return text;
    }
    let mut kept: String = text
        .lines()
        .take(DIFF_LINES)
        .flat_map(|l| [l, "\n"])
        .collect();
    kept.push_str(&format!(
        "… {} more diff lines not shown\n",
        total - DIFF_LINES
    ));
    kept
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
