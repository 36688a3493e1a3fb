//! Allow and deny rules: `TOOL` or `TOOL: PATTERN`, parsed against the known tools and
//! matched against what a call touches. The patterns are prompt-assembly's wildcards
//! ([`Wildcard`]), the grammar the MCP tools of a `tools` list are read with too.

use std::path::{Path, PathBuf};

use prompt_assembly::wildcard::Wildcard;

use super::shell::{pieces, simple_command, squeeze};
use super::{Access, Origin, normalise, real_path};

/// One allow or deny rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    /// The rule as written.
    pub text: String,
    tool: Wildcard,
    /// `None`: every call of the tool.
    spec: Option<Wildcard>,
    pub origin: Origin,
}

/// How a rule's pattern is read for a tool.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum SpecKind {
    Path,
    Command,
    Url,
    /// The tool takes no specifier.
    None,
}

fn spec_kind(tool: &str) -> SpecKind {
    match tool {
        "read" | "write" | "edit" | "grep" | "glob" => SpecKind::Path,
        "bash" => SpecKind::Command,
        "web_fetch" => SpecKind::Url,
        _ => SpecKind::None,
    }
}

/// Where relative paths in rules are taken from, and what `~` means.
#[derive(Debug, Clone)]
pub struct RuleContext {
    pub workspace: PathBuf,
    pub home: Option<PathBuf>,
}

impl RuleContext {
    /// `~/x` under the home directory, relative paths under the workspace, and `.`/`..`
    /// resolved without touching the disk.
    pub fn expand(&self, path: &str) -> PathBuf {
        let joined = match (path.strip_prefix("~/"), &self.home) {
            (Some(rest), Some(home)) => home.join(rest),
            _ if path == "~" && self.home.is_some() => self.home.clone().unwrap_or_default(),
            _ => self.workspace.join(path),
        };
        normalise(&joined)
    }
}

impl Rule {
    /// Parses `TOOL` or `TOOL: PATTERN`. `known` are the tool names a bare name is checked
    /// against (names with `*` and `mcp__` tools are taken as they are).
    pub fn parse(
        text: &str,
        origin: Origin,
        context: &RuleContext,
        known: &[&str],
    ) -> Result<Rule, String> {
        let (tool, spec) = match text.split_once(':') {
            Some((tool, spec)) => (tool.trim(), Some(spec.trim())),
            None => (text.trim(), None),
        };
        if tool.is_empty() {
            return Err(format!(
                "rule {text:?} names no tool; write it as `TOOL` or `TOOL: PATTERN`"
            ));
        }
        if !tool.contains('*') && !tool.starts_with("mcp__") && !known.contains(&tool) {
            return Err(format!(
                "rule {text:?}: unknown tool `{tool}`; the tools are {}",
                known.join(", ")
            ));
        }
        let spec = match spec {
            None | Some("") | Some("*") => None,
            Some(spec) => {
                let spec = match spec_kind(tool) {
                    SpecKind::Path => {
                        // Expand `~` and relative paths, keep a trailing `*`.
                        let (base, star) = match spec.strip_suffix('*') {
                            Some(base) if !base.contains('*') => (base, "*"),
                            _ => (spec, ""),
                        };
                        let keep_slash = base.ends_with('/');
                        let mut expanded = context.expand(base).display().to_string();
                        if keep_slash && !expanded.ends_with('/') {
                            expanded.push('/');
                        }
                        format!("{expanded}{star}")
                    }
                    SpecKind::Command => squeeze(spec),
                    SpecKind::Url => spec.to_string(),
                    SpecKind::None => {
                        return Err(format!(
                            "rule {text:?}: `{tool}` takes no pattern; write just `{tool}`"
                        ));
                    }
                };
                Some(Wildcard::new(&spec))
            }
        };
        Ok(Rule {
            text: text.trim().to_string(),
            // `mcp__<server>` names every tool of that server, as it does in `tools` lists.
            tool: Wildcard::tool(tool),
            spec,
            origin,
        })
    }

    /// A rule for exactly this call (what "allow for this session" adds).
    pub(super) fn exact(tool: &str, access: &Access) -> Rule {
        let subject = match access {
            // Every page of the same site: asking again per page would only train people
            // to say yes without reading.
            Access::Fetch(url) => reqwest::Url::parse(url)
                .ok()
                .map(|u| format!("{}/*", u.origin().ascii_serialization()))
                .or_else(|| Some(url.clone())),
            Access::Command { command, .. } => Some(squeeze(command)),
            other => other.subject(),
        };
        let text = match &subject {
            Some(subject) => format!("{tool}: {subject}"),
            None => tool.to_string(),
        };
        Rule {
            text,
            tool: Wildcard::new(tool),
            spec: subject.map(|s| {
                if s.ends_with('*') {
                    Wildcard::new(&s)
                } else {
                    Wildcard::literal(&s)
                }
            }),
            origin: Origin::Session,
        }
    }

    /// A rule for a path, granted by the runtime itself.
    pub fn runtime_path(tool: &str, path: &Path, why: &'static str) -> Rule {
        let subject = path.display().to_string();
        Rule {
            text: format!("{tool}: {subject}"),
            tool: Wildcard::new(tool),
            spec: Some(Wildcard::literal(&subject)),
            origin: Origin::Runtime(why),
        }
    }

    fn specificity(&self) -> (usize, usize) {
        (
            self.spec.as_ref().map_or(0, Wildcard::literal_len),
            self.tool.literal_len(),
        )
    }

    /// Whether the rule covers the call. Deny rules also look at every piece of a compound
    /// command; allow rules match a command only when it is one simple command.
    pub(super) fn matches(&self, tool: &str, access: &Access, deny: bool) -> bool {
        if !self.tool.matches(tool) {
            return false;
        }
        let Some(spec) = &self.spec else {
            return true;
        };
        match access {
            Access::Command { command, .. } => {
                if deny {
                    let whole = squeeze(command);
                    spec.matches(&whole) || pieces(command).iter().any(|p| spec.matches(p))
                } else {
                    simple_command(command).is_some_and(|c| spec.matches(&c))
                }
            }
            // A path is also judged by where it really leads, so a link named `notes`
            // pointing at `.env` is caught by `write: *.env` (for deny rules; an allow
            // rule must match what the call names).
            Access::Read(Some(path)) | Access::Write(path) if deny => {
                spec.matches(&path.display().to_string())
                    || spec.matches(&real_path(path).display().to_string())
            }
            other => other.subject().is_some_and(|s| spec.matches(&s)),
        }
    }
}

/// Allow and deny rules, most specific first.
#[derive(Debug, Clone, Default)]
pub struct Rules {
    pub allow: Vec<Rule>,
    pub deny: Vec<Rule>,
}

impl Rules {
    pub fn extend(&mut self, other: Rules) {
        self.allow.extend(other.allow);
        self.deny.extend(other.deny);
        self.sort();
    }

    pub(super) fn sort(&mut self) {
        // Stable: among equally specific rules the one written first is named.
        self.allow
            .sort_by_key(|r| std::cmp::Reverse(r.specificity()));
        self.deny
            .sort_by_key(|r| std::cmp::Reverse(r.specificity()));
    }

    pub fn is_empty(&self) -> bool {
        self.allow.is_empty() && self.deny.is_empty()
    }
}

pub(super) fn first<'r>(
    rules: &'r [Rule],
    tool: &str,
    access: &Access,
    deny: bool,
) -> Option<&'r Rule> {
    rules.iter().find(|r| r.matches(tool, access, deny))
}
#[cfg(test)]
mod tests {
    use super::*;

    fn context() -> RuleContext {
        RuleContext {
            workspace: PathBuf::from("/ws"),
            home: Some(PathBuf::from("/home/u")),
        }
    }

    const KNOWN: [&str; 5] = ["read", "write", "edit", "bash", "web_fetch"];

    fn rule(text: &str) -> Rule {
        Rule::parse(text, Origin::Session, &context(), &KNOWN).unwrap()
    }

    fn command(text: &str) -> Access {
        Access::Command {
            command: text.to_string(),
            outside_sandbox: true,
            reason: None,
        }
    }

    #[test]
    fn allow_rules_match_only_simple_commands() {
        let r = rule("bash: git status*");
        assert!(r.matches("bash", &command("git  status --short"), false));
        assert!(!r.matches("bash", &command("git status; rm -rf ~"), false));
        assert!(!r.matches("bash", &command("git status $(rm -rf ~)"), false));
        assert!(!r.matches("bash", &command("git status > /etc/passwd"), false));
        assert!(!r.matches("bash", &command("git status `id`"), false));
        assert!(r.matches("bash", &command("git status 'a;b'"), false));
        assert!(!r.matches("bash", &command("git status \"$HOME\""), false));
    }

    #[test]
    fn deny_rules_see_every_piece() {
        let r = rule("bash: git push*");
        for cmd in [
            "git push",
            "cd x && git push origin",
            "FOO=1 git push",
            "sudo git push",
            "bash -c 'git push'",
            "echo $(git push)",
            "true | git  push -f",
            "'git' push",
            "g\\it push",
        ] {
            assert!(r.matches("bash", &command(cmd), true), "{cmd}");
        }
        assert!(!r.matches("bash", &command("git pull"), true));
    }

    #[test]
    fn path_rules_expand_home_and_workspace() {
        let r = rule("write: ~/notes/*");
        assert!(r.matches("write", &Access::Write("/home/u/notes/a.md".into()), false));
        let r = rule("write: secrets/*");
        assert!(r.matches("write", &Access::Write("/ws/secrets/k".into()), true));
        assert!(!r.matches("write", &Access::Write("/ws/src/k".into()), true));
        let r = rule("edit");
        assert!(r.matches("edit", &Access::Write("/anything".into()), true));
    }

    #[test]
    fn rules_are_checked_when_parsed() {
        let e = Rule::parse("bsh: ls", Origin::Session, &context(), &KNOWN).unwrap_err();
        assert!(
            e.contains("unknown tool `bsh`") && e.contains("bash"),
            "{e}"
        );
        let e =
            Rule::parse("todowrite: x", Origin::Session, &context(), &["todowrite"]).unwrap_err();
        assert!(e.contains("takes no pattern"), "{e}");
        assert!(Rule::parse("mcp__time__*", Origin::Session, &context(), &KNOWN).is_ok());
        let server = Rule::parse("mcp__time", Origin::Session, &context(), &KNOWN).unwrap();
        assert!(server.matches("mcp__time__get_current_time", &Access::External, false));
        assert!(!server.matches("mcp__timer__x", &Access::External, false));
    }

    #[test]
    fn the_most_specific_rule_is_named() {
        let mut rules = Rules {
            allow: vec![],
            deny: vec![rule("bash"), rule("bash: git push*"), rule("bash: git*")],
        };
        rules.sort();
        let hit = first(&rules.deny, "bash", &command("git push -f"), true).unwrap();
        assert_eq!(hit.text, "bash: git push*");
    }

    #[test]
    fn session_rules_are_exact() {
        let r = Rule::exact("bash", &command("git  push origin main"));
        assert_eq!(r.text, "bash: git push origin main");
        assert!(r.matches("bash", &command("git push origin main"), false));
        assert!(!r.matches("bash", &command("git push origin main --force"), false));
        let r = Rule::exact("web_fetch", &Access::Fetch("https://docs.rs/a/b?c".into()));
        assert_eq!(r.text, "web_fetch: https://docs.rs/*");
        assert!(r.matches(
            "web_fetch",
            &Access::Fetch("https://docs.rs/x".into()),
            false
        ));
        let elsewhere = Access::Fetch("https://docs.rs.evil.example/x".into());
        assert!(!r.matches("web_fetch", &elsewhere, false));
    }

    /// A tool pattern means the same in a rule as in a `tools` list: both read it with
    /// prompt-assembly's `Wildcard::tool`.
    #[test]
    fn tool_patterns_mean_the_same_in_rules_and_tools_lists() {
        use prompt_assembly::capabilities::{McpAccess, McpRule};
        for pattern in [
            "mcp__time__get_current_time",
            "mcp__time__get",
            "mcp__time",
            "mcp__tim",
            "mcp__*",
            "mcp__ti*",
            "mcp__*__get_current_time",
            "mcp__*__convert*",
            "*",
        ] {
            let rule = rule(pattern);
            let list = McpAccess {
                rules: vec![McpRule {
                    allow: Some(vec![pattern.to_string()]),
                    deny: Vec::new(),
                }],
            };
            for tool in [
                "mcp__time__get_current_time",
                "mcp__time__convert_time",
                "mcp__timer__x",
                "mcp__everything__echo",
            ] {
                assert_eq!(
                    rule.matches(tool, &Access::External, false),
                    list.allows(tool),
                    "{pattern} on {tool}"
                );
            }
        }
        let server = rule("mcp__time");
        assert!(server.matches("mcp__time__convert_time", &Access::External, true));
        assert!(!server.matches("mcp__timer__x", &Access::External, true));
    }
}
