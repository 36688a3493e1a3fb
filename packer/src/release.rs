//! `packer release`: fetch a channel's live document from packd, change its entries (pin,
//! staged rollout, rollback, remove), sign the next sequence and publish it.

use std::io::{BufRead, IsTerminal, Write};
use std::path::PathBuf;

use anyhow::{Context, Result, bail};
use pack_format::channel::{CHANNEL_FORMAT, MAX_SEQUENCE, format_time};
use pack_format::keys::SIGNING_PUB_FILE;
use pack_format::{
    ChannelDocument, ChannelEntry, ContentKeyRing, EntryTarget, Guard, Limits, PackRef, Ramp,
    Rollout, Stop, TrustedKeys, Watch, WatchAction, sha256_hex, validate_name,
};
use pack_protocol::{OutcomeCounts, OutcomeRates, paths};
use reqwest::StatusCode;
use semver::{Version, VersionReq};
use serde_json::json;
use time::{Duration, OffsetDateTime};

use crate::channel::{describe, parse_expires};
use crate::check::open_entry_as_client;
use crate::guard::{guard_id, read_guard_pub};
use crate::keys::{content_key_ring, signing_key};
use crate::live::{LiveChannel, fetch_live};
use crate::remote::model::{
    ChannelList, PackList, PackRecord, PackVersions, PublishRequest, PublishResponse,
};
use crate::remote::{Remote, ServerArgs, ServerError};
use crate::{ContentKeyArgs, print_json};

const RELEASE_HELP: &str = "\
Fetches the live document of CHANNEL, checks its signature against KEYS/signing.pub (and
any --trusted-key), applies the changes below, signs the result as sequence = live + 1 and
publishes it. A channel that does not exist yet starts empty (sequence 1) and needs
--new-channel and --pack NAME: without --new-channel a channel name that is not on the server
is refused, with the names that are. Every VERSION must already be on the server (`packer
publish`) under the channel's pack name; its SHA-256, size and schema come from the server's
pack list.

Before anything is shown or signed, the token is checked against the server, and every pack
version the new document names that the live one does not is downloaded and checked the way
a client checks it before installing: its SHA-256, its header against the entry (name,
version, schema), decryption with the content keys in KEYS (KEYS/content.key and any
--content-key), every file against its index, and the templates against the contract of its
schema. A pack clients would refuse is not released: nothing is signed or published. packd
keeps that upload under its version (a version never changes there, released or not), so
publish the fix under the next version. --no-verify skips the download and the check (with a
warning), for a release that must go out without the content key at hand.

Changes are combinable and repeatable, applied in this order: --resume, --remove, --rollback,
--pin, --rollout, --ramp (each in the order given). RANGE is a semver range of client releases: '*',
'>=1.4.0, <1.5.0', '^1.2'. A bare version is a caret range: '1.4' means '^1.4' (>=1.4.0,
<2.0.0); for 1.4.x only write '~1.4'. Ranges are compared by meaning ('>=1.4, <1.5' =
'>=1.4,<1.5').

  --pin 'RANGE=VERSION'
      Clients in RANGE get VERSION: replaces the range's entry, or adds one before the
      catch-all '*'. A staged rollout of the same range to the same VERSION is finished
      (removed).
  --rollout 'RANGE=VERSION@PERCENT'
      Stage VERSION to PERCENT (0-100) of the installs in RANGE: an entry just before the
      range's own entry, so the other installs keep what they have. Changing PERCENT for the
      same VERSION keeps the salt: raising only adds installs, lowering only takes some out.
      Finish it with --pin.
  --ramp 'RANGE=VERSION@1%..100%/72h' | 'RANGE=VERSION@1,5,25,100%/24h'
      A rollout whose percentage grows on a schedule signed now, placed and salted like
      --rollout: from 1% now in a straight line to 100% 72 hours later (whole percents,
      rounded down), or 1% now, then 5%, 25% and 100%, one step every 24 hours. Durations
      are s, m, h or d. Every client reads the schedule with its own clock; nothing is
      signed while it runs. The document must not expire before the ramp ends: without
      --expires the expiry is at least the ramp's end plus the usual validity; an --expires
      before the end is refused.
  --resume 'RANGE'
      When the live document is a guard document that froze RANGE's ramp (`packer guard
      freeze`): put the ramp back, shifted so that it continues from the frozen percentage
      now, with its salt and watch.
  --guard-key FILE | --no-guard
      Name the guard key (the guard.pub of `packer keygen --guard`): the key trusted to
      freeze or roll back this channel's rollouts, and nothing else. Without either option
      the new document keeps the live one's guard key; --no-guard removes it.
  --guard-watch tool_error_rate,fallback_rate  [--on-regression freeze|rollback]
      What the guard compares, between the rolling-out pack and the one it replaces, while
      this run's --ramp and --rollout entries run, and what it does when one is worse
      (default freeze). Needs a guard key on the channel.
  --rollback 'RANGE=VERSION' | 'RANGE=builtin'
      Emergency: every entry of RANGE (rollouts included) becomes one entry pointing at
      VERSION, or at the pack compiled into the client.
  --remove 'RANGE'
      Drop every entry of RANGE.
  --expires 30d | 12h | 2026-01-31T00:00:00Z
      Validity of the new document. Default: as long as the live one was valid for, or 30d
      for a new channel (longer when a ramp runs past that, see --ramp).

Shows the old and new entries (- gone, + new) and asks before publishing; --yes skips the
question and is required when stdin is not a terminal. If someone else releases between
the fetch and the publish, nothing is published: re-run the command. Sequences stop at
9007199254740991 (2^53 - 1, docs/FORMAT.md): a channel there takes no further document, and
the command says so instead of wrapping around. The token (publish
scope) comes from --token-file or PROMPTPACK_TOKEN; a password-protected signing key reads
its password from --password-file or PROMPTPACK_KEY_PASSWORD.

Examples:
  packer release stable --server URL --keys keys --pack prompts --pin '*=1.1.0'
  packer release stable --server URL --keys keys --rollout '>=1.4.0, <1.5.0=1.2.0@10'
  packer release stable --server URL --keys keys --rollout '>=1.4.0, <1.5.0=1.2.0@50'
  packer release stable --server URL --keys keys --guard-key guard/guard.pub \
      --ramp '>=1.4.0, <1.5.0=1.2.0@1,5,25,100%/24h' --guard-watch tool_error_rate,fallback_rate
  packer release stable --server URL --keys keys --resume '>=1.4.0, <1.5.0'
  packer release stable --server URL --keys keys --pin '>=1.4.0, <1.5.0=1.2.0'
  packer release stable --server URL --keys keys --rollback '>=1.4.0, <1.5.0=builtin'";

#[derive(clap::Args)]
#[command(
    after_help = "Run with --help for what each change does, and examples.",
    after_long_help = RELEASE_HELP
)]
pub struct ReleaseArgs {
    /// Channel name, e.g. stable.
    #[arg(value_name = "CHANNEL")]
    channel: String,

    #[command(flatten)]
    server: ServerArgs,

    /// Key directory holding signing.key (and signing.pub, trusted for the live document)
    /// and content.key, which opens the packs the release newly names.
    #[arg(long, value_name = "DIR")]
    keys: PathBuf,

    #[command(flatten)]
    extra_keys: ContentKeyArgs,

    /// Another public key the live document may be signed with (after a key rotation).
    #[arg(long = "trusted-key", value_name = "FILE")]
    trusted_keys: Vec<PathBuf>,

    /// Pack name of the channel; needed only with --new-channel.
    #[arg(long = "pack", value_name = "NAME")]
    pack: Option<String>,

    /// Create CHANNEL when it does not exist on the server. Without it, a channel name the
    /// server does not have is refused (a typo would otherwise start a new channel).
    #[arg(long)]
    new_channel: bool,

    /// Release without downloading and checking the packs the new document names (clients
    /// still check them, and refuse a pack that does not open or fit the contract).
    #[arg(long)]
    no_verify: bool,

    /// Pin: clients in RANGE get VERSION ('RANGE=VERSION').
    #[arg(long = "pin", value_name = "RANGE=VERSION")]
    pins: Vec<String>,

    /// Staged rollout of VERSION to PERCENT of RANGE ('RANGE=VERSION@PERCENT').
    #[arg(long = "rollout", value_name = "RANGE=VERSION@PERCENT")]
    rollouts: Vec<String>,

    /// Staged rollout on a schedule starting now ('RANGE=VERSION@1%..100%/72h' or
    /// 'RANGE=VERSION@1,5,25,100%/24h').
    #[arg(long = "ramp", value_name = "RANGE=VERSION@SCHEDULE")]
    ramps: Vec<String>,

    /// Continue the ramp of RANGE that the live guard document froze, from the frozen
    /// percentage.
    #[arg(long = "resume", value_name = "RANGE")]
    resumes: Vec<String>,

    /// What the guard compares while this run's --ramp and --rollout entries run, as a comma
    /// list (tool_error_rate,fallback_rate).
    #[arg(long = "guard-watch", value_name = "METRICS")]
    guard_watch: Option<String>,

    /// What the guard does when a watched metric regresses (default: freeze).
    #[arg(
        long = "on-regression",
        value_enum,
        value_name = "ACTION",
        requires = "guard_watch"
    )]
    on_regression: Option<OnRegression>,

    /// The guard's public key file (guard.pub): the channel delegates stopping its rollouts
    /// to it. Without it the live document's guard key is kept.
    #[arg(long = "guard-key", value_name = "FILE", conflicts_with = "no_guard")]
    guard_key: Option<PathBuf>,

    /// Remove the channel's guard key.
    #[arg(long, conflicts_with = "guard_watch")]
    no_guard: bool,

    /// Replace every entry of RANGE with VERSION or 'builtin' ('RANGE=VERSION|builtin').
    #[arg(long = "rollback", value_name = "RANGE=VERSION|builtin")]
    rollbacks: Vec<String>,

    /// Drop every entry of RANGE.
    #[arg(long = "remove", value_name = "RANGE")]
    removes: Vec<String>,

    /// Expiry: a duration from now (30d, 12h) or an RFC 3339 time.
    #[arg(long, value_name = "DURATION_OR_RFC3339")]
    expires: Option<String>,

    /// Publish without asking.
    #[arg(long, short = 'y')]
    yes: bool,

    /// File whose first line is the signing key's password.
    #[arg(long, value_name = "FILE")]
    password_file: Option<PathBuf>,
}

/// What the guard does when a watched metric regresses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum OnRegression {
    Freeze,
    Rollback,
}

impl From<OnRegression> for WatchAction {
    fn from(action: OnRegression) -> WatchAction {
        match action {
            OnRegression::Freeze => WatchAction::Freeze,
            OnRegression::Rollback => WatchAction::Rollback,
        }
    }
}

/// What an operation points clients at, before it is looked up on the server.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Wanted {
    Version(Version),
    Builtin,
}

pub fn run(args: &ReleaseArgs, json: bool) -> Result<()> {
    validate_name("channel", &args.channel).context("CHANNEL")?;
    if args.pins.is_empty()
        && args.rollouts.is_empty()
        && args.ramps.is_empty()
        && args.resumes.is_empty()
        && args.rollbacks.is_empty()
        && args.removes.is_empty()
        && args.expires.is_none()
        && args.guard_key.is_none()
        && !args.no_guard
    {
        bail!(
            "nothing to release: give at least one of --pin, --rollout, --ramp, --resume, --rollback, --remove, --guard-key, --no-guard or --expires (see `packer release --help`)"
        );
    }
    // Parse everything before touching the network or the key.
    let removes = args
        .removes
        .iter()
        .map(|spec| parse_range(spec).with_context(|| format!("--remove {spec:?}")))
        .collect::<Result<Vec<_>>>()?;
    let rollbacks = args
        .rollbacks
        .iter()
        .map(|spec| parse_target(spec, true).with_context(|| format!("--rollback {spec:?}")))
        .collect::<Result<Vec<_>>>()?;
    let pins = args
        .pins
        .iter()
        .map(|spec| parse_target(spec, false).with_context(|| format!("--pin {spec:?}")))
        .collect::<Result<Vec<_>>>()?;
    let rollouts = args
        .rollouts
        .iter()
        .map(|spec| parse_rollout(spec).with_context(|| format!("--rollout {spec:?}")))
        .collect::<Result<Vec<_>>>()?;
    let ramps = args
        .ramps
        .iter()
        .map(|spec| parse_ramp(spec).with_context(|| format!("--ramp {spec:?}")))
        .collect::<Result<Vec<_>>>()?;
    let resumes = args
        .resumes
        .iter()
        .map(|spec| parse_range(spec).with_context(|| format!("--resume {spec:?}")))
        .collect::<Result<Vec<_>>>()?;
    let watch = match &args.guard_watch {
        Some(metrics) => {
            if rollouts.is_empty() && ramps.is_empty() {
                bail!(
                    "--guard-watch sets what the guard watches on this run's --ramp and --rollout \
                     entries; give one (for a rollout already running, repeat its --ramp or \
                     --rollout)"
                );
            }
            let action = args.on_regression.unwrap_or(OnRegression::Freeze).into();
            Some(parse_watch(metrics, action).context("--guard-watch")?)
        }
        None => None,
    };
    let named_guard = args
        .guard_key
        .as_deref()
        .map(|path| read_guard_pub(path).context("--guard-key"))
        .transpose()?;

    let remote = Remote::new(&args.server, true)?;
    remote
        .check_publish_token()
        .context("the token was refused before anything was signed or published")?;
    let key = signing_key(&args.keys, args.password_file.as_deref())?;
    let mut trusted = TrustedKeys::new();
    let signing_pub = args.keys.join(SIGNING_PUB_FILE);
    if signing_pub.exists() {
        trusted.add_file(&signing_pub)?;
    }
    trusted.add_signing_key(&key);
    for path in &args.trusted_keys {
        trusted.add_file(path)?;
    }
    if let Some(guard) = &named_guard {
        let id = guard_id(guard);
        if trusted.ids().contains(&id.as_str()) {
            bail!(
                "--guard-key: key {id} is trusted as a signing key; the guard key is a separate \
                 key that may only stop rollouts (`packer keygen --guard --dir DIR` makes one). \
                 Nothing was signed or published"
            );
        }
    }

    let now = OffsetDateTime::now_utc()
        .replace_nanosecond(0)
        .unwrap_or_else(|_| OffsetDateTime::now_utc());
    let live_channel = fetch_live(&remote, &args.channel, &trusted)?;
    let live = live_channel.as_ref().map(LiveChannel::document);
    match (live, args.new_channel) {
        (None, false) => return Err(unknown_channel(&remote, &args.channel)),
        (Some(live), true) => bail!(
            "--new-channel: channel {} already exists on {} (pack {}, sequence {}); drop \
             --new-channel to release on it. Nothing was signed or published",
            args.channel,
            remote.base(),
            live.pack,
            live.sequence
        ),
        (None, true) | (Some(_), false) => {}
    }
    let (pack, pack_from) = match (live, &args.pack) {
        (Some(live), Some(pack)) if live.pack != *pack => bail!(
            "channel {} on {} is for pack {:?}, not {pack:?}; drop --pack or pick another channel",
            args.channel,
            remote.base(),
            live.pack
        ),
        (Some(live), _) => (live.pack.clone(), PackFrom::Live),
        (None, Some(pack)) => {
            validate_name("pack", pack).context("--pack")?;
            (pack.clone(), PackFrom::Option)
        }
        (None, None) => bail!(
            "channel {} does not exist on {} yet: give --pack NAME, the pack it serves, to create it",
            args.channel,
            remote.base()
        ),
    };

    let needs_versions = rollbacks
        .iter()
        .chain(&pins)
        .any(|(_, w)| matches!(w, Wanted::Version(_)))
        || !rollouts.is_empty()
        || !ramps.is_empty();
    let versions = if needs_versions {
        remote
            .get_json_opt::<PackVersions>(&paths::pack(&pack))?
            .map(|p| p.versions)
            .unwrap_or_default()
    } else {
        Vec::new()
    };
    let lookup = |wanted: &Wanted| -> Result<EntryTarget> {
        match wanted {
            Wanted::Builtin => Ok(EntryTarget::Builtin),
            Wanted::Version(version) => pack_ref(&versions, version)
                .map(EntryTarget::Pack)
                .ok_or_else(|| {
                    not_on_server(&remote, &versions, &pack, version, &args.channel, pack_from)
                }),
        }
    };

    let guard = match (&named_guard, args.no_guard) {
        (Some(guard), _) => Some(guard.clone()),
        (None, true) => None,
        (None, false) => live.and_then(|l| l.guard.clone()),
    };
    if watch.is_some() && guard.is_none() {
        bail!(
            "--guard-watch: channel {} names no guard key, so nothing would watch the rollout; \
             name one with --guard-key FILE (the guard.pub of `packer keygen --guard --dir \
             DIR`). Nothing was signed or published",
            args.channel
        );
    }

    let mut resumed = Vec::new();
    for range in &resumes {
        let Some(live) = &live_channel else {
            bail!(
                "--resume {range}: channel {} has no live document",
                args.channel
            );
        };
        resumed.push(
            resume(live, range, now)
                .with_context(|| format!("--resume {range}: nothing was signed or published"))?,
        );
    }
    let old_entries = live.map(|l| kept_entries(l, &[])).unwrap_or_default();
    let mut entries = live.map(|l| kept_entries(l, &resumed)).unwrap_or_default();
    for (range, spec) in removes.iter().zip(&args.removes) {
        let before = entries.len();
        entries.retain(|e| e.clients != *range);
        if entries.len() == before {
            bail!(
                "--remove {spec:?}: channel {} has no entry for clients {range}",
                args.channel
            );
        }
    }
    for (range, wanted) in &rollbacks {
        rollback(&mut entries, range, lookup(wanted)?);
    }
    for (range, wanted) in &pins {
        pin(&mut entries, range, lookup(wanted)?);
    }
    for (range, version, percent) in &rollouts {
        let EntryTarget::Pack(target) = lookup(&Wanted::Version(version.clone()))? else {
            unreachable!("a version always looks up to a pack")
        };
        let staged = Staged {
            percent: *percent,
            ramp: None,
            watch: watch.clone(),
        };
        rollout(&mut entries, range, target, staged, &pack);
    }
    for (range, version, percent, ramp) in &ramps {
        let EntryTarget::Pack(target) = lookup(&Wanted::Version(version.clone()))? else {
            unreachable!("a version always looks up to a pack")
        };
        let staged = Staged {
            percent: *percent,
            ramp: Some(Ramp {
                start: now,
                ..ramp.clone()
            }),
            watch: watch.clone(),
        };
        rollout(&mut entries, range, target, staged, &pack);
    }

    // The validity to repeat is the offline-signed document's: a guard document only
    // inherits its expiry.
    let signed_live = live_channel.as_ref().map(LiveChannel::base_document);
    let expires_at = expiry(args.expires.as_deref(), signed_live, &entries, now)?;
    let sequence = next_sequence(&args.channel, remote.base(), live)?;
    let document = ChannelDocument {
        format: CHANNEL_FORMAT,
        channel: args.channel.clone(),
        pack: pack.clone(),
        sequence,
        issued_at: now,
        expires_at,
        entries,
        guard,
        // Signed with the offline key, the document replaces any guard document.
        restricts: None,
    };

    let checked = check_newly_named(args, &remote, &pack, &old_entries, &document.entries)
        .with_context(|| {
            format!(
                "not releasing channel {}: nothing was signed or published",
                args.channel
            )
        })?;

    eprint!(
        "{}",
        diff(
            &args.channel,
            remote.base(),
            live,
            &document,
            &old_entries,
            now
        )
    );
    if !args.yes {
        confirm(&args.channel, sequence, remote.base())?;
    }

    let signed = document.sign(&key)?;
    pack_format::channel::verify(
        &signed.document,
        &signed.signature,
        &trusted,
        now,
        &Limits::DEFAULT,
    )
    .context("the freshly signed document does not verify")?;
    let text = String::from_utf8(signed.document.clone())
        .context("the signed document is not UTF-8 text")?;
    let body = PublishRequest {
        document: text,
        signature: signed.signature.clone(),
    };
    let answer = match remote.put_json::<PublishResponse>(&paths::channel(&args.channel), &body) {
        Ok(answer) => answer,
        Err(error) => {
            if let Some(server) = error.downcast_ref::<ServerError>()
                && server.status == StatusCode::CONFLICT
            {
                return Err(error.context(format!(
                    "someone else released channel {} after this run read sequence {}; nothing \
                     was published. Re-run the same command to apply the change on top of theirs",
                    args.channel,
                    sequence - 1
                )));
            }
            return Err(error);
        }
    };

    if json {
        print_json(&json!({
            "server": remote.base(),
            "channel": document.channel,
            "pack": document.pack,
            "sequence": document.sequence,
            "previous_sequence": live.map(|l| l.sequence),
            "issued_at": format_time(document.issued_at),
            "expires_at": format_time(document.expires_at),
            "sha256": sha256_hex(&signed.document),
            "key_id": key.key_id(),
            "created": answer.created,
            "guard": document.guard.as_ref().map(|g| json!({ "key_id": guard_id(g), "key": g.key })),
            "entries": crate::live::entries_json(&document.entries, now),
            "checked": checked.iter().map(|r| r.version.to_string()).collect::<Vec<_>>(),
            "no_verify": args.no_verify,
        }));
    } else {
        outln!(
            "released  {} sequence {} on {}",
            answer.channel.channel,
            answer.channel.sequence,
            remote.base()
        );
        outln!("expires   {}", answer.channel.expires_at);
        outln!("sha256    {}", answer.channel.sha256);
        outln!("signed by {}", answer.channel.key_id);
        if let Some(guard) = &document.guard {
            outln!("guard key {} (may freeze or roll back)", guard_id(guard));
        }
    }
    Ok(())
}

/// The new document's expiry: `--expires`, or the live document's usual validity from now
/// (30 days for a new channel). A ramp must end before the document expires, since clients
/// stop reading an expired document: without `--expires` the expiry moves to at least the
/// last ramp's end plus that validity; an `--expires` before it is refused.
fn expiry(
    expires: Option<&str>,
    live: Option<&ChannelDocument>,
    entries: &[ChannelEntry],
    now: OffsetDateTime,
) -> Result<OffsetDateTime> {
    let last_ramp = last_ramp_end(entries);
    if let Some(text) = expires {
        let expires_at = parse_expires(text, now)?;
        if let Some((end, entry)) = last_ramp
            && end > expires_at
        {
            // Whole days, rounded up.
            let days = ((end - now).whole_seconds() + 86_399) / 86_400;
            bail!(
                "the ramp of clients {} ends at {}, after the document expires ({}): clients \
                 stop following an expired document, so the ramp would not finish. Give a \
                 longer --expires, at least {days}d (or drop it: the expiry is then the ramp's \
                 end plus the usual validity). Nothing was signed or published",
                entry.clients,
                format_time(end),
                format_time(expires_at)
            );
        }
        return Ok(expires_at);
    }
    let validity = live.map_or(Duration::days(30), usual_validity);
    let usual = now
        .checked_add(validity)
        .context("the live document's validity is too long to repeat; give --expires")?;
    let Some((end, _)) = last_ramp else {
        return Ok(usual);
    };
    let after_ramp = end
        .checked_add(validity)
        .context("the ramp ends too far in the future; give --expires")?;
    Ok(usual.max(after_ramp))
}

/// The end of the ramp that ends last among `entries`, with its entry.
fn last_ramp_end(entries: &[ChannelEntry]) -> Option<(OffsetDateTime, &ChannelEntry)> {
    entries
        .iter()
        .filter_map(|e| {
            let ramp = e.rollout.as_ref()?.ramp.as_ref()?;
            Some((ramp.end(), e))
        })
        .max_by_key(|(end, _)| *end)
}

/// How long `live` was valid for, at least an hour. When it was signed with a ramp still to
/// run, only the time from the ramp's end to the expiry counts (if that is an hour or more):
/// otherwise every release during a ramp would repeat a validity already stretched by it.
fn usual_validity(live: &ChannelDocument) -> Duration {
    let whole = live.expires_at - live.issued_at;
    let after_ramp = last_ramp_end(&live.entries)
        .filter(|(end, _)| *end > live.issued_at)
        .map(|(end, _)| live.expires_at - end)
        .filter(|after| *after >= Duration::hours(1));
    after_ramp
        .map_or(whole, |after| after.min(whole))
        .max(Duration::hours(1))
}

/// The entries of `live` as a document signed with the offline key keeps the stops of a live
/// stop order: a held rollout fixed at its held percentage (its ramp stopped; salt and watch
/// kept), a reverted entry with a rollout dropped (its installs go to the entries under it, as
/// the publisher sees in the summary), a reverted entry without one sent to the built-in pack.
/// `resumed` puts back the rollouts `--resume` continues.
fn kept_entries(live: &ChannelDocument, resumed: &[(usize, Rollout)]) -> Vec<ChannelEntry> {
    let stop_for = |i| live.restricts.as_ref().and_then(|r| r.stop_for(i));
    live.entries
        .iter()
        .enumerate()
        .filter_map(|(i, entry)| {
            if let Some((_, rollout)) = resumed.iter().find(|(j, _)| *j == i) {
                return Some(ChannelEntry {
                    rollout: Some(rollout.clone()),
                    ..entry.clone()
                });
            }
            match (stop_for(i), &entry.rollout) {
                (None, _) => Some(entry.clone()),
                (Some(Stop::Hold { percent, .. }), Some(rollout)) => Some(ChannelEntry {
                    rollout: Some(Rollout {
                        watch: rollout.watch.clone(),
                        ..Rollout::fixed(*percent, rollout.salt.clone())
                    }),
                    ..entry.clone()
                }),
                (Some(Stop::Revert { .. }), Some(_)) => None,
                (Some(Stop::Hold { .. } | Stop::Revert { .. }), None) => Some(ChannelEntry {
                    target: EntryTarget::Builtin,
                    ..entry.clone()
                }),
            }
        })
        .collect()
}

/// The ramp of `range` that the live stop order holds, shifted so it continues from the held
/// percentage now: its new start is the old start plus the time it stood frozen. Salt and
/// watch stay. Returns the entry's index (in the offline-signed document) and the rollout.
fn resume(live: &LiveChannel, range: &VersionReq, now: OffsetDateTime) -> Result<(usize, Rollout)> {
    let current = live.document();
    let (Some(_), Some(restricts)) = (&live.verified.base, &current.restricts) else {
        bail!(
            "the live document (sequence {}) is signed with the offline key, not a stop order \
             of the guard: no guard froze anything. To change a rollout, give --ramp or --rollout",
            current.sequence
        );
    };
    let base = live.base_document();
    let Some(i) = base
        .entries
        .iter()
        .position(|e| e.clients == *range && e.rollout.is_some())
    else {
        bail!(
            "sequence {} (the offline-signed document the guard restricts) has no rollout for \
             clients {range}",
            base.sequence
        );
    };
    let was = &base.entries[i];
    let Some(rollout) = &was.rollout else {
        bail!(
            "sequence {} has no rollout for clients {range}",
            base.sequence
        );
    };
    let held = match restricts.stop_for(i) {
        None => bail!(
            "the rollout of clients {range} is not frozen: it is as sequence {} signed it",
            base.sequence
        ),
        Some(Stop::Revert { .. }) => bail!(
            "there is no rollout to resume: the guard rolled clients {range} back from {}. \
             Give --ramp or --rollout to roll out again",
            crate::guard::target_name(&was.target)
        ),
        Some(Stop::Hold { percent, .. }) => *percent,
    };
    let Some(ramp) = &rollout.ramp else {
        return Ok((i, rollout.clone()));
    };
    if held < rollout.percent {
        bail!(
            "the guard holds clients {range} at {held}%, below where the ramp starts ({}%); \
             give --ramp to roll out again",
            rollout.percent
        );
    }
    let frozen_at = frozen_at(rollout, held, current.issued_at);
    Ok((
        i,
        Rollout {
            ramp: Some(Ramp {
                start: ramp.start + (now - frozen_at),
                ..ramp.clone()
            }),
            ..rollout.clone()
        },
    ))
}

/// When `rollout`'s ramp stood at `percent`: the latest second up to `signed` (the guard
/// document's date) at which it had not passed it. That is `signed` itself when this guard
/// document froze it; earlier when an older guard document did and a later one kept the freeze.
fn frozen_at(rollout: &Rollout, percent: u8, signed: OffsetDateTime) -> OffsetDateTime {
    if rollout.percent_at(signed) <= percent {
        return signed;
    }
    let start = rollout.ramp.as_ref().map_or(signed, |r| r.start);
    // The percentage never falls along a ramp: the last second at or below `percent`.
    let (mut low, mut high) = (0i64, (signed - start).whole_seconds());
    while high - low > 1 {
        let mid = low + (high - low) / 2;
        if rollout.percent_at(start + Duration::seconds(mid)) <= percent {
            low = mid;
        } else {
            high = mid;
        }
    }
    start + Duration::seconds(low)
}

/// The sequence after the live one (1 for a new channel). Refused, never wrapped, past
/// [`MAX_SEQUENCE`]: clients refuse a higher sequence and reject a lower one as a rollback,
/// so such a channel can take no further document.
fn next_sequence(channel: &str, server: &str, live: Option<&ChannelDocument>) -> Result<u64> {
    let Some(live) = live else {
        return Ok(1);
    };
    match live.sequence.checked_add(1) {
        Some(next) if next <= MAX_SEQUENCE => Ok(next),
        _ => bail!(
            "channel {channel} on {server} is at sequence {}, the highest a channel document \
             may carry ({MAX_SEQUENCE} = 2^53 - 1, the largest integer every JSON reader holds \
             exactly); clients refuse any higher sequence and reject a lower one as a rollback, \
             so this channel cannot be released again. Nothing was published: release on a new \
             channel name and point clients at it",
            live.sequence
        ),
    }
}

/// Where the pack's name comes from: the live document, or `--pack` for a new channel.
#[derive(Debug, Clone, Copy)]
enum PackFrom {
    Live,
    Option,
}

/// The entry for `version` from the server's records of the pack, if it was uploaded.
fn pack_ref(versions: &[PackRecord], version: &Version) -> Option<PackRef> {
    let record = versions.iter().find(|r| r.version == *version)?;
    Some(PackRef {
        version: version.clone(),
        sha256: record.sha256.clone(),
        size: record.size,
        schema: record.schema,
    })
}

/// Why `version` cannot be released: it was not uploaded as pack `pack`. `packer build`
/// names a pack after its directory unless given `--name`, so a version uploaded under
/// another name is the likely mistake, and is named.
fn not_on_server(
    remote: &Remote,
    versions: &[PackRecord],
    pack: &str,
    version: &Version,
    channel: &str,
    pack_from: PackFrom,
) -> anyhow::Error {
    let server = remote.base();
    let available = if versions.is_empty() {
        "none".to_string()
    } else {
        versions
            .iter()
            .map(|r| r.version.to_string())
            .collect::<Vec<_>>()
            .join(", ")
    };
    let not_there =
        format!("pack {pack} {version} is not on {server} (versions there: {available})");
    // Only a hint: without the list the message above still stands.
    let others: Vec<String> = remote
        .get_json::<PackList>(paths::PACKS)
        .map(|list| {
            list.packs
                .into_iter()
                .filter(|p| p.name != pack && pack_ref(&p.versions, version).is_some())
                .map(|p| p.name)
                .collect()
        })
        .unwrap_or_default();
    let Some(other) = others.first() else {
        return anyhow::anyhow!(
            "{not_there}; upload it first with `packer publish FILE --server {server}`"
        );
    };
    let uploaded = others
        .iter()
        .map(|name| format!("{name} {version}"))
        .collect::<Vec<_>>()
        .join(", ");
    let naming = "`packer build` names a pack after its directory unless given --name";
    match pack_from {
        PackFrom::Option => {
            anyhow::anyhow!("{not_there}; {uploaded} is — did you mean --pack {other}? ({naming})")
        }
        PackFrom::Live => anyhow::anyhow!(
            "{not_there}; {uploaded} is, but channel {channel} serves pack {pack}: build the \
             same directory again with --name {pack} --version {version} and publish that ({naming})"
        ),
    }
}

/// A channel that is not on the server, named without `--new-channel`: most likely a typo,
/// so the channels that are there are listed.
fn unknown_channel(remote: &Remote, channel: &str) -> anyhow::Error {
    let server = remote.base();
    let there = match remote.get_json::<ChannelList>(paths::CHANNELS) {
        Ok(list) if list.channels.is_empty() => "no channels there yet".to_string(),
        Ok(list) => format!(
            "channels there: {}",
            list.channels
                .iter()
                .map(|c| format!("{} (pack {})", c.channel, c.pack))
                .collect::<Vec<_>>()
                .join(", ")
        ),
        Err(error) => format!(
            "the channel list could not be read: {}",
            pack_protocol::error_text::report(error.as_ref())
        ),
    };
    anyhow::anyhow!(
        "channel {channel} does not exist on {server} ({there}); check the name, or give \
         --new-channel --pack NAME to create it. Nothing was signed or published"
    )
}

/// Downloads every pack `new` names that `old` does not, and checks each the way a client
/// does before installing it. Returns the packs checked; none with `--no-verify`, which
/// warns instead.
fn check_newly_named(
    args: &ReleaseArgs,
    remote: &Remote,
    pack: &str,
    old: &[ChannelEntry],
    new: &[ChannelEntry],
) -> Result<Vec<PackRef>> {
    let named = |entries: &[ChannelEntry]| -> Vec<PackRef> {
        entries
            .iter()
            .filter_map(|e| match &e.target {
                EntryTarget::Pack(target) => Some(target.clone()),
                EntryTarget::Builtin => None,
            })
            .collect()
    };
    let before = named(old);
    let mut newly: Vec<PackRef> = Vec::new();
    for target in named(new) {
        if !before.contains(&target) && !newly.contains(&target) {
            newly.push(target);
        }
    }
    if newly.is_empty() {
        return Ok(newly);
    }
    if args.no_verify {
        for target in &newly {
            eprintln!(
                "warning: --no-verify: pack {pack} {} was not downloaded or opened; clients \
                 refuse it if it does not decrypt with their content key or does not fit the \
                 contract",
                target.version
            );
        }
        return Ok(Vec::new());
    }
    let keys = content_key_ring(Some(&args.keys), &args.extra_keys.content_keys).context(
        "the packs this release names are opened before signing; give the content key clients \
         hold (--keys DIR or --content-key FILE), or --no-verify to release unchecked",
    )?;
    for target in &newly {
        let what = format!("pack {pack} {} on {}", target.version, remote.base());
        check_as_client(remote, pack, target, &keys, &what).with_context(|| {
            format!(
                "clients would refuse {what}. No channel document names {} yet, so packd takes \
                 other bytes for it: publish the fixed pack under the same version and release \
                 again",
                target.version
            )
        })?;
    }
    Ok(newly)
}

/// Downloads the pack `target` names and checks it as a client does before installing it.
fn check_as_client(
    remote: &Remote,
    pack: &str,
    target: &PackRef,
    keys: &ContentKeyRing,
    what: &str,
) -> Result<()> {
    let path = paths::blob(&target.sha256);
    let limit = target.size.min(Limits::DEFAULT.max_sealed_len);
    let Some((bytes, _)) = remote.get_bytes_opt(&path, limit)? else {
        bail!(
            "{what}: the server lists it but does not serve {}",
            remote.url(&path)
        );
    };
    let opened = open_entry_as_client(&bytes, pack, target, keys, what)?;
    let key_ids: Vec<&str> = opened
        .header
        .key_slots
        .iter()
        .map(|slot| slot.key_id.as_str())
        .filter(|id| keys.get(id).is_some())
        .collect();
    let fits = match pack_contract::Kind::of_schema(opened.header.schema) {
        pack_contract::Kind::Agent(schema) => format!("every template fits schema {schema}"),
        kind @ (pack_contract::Kind::App | pack_contract::Kind::Files) => {
            format!("every file keeps its contract, {kind}")
        }
    };
    eprintln!(
        "checked   {what}: opens with content key {}, {} files, {fits}",
        key_ids.join(", "),
        opened.payload.len(),
    );
    Ok(())
}

/// Where a new full entry goes: before the first catch-all, else at the end.
fn catch_all_position(entries: &[ChannelEntry]) -> usize {
    entries
        .iter()
        .position(|e| e.clients == VersionReq::STAR && e.rollout.is_none())
        .unwrap_or(entries.len())
}

fn pin(entries: &mut Vec<ChannelEntry>, range: &VersionReq, target: EntryTarget) {
    // Pinning the version a rollout was staging finishes that rollout.
    entries.retain(|e| !(e.clients == *range && e.rollout.is_some() && e.target == target));
    let entry = ChannelEntry {
        clients: range.clone(),
        target,
        rollout: None,
    };
    match entries
        .iter()
        .position(|e| e.clients == *range && e.rollout.is_none())
    {
        Some(i) => entries[i] = entry,
        None if *range == VersionReq::STAR => entries.push(entry),
        None => {
            let at = catch_all_position(entries);
            entries.insert(at, entry);
        }
    }
}

fn rollback(entries: &mut Vec<ChannelEntry>, range: &VersionReq, target: EntryTarget) {
    let first = entries.iter().position(|e| e.clients == *range);
    entries.retain(|e| e.clients != *range);
    let entry = ChannelEntry {
        clients: range.clone(),
        target,
        rollout: None,
    };
    let at = match first {
        Some(i) => i.min(entries.len()),
        None if *range == VersionReq::STAR => entries.len(),
        None => catch_all_position(entries),
    };
    entries.insert(at, entry);
}

/// The rollout of a `--rollout` or `--ramp`, before its salt is chosen.
struct Staged {
    percent: u8,
    ramp: Option<Ramp>,
    watch: Option<Watch>,
}

fn rollout(
    entries: &mut Vec<ChannelEntry>,
    range: &VersionReq,
    target: PackRef,
    staged: Staged,
    pack: &str,
) {
    let target = EntryTarget::Pack(target);
    let existing = entries
        .iter()
        .position(|e| e.clients == *range && e.rollout.is_some());
    // Same version: keep the salt, so the same installs stay in as the percent moves.
    let salt = existing
        .and_then(|i| {
            let e = &entries[i];
            (e.target == target).then(|| e.rollout.as_ref().map(|r| r.salt.clone()))
        })
        .flatten()
        .unwrap_or_else(|| match &target {
            EntryTarget::Pack(p) => format!("{pack}@{}", p.version),
            EntryTarget::Builtin => "builtin".to_string(),
        });
    let entry = ChannelEntry {
        clients: range.clone(),
        target,
        rollout: Some(Rollout {
            percent: staged.percent,
            salt,
            ramp: staged.ramp,
            watch: staged.watch,
        }),
    };
    if let Some(i) = existing {
        entries[i] = entry;
        return;
    }
    let at = entries
        .iter()
        .position(|e| e.clients == *range)
        .unwrap_or_else(|| catch_all_position(entries));
    entries.insert(at, entry);
}

fn parse_range(text: &str) -> Result<VersionReq> {
    let range = VersionReq::parse(text.trim()).with_context(|| {
        format!(
            "expected a semver range of client releases such as '*', '>=1.4.0, <1.5.0' or '^1.2', found {:?}",
            text.trim()
        )
    })?;
    crate::note_bare_range(text.trim(), &range);
    Ok(range)
}

/// Splits `RANGE=VALUE` at the first `=` after which the left side is a whole range, so
/// `>=1.4.0=1.2.0` and `=1.4.2=builtin` work.
fn split_range<'a>(spec: &'a str, example: &str) -> Result<(VersionReq, &'a str)> {
    spec.char_indices()
        .filter(|&(_, c)| c == '=')
        .find_map(|(i, _)| {
            let (range, value) = (spec[..i].trim(), spec[i + 1..].trim());
            if range.is_empty() || value.is_empty() {
                return None;
            }
            VersionReq::parse(range).ok().map(|req| {
                crate::note_bare_range(range, &req);
                (req, value)
            })
        })
        .with_context(|| format!("expected {example}"))
}

fn parse_version(text: &str) -> Result<Version> {
    crate::parse_version(text).map_err(anyhow::Error::msg)
}

fn parse_target(spec: &str, builtin_allowed: bool) -> Result<(VersionReq, Wanted)> {
    let example = if builtin_allowed {
        "RANGE=VERSION or RANGE=builtin, e.g. '>=1.4.0, <1.5.0=1.1.0' or '*=builtin'"
    } else {
        "RANGE=VERSION, e.g. '>=1.4.0, <1.5.0=1.2.0' or '*=1.2.0'"
    };
    let (range, value) = split_range(spec, example)?;
    if value == "builtin" {
        if !builtin_allowed {
            bail!("to send clients to the built-in pack use --rollback 'RANGE=builtin'");
        }
        return Ok((range, Wanted::Builtin));
    }
    Ok((range, Wanted::Version(parse_version(value)?)))
}

fn parse_rollout(spec: &str) -> Result<(VersionReq, Version, u8)> {
    let example = "RANGE=VERSION@PERCENT, e.g. '>=1.4.0, <1.5.0=1.2.0@10'";
    let Some((body, percent)) = spec.rsplit_once('@') else {
        bail!("expected {example}");
    };
    let (range, version) = split_range(body, example)?;
    let number = percent.trim().trim_end_matches('%');
    let percent = match number.parse::<u8>() {
        Ok(p) if p <= 100 => p,
        _ => bail!("rollout percent must be a whole number 0-100, found {percent:?}"),
    };
    Ok((range, parse_version(version)?, percent))
}

/// `RANGE=VERSION@SCHEDULE`: the range, the version, the starting percentage and the
/// schedule (its start is set when the document is signed).
fn parse_ramp(spec: &str) -> Result<(VersionReq, Version, u8, Ramp)> {
    let example = "RANGE=VERSION@SCHEDULE, e.g. '>=1.4.0, <1.5.0=1.2.0@1%..100%/72h' or '*=1.2.0@1,5,25,100%/24h'";
    let Some((body, schedule)) = spec.rsplit_once('@') else {
        bail!("expected {example}");
    };
    let (range, version) = split_range(body, example)?;
    let (percent, ramp) = Ramp::parse(schedule.trim(), OffsetDateTime::UNIX_EPOCH)?;
    Ok((range, parse_version(version)?, percent, ramp))
}

/// The metrics the guard compares, each a rate `packer status --outcomes` shows.
fn parse_watch(text: &str, action: WatchAction) -> Result<Watch> {
    let rates = OutcomeRates::of(&OutcomeCounts::default());
    let known: Vec<&str> = rates.named().iter().map(|(name, _)| *name).collect();
    let mut metrics: Vec<String> = Vec::new();
    for name in text.split(',').map(str::trim).filter(|n| !n.is_empty()) {
        if !known.contains(&name) {
            bail!(
                "{name:?} is not a metric the guard compares; the metrics are {}",
                known.join(", ")
            );
        }
        if !metrics.iter().any(|m| m == name) {
            metrics.push(name.to_string());
        }
    }
    if metrics.is_empty() {
        bail!(
            "no metric named; give a comma list of {}, e.g. tool_error_rate,fallback_rate",
            known.join(", ")
        );
    }
    Ok(Watch { metrics, action })
}

/// `ID` of a guard key, or `none`.
fn guard_label(guard: Option<&Guard>) -> String {
    guard.map_or_else(|| "none".to_string(), guard_id)
}

/// The old and new entries, with `-` for entries that go, `+` for entries that come; ramps
/// read at `now`.
fn diff(
    channel: &str,
    server: &str,
    live: Option<&ChannelDocument>,
    new: &ChannelDocument,
    old_entries: &[ChannelEntry],
    now: OffsetDateTime,
) -> String {
    let mut out = String::new();
    match live {
        Some(live) => out.push_str(&format!(
            "channel {channel} on {server}: pack {}, sequence {} -> {}\n",
            new.pack, live.sequence, new.sequence
        )),
        None => out.push_str(&format!(
            "channel {channel} on {server}: new, pack {}, sequence {}\n",
            new.pack, new.sequence
        )),
    }
    if let Some(live) = live {
        out.push_str(&format!(
            "  expires {} -> {}\n",
            format_time(live.expires_at),
            format_time(new.expires_at)
        ));
    } else {
        out.push_str(&format!("  expires {}\n", format_time(new.expires_at)));
    }
    let old_guard = live.and_then(|l| l.guard.as_ref());
    if live.is_some() && old_guard != new.guard.as_ref() {
        out.push_str(&format!(
            "  guard key {} -> {}\n",
            guard_label(old_guard),
            guard_label(new.guard.as_ref())
        ));
    } else if let Some(guard) = &new.guard {
        out.push_str(&format!("  guard key {}\n", guard_id(guard)));
    }
    if let Some(restricts) = live.and_then(|l| l.restricts.as_ref()) {
        let base = serde_json::from_str::<ChannelDocument>(&restricts.document)
            .map_or_else(|_| "?".to_string(), |b| b.sequence.to_string());
        out.push_str(&format!(
            "  (the live document is a stop order of the guard restricting sequence {base}; this \
             one, signed with the offline key, replaces it and keeps what it stopped unless \
             --resume says otherwise)\n"
        ));
    }
    out.push_str("  entries (first match wins):\n");
    for old in old_entries {
        if !new.entries.contains(old) {
            out.push_str(&format!("  - {}\n", describe(old, now)));
        }
    }
    for entry in &new.entries {
        let mark = if old_entries.contains(entry) {
            ' '
        } else {
            '+'
        };
        out.push_str(&format!("  {mark} {}\n", describe(entry, now)));
    }
    if new.entries.is_empty() {
        out.push_str("    (none: every client uses its built-in pack)\n");
    }
    if new.entries == old_entries {
        out.push_str("  (entries unchanged; only the dates change)\n");
    }
    out
}

fn confirm(channel: &str, sequence: u64, server: &str) -> Result<()> {
    if !std::io::stdin().is_terminal() {
        bail!(
            "not publishing: stdin is not a terminal, so there is no one to confirm the change above; re-run with --yes to publish it"
        );
    }
    eprint!("publish channel {channel} sequence {sequence} to {server}? [y/N] ");
    std::io::stderr().flush().ok();
    let mut answer = String::new();
    std::io::stdin()
        .lock()
        .read_line(&mut answer)
        .context("reading the answer")?;
    if matches!(answer.trim(), "y" | "Y" | "yes" | "YES" | "Yes") {
        Ok(())
    } else {
        bail!("not published: the answer was not yes")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pack(version: &str) -> PackRef {
        PackRef {
            version: Version::parse(version).unwrap(),
            sha256: "a".repeat(64),
            size: 10,
            schema: 1,
        }
    }

    fn req(text: &str) -> VersionReq {
        VersionReq::parse(text).unwrap()
    }

    fn fixed(percent: u8) -> Staged {
        Staged {
            percent,
            ramp: None,
            watch: None,
        }
    }

    #[test]
    fn specs_split_at_the_right_equals_sign() {
        let (range, wanted) = parse_target(">=1.4.0, <1.5.0=1.2.0", false).unwrap();
        assert_eq!(range, req(">=1.4.0, <1.5.0"));
        assert_eq!(wanted, Wanted::Version(Version::new(1, 2, 0)));
        let (range, wanted) = parse_target("=1.4.2=builtin", true).unwrap();
        assert_eq!(range, req("=1.4.2"));
        assert_eq!(wanted, Wanted::Builtin);
        assert!(parse_target("*=builtin", false).is_err());
        assert!(parse_target("*=latest", false).is_err());
        let (range, version, percent) = parse_rollout("^1.4=1.2.0@10%").unwrap();
        assert_eq!(
            (range, version, percent),
            (req("^1.4"), Version::new(1, 2, 0), 10)
        );
        assert!(parse_rollout("*=1.2.0@101").is_err());
        assert!(parse_rollout("*=1.2.0").is_err());
    }

    #[test]
    fn pin_replaces_the_same_range_or_goes_before_the_catch_all() {
        let mut entries = Vec::new();
        pin(&mut entries, &req("*"), EntryTarget::Pack(pack("1.0.0")));
        pin(&mut entries, &req("<1.4"), EntryTarget::Builtin);
        pin(&mut entries, &req("*"), EntryTarget::Pack(pack("1.1.0")));
        assert_eq!(entries.len(), 2);
        assert_eq!(entries[0].clients, req("<1.4"));
        assert_eq!(entries[1].target, EntryTarget::Pack(pack("1.1.0")));
    }

    #[test]
    fn rollout_keeps_its_salt_and_pin_finishes_it() {
        let mut entries = Vec::new();
        pin(&mut entries, &req("*"), EntryTarget::Pack(pack("1.0.0")));
        rollout(&mut entries, &req("*"), pack("1.1.0"), fixed(10), "p");
        assert_eq!(entries.len(), 2);
        assert_eq!(entries[0].rollout.as_ref().unwrap().percent, 10);
        let salt = entries[0].rollout.as_ref().unwrap().salt.clone();
        entries[0].rollout.as_mut().unwrap().salt = "custom".into();
        rollout(&mut entries, &req("*"), pack("1.1.0"), fixed(50), "p");
        assert_eq!(entries.len(), 2);
        assert_eq!(
            entries[0].rollout,
            Some(Rollout {
                percent: 50,
                salt: "custom".into(),
                ramp: None,
                watch: None,
            })
        );
        // A different version reshuffles.
        rollout(&mut entries, &req("*"), pack("1.2.0"), fixed(5), "p");
        assert_ne!(entries[0].rollout.as_ref().unwrap().salt, "custom");
        assert_ne!(entries[0].rollout.as_ref().unwrap().salt, salt);
        pin(&mut entries, &req("*"), EntryTarget::Pack(pack("1.2.0")));
        assert_eq!(entries.len(), 1);
        assert!(entries[0].rollout.is_none());
    }

    fn ramping(start: OffsetDateTime) -> Vec<ChannelEntry> {
        let (percent, ramp) = Ramp::parse("1,5,25,100%/24h", start).unwrap();
        vec![ChannelEntry {
            clients: req("*"),
            target: EntryTarget::Pack(pack("1.1.0")),
            rollout: Some(Rollout {
                ramp: Some(ramp),
                ..Rollout::fixed(percent, "s")
            }),
        }]
    }

    fn document(issued_at: OffsetDateTime, expires_at: OffsetDateTime) -> ChannelDocument {
        ChannelDocument {
            format: CHANNEL_FORMAT,
            channel: "stable".into(),
            pack: "p".into(),
            sequence: 1,
            issued_at,
            expires_at,
            entries: Vec::new(),
            guard: None,
            restricts: None,
        }
    }

    #[test]
    fn a_ramp_stretches_the_expiry_once_not_at_every_release() {
        let t = OffsetDateTime::UNIX_EPOCH + Duration::days(20_000);
        let live = document(t - Duration::days(1), t + Duration::days(29));
        let entries = ramping(t);
        let first = expiry(None, Some(&live), &entries, t).unwrap();
        assert_eq!(first, t + Duration::hours(72) + Duration::days(30));

        // A day later, on top of that document: the same 30 days after the ramp.
        let live = ChannelDocument {
            entries: entries.clone(),
            ..document(t, first)
        };
        assert_eq!(usual_validity(&live), Duration::days(30));
        let later = t + Duration::days(1);
        assert_eq!(expiry(None, Some(&live), &entries, later).unwrap(), first);
        // Once the ramp is over, the usual validity from now.
        assert_eq!(
            expiry(None, Some(&live), &[], later).unwrap(),
            later + Duration::days(30)
        );

        let short = expiry(Some("2d"), Some(&live), &entries, t).unwrap_err();
        assert!(short.to_string().contains("at least 3d"), "{short:#}");
        assert_eq!(
            expiry(Some("3d"), Some(&live), &entries, t).unwrap(),
            t + Duration::days(3)
        );
    }

    #[test]
    fn a_freeze_kept_by_a_later_guard_document_resumes_from_where_it_was_frozen() {
        let t = OffsetDateTime::UNIX_EPOCH + Duration::days(20_000);
        let entries = ramping(t);
        let rollout = entries[0].rollout.as_ref().unwrap();
        // Frozen at 5% by the document signed then.
        let signed = t + Duration::hours(30);
        assert_eq!(frozen_at(rollout, 5, signed), signed);
        // A later guard document (signed when the ramp would stand at 100%) kept the 5%: the
        // ramp continues from its last second at 5%, not from 100%.
        let later = t + Duration::hours(100);
        let at = frozen_at(rollout, 5, later);
        assert_eq!(at, t + Duration::hours(48) - Duration::seconds(1));
        assert_eq!(rollout.percent_at(at), 5);
    }

    #[test]
    fn rollback_replaces_every_entry_of_the_range() {
        let mut entries = Vec::new();
        pin(&mut entries, &req("^1.4"), EntryTarget::Pack(pack("1.0.0")));
        pin(&mut entries, &req("*"), EntryTarget::Pack(pack("1.0.0")));
        rollout(&mut entries, &req("^1.4"), pack("1.1.0"), fixed(10), "p");
        assert_eq!(entries.len(), 3);
        rollback(&mut entries, &req("^1.4"), EntryTarget::Builtin);
        assert_eq!(entries.len(), 2);
        assert_eq!(entries[0].clients, req("^1.4"));
        assert_eq!(entries[0].target, EntryTarget::Builtin);
        assert_eq!(entries[1].clients, req("*"));
    }
}
