//! What the agent may do without asking: a permission mode, an approval policy, and
//! allow/deny rules.
//!
//! Every tool call is first described as an [`Access`] (a path it reads or writes, a
//! command it runs, a URL it fetches). Then, in this order:
//! 1. a **deny rule** that matches refuses the call, whatever else says;
//! 2. a call **inside the mode** runs: `read-only` reads and runs commands in a read-only
//!    sandbox, `workspace` also writes under the workspace and the temp directories and
//!    runs commands in a sandbox that may write there, `full` does anything;
//! 3. an **allow rule** that matches (the user's, a trusted workspace's, or one granted for
//!    this session) lets a call outside the mode run;
//! 4. anything else is **asked** about (`ask`: allow once, allow for this session, or deny
//!    with a reason the model reads) or **refused** (`never`) with a message naming the
//!    mode, where it was set, and the rule that would allow it.
//!
//! Rules are `TOOL` or `TOOL: PATTERN`, where `*` in the pattern matches any text:
//! `bash: git status*`, `write: ~/notes/*`, `web_fetch: https://docs.rs/*`. Among matching
//! rules of one kind the most specific (the most literal characters) is the one named.
//!
//! A helper agent runs with its parent's policy narrowed by its own ceiling, so it never
//! has more than its parent. A workspace's own rules file allows only while it is the file
//! the user trusted ([`trust`]).

use std::fmt;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};

use serde::{Deserialize, Serialize};

use crate::sandbox::Sandbox;

pub mod trust;

pub use prompt_assembly::paths::{normalise, real_path};
pub use prompt_assembly::permission_mode::PermissionMode;

/// What happens to a call outside the mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Approval {
    /// Ask the user: allow once, allow for this session, or deny with a reason.
    Ask,
    /// Refuse it with a tool error that names the rule.
    Never,
}

impl Approval {
    pub fn as_str(self) -> &'static str {
        match self {
            Approval::Ask => "ask",
            Approval::Never => "never",
        }
    }
}

impl fmt::Display for Approval {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for Approval {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "ask" => Ok(Approval::Ask),
            "never" => Ok(Approval::Never),
            _ => Err(format!(
                "unknown approval policy {s:?}; expected ask or never"
            )),
        }
    }
}

/// What one tool call touches, as far as permissions care.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Access {
    /// The session's own bookkeeping (task list, notes, skills, helpers, background tasks).
    Own,
    /// Reads, a named path if the call has one.
    Read(Option<PathBuf>),
    /// Creates or changes this file.
    Write(PathBuf),
    /// Runs a shell command; `outside_sandbox` when the model asked to leave the sandbox.
    Command {
        command: String,
        outside_sandbox: bool,
        /// Why the model says it needs to leave the sandbox, shown to the user.
        reason: Option<String>,
    },
    /// Fetches a URL.
    Fetch(String),
    /// A tool the runtime cannot look inside (a tool served by another program): outside
    /// `read-only` and `workspace` unless a rule allows it.
    External,
}

impl Access {
    /// The text a rule's pattern is matched against.
    fn subject(&self) -> Option<String> {
        match self {
            Access::Own | Access::External | Access::Read(None) => None,
            Access::Read(Some(path)) | Access::Write(path) => Some(path.display().to_string()),
            Access::Command { command, .. } => Some(command.clone()),
            Access::Fetch(url) => Some(url.clone()),
        }
    }
}

/// Where a setting or rule came from, so every message can say.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Origin {
    /// The built-in default for this kind of session.
    Default(&'static str),
    /// A command-line flag.
    Flag(&'static str),
    /// The user's config file.
    UserConfig(PathBuf),
    /// The workspace's rules file.
    Workspace(PathBuf),
    /// Granted by the user's answer earlier in this session.
    Session,
    /// Granted by the runtime for the session's own work (the plan file in plan mode).
    Runtime(&'static str),
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Origin::Default(what) => write!(f, "the default for {what}"),
            Origin::Flag(flag) => write!(f, "set by {flag}"),
            Origin::UserConfig(path) => write!(f, "from {}", path.display()),
            Origin::Workspace(path) => write!(f, "from {}", path.display()),
            Origin::Session => f.write_str("allowed by you for this session"),
            Origin::Runtime(why) => f.write_str(why),
        }
    }
}

/// One allow or deny rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    /// The rule as written.
    pub text: String,
    tool: Pattern,
    /// `None`: every call of the tool.
    spec: Option<Pattern>,
    pub origin: Origin,
}

/// A wildcard pattern: `*` matches any text, everything else matches itself.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Pattern {
    parts: Vec<String>,
    /// Starts or ends with `*`.
    open_start: bool,
    open_end: bool,
}

impl Pattern {
    fn new(text: &str) -> Pattern {
        let parts: Vec<String> = text
            .split('*')
            .filter(|p| !p.is_empty())
            .map(str::to_string)
            .collect();
        Pattern {
            open_start: text.starts_with('*'),
            open_end: text.ends_with('*') || (text.contains('*') && parts.is_empty()),
            parts,
        }
    }

    fn literal_len(&self) -> usize {
        self.parts.iter().map(String::len).sum()
    }

    fn matches(&self, text: &str) -> bool {
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
                Some(Pattern::new(&spec))
            }
        };
        // `mcp__<server>` names every tool of that server, as it does in ceilings.
        let server_wide;
        let tool = match tool.strip_prefix("mcp__") {
            Some(server) if !server.contains("__") && !server.contains('*') => {
                server_wide = format!("{tool}__*");
                server_wide.as_str()
            }
            Some(_) | None => tool,
        };
        Ok(Rule {
            text: text.trim().to_string(),
            tool: Pattern::new(tool),
            spec,
            origin,
        })
    }

    /// A rule for exactly this call (what "allow for this session" adds).
    fn exact(tool: &str, access: &Access) -> Rule {
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
            tool: Pattern::new(tool),
            spec: subject.map(|s| {
                if s.ends_with('*') {
                    Pattern::new(&s)
                } else {
                    // Literal: escape nothing, match the whole text.
                    Pattern {
                        parts: vec![s],
                        open_start: false,
                        open_end: false,
                    }
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
            tool: Pattern::new(tool),
            spec: Some(Pattern {
                parts: vec![subject],
                open_start: false,
                open_end: false,
            }),
            origin: Origin::Runtime(why),
        }
    }

    fn specificity(&self) -> (usize, usize) {
        (
            self.spec.as_ref().map_or(0, Pattern::literal_len),
            self.tool.literal_len(),
        )
    }

    /// Whether the rule covers the call. Deny rules also look at every piece of a compound
    /// command; allow rules match a command only when it is one simple command.
    fn matches(&self, tool: &str, access: &Access, deny: bool) -> bool {
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

/// Whitespace runs as one space, ends trimmed.
fn squeeze(text: &str) -> String {
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
fn pieces(command: &str) -> Vec<String> {
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

    fn sort(&mut self) {
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

fn first<'r>(rules: &'r [Rule], tool: &str, access: &Access, deny: bool) -> Option<&'r Rule> {
    rules.iter().find(|r| r.matches(tool, access, deny))
}

/// What the user is asked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApprovalRequest {
    pub tool: String,
    /// The exact command, path or URL.
    pub subject: String,
    /// What the call would change, as a unified diff (`write`, `edit`).
    pub preview: Option<String>,
    /// Why the call is outside the mode.
    pub why: String,
    /// What the model says it needs this for.
    pub reason: Option<String>,
    /// The rule "allow for this session" adds.
    pub session_rule: String,
}

/// The user's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    Once,
    Session,
    /// Denied; the reason (possibly empty) goes to the model.
    Deny(String),
}

type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Asks the person at the terminal about a call outside the mode.
pub trait Approver: Send + Sync + fmt::Debug {
    fn ask(&self, request: ApprovalRequest) -> BoxFuture<'_, Answer>;

    /// Tells the user that a call outside the mode ran, and why it was allowed.
    fn tell(&self, _note: &str) {}
}

/// The settings one session runs with.
#[derive(Debug, Clone)]
pub struct Settings {
    pub mode: PermissionMode,
    pub mode_origin: Origin,
    pub approval: Approval,
    pub approval_origin: Origin,
    /// Commands (and `web_fetch`) may use the network in `read-only` and `workspace`.
    pub network: bool,
    /// Writable in `workspace` mode besides the workspace: the temp directories and any
    /// `writable_roots` from the config.
    pub writable: Vec<PathBuf>,
    pub rules: Rules,
    /// Files no mode below `full` lets the agent change, e.g. the workspace's own rules.
    pub protected: Vec<PathBuf>,
}

impl Settings {
    /// No limits, for a caller that chooses to run tools unrestricted (tests, benchmarks).
    pub fn unrestricted() -> Settings {
        Settings {
            mode: PermissionMode::Full,
            mode_origin: Origin::Default("an unrestricted tool context"),
            approval: Approval::Never,
            approval_origin: Origin::Default("an unrestricted tool context"),
            network: true,
            writable: Vec::new(),
            rules: Rules::default(),
            protected: Vec::new(),
        }
    }
}

/// One session's permissions, shared by the agent and every helper it starts.
#[derive(Debug)]
pub struct Permissions {
    pub workspace: PathBuf,
    pub settings: Settings,
    pub sandbox: Sandbox,
    approver: Option<Arc<dyn Approver>>,
    /// Rules the user granted with "allow for this session".
    granted: Mutex<Vec<Rule>>,
    /// One question at a time, even when helpers ask at once.
    asking: tokio::sync::Mutex<()>,
}

impl Permissions {
    pub fn new(
        workspace: PathBuf,
        mut settings: Settings,
        sandbox: Sandbox,
        approver: Option<Arc<dyn Approver>>,
    ) -> Permissions {
        settings.rules.sort();
        Permissions {
            workspace,
            settings,
            sandbox,
            approver,
            granted: Mutex::new(Vec::new()),
            asking: tokio::sync::Mutex::new(()),
        }
    }

    /// Adds a rule for the rest of the session.
    pub fn grant(&self, rule: Rule) {
        let mut granted = self.granted.lock().unwrap_or_else(PoisonError::into_inner);
        if !granted.iter().any(|r| r.text == rule.text) {
            granted.push(rule);
        }
    }

    /// The rules granted for this session so far.
    pub fn granted(&self) -> Vec<Rule> {
        self.granted
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Whether calls outside the mode are asked about.
    pub fn asks(&self) -> bool {
        self.settings.approval == Approval::Ask && self.approver.is_some()
    }

    /// The directories a `workspace`-mode write may land in.
    pub fn writable_roots(&self) -> Vec<PathBuf> {
        let mut roots = vec![self.workspace.clone()];
        roots.extend(self.settings.writable.iter().cloned());
        roots
    }
}

/// One agent's permissions: the session's, at a mode no wider than its parent's.
#[derive(Debug, Clone)]
pub struct Policy {
    shared: Arc<Permissions>,
    mode: PermissionMode,
    /// Where this agent's mode comes from, for messages.
    origin: String,
}

/// A call allowed to run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Permit {
    /// Commands run in the sandbox (with these writable directories and network setting).
    pub sandbox: Option<SandboxSpec>,
}

/// What a sandboxed command may do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SandboxSpec {
    pub writable: Vec<PathBuf>,
    pub network: bool,
}

impl Policy {
    pub fn new(shared: Arc<Permissions>) -> Policy {
        let settings = &shared.settings;
        Policy {
            mode: settings.mode,
            origin: settings.mode_origin.to_string(),
            shared,
        }
    }

    /// Full access, nothing asked, no sandbox: only where a caller says so.
    pub fn unrestricted(workspace: PathBuf) -> Policy {
        Policy::new(Arc::new(Permissions::new(
            workspace,
            Settings::unrestricted(),
            Sandbox::Unavailable {
                reason: "no sandbox in an unrestricted tool context".to_string(),
            },
            None,
        )))
    }

    pub fn mode(&self) -> PermissionMode {
        self.mode
    }

    /// Where the mode was set, as messages say it.
    pub fn origin(&self) -> &str {
        &self.origin
    }

    pub fn permissions(&self) -> &Arc<Permissions> {
        &self.shared
    }

    /// This policy at most at `ceiling`; `why` says where the ceiling comes from.
    pub fn narrow(&self, ceiling: PermissionMode, why: &str) -> Policy {
        if ceiling >= self.mode {
            return self.clone();
        }
        Policy {
            shared: self.shared.clone(),
            mode: ceiling,
            origin: why.to_string(),
        }
    }

    /// The same policy for a helper started by `parent`.
    pub fn inherited(&self, parent: &str) -> Policy {
        Policy {
            shared: self.shared.clone(),
            mode: self.mode,
            origin: format!("inherited from {parent}, {}", self.origin),
        }
    }

    /// The sandbox a command would run in under this mode, or why there is none.
    fn sandbox_for_commands(&self) -> Result<SandboxSpec, String> {
        let shared = &self.shared;
        if !shared.sandbox.confines_files() {
            return Err(format!(
                "commands cannot be sandboxed on this machine ({})",
                shared.sandbox.describe()
            ));
        }
        let network = shared.settings.network;
        if !network && !shared.sandbox.confines_network() {
            return Err(format!(
                "the network cannot be switched off for commands on this machine ({}); \
                 set `network = true` under [permissions] to run them with the file-system \
                 sandbox alone",
                shared.sandbox.describe()
            ));
        }
        let writable = match self.mode {
            PermissionMode::ReadOnly => Vec::new(),
            PermissionMode::Workspace | PermissionMode::Full => shared.writable_roots(),
        };
        Ok(SandboxSpec { writable, network })
    }

    /// Whether the call is inside the mode: `Ok` with how it runs, or `Err` saying why not.
    fn inside(&self, access: &Access) -> Result<Permit, String> {
        let plain = Permit { sandbox: None };
        let shared = &self.shared;
        match access {
            Access::Own | Access::Read(_) => Ok(plain),
            Access::Write(path) => {
                let real = real_path(path);
                if let Some(protected) = shared
                    .settings
                    .protected
                    .iter()
                    .find(|p| **p == real || **p == *path)
                {
                    return Err(format!(
                        "{} holds the workspace's permission rules, which only you change",
                        protected.display()
                    ));
                }
                match self.mode {
                    PermissionMode::Full => Ok(plain),
                    PermissionMode::ReadOnly => Err(format!(
                        "the `read-only` mode allows no writes ({})",
                        self.origin
                    )),
                    PermissionMode::Workspace => {
                        let roots = shared.writable_roots();
                        if roots.iter().any(|root| real.starts_with(real_path(root))) {
                            Ok(plain)
                        } else {
                            let shown: Vec<String> =
                                roots.iter().map(|r| r.display().to_string()).collect();
                            Err(format!(
                                "{} is outside the `workspace` mode ({}), which writes only under {}",
                                path.display(),
                                self.origin,
                                shown.join(", ")
                            ))
                        }
                    }
                }
            }
            Access::Command {
                outside_sandbox, ..
            } => {
                if self.mode == PermissionMode::Full {
                    return Ok(plain);
                }
                if *outside_sandbox {
                    return Err(format!(
                        "the command asks to run outside the sandbox of the `{}` mode ({})",
                        self.mode, self.origin
                    ));
                }
                self.sandbox_for_commands()
                    .map(|spec| Permit {
                        sandbox: Some(spec),
                    })
                    .map_err(|why| {
                        format!(
                            "{why}, so under the `{}` mode ({}) each command needs approval",
                            self.mode, self.origin
                        )
                    })
            }
            Access::Fetch(_) => {
                if self.mode == PermissionMode::Full || shared.settings.network {
                    Ok(plain)
                } else {
                    Err(format!(
                        "the `{}` mode ({}) has no network access unless `network = true` is set under [permissions]",
                        self.mode, self.origin
                    ))
                }
            }
            Access::External => {
                if self.mode == PermissionMode::Full {
                    Ok(plain)
                } else {
                    Err(format!(
                        "what this tool does is not known to the runtime, so the `{}` mode ({}) does not cover it",
                        self.mode, self.origin
                    ))
                }
            }
        }
    }

    /// Decides one call. `preview` is asked for only when the user is asked.
    pub async fn check(
        &self,
        tool: &str,
        access: &Access,
        preview: &(dyn Fn() -> Option<String> + Sync),
    ) -> Result<Permit, String> {
        let shared = &self.shared;
        let granted = shared.granted();
        if let Some(rule) = first(&shared.settings.rules.deny, tool, access, true) {
            return Err(format!(
                "refused by the deny rule `{}` ({}). Deny rules win over everything else; do not retry this call, work around it or tell the user what you need.",
                rule.text, rule.origin
            ));
        }
        let why = match self.inside(access) {
            Ok(permit) => return Ok(permit),
            Err(why) => why,
        };
        // Outside the mode: a matching allow rule runs it outside the sandbox.
        let outside = Permit { sandbox: None };
        let allowed = first(&shared.settings.rules.allow, tool, access, false)
            .or_else(|| first(&granted, tool, access, false))
            .cloned();
        if let Some(rule) = allowed {
            if let Some(approver) = &shared.approver {
                approver.tell(&format!(
                    "{tool} allowed by the rule `{}` ({})",
                    rule.text, rule.origin
                ));
            }
            return Ok(outside);
        }
        let session_rule = Rule::exact(tool, access);
        let approver = match (&shared.approver, shared.settings.approval) {
            (Some(approver), Approval::Ask) => approver,
            (_, Approval::Never) | (None, Approval::Ask) => {
                return Err(format!(
                    "refused: {why}, and the approval policy is `never` ({}). Do not retry this call; do what you can within the mode, or tell the user what you need. To allow it, the user can add `{}` to `allow` under [permissions] in config.toml, or change the mode with --permissions.",
                    shared.settings.approval_origin, session_rule.text
                ));
            }
        };
        let request = ApprovalRequest {
            tool: tool.to_string(),
            subject: access.subject().unwrap_or_else(|| tool.to_string()),
            preview: preview(),
            why: why.clone(),
            reason: match access {
                Access::Command { reason, .. } => reason.clone(),
                _ => None,
            },
            session_rule: session_rule.text.clone(),
        };
        let _one_at_a_time = shared.asking.lock().await;
        // An answer given while this call waited may already cover it.
        if first(&shared.granted(), tool, access, false).is_some() {
            return Ok(outside);
        }
        match approver.ask(request).await {
            Answer::Once => Ok(outside),
            Answer::Session => {
                shared.grant(session_rule);
                Ok(outside)
            }
            Answer::Deny(reason) => {
                let reason = reason.trim();
                Err(if reason.is_empty() {
                    format!(
                        "the user denied this call ({why}) and gave no reason. Do not retry it; ask the user or take another way."
                    )
                } else {
                    format!("the user denied this call ({why}). Their reason: {reason}")
                })
            }
        }
    }
}

/// The `[permissions]` table of config.toml, and the workspace's rules file.
pub mod config {
    use super::trust::{self, Trust};
    use super::*;

    /// `[permissions]` as written.
    #[derive(Debug, Default, Deserialize)]
    #[serde(deny_unknown_fields)]
    pub struct Section {
        pub mode: Option<PermissionMode>,
        /// For interactive sessions; `agent exec` never asks unless `--approval ask`.
        pub approval: Option<Approval>,
        #[serde(default)]
        pub network: bool,
        #[serde(default)]
        pub writable_roots: Vec<String>,
        #[serde(default)]
        pub allow: Vec<String>,
        #[serde(default)]
        pub deny: Vec<String>,
        /// Workspaces whose `.agents/permissions.toml` may *allow* things (deny rules from
        /// any workspace always apply), while the file is the one trusted.
        #[serde(default)]
        pub trusted_workspaces: Vec<String>,
        /// Written by `agent trust`: the SHA-256 of each trusted rules file as the user
        /// trusted it, by the file's path.
        #[serde(default)]
        pub trusted_rules: std::collections::BTreeMap<String, String>,
    }

    #[derive(Debug, Default, Deserialize)]
    struct File {
        #[serde(default)]
        permissions: Section,
    }

    /// A workspace's `.agents/permissions.toml`.
    #[derive(Debug, Default, Deserialize)]
    #[serde(deny_unknown_fields)]
    struct WorkspaceFile {
        #[serde(default)]
        allow: Vec<String>,
        #[serde(default)]
        deny: Vec<String>,
    }

    /// The workspace rules file, relative to the workspace.
    pub const WORKSPACE_RULES: &str = ".agents/permissions.toml";
    /// The most a workspace rules file may hold; it is a few lines.
    pub const MAX_WORKSPACE_RULES_BYTES: u64 = 1024 * 1024;

    /// The `[permissions]` table; other tables are left to their owners.
    pub fn section(config_text: &str) -> Result<Section, String> {
        let file: File = toml::from_str(config_text).map_err(|e| format!("[permissions]: {e}"))?;
        Ok(file.permissions)
    }

    fn parse_all(
        texts: &[String],
        origin: &Origin,
        context: &RuleContext,
        known: &[&str],
    ) -> Result<Vec<Rule>, String> {
        texts
            .iter()
            .map(|t| Rule::parse(t, origin.clone(), context, known))
            .collect()
    }

    /// The user's rules from `[permissions]`.
    pub fn user_rules(
        section: &Section,
        config_path: &Path,
        context: &RuleContext,
        known: &[&str],
    ) -> Result<Rules, String> {
        let origin = Origin::UserConfig(config_path.to_path_buf());
        Ok(Rules {
            allow: parse_all(&section.allow, &origin, context, known)?,
            deny: parse_all(&section.deny, &origin, context, known)?,
        })
    }

    /// What the workspace's rules file says, and whether its allow rules count.
    #[derive(Debug, Default)]
    pub struct WorkspaceRules {
        pub path: PathBuf,
        pub rules: Rules,
        /// Allow rules left out because the file is not one the user trusted.
        pub ignored_allow: Vec<String>,
        pub exists: bool,
        pub trust: Trust,
    }

    /// The workspace's rules file, read once: the SHA-256 of its bytes and the rules
    /// parsed from those same bytes.
    #[derive(Debug)]
    pub struct WorkspaceFileRead {
        pub path: PathBuf,
        pub sha256: String,
        pub allow: Vec<Rule>,
        pub deny: Vec<Rule>,
    }

    /// Reads `<workspace>/.agents/permissions.toml` (at most
    /// [`MAX_WORKSPACE_RULES_BYTES`]), hashes it and parses it; `None` when there is none.
    pub fn read_workspace_file(
        context: &RuleContext,
        known: &[&str],
    ) -> Result<Option<WorkspaceFileRead>, String> {
        use std::io::Read as _;
        let path = context.workspace.join(WORKSPACE_RULES);
        let fail = |e: String| format!("{}: {e}", path.display());
        let file = match std::fs::File::open(&path) {
            Ok(file) => file,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(fail(e.to_string())),
        };
        let mut bytes = Vec::new();
        file.take(MAX_WORKSPACE_RULES_BYTES + 1)
            .read_to_end(&mut bytes)
            .map_err(|e| fail(e.to_string()))?;
        if bytes.len() as u64 > MAX_WORKSPACE_RULES_BYTES {
            return Err(fail(format!(
                "larger than {MAX_WORKSPACE_RULES_BYTES} bytes; a rules file is a few lines"
            )));
        }
        let sha256 = pack_format::sha256_hex(&bytes);
        let text = std::str::from_utf8(&bytes).map_err(|e| fail(e.to_string()))?;
        let file: WorkspaceFile = toml::from_str(text).map_err(|e| fail(e.to_string()))?;
        let origin = Origin::Workspace(path.clone());
        let deny = parse_all(&file.deny, &origin, context, known).map_err(fail)?;
        let allow = parse_all(&file.allow, &origin, context, known).map_err(fail)?;
        Ok(Some(WorkspaceFileRead {
            path,
            sha256,
            allow,
            deny,
        }))
    }

    /// The workspace's rules. Its deny rules always apply; its allow rules only while the
    /// file is byte for byte the one the user trusted (`agent trust`), since a cloned
    /// repository, a `git pull` or a sandboxed command must not be able to grant anything.
    pub fn workspace_rules(
        context: &RuleContext,
        section: &Section,
        known: &[&str],
    ) -> Result<WorkspaceRules, String> {
        let Some(file) = read_workspace_file(context, known)? else {
            return Ok(WorkspaceRules {
                path: context.workspace.join(WORKSPACE_RULES),
                ..Default::default()
            });
        };
        let trust = trust::trust_of(section, context, &file.sha256);
        let (allow, ignored_allow) = if trust.allows() {
            (file.allow, Vec::new())
        } else {
            (Vec::new(), file.allow.into_iter().map(|r| r.text).collect())
        };
        Ok(WorkspaceRules {
            path: file.path,
            rules: Rules {
                allow,
                deny: file.deny,
            },
            ignored_allow,
            exists: true,
            trust,
        })
    }
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
    fn wildcards() {
        let p = Pattern::new("git status*");
        assert!(p.matches("git status"));
        assert!(p.matches("git status --short"));
        assert!(!p.matches("git stash"));
        let p = Pattern::new("*.env");
        assert!(p.matches("/ws/.env") && !p.matches("/ws/.env.example"));
        let p = Pattern::new("a*b*c");
        assert!(p.matches("abc") && p.matches("a1b2c") && !p.matches("a1b2c3"));
        assert!(Pattern::new("*").matches(""));
        assert!(
            Pattern::new("exact").matches("exact") && !Pattern::new("exact").matches("exactly")
        );
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

    #[test]
    fn modes_order_from_narrow_to_wide() {
        assert!(PermissionMode::ReadOnly < PermissionMode::Workspace);
        assert!(PermissionMode::Workspace < PermissionMode::Full);
        assert_eq!("read-only".parse(), Ok(PermissionMode::ReadOnly));
        assert!(
            "rw".parse::<PermissionMode>()
                .unwrap_err()
                .contains("read-only")
        );
    }
}
