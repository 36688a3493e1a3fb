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

/// Every piece of a command a deny rule should see: split at every shell operator, quote
/// and substitution, with leading `VAR=value` assignments and wrappers such as `sudo` or
/// `env` taken off. A guard against mistakes, not a shell parser: the sandbox is the
/// boundary.
pub(super) fn pieces(command: &str) -> Vec<String> {
    let mut out = Vec::new();
    for piece in command.split([
        ';', '&', '|', '(', ')', '`', '$', '"', '\'', '\n', '\r', '<', '>', '{', '}',
    ]) {
        let words: Vec<&str> = piece.split_whitespace().collect();
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
    out.retain(|p| !p.is_empty());
    out.dedup();
    out
}
