//! Commands as rules see them: one simple command for an allow rule, every piece of a
//! compound one for a deny rule.

/// Whitespace runs as one space, ends trimmed.
pub(super) fn squeeze(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The command as one simple command, or `None` when the shell would do more than run
/// one program with arguments: several commands (`;`, `&&`, `||`, `|`, `&`, newlines),
/// redirections, subshells, or substitutions (`$…`, backticks) outside single quotes.
pub fn simple_command(command: &str) -> Option<String> {
    let mut single = false;
    let mut double = false;
    let mut escaped = false;
    for c in command.chars() {
        if escaped {
            escaped = false;
            continue;
        }
        if single {
            single = c != '\'';
            continue;
        }
        match c {
            '\\' => escaped = true,
            '\'' if !double => single = true,
            '"' => double = !double,
            '$' | '`' => return None,
            ';' | '&' | '|' | '<' | '>' | '(' | ')' | '\n' | '\r' if !double => return None,
            _ => {}
        }
    }
    if single || double || escaped {
        return None;
    }
    Some(squeeze(command))
}

/// Wrappers that run the rest of the line as a command.
const WRAPPERS: [&str; 9] = [
    "sudo", "env", "command", "exec", "nohup", "time", "nice", "builtin", "xargs",
];

/// The characters where the shell ends one command and starts another, or substitutes,
/// redirects or groups.
const OPERATORS: [char; 13] = [
    ';', '&', '|', '(', ')', '`', '$', '\n', '\r', '<', '>', '{', '}',
];

/// Every piece of a command a deny rule should see, read two ways, so one catches what the
/// other misses:
/// - split at every shell operator, quote and substitution, quoted or not (so
///   `bash -c 'git push'` shows `git push`);
/// - split at the operators outside quotes, each part read into words as the shell reads
///   them (`shlex`), so quoting a command's name (`'git' push`, `g\it push`) hides nothing.
///
/// Each piece is also seen with leading `VAR=value` assignments and wrappers such as
/// `sudo` or `env` taken off. A guard against mistakes, not a shell parser: the sandbox is
/// the boundary.
pub(super) fn pieces(command: &str) -> Vec<String> {
    let mut out = Vec::new();
    for piece in command.split(|c| OPERATORS.contains(&c) || c == '"' || c == '\'') {
        let words: Vec<&str> = piece.split_whitespace().collect();
        push_with_and_without_wrappers(&mut out, &words);
    }
    for part in unquoted_parts(command) {
        // A part whose quotes do not close is left to the split above.
        if let Some(words) = shlex::split(part) {
            let words: Vec<&str> = words.iter().map(String::as_str).collect();
            push_with_and_without_wrappers(&mut out, &words);
        }
    }
    out.retain(|p| !p.is_empty());
    out.dedup();
    out
}

/// Adds the words as one piece, and again from the first word that is not an assignment,
/// a wrapper or a wrapper's flag.
fn push_with_and_without_wrappers(out: &mut Vec<String>, words: &[&str]) {
    let mut start = 0;
    while start < words.len() {
        let word = words[start];
        let assignment = word
            .split_once('=')
            .is_some_and(|(name, _)| !name.is_empty() && !name.starts_with('-'));
        if assignment || WRAPPERS.contains(&word) || word.starts_with('-') && start > 0 {
            start += 1;
        } else {
            break;
        }
    }
    for from in [0, start] {
        if from < words.len() {
            out.push(words[from..].join(" "));
        }
    }
}

/// The command cut at the shell operators that stand outside quotes: the parts it runs as
/// separate commands, each still quoted as written.
fn unquoted_parts(command: &str) -> Vec<&str> {
    let mut parts = Vec::new();
    let mut single = false;
    let mut double = false;
    let mut escaped = false;
    let mut start = 0;
    for (at, c) in command.char_indices() {
        if escaped {
            escaped = false;
            continue;
        }
        if single {
            single = c != '\'';
            continue;
        }
        match c {
            '\\' => escaped = true,
            '\'' if !double => single = true,
            '"' => double = !double,
            c if !double && OPERATORS.contains(&c) => {
                parts.push(&command[start..at]);
                start = at + c.len_utf8();
            }
            _ => {}
        }
    }
    parts.push(&command[start..]);
    parts
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deny_pieces_see_inside_quotes_and_past_wrappers() {
        let seen = pieces("FOO=1 sudo -E bash -c 'cd x && git push' | tee log");
        for piece in ["git push", "cd x", "tee log", "bash -c"] {
            assert!(seen.iter().any(|p| p == piece), "{piece} in {seen:?}");
        }
    }

    #[test]
    fn deny_pieces_read_words_as_the_shell_does() {
        for (command, piece) in [
            ("'git' push", "git push"),
            ("\"git\" push -f", "git push -f"),
            ("g\\it push", "git push"),
            ("gi''t push", "git push"),
            ("sudo 'git' push", "git push"),
            ("true; 'git' push origin", "git push origin"),
        ] {
            let seen = pieces(command);
            assert!(seen.iter().any(|p| p == piece), "{piece} in {seen:?}");
        }
        // Quotes that never close leave the plain split to do the work.
        assert!(pieces("git push 'oops").iter().any(|p| p == "git push"));
    }

    #[test]
    fn parts_are_cut_only_at_operators_outside_quotes() {
        assert_eq!(
            unquoted_parts("a 'b;c' \"d|e\" f\\;g; h"),
            ["a 'b;c' \"d|e\" f\\;g", " h"]
        );
    }

    /// An allow rule matches the command as written, quotes and all: reading its words as
    /// the shell does would let `bash: echo hi` allow `echo 'hi'`, or more.
    #[test]
    fn an_allowed_command_keeps_its_quotes() {
        assert_eq!(
            simple_command("git  status 'a;b'").as_deref(),
            Some("git status 'a;b'")
        );
        assert_eq!(simple_command("git status; rm -rf ~"), None);
        assert_eq!(simple_command("echo 'open"), None);
    }
}
