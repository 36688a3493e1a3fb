//! The diff shown when the user is asked about a change.

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
