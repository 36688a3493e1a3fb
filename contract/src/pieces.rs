//! A template's top-level pieces: what validation has to compile, without the text between.
//!
//! handlebars finds each element's line by counting from the start of the template, so
//! compiling a template costs the square of its length, and its parser walks prose one
//! character at a time. Neither is needed to learn that a template is fine: the prose
//! between tags is never checked, and each top-level element (a `{{path}}`, or a block from
//! its `{{#…}}` to its `{{/…}}`) is checked against the root of the contract alone. So
//! [`split`] cuts a template into those elements, each as the text of its tags with the prose
//! and comments left out, and validation compiles each distinct one once; a template any of
//! whose pieces fails is checked again whole, for the message and the line.
//!
//! The cut follows handlebars' grammar only where that is simple: a `{{` starts a tag (or a
//! comment) unless a backslash escapes it, a string runs to its next quote, and a tag ends
//! at its first `}}` outside strings. Anything else — an escape, a raw block, a brace,
//! bracket or backslash inside a tag, a tag never closed — makes [`split`] give up (`None`),
//! and the template is checked whole, as before. Whatever handlebars makes of a template the
//! scan does follow, it makes of each piece the same tags in the same nesting: the text left
//! out holds no `{{`, so the parser reads it as text wherever it stands.

/// The top-level pieces of `source`, each the concatenated text of its tags, in order; or
/// `None` when the scan cannot be sure where a tag or comment ends.
pub(crate) fn split(source: &str) -> Option<Vec<String>> {
    let bytes = source.as_bytes();
    let mut pieces = Vec::new();
    let mut piece = String::new();
    let mut depth = 0usize;
    let mut from = 0;
    while let Some(found) = source[from..].find("{{") {
        let start = from + found;
        if start > 0 && bytes[start - 1] == b'\\' {
            return None;
        }
        if source[start..].starts_with("{{{{") {
            return None;
        }
        if source[start..].starts_with("{{!") {
            from = comment_end(source, start)?;
            continue;
        }
        let end = tag_end(source, start)?;
        let tag = &source[start..end];
        piece.push_str(tag);
        // `{{~ #if x}}` is a block too: the grammar allows a tilde and spaces before the `#`.
        let body = tag[2..].trim_start_matches(['~', ' ', '\t', '\n', '\r']);
        if body.starts_with('#') {
            depth += 1;
        } else if body.starts_with('/') {
            // A close with nothing open is a piece of its own, which does not parse.
            depth = depth.saturating_sub(1);
        }
        if depth == 0 {
            pieces.push(std::mem::take(&mut piece));
        }
        from = end;
    }
    // A block never closed: its piece does not parse, which sends the template to the
    // whole check.
    if !piece.is_empty() {
        pieces.push(piece);
    }
    Some(pieces)
}

/// Where the tag starting at `start` (at its `{{`) ends, past its closing braces; `None` for
/// anything but a tag of names, strings, parentheses and operators closed by `}}` (or `}}}`
/// after `{{{`).
fn tag_end(source: &str, start: usize) -> Option<usize> {
    let bytes = source.as_bytes();
    let triple = bytes.get(start + 2) == Some(&b'{');
    let mut at = start + if triple { 3 } else { 2 };
    while at < bytes.len() {
        match bytes[at] {
            quote @ (b'"' | b'\'') => {
                // Without a backslash, a string (or a quoted partial name) ends at the next
                // quote of its kind.
                let len = source[at + 1..].find(quote as char)?;
                if source[at + 1..at + 1 + len].contains('\\') {
                    return None;
                }
                at += len + 2;
            }
            b'}' => {
                let closing = if triple { "}}}" } else { "}}" };
                return source[at..]
                    .starts_with(closing)
                    .then_some(at + closing.len());
            }
            b'{' | b'[' | b']' | b'\\' => return None,
            _ => at += 1,
        }
    }
    None
}

/// Where the comment starting at `start` (at its `{{!`) ends, as handlebars reads it: a
/// `{{!--` comment at its first `--}}`, or else, like `{{! short }}`, at its first `}}`.
fn comment_end(source: &str, start: usize) -> Option<usize> {
    let after_bang = start + 3;
    // The grammar lets whitespace stand between `{{!` and `--`.
    let rest = source[after_bang..].trim_start_matches([' ', '\t', '\n', '\r']);
    if let Some(body) = rest.strip_prefix("--") {
        let body_at = source.len() - body.len();
        if let Some(end) = body.find("--}}") {
            return Some(body_at + end + 4);
        }
    }
    source[after_bang..]
        .find("}}")
        .map(|end| after_bang + end + 2)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pieces(source: &str) -> Vec<String> {
        split(source).unwrap_or_else(|| panic!("{source:?} was not split"))
    }

    #[test]
    fn prose_and_comments_are_left_out_and_blocks_stay_whole() {
        assert_eq!(
            pieces(
                "Hi {{persona}}.\n{{! note }}{{#if a}}x {{b}}\n{{else}}y{{/if}} and \
                 {{!-- a }} in --}}{{{c}}}"
            ),
            ["{{persona}}", "{{#if a}}{{b}}{{else}}{{/if}}", "{{{c}}}"]
        );
    }

    #[test]
    fn nested_blocks_make_one_piece() {
        assert_eq!(
            pieces("{{#each xs}}{{#if @first}}{{this}}{{/if}}{{/each}}{{~ #with o~}}{{/with}}"),
            [
                "{{#each xs}}{{#if @first}}{{this}}{{/if}}{{/each}}",
                "{{~ #with o~}}{{/with}}"
            ]
        );
    }

    #[test]
    fn strings_may_hold_braces() {
        assert_eq!(pieces("{{eq a \"}}{{\"}} x"), ["{{eq a \"}}{{\"}}"]);
    }

    #[test]
    fn an_unclosed_block_and_a_stray_close_are_pieces_of_their_own() {
        assert_eq!(pieces("{{/if}}{{#if a}}x"), ["{{/if}}", "{{#if a}}"]);
    }

    #[test]
    fn text_without_tags_has_no_pieces() {
        assert_eq!(pieces("a } b }} c { d"), Vec::<String>::new());
    }

    #[test]
    fn what_the_scan_does_not_follow_is_left_whole() {
        for source in [
            r"\{{x}}",
            r"\\{{x}}",
            "{{{{raw}}}}x{{{{/raw}}}}",
            "{{x [a b]}}",
            "{{x \"a\\\"b\"}}",
            "{{x",
            "{{x}",
            "{{{x}}",
            "{{x {y}}",
            "{{! never closed",
            "{{eq a \"unterminated}}",
        ] {
            assert_eq!(split(source), None, "{source:?}");
        }
    }

    #[test]
    fn a_long_comment_ends_at_its_first_dashes_and_braces() {
        assert_eq!(pieces("{{!-- {{x}} --}}{{y}}"), ["{{y}}"]);
        assert_eq!(pieces("{{! -- {{x}} --}}{{y}}"), ["{{y}}"]);
        // No `--}}`: a short comment, ended by the first `}}`.
        assert_eq!(pieces("{{!-- a }}{{y}}"), ["{{y}}"]);
        assert_eq!(pieces("{{!--}}{{y}}"), ["{{y}}"]);
    }
}
