//! The one wildcard grammar of tool patterns: `*` matches any text (none included), every
//! other character matches itself, and the whole text must match.
//!
//! Two places read it, so a pattern means the same wherever it is written: the MCP tools an
//! agent's `tools` and `disallowed_tools` lists name ([`crate::capabilities::McpRule`]), and
//! the permission rules of the runtime (`TOOL` and `TOOL: PATTERN`, for the tool and for
//! the command, path or URL). Tool names add one form ([`Wildcard::tool`]): `mcp__<server>`
//! alone names every tool of that server.

/// The prefix of every MCP tool name the model sees (`mcp__<server>__<tool>`).
pub const MCP_PREFIX: &str = "mcp__";

/// A pattern where `*` matches any text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Wildcard {
    /// The literal runs between the `*`s, empty ones left out.
    parts: Vec<String>,
    /// Any text may come before the first part.
    open_start: bool,
    /// Any text may come after the last part.
    open_end: bool,
}

impl Wildcard {
    pub fn new(text: &str) -> Wildcard {
        let parts: Vec<String> = text
            .split('*')
            .filter(|p| !p.is_empty())
            .map(str::to_string)
            .collect();
        Wildcard {
            open_start: text.starts_with('*'),
            open_end: text.ends_with('*') || (text.contains('*') && parts.is_empty()),
            parts,
        }
    }

    /// Exactly `text`, a `*` in it included: for a subject taken from a call, which is
    /// matched as it is.
    pub fn literal(text: &str) -> Wildcard {
        Wildcard {
            parts: vec![text.to_string()],
            open_start: false,
            open_end: false,
        }
    }

    /// A pattern of tool names: as [`Wildcard::new`], except that `mcp__<server>` alone
    /// (no `__` after the server, no `*`) names every tool of that server, as
    /// `mcp__<server>__*` does.
    pub fn tool(text: &str) -> Wildcard {
        match text.strip_prefix(MCP_PREFIX) {
            Some(server) if !server.contains("__") && !server.contains('*') => {
                Wildcard::new(&format!("{text}__*"))
            }
            Some(_) | None => Wildcard::new(text),
        }
    }

    /// How many characters must match as written: the more, the more specific.
    pub fn literal_len(&self) -> usize {
        self.parts.iter().map(String::len).sum()
    }

    pub fn matches(&self, text: &str) -> bool {
        let n = self.parts.len();
        if n == 0 {
            return self.open_start || self.open_end || text.is_empty();
        }
        let mut rest = text;
        for (i, part) in self.parts.iter().enumerate() {
            let first = i == 0;
            let last = i == n - 1;
            if first && !self.open_start {
                let Some(after) = rest.strip_prefix(part.as_str()) else {
                    return false;
                };
                rest = after;
                if last && !self.open_end {
                    return rest.is_empty();
                }
                continue;
            }
            if last && !self.open_end {
                return rest.len() >= part.len() && rest.ends_with(part.as_str());
            }
            match rest.find(part.as_str()) {
                Some(at) => rest = &rest[at + part.len()..],
                None => return false,
            }
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wildcards() {
        let p = Wildcard::new("git status*");
        assert!(p.matches("git status"));
        assert!(p.matches("git status --short"));
        assert!(!p.matches("git stash"));
        let p = Wildcard::new("*.env");
        assert!(p.matches("/ws/.env") && !p.matches("/ws/.env.example"));
        let p = Wildcard::new("a*b*c");
        assert!(p.matches("abc") && p.matches("a1b2c") && !p.matches("a1b2c3"));
        assert!(Wildcard::new("*").matches(""));
        assert!(
            Wildcard::new("exact").matches("exact") && !Wildcard::new("exact").matches("exactly")
        );
    }

    #[test]
    fn a_literal_matches_only_itself() {
        let p = Wildcard::literal("https://docs.rs/*");
        assert!(p.matches("https://docs.rs/*"));
        assert!(!p.matches("https://docs.rs/a"));
        assert_eq!(p.literal_len(), "https://docs.rs/*".len());
    }

    #[test]
    fn a_server_name_alone_names_all_its_tools() {
        let server = Wildcard::tool("mcp__time");
        assert!(server.matches("mcp__time__get_current_time"));
        assert!(!server.matches("mcp__timer__x"));
        assert!(!server.matches("mcp__time"));
        assert_eq!(server.literal_len(), "mcp__time__".len());
        // A name with a tool in it, or a `*`, is read as written.
        assert!(
            Wildcard::tool("mcp__time__get_current_time").matches("mcp__time__get_current_time")
        );
        assert!(!Wildcard::tool("mcp__time__get").matches("mcp__time__get_current_time"));
        assert!(Wildcard::tool("mcp__ti*").matches("mcp__timer__x"));
        // Built-in tool names have no server form.
        assert!(
            Wildcard::tool("bash").matches("bash") && !Wildcard::tool("bash").matches("bash__x")
        );
    }
}
