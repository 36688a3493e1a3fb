//! Where a setting or rule came from, so every message can say.

use std::fmt;
use std::path::PathBuf;

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
