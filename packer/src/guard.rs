//! `packer guard freeze|rollback`: stop a channel's rollout with the guard key, the key the
//! channel's offline-signed document delegates stopping to. The guard signs a guard document
//! (it carries the offline-signed document it restricts, and may only hold a rollout's
//! percentage or send an entry's clients back to what it replaced); resuming takes the
//! offline signing key (`packer release --resume`).

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use pack_format::channel::format_time;
use pack_format::guard::{GuardAction, Stop, check_live, guard_document};
use pack_format::keys::SIGNING_PUB_FILE;
use pack_format::{
    ChannelDocument, EntryTarget, Guard, Limits, SigningKey, TrustedKeys, sha256_hex, validate_name,
};
use pack_protocol::paths;
use reqwest::StatusCode;
use semver::VersionReq;
use serde_json::{Value, json};
use time::OffsetDateTime;

use crate::fsio::read_limited;
use crate::keys::password;
use crate::live::fetch_live;
use crate::remote::model::{PublishRequest, PublishResponse};
use crate::remote::{Remote, ServerArgs, ServerError};
use crate::{print_json, shown};

/// The guard's secret key, as `packer keygen --guard` names it.
pub const GUARD_KEY_FILE: &str = "guard.key";
/// The guard's public key, the file `packer release --guard-key` takes.
pub const GUARD_PUB_FILE: &str = "guard.pub";

const GUARD_HELP: &str = "\
Fetches the live document of CHANNEL, checks it against the trusted offline key (--keys DIR
with signing.pub, or --trusted-key FILE), and signs with the guard key a guard document that
restricts the offline-signed document (the live one, or the one the live guard document
already restricts):

  freeze    holds the entry's rollout at the percentage its ramp has reached now; the
            schedule stops there. The salt stays, so the installs already in stay in.
  rollback  sends the entry's clients to what the entry replaces: the next entry for the
            same clients without a rollout, or the built-in pack.

The entry is --entry N (as `packer status` numbers them, from 0) or --clients RANGE (the
entry with a rollout for exactly that range). The document is verified the way clients verify
it before it is published, so a key the channel does not delegate to, or a change a guard may
not make, is refused here and nothing is published. Only the offline signing key resumes a
frozen rollout or releases anything new: `packer release CHANNEL --resume RANGE`.

The token (publish scope) comes from --token-file or PROMPTPACK_TOKEN; a password-protected
guard key reads its password from --password-file or PROMPTPACK_KEY_PASSWORD.

Examples:
  packer guard freeze stable --server URL --guard-key guard/guard.key --keys keys --clients '*'
  packer guard rollback stable --server URL --guard-key guard/guard.key --trusted-key signing.pub --entry 0";

/// What to do to the entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ActionArg {
    /// Hold the rollout at its percentage of now.
    Freeze,
    /// Send the entry's clients to what it replaces.
    Rollback,
}

impl From<ActionArg> for GuardAction {
    fn from(action: ActionArg) -> GuardAction {
        match action {
            ActionArg::Freeze => GuardAction::Freeze,
            ActionArg::Rollback => GuardAction::Rollback,
        }
    }
}

#[derive(clap::Args)]
#[command(
    after_help = "Run with --help for what each action does, and examples.",
    after_long_help = GUARD_HELP
)]
pub struct GuardArgs {
    /// freeze or rollback.
    #[arg(value_enum, value_name = "ACTION")]
    action: ActionArg,

    /// Channel name, e.g. stable.
    #[arg(value_name = "CHANNEL")]
    channel: String,

    #[command(flatten)]
    server: ServerArgs,

    /// The guard's secret key (guard.key from `packer keygen --guard`).
    #[arg(long = "guard-key", value_name = "FILE")]
    guard_key: PathBuf,

    /// Key directory holding signing.pub, the offline key the live document must verify
    /// against (signing.key is not needed).
    #[arg(long, value_name = "DIR")]
    keys: Option<PathBuf>,

    /// A public key the offline-signed document may be signed with. Repeatable.
    #[arg(long = "trusted-key", value_name = "FILE")]
    trusted_keys: Vec<PathBuf>,

    /// The entry to act on, numbered from 0 as `packer status` shows them.
    #[arg(
        long,
        value_name = "N",
        required_unless_present = "clients",
        conflicts_with = "clients"
    )]
    entry: Option<usize>,

    /// The entry with a rollout for exactly this range of client releases.
    #[arg(long, value_name = "RANGE")]
    clients: Option<String>,

    /// File whose first line is the guard key's password.
    #[arg(long, value_name = "FILE")]
    password_file: Option<PathBuf>,
}

pub fn run(args: &GuardArgs, json: bool) -> Result<()> {
    validate_name("channel", &args.channel).context("CHANNEL")?;
    let clients = args
        .clients
        .as_deref()
        .map(|text| {
            VersionReq::parse(text.trim()).with_context(|| {
                format!(
                    "--clients {text:?}: expected a semver range of client releases such as '*' or '>=1.4.0, <1.5.0'"
                )
            })
        })
        .transpose()?;
    let trusted = trusted_keys(args)?;

    let remote = Remote::new(&args.server, true)?;
    remote
        .check_publish_token()
        .context("the token was refused before anything was signed or published")?;
    let key = guard_key(&args.guard_key, args.password_file.as_deref())?;
    if trusted.ids().contains(&key.key_id().as_str()) {
        bail!(
            "--guard-key {} is key {}, which is trusted as the offline signing key; a guard \
             key is a separate key (`packer keygen --guard`). Nothing was published",
            shown(&args.guard_key),
            key.key_id()
        );
    }

    let now = OffsetDateTime::now_utc()
        .replace_nanosecond(0)
        .unwrap_or_else(|_| OffsetDateTime::now_utc());
    let Some(live) = fetch_live(&remote, &args.channel, &trusted)? else {
        bail!(
            "channel {} does not exist on {}: there is nothing to stop",
            args.channel,
            remote.base()
        );
    };
    let current = live.document();
    let entry = match (args.entry, &clients) {
        (Some(entry), _) => entry,
        (None, Some(range)) => current
            .entries
            .iter()
            .position(|e| e.clients == *range && e.rollout.is_some())
            .with_context(|| {
                format!(
                    "channel {} has no rollout for clients {range}: {}",
                    args.channel,
                    rollouts_there(current)
                )
            })?,
        (None, None) => bail!("give --entry N or --clients RANGE"),
    };
    let action = GuardAction::from(args.action);
    let base = live.base();
    let document = guard_document(&base, current, entry, action, now).with_context(|| {
        format!(
            "cannot {action} channel {}: nothing was published",
            args.channel
        )
    })?;
    let signed = document.sign(&key)?;
    // Checked as clients check it before anything leaves: the offline key signed what it
    // restricts and delegates to this key, the change is a guard's, and it keeps every stop
    // the live guard document made.
    let verified = pack_format::channel::verify(
        &signed.document,
        &signed.signature,
        &trusted,
        now,
        &Limits::DEFAULT,
    )
    .and_then(|verified| check_live(&verified, &live.verified.document).map(|()| verified))
    .with_context(|| {
        format!(
            "the guard document signed with {} ({}) would be refused by clients; nothing was published",
            shown(&args.guard_key),
            key.key_id()
        )
    })?;
    let restricts = verified
        .base
        .as_ref()
        .map_or(0, |base| base.document.sequence);

    let body = PublishRequest {
        document: String::from_utf8(signed.document.clone())
            .context("the signed document is not UTF-8 text")?,
        signature: signed.signature.clone(),
    };
    let answer = match remote.put_json::<PublishResponse>(&paths::channel(&args.channel), &body) {
        Ok(answer) => answer,
        Err(error) => {
            if let Some(server) = error.downcast_ref::<ServerError>()
                && server.status == StatusCode::CONFLICT
            {
                return Err(error.context(format!(
                    "channel {} changed after this run read sequence {}; nothing was published. \
                     Re-run the same command to act on the new document",
                    args.channel, current.sequence
                )));
            }
            return Err(error);
        }
    };

    let base_doc = live.base_document();
    let changes = guard_changes(&document, base_doc);
    let change = changes.iter().find(|c| c.entry == entry);
    let clients = &base_doc.entries[entry].clients;
    let undo = change.map_or_else(String::new, |c| c.undo(&document.channel));
    if json {
        print_json(&json!({
            "server": remote.base(),
            "channel": document.channel,
            "action": action.to_string(),
            "entry": entry,
            "clients": clients.to_string(),
            "sequence": document.sequence,
            "previous_sequence": current.sequence,
            "restricts_sequence": restricts,
            "issued_at": format_time(document.issued_at),
            "expires_at": format_time(document.expires_at),
            "sha256": sha256_hex(&signed.document),
            "key_id": key.key_id(),
            "created": answer.created,
            "change": change.map(GuardChange::to_json),
            "undo": undo,
            "entries": crate::live::entries_json(&verified.document.entries, now),
        }));
    } else {
        if let Some(change) = change {
            outln!("{}", change.text());
        }
        outln!(
            "published {} sequence {} on {}, restricting sequence {restricts}",
            answer.channel.channel,
            answer.channel.sequence,
            remote.base()
        );
        outln!("signed by {} (guard key)", answer.channel.key_id);
        if !undo.is_empty() {
            outln!("{undo}");
        }
    }
    Ok(())
}

/// The offline keys the live document must verify against: `--keys DIR/signing.pub` and
/// every `--trusted-key`.
fn trusted_keys(args: &GuardArgs) -> Result<TrustedKeys> {
    let mut trusted = TrustedKeys::new();
    if let Some(dir) = &args.keys {
        let public = dir.join(SIGNING_PUB_FILE);
        trusted.add_file(&public).with_context(|| {
            format!(
                "--keys {}: the offline key's signing.pub is read from there",
                shown(dir)
            )
        })?;
    }
    for path in &args.trusted_keys {
        trusted.add_file(path)?;
    }
    if trusted.is_empty() {
        bail!(
            "no trusted key: give --keys DIR (with signing.pub) or --trusted-key FILE, the \
             offline key the channel's documents are signed with"
        );
    }
    Ok(trusted)
}

/// The guard's secret key, decrypted with the password when it has one.
fn guard_key(path: &Path, password_file: Option<&Path>) -> Result<SigningKey> {
    let password = password(password_file)?;
    SigningKey::load(path, password.as_deref().map(String::as_str)).with_context(|| {
        format!(
            "--guard-key {}: the guard's secret key ({GUARD_KEY_FILE} from `packer keygen \
             --guard`; {GUARD_PUB_FILE} is the public half the channel names)",
            shown(path)
        )
    })
}

/// The guard entry for the public key file at `path` (a minisign `.pub`).
pub(crate) fn read_guard_pub(path: &Path) -> Result<Guard> {
    let bytes = read_limited(path, 8 * 1024, "guard public key")?;
    let text = String::from_utf8(bytes)
        .map_err(|_| anyhow::anyhow!("{}: not a minisign public key file", shown(path)))?;
    let key = text
        .lines()
        .map(str::trim)
        .find(|line| !line.is_empty() && !line.starts_with("untrusted comment:"))
        .with_context(|| format!("{}: no key line in it", shown(path)))?;
    let guard = Guard {
        key: key.to_string(),
    };
    guard.public_key().with_context(|| {
        format!(
            "{}: expected a minisign public key file ({GUARD_PUB_FILE} from `packer keygen --guard`)",
            shown(path)
        )
    })?;
    Ok(guard)
}

/// The key id of a channel's guard, or why it is not a key.
pub(crate) fn guard_id(guard: &Guard) -> String {
    guard
        .key_id()
        .unwrap_or_else(|e| format!("(unreadable: {e})"))
}

/// `entry 0 (clients *): rollout 10%` for each rollout of `doc`, or that there is none.
fn rollouts_there(doc: &ChannelDocument) -> String {
    let rollouts: Vec<String> = doc
        .entries
        .iter()
        .enumerate()
        .filter_map(|(i, e)| {
            e.rollout
                .as_ref()
                .map(|r| format!("entry {i} (clients {}) at {}%", e.clients, r.percent))
        })
        .collect();
    if rollouts.is_empty() {
        "it has no rollouts".to_string()
    } else {
        format!("its rollouts are {}", rollouts.join(", "))
    }
}

/// What a stop order does to one entry of the document it restricts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct GuardChange {
    pub entry: usize,
    pub clients: VersionReq,
    pub kind: ChangeKind,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ChangeKind {
    /// The rollout is held at `percent` (its ramp, if any, stopped); the installs above it
    /// go to `to`.
    Freeze {
        percent: u8,
        target: EntryTarget,
        to: String,
    },
    /// The entry's installs were sent from `from` to `to`.
    Rollback { from: EntryTarget, to: String },
}

impl GuardChange {
    pub fn text(&self) -> String {
        let GuardChange { entry, clients, .. } = self;
        match &self.kind {
            ChangeKind::Freeze {
                percent,
                target,
                to,
            } => format!(
                "froze entry {entry} (clients {clients}): {} held at {percent}%, the installs above it to {to}",
                target_name(target)
            ),
            ChangeKind::Rollback { from, to } => format!(
                "rolled back entry {entry} (clients {clients}): {} -> {to}",
                target_name(from)
            ),
        }
    }

    /// What undoes the stop, with the signing key: a freeze resumes where it stood; after a
    /// rollback there is no rollout to resume, so the rollout starts again.
    pub fn undo(&self, channel: &str) -> String {
        let clients = &self.clients;
        match &self.kind {
            ChangeKind::Freeze { .. } => format!(
                "resuming takes the signing key: packer release {channel} --resume '{clients}'"
            ),
            ChangeKind::Rollback {
                from: EntryTarget::Pack(pack),
                ..
            } => format!(
                "starting again takes the signing key: packer release {channel} --ramp '{clients}={}@1%..100%/72h'",
                pack.version
            ),
            ChangeKind::Rollback {
                from: EntryTarget::Builtin,
                ..
            } => format!(
                "undoing it takes the signing key: packer release {channel} --pin '{clients}=VERSION'"
            ),
        }
    }

    pub fn to_json(&self) -> Value {
        let mut value = json!({
            "entry": self.entry,
            "clients": self.clients.to_string(),
        });
        match &self.kind {
            ChangeKind::Freeze {
                percent,
                target,
                to,
            } => {
                value["action"] = json!("freeze");
                value["percent"] = json!(percent);
                value["target"] = json!(target_name(target));
                value["to"] = json!(to);
            }
            ChangeKind::Rollback { from, to } => {
                value["action"] = json!("rollback");
                value["from"] = json!(target_name(from));
                value["to"] = json!(to);
            }
        }
        value
    }
}

/// `1.3.0` or `builtin`.
pub(crate) fn target_name(target: &EntryTarget) -> String {
    match target {
        EntryTarget::Pack(pack) => pack.version.to_string(),
        EntryTarget::Builtin => "builtin".to_string(),
    }
}

/// Where the installs a stop takes out of entry `i` of `base` go
/// ([`ChannelDocument::fallback`]), for humans: a version or `builtin` when it is the same
/// for every release of the entry's range, else the rule.
pub(crate) fn fallback_name(base: &ChannelDocument, i: usize) -> String {
    match base.range_fallback(i) {
        Some(target) => target_name(target),
        None => {
            "each release's next entry without a rollout (builtin where there is none)".to_string()
        }
    }
}

/// Every stop of the stop order `order` on the document it restricts, `base`.
pub(crate) fn guard_changes(order: &ChannelDocument, base: &ChannelDocument) -> Vec<GuardChange> {
    let Some(restricts) = &order.restricts else {
        return Vec::new();
    };
    restricts
        .stops
        .iter()
        .filter_map(|stop| {
            let entry = stop.entry();
            let b = base.entries.get(entry)?;
            let to = fallback_name(base, entry);
            let kind = match *stop {
                Stop::Hold { percent, .. } => ChangeKind::Freeze {
                    percent,
                    target: b.target.clone(),
                    to,
                },
                Stop::Revert { .. } => ChangeKind::Rollback {
                    from: b.target.clone(),
                    to,
                },
            };
            Some(GuardChange {
                entry,
                clients: b.clients.clone(),
                kind,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use pack_format::{ChannelEntry, PackRef, Rollout};

    fn pack(version: &str) -> EntryTarget {
        EntryTarget::Pack(PackRef {
            version: semver::Version::parse(version).unwrap(),
            sha256: "a".repeat(64),
            size: 1,
            schema: 1,
        })
    }

    #[test]
    fn changes_name_the_frozen_and_the_rolled_back_entries() {
        let now = OffsetDateTime::now_utc();
        let entry = |range: &str, target: EntryTarget, percent: Option<u8>| ChannelEntry {
            clients: VersionReq::parse(range).unwrap(),
            target,
            rollout: percent.map(|p| Rollout::fixed(p, "s")),
        };
        let base = ChannelDocument {
            format: 1,
            channel: "stable".into(),
            pack: "p".into(),
            sequence: 4,
            issued_at: now,
            expires_at: now + time::Duration::days(1),
            entries: vec![
                entry("^1.4", pack("1.3.0"), Some(25)),
                entry("^1.5", pack("1.3.0"), Some(25)),
                entry("*", pack("1.2.0"), None),
            ],
            guard: None,
            restricts: None,
        };
        let mut order = base.clone();
        order.entries.clear();
        order.restricts = Some(pack_format::Restricts {
            document: String::new(),
            signature: String::new(),
            stops: vec![
                Stop::Hold {
                    entry: 0,
                    percent: 5,
                },
                Stop::Revert { entry: 1 },
            ],
        });
        let changes = guard_changes(&order, &base);
        let texts: Vec<String> = changes.iter().map(GuardChange::text).collect();
        assert_eq!(
            texts,
            [
                "froze entry 0 (clients ^1.4): 1.3.0 held at 5%, the installs above it to 1.2.0",
                "rolled back entry 1 (clients ^1.5): 1.3.0 -> 1.2.0",
            ]
        );
        assert!(guard_changes(&base, &base).is_empty());
    }
}
