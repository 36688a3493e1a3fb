//! The binary's side of permissions: the flags, the defaults per kind of session, the
//! questions asked at the terminal, the sandbox launcher (`agent sandbox-exec`) and
//! `agent doctor`.

use std::ffi::OsString;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};

use agent_runtime::permissions::config::{self, Section, WORKSPACE_RULES};
use agent_runtime::permissions::trust::Trust;
use agent_runtime::permissions::{
    Answer, Approval, ApprovalRequest, Approver, Origin, PermissionMode, Permissions, RuleContext,
    Rules, SandboxSpec, Settings,
};
use agent_runtime::sandbox::{self, Probe, Sandbox};
use agent_runtime::tools::WebSettings;
use anyhow::Context as _;
use tokio::sync::watch;

/// `--permissions`, `--approval` and `--yolo`, shared by `agent` and `agent exec`.
#[derive(clap::Args, Debug, Default, Clone)]
pub struct PermissionArgs {
    /// How far the agent may reach without asking: read-only, workspace or full.
    #[arg(long, value_name = "MODE")]
    pub permissions: Option<PermissionMode>,
    /// What happens to a call outside the mode: ask (you decide each time) or never
    /// (refused, with the rule that refused it).
    #[arg(long, value_name = "POLICY")]
    pub approval: Option<Approval>,
    /// No sandbox, no questions: the agent may change or delete anything your user can,
    /// and reach any network. Deny rules still apply.
    #[arg(long, conflicts_with_all = ["permissions", "approval"])]
    pub yolo: bool,
}

/// Which kind of session, for the defaults.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// `agent`: a person answers questions.
    Interactive,
    /// `agent exec` and `agent init`: nobody may be there to answer.
    Unattended,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Interactive => "interactive sessions",
            Kind::Unattended => "`agent exec`",
        }
    }
}

/// What an entry point decided about permissions before any session starts.
#[derive(Debug, Clone)]
pub struct Choice {
    pub kind: Kind,
    pub args: PermissionArgs,
    pub approver: Option<Arc<dyn Approver>>,
}

impl Default for Choice {
    fn default() -> Self {
        Choice {
            kind: Kind::Unattended,
            args: PermissionArgs::default(),
            approver: None,
        }
    }
}

/// The sandbox this machine offers, probed once per process.
pub fn sandbox() -> &'static Sandbox {
    static SANDBOX: OnceLock<Sandbox> = OnceLock::new();
    SANDBOX.get_or_init(|| match std::env::current_exe() {
        Ok(exe) => Sandbox::detect(&exe),
        Err(e) => Sandbox::Unavailable {
            reason: format!("cannot find the agent binary to launch the sandbox: {e}"),
        },
    })
}

/// The user's home directory, for `~` in rules.
pub fn home() -> Option<PathBuf> {
    std::env::var_os("HOME")
        .filter(|h| !h.is_empty())
        .map(PathBuf::from)
}

/// Names rules may use: every built-in tool.
pub fn known_tools() -> Vec<&'static str> {
    agent_runtime::tools::registered().collect()
}

/// Mode and approval after flags, config and defaults, each with where it came from.
fn mode_and_approval(
    choice: &Choice,
    section: &Section,
    config_path: &Path,
) -> ((PermissionMode, Origin), (Approval, Origin)) {
    let args = &choice.args;
    if args.yolo {
        return (
            (PermissionMode::Full, Origin::Flag("--yolo")),
            (Approval::Never, Origin::Flag("--yolo")),
        );
    }
    let mode = match (args.permissions, section.mode) {
        (Some(mode), _) => (mode, Origin::Flag("--permissions")),
        (None, Some(mode)) => (mode, Origin::UserConfig(config_path.to_path_buf())),
        (None, None) => (
            PermissionMode::Workspace,
            Origin::Default(choice.kind.name()),
        ),
    };
    let approval = match (args.approval, choice.kind, section.approval) {
        (Some(approval), _, _) => (approval, Origin::Flag("--approval")),
        // `agent exec` never waits for an answer nobody may give; `--approval ask` is the
        // way to have one asked at the terminal.
        (None, Kind::Unattended, _) => (Approval::Never, Origin::Default(choice.kind.name())),
        (None, Kind::Interactive, Some(approval)) => {
            (approval, Origin::UserConfig(config_path.to_path_buf()))
        }
        (None, Kind::Interactive, None) => (Approval::Ask, Origin::Default(choice.kind.name())),
    };
    (mode, approval)
}

/// Temp directories commands and writes may use in `workspace` mode.
fn temp_dirs() -> Vec<PathBuf> {
    let mut dirs = vec![PathBuf::from("/tmp"), std::env::temp_dir()];
    dirs.retain(|d| d.is_dir());
    dirs.dedup();
    dirs
}

/// Everything permissions need for one session in `workspace`.
pub struct SessionSafety {
    pub permissions: Arc<Permissions>,
    /// Allow rules of the workspace's rules file that were left out, and why.
    pub ignored_allow: Vec<String>,
    pub trust: Trust,
    pub workspace_rules: Option<PathBuf>,
}

/// Builds the session's permissions. Fails on a config or workspace rules file that
/// cannot be read: its deny rules may matter.
pub fn session(
    choice: &Choice,
    config_text: &str,
    config_path: &Path,
    workspace: &Path,
) -> anyhow::Result<SessionSafety> {
    let section = config::section(config_text)
        .map_err(|e| anyhow::anyhow!("{}: {e}", config_path.display()))?;
    let context = RuleContext {
        workspace: workspace.to_path_buf(),
        home: home(),
    };
    let known = known_tools();
    let mut rules = config::user_rules(&section, config_path, &context, &known)
        .map_err(|e| anyhow::anyhow!("{} [permissions]: {e}", config_path.display()))?;
    let from_workspace = config::workspace_rules(&context, &section, &known)
        .map_err(|e| anyhow::anyhow!("workspace rules {e}; fix or remove the file"))?;
    let workspace_rules = from_workspace.exists.then(|| from_workspace.path.clone());
    rules.extend(from_workspace.rules);
    let ((mode, mode_origin), (approval, approval_origin)) =
        mode_and_approval(choice, &section, config_path);
    let mut writable = temp_dirs();
    writable.extend(section.writable_roots.iter().map(|r| context.expand(r)));
    let settings = Settings {
        mode,
        mode_origin,
        approval,
        approval_origin,
        network: section.network,
        writable,
        rules,
        protected: vec![workspace.join(WORKSPACE_RULES)],
    };
    // Under `never` the approver is never asked; it still tells the user what a rule let
    // through.
    let permissions = Permissions::new(
        workspace.to_path_buf(),
        settings,
        sandbox().clone(),
        choice.approver.clone(),
    );
    Ok(SessionSafety {
        permissions: Arc::new(permissions),
        ignored_allow: from_workspace.ignored_allow,
        trust: from_workspace.trust,
        workspace_rules,
    })
}

/// One line saying how this session runs, and the warnings the user must see once.
pub fn announce(safety: &SessionSafety, colour: bool) {
    let p = &safety.permissions;
    let s = &p.settings;
    let mut err = std::io::stderr().lock();
    let (bold, red, reset) = if colour {
        ("\x1b[1m", "\x1b[1;31m", "\x1b[0m")
    } else {
        ("", "", "")
    };
    if s.mode_origin == Origin::Flag("--yolo") {
        let _ = writeln!(
            err,
            "{red}--yolo: NO SANDBOX, NO QUESTIONS. The agent can change or delete anything your user account can and reach any network. Deny rules still apply.{reset}"
        );
        return;
    }
    let sandbox = match s.mode {
        PermissionMode::Full => "no sandbox (full)".to_string(),
        PermissionMode::ReadOnly | PermissionMode::Workspace => {
            let net = if s.network {
                "network on"
            } else {
                "network off"
            };
            if p.sandbox.confines_files() {
                format!("sandbox: {} · {net}", p.sandbox.describe())
            } else {
                "no sandbox".to_string()
            }
        }
    };
    let _ = writeln!(
        err,
        "{bold}permissions: {} · approval {} · {sandbox}{reset}",
        s.mode, s.approval
    );
    if s.mode != PermissionMode::Full && !p.sandbox.confines_files() {
        let _ = writeln!(
            err,
            "{red}warning: commands cannot be sandboxed here ({}); every bash call needs an allow rule or your approval{}{reset}",
            p.sandbox.describe(),
            if s.approval == Approval::Never {
                ", and approval is `never`, so they are refused"
            } else {
                ""
            }
        );
    } else if s.mode != PermissionMode::Full && !s.network && !p.sandbox.confines_network() {
        let _ = writeln!(
            err,
            "{red}warning: this kernel cannot switch the network off for commands ({}); each bash call needs approval unless `network = true` is set under [permissions]{reset}",
            p.sandbox.describe()
        );
    }
    if !safety.ignored_allow.is_empty()
        && let Some(path) = &safety.workspace_rules
        && let Some(why) = safety.trust.why_ignored()
    {
        let _ = writeln!(
            err,
            "note: {} allow rule(s) in {} ignored: {why}; review the file, then run `agent trust` to trust it as it is now (its deny rules apply)",
            safety.ignored_allow.len(),
            path.display()
        );
    }
}

/// Asks at the terminal: the exact command, diff or URL, then allow once, allow for the
/// session, or deny with a reason.
#[derive(Debug, Default)]
pub struct TerminalApprover {
    /// Stops the current step when the user presses Ctrl-C at a question.
    interrupt: Mutex<Option<watch::Sender<bool>>>,
}

impl TerminalApprover {
    /// The step that questions from now on belong to.
    pub fn arm(&self, interrupt: watch::Sender<bool>) {
        *self
            .interrupt
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(interrupt);
    }
}

impl Approver for TerminalApprover {
    fn ask(
        &self,
        request: ApprovalRequest,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = Answer> + Send + '_>> {
        Box::pin(async move {
            let answer = tokio::task::spawn_blocking(move || ask_at_terminal(&request))
                .await
                .unwrap_or_else(|e| (Answer::Deny(format!("the question failed: {e}")), false));
            let (answer, interrupted) = answer;
            if interrupted
                && let Some(stop) = self
                    .interrupt
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .as_ref()
            {
                let _ = stop.send(true);
            }
            answer
        })
    }

    fn tell(&self, note: &str) {
        eprintln!("  ⚑ {note}");
    }
}

/// The question itself; `true` with the answer when the user pressed Ctrl-C.
fn ask_at_terminal(request: &ApprovalRequest) -> (Answer, bool) {
    let mut err = std::io::stderr().lock();
    let _ = writeln!(
        err,
        "\n? {} needs your approval: {}",
        request.tool, request.why
    );
    match (&request.preview, request.tool.as_str()) {
        (Some(diff), _) => {
            for line in diff.lines() {
                let _ = writeln!(err, "  {line}");
            }
        }
        (None, "bash") => {
            let _ = writeln!(err, "  $ {}", request.subject);
        }
        (None, _) => {
            let _ = writeln!(err, "  {}", request.subject);
        }
    }
    if let Some(reason) = request.reason.as_deref().filter(|r| !r.trim().is_empty()) {
        let _ = writeln!(err, "  the model says: {}", reason.trim());
    }
    let _ = writeln!(
        err,
        "  [o] allow once · [s] allow for this session (`{}`) · [d] deny",
        request.session_rule
    );
    drop(err);
    // The question names the call, so a second one is not mistaken for the first.
    let short: String = match request.tool.as_str() {
        "write" | "edit" => Path::new(&request.subject)
            .file_name()
            .map_or(request.subject.clone(), |n| {
                n.to_string_lossy().into_owned()
            }),
        _ => {
            let mut short: String = request.subject.chars().take(40).collect();
            if short.len() < request.subject.len() {
                short.push('…');
            }
            short
        }
    };
    let question = format!("allow {} {short}? [o/s/d] › ", request.tool);
    let Ok(mut editor) = rustyline::DefaultEditor::new() else {
        return (Answer::Deny("no terminal to ask on".to_string()), false);
    };
    loop {
        match editor.readline(&question) {
            Ok(line) => match line.trim().to_lowercase().as_str() {
                "o" | "once" | "y" | "yes" => return (Answer::Once, false),
                "s" | "session" => return (Answer::Session, false),
                "d" | "deny" | "n" | "no" => {
                    let reason = editor
                        .readline("reason for the model (Enter for none) › ")
                        .unwrap_or_default();
                    return (Answer::Deny(reason), false);
                }
                _ => eprintln!("  type o, s or d"),
            },
            Err(rustyline::error::ReadlineError::Interrupted) => {
                return (
                    Answer::Deny("the user interrupted the run instead of answering".to_string()),
                    true,
                );
            }
            Err(_) => {
                return (
                    Answer::Deny("the question could not be answered (no input)".to_string()),
                    false,
                );
            }
        }
    }
}

/// `agent sandbox-exec`: restrict this process with Landlock, then become the command.
#[derive(clap::Args, Debug)]
pub struct SandboxExecArgs {
    /// Restrict a throwaway process and print what the kernel enforced, as JSON.
    #[arg(long)]
    probe: bool,
    /// A directory (or file) the command may write below; repeatable.
    #[arg(long = "write", value_name = "PATH")]
    write: Vec<PathBuf>,
    /// Let the command use the network.
    #[arg(long)]
    network: bool,
    /// The program and its arguments, after `--`.
    #[arg(last = true)]
    command: Vec<OsString>,
}

/// Runs the launcher. Returns only on failure: on success the process is the command.
pub fn sandbox_exec(args: SandboxExecArgs) -> std::process::ExitCode {
    if args.probe {
        let spec = SandboxSpec {
            writable: Vec::new(),
            network: true,
        };
        let probe = match crate::launcher::restrict_self(&spec) {
            Ok(enforced) => Probe {
                abi: enforced.abi,
                reason: None,
            },
            // Landlock, but too old to confine files: the host says so by the ABI.
            Err(e @ sandbox::SandboxError::NoFileConfinement { abi }) => Probe {
                abi,
                reason: Some(e.to_string()),
            },
            Err(
                e @ (sandbox::SandboxError::Unsupported(_)
                | sandbox::SandboxError::BadAbiMax(_)
                | sandbox::SandboxError::NoNetworkRules { .. }
                | sandbox::SandboxError::Ruleset(_)),
            ) => Probe {
                abi: 0,
                reason: Some(e.to_string()),
            },
        };
        let _ = writeln!(
            std::io::stdout(),
            "{}",
            serde_json::to_string(&probe).unwrap_or_default()
        );
        return std::process::ExitCode::SUCCESS;
    }
    let Some((program, rest)) = args.command.split_first() else {
        eprintln!("sandbox-exec: no command given after --");
        return std::process::ExitCode::from(sandbox::LAUNCH_FAILED as u8);
    };
    let spec = SandboxSpec {
        writable: args.write,
        network: args.network,
    };
    // A new session without a controlling terminal: the command cannot open `/dev/tty`,
    // so it cannot push keystrokes into the user's shell with TIOCSTI (CVE-2017-5226 in
    // bubblewrap), whatever the Landlock ABI. It also makes the command lead its own
    // process group, which is how a timeout kills the whole tree.
    #[cfg(target_os = "linux")]
    if let Err(e) = rustix::process::setsid() {
        eprintln!(
            "sandbox: cannot start a new session without the terminal (setsid: {e}; the launcher must not lead its process group); the command was not run"
        );
        return std::process::ExitCode::from(sandbox::LAUNCH_FAILED as u8);
    }
    if let Err(e) = crate::launcher::restrict_self(&spec) {
        // Never run the command unconfined when confinement was asked for.
        eprintln!("sandbox: {e}; the command was not run");
        return std::process::ExitCode::from(sandbox::LAUNCH_FAILED as u8);
    }
    #[cfg(unix)]
    {
        use std::os::unix::process::CommandExt as _;
        let e = std::process::Command::new(program).args(rest).exec();
        eprintln!("sandbox: cannot run {}: {e}", program.to_string_lossy());
        std::process::ExitCode::from(127)
    }
    #[cfg(not(unix))]
    {
        let _ = (program, rest);
        std::process::ExitCode::from(sandbox::LAUNCH_FAILED as u8)
    }
}

/// `agent doctor`: what this machine supports and what the agent will do here.
pub fn doctor(data_dir: &agent_runtime::data_dir::DataDir) -> anyhow::Result<()> {
    let config_path = data_dir.config_file();
    let config_text = crate::read_config(data_dir)?;
    let workspace = std::env::current_dir().context("reading the current directory")?;
    let mut out = String::new();
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|r| r.trim().to_string())
        .unwrap_or_else(|_| std::env::consts::OS.to_string());
    out.push_str(&format!("kernel: {kernel}\n"));
    let sandbox = sandbox();
    match sandbox {
        Sandbox::Landlock { abi, launcher } => {
            out.push_str(&format!(
                "sandbox: Landlock ABI {abi} (launcher {})\n",
                launcher.display()
            ));
            if let Some(max) = std::env::var(sandbox::ABI_MAX_ENV)
                .ok()
                .filter(|m| !m.trim().is_empty())
            {
                out.push_str(&format!(
                    "  lowered by {}={max}: the agent acts as on a kernel offering at most ABI {max} (a testing knob; it never raises the ABI)\n",
                    sandbox::ABI_MAX_ENV
                ));
            }
            if sandbox.confines_files() {
                out.push_str(&format!(
                    "  file confinement: yes (ABI {}+)\n",
                    sandbox::MIN_FILE_ABI
                ));
            } else {
                out.push_str(&format!(
                    "  file confinement: no: truncate(2) is not mediated before ABI {}, so commands below `full` need an allow rule or approval\n",
                    sandbox::MIN_FILE_ABI
                ));
            }
            for (level, adds) in sandbox::ABI_LEVELS {
                let here = if *abi >= level { "yes" } else { "no " };
                out.push_str(&format!("  {here} ABI {level}: {adds}\n"));
            }
            out.push_str("  UDP and other socket families: not filtered by Landlock\n");
        }
        Sandbox::Unavailable { reason } => {
            out.push_str(&format!(
                "sandbox: none ({reason})\n  commands below `full` need an allow rule or approval\n"
            ));
        }
    }
    out.push_str("seccomp: not used\n");
    for (kind, label) in [
        (Kind::Interactive, "interactive (`agent`)"),
        (Kind::Unattended, "unattended (`agent exec`)"),
    ] {
        let choice = Choice {
            kind,
            ..Default::default()
        };
        let safety = session(&choice, &config_text, &config_path, &workspace)?;
        let s = &safety.permissions.settings;
        out.push_str(&format!(
            "{label}: {} ({}) · approval {} ({})\n",
            s.mode, s.mode_origin, s.approval, s.approval_origin
        ));
        if kind == Kind::Unattended {
            let roots: Vec<String> = safety
                .permissions
                .writable_roots()
                .iter()
                .map(|r| r.display().to_string())
                .collect();
            out.push_str(&format!(
                "writable in workspace mode: {}\n",
                roots.join(", ")
            ));
            out.push_str(&format!(
                "network for commands and web_fetch below full: {}\n",
                if s.network { "on" } else { "off" }
            ));
            describe_rules(&mut out, &s.rules);
            match (&safety.workspace_rules, safety.trust.why_ignored()) {
                (Some(path), Some(why)) if !safety.ignored_allow.is_empty() => {
                    out.push_str(&format!(
                        "workspace rules: {} ({} allow rule(s) ignored: {why}; `agent trust` trusts it as it is now)\n",
                        path.display(),
                        safety.ignored_allow.len()
                    ))
                }
                (Some(path), None) => out.push_str(&format!(
                    "workspace rules: {} (trusted as it is; its allow rules count)\n",
                    path.display()
                )),
                (Some(path), Some(_)) => {
                    out.push_str(&format!("workspace rules: {}\n", path.display()))
                }
                (None, _) => out.push_str(&format!(
                    "workspace rules: none ({} does not exist)\n",
                    workspace.join(WORKSPACE_RULES).display()
                )),
            }
        }
    }
    let web = WebSettings::parse(&config_text)
        .map_err(|e| anyhow::anyhow!("{}: {e}", config_path.display()))?;
    out.push_str(&format!(
        "web_fetch: at most {} bytes, {} s, {} redirects; non-public addresses refused{}\n",
        web.max_bytes,
        web.timeout.as_secs(),
        web.max_redirects,
        if web.allow_private.is_empty() {
            String::new()
        } else {
            format!(" except {} listed block(s)", web.allow_private.len())
        }
    ));
    out.push_str("web_search: not available (no search provider is built in)\n");
    doctor_model_and_packs(&mut out, data_dir, &config_text);
    std::io::stdout().write_all(out.as_bytes())?;
    Ok(())
}

/// `agent doctor`'s model and prompt-pack lines: what `agent exec` would call and where its
/// prompts would come from, or everything missing, with the fix.
fn doctor_model_and_packs(
    out: &mut String,
    data_dir: &agent_runtime::data_dir::DataDir,
    config_text: &str,
) {
    use agent_runtime::provider::{ProviderOverrides, ProviderSettings};
    match ProviderSettings::resolve(config_text, &ProviderOverrides::default(), |name| {
        std::env::var(name).ok()
    }) {
        Ok(settings) => out.push_str(&format!(
            "model: {} at {} ({} API, provider {}{}); `agent exec` fails at once if nothing listens there\n",
            settings.model,
            settings.base_url,
            settings.api,
            settings.id,
            if settings.api_key.is_some() {
                ", API key set"
            } else {
                ", no API key"
            }
        )),
        Err(reason) => out.push_str(&format!("model: not configured: {reason}\n")),
    }
    let config_path = data_dir.config_file();
    match agent_runtime::packs::client_config(data_dir, config_text) {
        Err(e) => out.push_str(&format!(
            "prompt packs: the built-in pack serves; [updates] cannot be used: {}\n",
            pack_protocol::error_text::report(&e)
        )),
        Ok(config) => match &config.server {
            None => out.push_str(&format!(
                "prompt packs: the built-in pack serves; updates off (no [updates] server in {})\n",
                config_path.display()
            )),
            Some(server) => {
                out.push_str(&format!(
                    "prompt packs: pack {} from {server}, channel {}; auto-update {}, watch {}{}\n",
                    config.pack,
                    config.channel,
                    if config.auto_update { "on" } else { "off" },
                    if config.auto_update && config.watch {
                        "on"
                    } else {
                        "off"
                    },
                    config
                        .pin
                        .as_ref()
                        .map_or(String::new(), |pin| format!(", pinned to {pin}"))
                ));
                if config.trusted_keys.is_empty() {
                    out.push_str(&format!(
                        "  trusted keys: none, so every channel document is refused: add the publisher's signing.pub to `trusted_keys` under [updates] in {}\n",
                        config_path.display()
                    ));
                } else {
                    out.push_str(&format!(
                        "  trusted keys: {}\n",
                        config.trusted_keys.ids().join(", ")
                    ));
                }
                if config.content_keys.is_empty() {
                    out.push_str(&format!(
                        "  content keys: none, so no pack opens: add the publisher's content.key to `content_keys` under [updates] in {}\n",
                        config_path.display()
                    ));
                } else {
                    out.push_str(&format!(
                        "  content keys: {}\n",
                        config.content_keys.ids().join(", ")
                    ));
                }
                out.push_str(
                    "  `agent packs status` shows what serves and how the last refresh went\n",
                );
            }
        },
    }
}

/// `/permissions`: how this session runs and what was allowed in it so far.
pub fn describe_session(p: &Permissions) -> String {
    let s = &p.settings;
    let mut out = format!(
        "mode {} ({}) · approval {} ({})\n{}\nnetwork below full: {}\n",
        s.mode,
        s.mode_origin,
        s.approval,
        s.approval_origin,
        p.sandbox.describe(),
        if s.network { "on" } else { "off" }
    );
    let roots: Vec<String> = p
        .writable_roots()
        .iter()
        .map(|r| r.display().to_string())
        .collect();
    out.push_str(&format!(
        "writable in workspace mode: {}\n",
        roots.join(", ")
    ));
    describe_rules(&mut out, &s.rules);
    let granted = p.granted();
    if granted.is_empty() {
        out.push_str("allowed for this session: nothing yet\n");
    }
    for rule in granted {
        out.push_str(&format!(
            "allowed for this session: `{}` ({})\n",
            rule.text, rule.origin
        ));
    }
    out
}

fn describe_rules(out: &mut String, rules: &Rules) {
    if rules.is_empty() {
        out.push_str("rules: none\n");
        return;
    }
    for (kind, list) in [("deny", &rules.deny), ("allow", &rules.allow)] {
        for rule in list {
            out.push_str(&format!("{kind} `{}` ({})\n", rule.text, rule.origin));
        }
    }
}
