//! What a Handlebars syntax error means to the person who wrote the template.
//!
//! handlebars reports where its parser gave up, in the names of its grammar's rules: an
//! `{{#if}}` that is never closed shows up at the end of the file as "expected escape,
//! expression, html_expression, …". [`explain`] scans the source the way a reader counts
//! braces — which blocks are open, where each was opened, which tag lacks a brace — and
//! says that instead. It runs only after the parser has refused a template, so a valid
//! template costs nothing more, and it gives up (`None`) on anything it does not follow
//! (raw blocks, an unterminated string), leaving the parser's own message.

/// A syntax problem found by [`explain`]: the line to report it at and what to say.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SyntaxProblem {
    /// 1-based line: where the problem is, or where the block that is never closed opens.
    pub line: usize,
    pub message: String,
}

/// A block opened and not yet closed: its name (`if`, `inline`), what stands between the
/// `#` and the name (`*` for a decorator, `>` for a partial block) and where its `{{` is.
struct Open<'s> {
    sigil: &'s str,
    name: &'s str,
    at: usize,
}

impl Open<'_> {
    /// How the block's opening tag is shown: `{{#if}}`, `{{#*inline}}`.
    fn shown(&self) -> String {
        format!("`{{{{#{}{}}}}}`", self.sigil, self.name)
    }
}

/// Tags longer than this are shortened in messages.
const SHOWN_TAG_LEN: usize = 40;

/// The first syntax problem in `source` a person can fix from its description, or `None`
/// when the scan finds nothing (the parser's message is then the best there is).
pub(crate) fn explain(source: &str) -> Option<SyntaxProblem> {
    let mut open: Vec<Open<'_>> = Vec::new();
    let mut from = 0;
    while let Some(found) = source[from..].find("{{") {
        let start = from + found;
        // `\{{` is text.
        if source[..start].ends_with('\\') {
            from = start + 2;
            continue;
        }
        // Raw blocks are not part of the accepted language; the parser's word stands.
        if source[start..].starts_with("{{{{") {
            return None;
        }
        let triple = source[start..].starts_with("{{{");
        let mut body = start + if triple { 3 } else { 2 };
        if source[body..].starts_with('~') {
            body += 1;
        }
        if !triple && source[body..].starts_with("!--") {
            // Without a `--}}`, handlebars ends the comment at the first `}}`, as a short one.
            let end = comment_end(source, body + 3, &["--}}", "--~}}"])
                .or_else(|| comment_end(source, body + 3, &["}}"]));
            match end {
                Some(end) => from = end,
                None => return Some(unclosed_comment(source, start, "{{!--", "--}}")),
            }
            continue;
        }
        if !triple && source[body..].starts_with('!') {
            match comment_end(source, body + 1, &["}}"]) {
                Some(end) => from = end,
                None => return Some(unclosed_comment(source, start, "{{!", "}}")),
            }
            continue;
        }
        let tag = match tag_end(source, start, body, triple) {
            TagEnd::Closed { body_end, after } => {
                from = after;
                source[body..body_end].trim_end_matches('~').trim()
            }
            TagEnd::Problem(problem) => return Some(problem),
            TagEnd::Unknown => return None,
        };
        if let Some(rest) = tag.strip_prefix('#') {
            let after_sigil = rest.trim_start_matches(['*', '>']);
            let sigil = &rest[..rest.len() - after_sigil.len()];
            let name = first_word(after_sigil.trim_start());
            if name.is_empty() {
                return None;
            }
            open.push(Open {
                sigil,
                name,
                at: start,
            });
        } else if let Some(rest) = tag.strip_prefix('/') {
            let name = first_word(rest.trim());
            if let Some(problem) = close(source, &mut open, name, start) {
                return Some(problem);
            }
        } else if (tag == "else" || tag.starts_with("else ") || tag == "^") && open.is_empty() {
            let (line, column) = position(source, start);
            let shown = shown(&source[start..from]);
            return Some(SyntaxProblem {
                line,
                message: format!(
                    "`{shown}` at line {line}, column {column} is outside any block; an \
                     `{{{{else}}}}` goes between `{{{{#if …}}}}` (or `#unless`, `#each`, \
                     `#with`) and its `{{{{/if}}}}`"
                ),
            });
        }
    }
    let innermost = open.pop()?;
    let (line, column) = position(source, innermost.at);
    let (opened, name) = (innermost.shown(), innermost.name);
    Some(SyntaxProblem {
        line,
        message: format!(
            "{opened} opened at line {line}, column {column} is never closed; add \
             `{{{{/{name}}}}}`"
        ),
    })
}

/// Handles `{{/name}}` at `at`: pops the block it closes, or says what is wrong.
fn close(source: &str, open: &mut Vec<Open<'_>>, name: &str, at: usize) -> Option<SyntaxProblem> {
    let (line, column) = position(source, at);
    let Some(innermost) = open.pop() else {
        return Some(SyntaxProblem {
            line,
            message: format!(
                "`{{{{/{name}}}}}` at line {line}, column {column} closes a block that was \
                 never opened; remove it, or open the block before it with `{{{{#{name} …}}}}`"
            ),
        });
    };
    if innermost.name == name {
        return None;
    }
    let (open_line, open_column) = position(source, innermost.at);
    let (opened, expected) = (innermost.shown(), innermost.name);
    // A block further out of this name: the close is right, the inner block was left open.
    if open.iter().any(|block| block.name == name) {
        return Some(SyntaxProblem {
            line: open_line,
            message: format!(
                "{opened} opened at line {open_line}, column {open_column} is never closed: \
                 `{{{{/{name}}}}}` at line {line}, column {column} comes first; add \
                 `{{{{/{expected}}}}}` before it"
            ),
        });
    }
    Some(SyntaxProblem {
        line,
        message: format!(
            "`{{{{/{name}}}}}` at line {line}, column {column} does not match {opened} \
             opened at line {open_line}, column {open_column}; close that block with \
             `{{{{/{expected}}}}}`"
        ),
    })
}

/// How a tag that starts at `start` (its body at `body`) ends.
enum TagEnd {
    /// Its body runs to `body_end`; the text after its closing braces starts at `after`.
    Closed {
        body_end: usize,
        after: usize,
    },
    Problem(SyntaxProblem),
    /// Something this scan does not follow.
    Unknown,
}

fn tag_end(source: &str, start: usize, body: usize, triple: bool) -> TagEnd {
    let bytes = source.as_bytes();
    let mut at = body;
    while at < bytes.len() {
        match bytes[at] {
            quote @ (b'"' | b'\'') => match source[at + 1..].find(quote as char) {
                Some(end) => at += end + 2,
                None => return TagEnd::Unknown,
            },
            b'[' => match source[at + 1..].find(']') {
                Some(end) => at += end + 2,
                None => return TagEnd::Unknown,
            },
            b'}' if bytes.get(at + 1) == Some(&b'}') => {
                if !triple {
                    return TagEnd::Closed {
                        body_end: at,
                        after: at + 2,
                    };
                }
                if bytes.get(at + 2) == Some(&b'}') {
                    return TagEnd::Closed {
                        body_end: at,
                        after: at + 3,
                    };
                }
                return TagEnd::Problem(missing_brace(source, start, at + 2));
            }
            b'}' => return TagEnd::Problem(missing_brace(source, start, at + 1)),
            b'{' if bytes.get(at + 1) == Some(&b'{') => {
                return TagEnd::Problem(never_closed(source, start, at, triple));
            }
            _ => at += 1,
        }
    }
    TagEnd::Problem(never_closed(source, start, bytes.len(), triple))
}

/// `{{x}`: the tag from `start` to `end` (past its last brace) lacks a closing brace.
fn missing_brace(source: &str, start: usize, end: usize) -> SyntaxProblem {
    let (line, column) = position(source, start);
    let tag = shown(&source[start..end]);
    SyntaxProblem {
        line,
        message: format!("`{tag}` at line {line}, column {column}: missing `}}`"),
    }
}

/// `{{x` with no closing braces before the next tag (at `end`) or the end of the file.
fn never_closed(source: &str, start: usize, end: usize, triple: bool) -> SyntaxProblem {
    let (line, column) = position(source, start);
    // Its first line is enough to find it by.
    let tag = source[start..end].lines().next().unwrap_or_default();
    let tag = shown(tag.trim_end());
    let braces = if triple { "}}}" } else { "}}" };
    SyntaxProblem {
        line,
        message: format!(
            "`{tag}` at line {line}, column {column} is never closed: missing `{braces}`"
        ),
    }
}

fn unclosed_comment(source: &str, start: usize, opener: &str, closer: &str) -> SyntaxProblem {
    let (line, column) = position(source, start);
    SyntaxProblem {
        line,
        message: format!(
            "the `{opener}` comment opened at line {line}, column {column} is never closed; add \
             `{closer}`"
        ),
    }
}

/// Where the text after a comment starts: after the first of `ends` from `from`.
fn comment_end(source: &str, from: usize, ends: &[&str]) -> Option<usize> {
    ends.iter()
        .filter_map(|end| source[from..].find(end).map(|at| from + at + end.len()))
        .min()
}

/// The first word of a tag's body: up to whitespace or the end.
fn first_word(text: &str) -> &str {
    text.split(char::is_whitespace).next().unwrap_or_default()
}

/// A tag as shown in a message: on one line, and shortened when long.
fn shown(tag: &str) -> String {
    let one_line: String = tag
        .chars()
        .map(|c| if c.is_whitespace() { ' ' } else { c })
        .collect();
    if one_line.chars().count() <= SHOWN_TAG_LEN {
        return one_line;
    }
    let cut: String = one_line.chars().take(SHOWN_TAG_LEN).collect();
    format!("{cut}…")
}

/// The 1-based line and column (in characters) of byte `at`.
fn position(source: &str, at: usize) -> (usize, usize) {
    let before = &source[..at];
    let line = before.matches('\n').count() + 1;
    let line_start = before.rfind('\n').map_or(0, |newline| newline + 1);
    (line, before[line_start..].chars().count() + 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_balanced_template_has_nothing_to_explain() {
        for source in [
            "plain text",
            "{{#if a}}x{{else if b}}y{{else}}z{{/if}}",
            "{{~#each xs as |x i|~}}{{x}}{{~/each~}}",
            "{{!-- a }} comment --}}{{! short }}",
            r"\{{#if}} is text",
            "{{eq a \"}}\"}}",
            "{{{raw}}}",
        ] {
            assert_eq!(explain(source), None, "{source}");
        }
    }

    #[test]
    fn positions_count_characters_from_one() {
        assert_eq!(position("ab\ncé{{", 6), (2, 3));
        assert_eq!(position("{{", 0), (1, 1));
    }

    #[test]
    fn decorator_and_partial_blocks_close_by_their_name() {
        assert_eq!(explain("{{#*inline \"x\"}}y{{/inline}}"), None);
        assert_eq!(explain("{{#> layout}}y{{/layout}}"), None);
    }

    #[test]
    fn what_the_scan_does_not_follow_is_left_to_the_parser() {
        assert_eq!(explain("{{{{raw}}}}x{{{{/raw}}}}"), None);
        assert_eq!(explain("{{eq a \"unterminated}}"), None);
    }
}
