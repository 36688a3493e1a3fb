//! `[mcp_servers.<name>]` tables of config.toml.
//!
//! ```toml
//! [mcp_servers.time]                 # a server the agent starts (stdio)
//! command = "mcp-server-time"
//! args = ["--local-timezone", "UTC"]
//! env = { TZ = "UTC" }               # added to the agent's own environment
//! cwd = "/srv/tools"                 # optional; default: the session's workspace
//!
//! [mcp_servers.docs]                 # a server that is already running (streamable HTTP)
//! url = "http://127.0.0.1:3001/mcp"
//! headers = { "X-Team" = "core" }
//! bearer_token_env = "DOCS_TOKEN"    # optional: sent as `Authorization: Bearer …`
//!
//! # Either kind:
//! startup_timeout_secs = 20          # connect, handshake and list tools (default 20)
//! tool_timeout_secs = 120            # one tool call (default 120)
//! enabled = true                     # false keeps the table but starts nothing
//! enabled_tools = ["get_current_time"]   # offer only these (default: all)
//! disabled_tools = ["convert_time"]      # never offer these
//! ```
//!
//! A server name is letters, digits, `-` and `_`, without `__` (the separator of the
//! `mcp__<server>__<tool>` names the model sees).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;

/// Connect, initialise and list tools within this long unless the table says otherwise.
pub const DEFAULT_STARTUP_TIMEOUT: Duration = Duration::from_secs(20);
/// One tool call within this long unless the table says otherwise.
pub const DEFAULT_TOOL_TIMEOUT: Duration = Duration::from_secs(120);

#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Entry {
    command: Option<String>,
    #[serde(default)]
    args: Vec<String>,
    #[serde(default)]
    env: BTreeMap<String, String>,
    cwd: Option<PathBuf>,
    url: Option<String>,
    #[serde(default)]
    headers: BTreeMap<String, String>,
    bearer_token_env: Option<String>,
    startup_timeout_secs: Option<u64>,
    tool_timeout_secs: Option<u64>,
    enabled: Option<bool>,
    enabled_tools: Option<Vec<String>>,
    #[serde(default)]
    disabled_tools: Vec<String>,
}

/// How to reach a server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Transport {
    /// A child process speaking JSON-RPC on stdin/stdout.
    Stdio {
        command: String,
        args: Vec<String>,
        env: BTreeMap<String, String>,
        cwd: Option<PathBuf>,
    },
    /// A streamable HTTP endpoint.
    Http {
        url: String,
        headers: BTreeMap<String, String>,
        /// The variable holding a bearer token, read when the server is started.
        bearer_token_env: Option<String>,
    },
}

/// One configured server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct McpServerConfig {
    pub name: String,
    pub transport: Transport,
    pub startup_timeout: Duration,
    pub tool_timeout: Duration,
    pub enabled: bool,
    /// Offer only these of the server's tools; `None` offers all.
    pub enabled_tools: Option<Vec<String>>,
    pub disabled_tools: Vec<String>,
}

impl McpServerConfig {
    /// Whether the server's tool `name` (its own name, not the `mcp__` one) is offered.
    pub fn offers(&self, name: &str) -> bool {
        self.enabled_tools
            .as_ref()
            .is_none_or(|only| only.iter().any(|t| t == name))
            && !self.disabled_tools.iter().any(|t| t == name)
    }

    /// `stdio: command args…` or `http: url`, for listings.
    pub fn describe(&self) -> String {
        match &self.transport {
            Transport::Stdio { command, args, .. } => {
                let mut text = format!("stdio: {command}");
                for arg in args {
                    text.push(' ');
                    text.push_str(arg);
                }
                text
            }
            Transport::Http { url, .. } => format!("http: {url}"),
        }
    }
}

/// Whether `name` can name a server: non-empty, `[A-Za-z0-9_-]`, no `__`.
fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && !name.contains("__")
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

/// Checks the tables, in name order. The error names the table and the field.
pub(crate) fn parse(entries: BTreeMap<String, Entry>) -> Result<Vec<McpServerConfig>, String> {
    let mut servers = Vec::with_capacity(entries.len());
    for (name, entry) in entries {
        let at = format!("[mcp_servers.{name}]");
        if !valid_name(&name) {
            return Err(format!(
                "{at}: a server name is letters, digits, `-` and `_`, without `__`"
            ));
        }
        let transport = match (entry.command, entry.url) {
            (Some(_), Some(_)) => {
                return Err(format!(
                    "{at}: set `command` (a server the agent starts) or `url` (one already running), not both"
                ));
            }
            (None, None) => {
                return Err(format!(
                    "{at}: set `command` (a server the agent starts) or `url` (one already running)"
                ));
            }
            (Some(command), None) => {
                if command.trim().is_empty() {
                    return Err(format!("{at}: `command` is empty"));
                }
                if !entry.headers.is_empty() || entry.bearer_token_env.is_some() {
                    return Err(format!(
                        "{at}: `headers` and `bearer_token_env` are for `url` servers; a `command` server gets `env`"
                    ));
                }
                Transport::Stdio {
                    command,
                    args: entry.args,
                    env: entry.env,
                    cwd: entry.cwd,
                }
            }
            (None, Some(url)) => {
                if !(url.starts_with("http://") || url.starts_with("https://")) {
                    return Err(format!(
                        "{at}: `url` must start with http:// or https://, found {url:?}"
                    ));
                }
                if !entry.args.is_empty() || !entry.env.is_empty() || entry.cwd.is_some() {
                    return Err(format!(
                        "{at}: `args`, `env` and `cwd` are for `command` servers; a `url` server gets `headers`"
                    ));
                }
                for header in entry.headers.keys() {
                    if http::HeaderName::from_bytes(header.as_bytes()).is_err() {
                        return Err(format!("{at}: {header:?} is not a valid header name"));
                    }
                }
                Transport::Http {
                    url,
                    headers: entry.headers,
                    bearer_token_env: entry.bearer_token_env,
                }
            }
        };
        let secs = |value: Option<u64>, default: Duration, field: &str| match value {
            None => Ok(default),
            Some(0) => Err(format!("{at}: `{field}` must be at least 1")),
            Some(n) => Ok(Duration::from_secs(n)),
        };
        servers.push(McpServerConfig {
            startup_timeout: secs(
                entry.startup_timeout_secs,
                DEFAULT_STARTUP_TIMEOUT,
                "startup_timeout_secs",
            )?,
            tool_timeout: secs(
                entry.tool_timeout_secs,
                DEFAULT_TOOL_TIMEOUT,
                "tool_timeout_secs",
            )?,
            name,
            transport,
            enabled: entry.enabled.unwrap_or(true),
            enabled_tools: entry.enabled_tools,
            disabled_tools: entry.disabled_tools,
        });
    }
    Ok(servers)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_text(text: &str) -> Result<Vec<McpServerConfig>, String> {
        #[derive(Deserialize)]
        struct File {
            mcp_servers: BTreeMap<String, Entry>,
        }
        let file: File = toml::from_str(text).map_err(|e| e.to_string())?;
        parse(file.mcp_servers)
    }

    #[test]
    fn both_kinds_and_their_defaults() {
        let servers = parse_text(
            r#"
            [mcp_servers.time]
            command = "mcp-server-time"
            args = ["--local-timezone", "UTC"]
            tool_timeout_secs = 5
            [mcp_servers.docs]
            url = "http://127.0.0.1:3001/mcp"
            headers = { "X-Team" = "core" }
            enabled = false
            "#,
        )
        .unwrap();
        assert_eq!(servers[0].name, "docs");
        assert!(!servers[0].enabled);
        assert_eq!(servers[0].describe(), "http: http://127.0.0.1:3001/mcp");
        assert_eq!(servers[1].tool_timeout, Duration::from_secs(5));
        assert_eq!(servers[1].startup_timeout, DEFAULT_STARTUP_TIMEOUT);
        assert_eq!(
            servers[1].describe(),
            "stdio: mcp-server-time --local-timezone UTC"
        );
    }

    #[test]
    fn mistakes_name_the_table() {
        for (text, expected) in [
            (
                "[mcp_servers.a]\nargs = []",
                "[mcp_servers.a]: set `command`",
            ),
            (
                "[mcp_servers.a]\ncommand = \"x\"\nurl = \"http://x\"",
                "not both",
            ),
            ("[mcp_servers.a__b]\ncommand = \"x\"", "without `__`"),
            ("[mcp_servers.a]\nurl = \"ftp://x\"", "must start with http"),
            (
                "[mcp_servers.a]\ncommand = \"x\"\nheaders = { A = \"b\" }",
                "are for `url` servers",
            ),
            (
                "[mcp_servers.a]\ncommand = \"x\"\ntool_timeout_secs = 0",
                "`tool_timeout_secs` must be at least 1",
            ),
            (
                "[mcp_servers.a]\ncommand = \"x\"\ncomand = 1",
                "unknown field",
            ),
        ] {
            let err = parse_text(text).unwrap_err();
            assert!(err.contains(expected), "{text}: {err}");
        }
    }

    #[test]
    fn tool_filters() {
        let servers = parse_text(
            "[mcp_servers.a]\ncommand = \"x\"\nenabled_tools = [\"t1\", \"t2\"]\ndisabled_tools = [\"t2\"]",
        )
        .unwrap();
        assert!(servers[0].offers("t1"));
        assert!(!servers[0].offers("t2"));
        assert!(!servers[0].offers("t3"));
    }
}
