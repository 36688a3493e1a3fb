//! The environment block: facts about the machine, gathered once per session, and the
//! model of the turn (which `/model`, an agent's own `model` or a helper's can change, so
//! the block names the one the request goes to). Tests build an [`Environment`] by hand so
//! rendered prompts are deterministic.

use std::path::{Path, PathBuf};

use serde::Serialize;

/// What the environment block reports.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Environment {
    pub cwd: PathBuf,
    pub is_git_repo: bool,
    pub platform: String,
    pub shell: String,
    pub os_version: String,
    /// `YYYY-MM-DD`.
    pub date: String,
    pub data_dir: PathBuf,
}

impl Environment {
    /// Looks at the real machine.
    pub fn detect(cwd: &Path, data_dir: &Path) -> Environment {
        let shell = std::env::var("SHELL")
            .or_else(|_| std::env::var("COMSPEC"))
            .unwrap_or_else(|_| "unknown".to_string());
        let date = time::OffsetDateTime::now_utc().date();
        Environment {
            cwd: cwd.to_path_buf(),
            is_git_repo: cwd.ancestors().any(|dir| dir.join(".git").exists()),
            platform: std::env::consts::OS.to_string(),
            shell,
            os_version: os_version(),
            date: format!(
                "{:04}-{:02}-{:02}",
                date.year(),
                u8::from(date.month()),
                date.day()
            ),
            data_dir: data_dir.to_path_buf(),
        }
    }

    pub fn is_windows(&self) -> bool {
        self.platform == "windows"
    }

    /// The `<env>` lines that follow the pack's heading, for a turn that runs `model`.
    pub fn block(&self, model: &str) -> String {
        format!(
            "<env>\nWorking directory: {}\nGit repository: {}\nPlatform: {}\nShell: {}\nOS version: {}\nModel: {}\nDate: {}\nData directory: {}\n</env>",
            self.cwd.display(),
            if self.is_git_repo { "yes" } else { "no" },
            self.platform,
            self.shell,
            self.os_version,
            model,
            self.date,
            self.data_dir.display(),
        )
    }
}

/// A human-readable OS version without spawning a process (a turn must stay cheap).
fn os_version() -> String {
    if cfg!(target_os = "linux") {
        let pretty = std::fs::read_to_string("/etc/os-release")
            .ok()
            .and_then(|text| {
                text.lines()
                    .find_map(|l| l.strip_prefix("PRETTY_NAME="))
                    .map(|v| v.trim_matches('"').to_string())
            });
        let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
            .ok()
            .map(|k| k.trim().to_string());
        return match (pretty, kernel) {
            (Some(p), Some(k)) => format!("{p} (kernel {k})"),
            (Some(p), None) => p,
            (None, Some(k)) => format!("Linux {k}"),
            (None, None) => "Linux".to_string(),
        };
    }
    format!("{} {}", std::env::consts::OS, std::env::consts::ARCH)
}
