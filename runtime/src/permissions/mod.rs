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
//! Rules are `TOOL` or `TOOL: PATTERN`, where `*` matches any text (prompt-assembly's
//! `wildcard`, the grammar `tools` lists read MCP tools with): `bash: git status*`,
//! `write: ~/notes/*`, `web_fetch: https://docs.rs/*`, `mcp__time`. Among matching rules
//! of one kind the most specific (the most literal characters) is the one named.
//!
//! A helper agent runs with its parent's policy narrowed by its own ceiling, so it never
//! has more than its parent. A workspace's own rules file allows only while it is the file
//! the user trusted ([`trust`]).
//!
//! One idea per file: `access` (what a call touches), `rules` (parsing and matching),
//! `shell` (commands as rules see them), `modes` (what each mode covers), `protected`
//! (files no mode lets the agent change), `sandbox_spec` (what a sandboxed command may
//! do), `approvals` (the approval policy and the question asked), `policy` (the session's
//! permissions and the check), [`config`] (the `[permissions]` table and the workspace's
//! rules file) and [`trust`].

mod access;
mod approvals;
pub mod config;
mod modes;
mod origin;
mod policy;
mod protected;
mod rules;
mod sandbox_spec;
mod shell;
pub mod trust;

pub use access::Access;
pub use approvals::{Answer, Approval, ApprovalRequest, Approver};
pub use origin::Origin;
pub use policy::{Permissions, Policy, Settings};
pub use prompt_assembly::paths::{normalise, real_path};
pub use prompt_assembly::permission_mode::PermissionMode;
pub use rules::{Rule, RuleContext, Rules};
pub use sandbox_spec::{Permit, SandboxSpec};
pub use shell::simple_command;
