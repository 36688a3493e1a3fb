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
    /// The nearest directory at or above `cwd` holding `.git`; `None` outside a repository.
    pub worktree_root: Option<PathBuf>,
    /// The `[providers.<id>]` entry the session's model comes from (`env` when only the
    /// environment configured it); the block names the model as `provider/model`.
    pub provider: Option<String>,
    /// The user's language and locale, from the locale variables ([`Locale::from_env`]).
    pub locale: Locale,
}

/// The user's language and locale, as the locale variables give them.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Locale {
    /// The language code (`en`, `zh`); `None` when no locale names one (unset, `C`, `POSIX`).
    pub language: Option<String>,
    /// The locale as set (`en_US.UTF-8`); `None` when unset.
    pub locale: Option<String>,
}

impl Locale {
    /// The first non-empty of `LC_ALL`, `LC_MESSAGES` and `LANG`, the order in which they
    /// decide the language of messages.
    pub fn from_env(var: impl Fn(&str) -> Option<String>) -> Locale {
        let Some(locale) = ["LC_ALL", "LC_MESSAGES", "LANG"]
            .into_iter()
            .filter_map(&var)
            .map(|v| v.trim().to_string())
            .find(|v| !v.is_empty())
        else {
            return Locale::default();
        };
        let code = locale
            .split(['_', '.', '@', '-'])
            .next()
            .unwrap_or_default()
            .to_ascii_lowercase();
        let language =
            (code.len() >= 2 && code.len() <= 3 && code.bytes().all(|b| b.is_ascii_lowercase()))
                .then_some(code);
        Locale {
            language,
            locale: Some(locale),
        }
    }
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
            worktree_root: crate::instructions::worktree_root(cwd),
            provider: None,
            locale: Locale::from_env(|name| std::env::var(name).ok()),
        }
    }

    /// This environment with the session's provider id.
    pub fn with_provider(mut self, provider: &str) -> Environment {
        self.provider = Some(provider.to_string());
        self
    }

    pub fn is_windows(&self) -> bool {
        self.platform == "windows"
    }

    /// The `<env>` lines that follow the pack's heading, for a turn that runs `model`.
    pub fn block(&self, model: &str) -> String {
        let root = self.worktree_root.as_ref().map_or_else(
            || "none (not inside a Git repository)".to_string(),
            |root| root.display().to_string(),
        );
        let model = match &self.provider {
            Some(provider) => format!("{provider}/{model}"),
            None => model.to_string(),
        };
        format!(
            "<env>\nWorking directory: {}\nWorktree root: {root}\nGit repository: {}\nPlatform: {}\nShell: {}\nOS version: {}\nModel: {model}\nLanguage: {}\nLocale: {}\nDate: {}\nData directory: {}\n</env>",
            self.cwd.display(),
            if self.is_git_repo { "yes" } else { "no" },
            self.platform,
            self.shell,
            self.os_version,
            self.locale.language.as_deref().unwrap_or("unknown"),
            self.locale.locale.as_deref().unwrap_or("unset"),
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_locale_comes_from_the_first_variable_set() {
        let env = |pairs: &'static [(&'static str, &'static str)]| {
            move |name: &str| {
                pairs
                    .iter()
                    .find(|(n, _)| *n == name)
                    .map(|(_, v)| v.to_string())
            }
        };
        let zh = Locale::from_env(env(&[("LANG", "en_US.UTF-8"), ("LC_ALL", "zh_CN.UTF-8")]));
        assert_eq!(zh.language.as_deref(), Some("zh"));
        assert_eq!(zh.locale.as_deref(), Some("zh_CN.UTF-8"));
        let c = Locale::from_env(env(&[("LC_ALL", ""), ("LANG", "C")]));
        assert_eq!((c.language, c.locale.as_deref()), (None, Some("C")));
        assert_eq!(Locale::from_env(env(&[])), Locale::default());
    }
}
