//! `packer channel`: write and sign a channel document.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use pack_format::channel::{CHANNEL_FORMAT, MAX_SEQUENCE, format_time};
use pack_format::{
    ChannelDocument, ChannelEntry, EntryTarget, Limits, PackRef, Rollout, TrustedKeys, Watch,
    WatchAction, sha256_hex, validate_name,
};
use semver::VersionReq;
use serde_json::json;
use time::format_description::well_known::Rfc3339;
use time::{Duration, OffsetDateTime};

use crate::fsio::{self, read_limited};
use crate::keys::signing_key;
use crate::{print_json, shown};

const ENTRY_HELP: &str = "\
One rule of the channel: which client releases get which pack. Repeatable; clients take the \
first entry that matches, so list narrow ranges and partial rollouts before catch-alls.

Syntax:  RANGE=TARGET[@PERCENT%[:SALT]]

  RANGE    a semver range of client releases: '*', '>=1.4.0, <1.5.0', '^1.2', '=1.4.2'.
           A bare version is a caret range: '1.4' means '^1.4' (>=1.4.0, <2.0.0); for
           1.4.x only write '~1.4'. The split is at the first '=' after a complete range,
           so '>=' and '=1.4.2' work.
  TARGET   a sealed pack file: its version, schema, SHA-256 and size are read from it
           (its pack name must be --pack); or the word 'builtin': use the pack compiled
           into the client (roll back to the embedded prompts).
  @10%     optional staged rollout: only installs whose bucket (0-99) is below 10 take
           this entry; the others fall through to the next entry. The salt picks the
           buckets; it defaults to PACK@VERSION (or 'builtin'), so raising the percent for
           the same target keeps everyone already in. Give ':SALT' to reshuffle.

Examples:
  --entry '>=1.4.0, <1.5.0=dist/prompts-1.2.0.pack@10%'
  --entry '>=1.4.0, <1.5.0=dist/prompts-1.1.0.pack'
  --entry '<1.4.0=builtin'
  --entry '*=dist/prompts-1.1.0.pack@25%:second-try'";

#[derive(clap::Args)]
#[command(
    after_help = "Writes OUT (the JSON document) and OUT.minisig (a standard minisign \
    signature, prehashed): `minisign -Vm OUT -p KEYS/signing.pub` verifies it. issued_at is \
    now. A password-protected signing key reads its password from --password-file or \
    PROMPTPACK_KEY_PASSWORD."
)]
pub struct ChannelArgs {
    /// Key directory holding signing.key.
    #[arg(long, value_name = "DIR")]
    keys: PathBuf,

    /// Channel name, e.g. stable.
    #[arg(long)]
    channel: String,

    /// Pack name every pack entry must carry.
    #[arg(long = "pack", value_name = "NAME")]
    pack: String,

    /// Sequence number: must be higher than every earlier document of this channel, and at
    /// most 9007199254740991 (2^53 - 1).
    #[arg(long)]
    sequence: u64,

    /// When the document expires: a duration from now (30d, 12h, 90m, 2w) or an RFC 3339
    /// time (2026-01-31T00:00:00Z).
    #[arg(long, value_name = "DURATION_OR_RFC3339")]
    expires: String,

    // The short help is spelled out: as a doc comment its brackets would read as links.
    #[arg(
        long = "entry",
        value_name = "SPEC",
        required = true,
        help = "An entry: RANGE=TARGET[@PERCENT%[:SALT]]. See --help for details.",
        long_help = ENTRY_HELP
    )]
    entries: Vec<String>,

    /// Output document; the signature goes to the same path plus `.minisig`.
    #[arg(
        short = 'o',
        long = "output",
        value_name = "OUT",
        default_value = "channel.json"
    )]
    output: PathBuf,

    /// File whose first line is the signing key's password.
    #[arg(long, value_name = "FILE")]
    password_file: Option<PathBuf>,
}

pub fn run(args: &ChannelArgs, json: bool) -> Result<()> {
    validate_name("channel", &args.channel).context("--channel")?;
    validate_name("pack", &args.pack).context("--pack")?;
    check_sequence(&args.output, &args.channel, args.sequence)?;
    let now = OffsetDateTime::now_utc()
        .replace_nanosecond(0)
        .unwrap_or_else(|_| OffsetDateTime::now_utc());
    let expires_at = parse_expires(&args.expires, now)?;
    let entries = args
        .entries
        .iter()
        .map(|spec| parse_entry(spec, &args.pack).with_context(|| format!("--entry {spec:?}")))
        .collect::<Result<Vec<_>>>()?;
    let key = signing_key(&args.keys, args.password_file.as_deref())?;

    let document = ChannelDocument {
        format: CHANNEL_FORMAT,
        channel: args.channel.clone(),
        pack: args.pack.clone(),
        sequence: args.sequence,
        issued_at: now,
        expires_at,
        entries,
        guard: None,
        restricts: None,
    };
    let signed = document.sign(&key)?;
    // Check the output the way a client will before anything is written.
    let mut trusted = TrustedKeys::new();
    trusted.add_signing_key(&key);
    pack_format::channel::verify(
        &signed.document,
        &signed.signature,
        &trusted,
        now,
        &Limits::DEFAULT,
    )
    .context("the freshly signed document does not verify")?;

    let signature_path = signature_path(&args.output);
    let staged = [
        fsio::stage(&args.output, &signed.document, 0o644)?,
        fsio::stage(&signature_path, signed.signature.as_bytes(), 0o644)?,
    ];
    for file in staged {
        file.commit()?;
    }

    if json {
        print_json(&json!({
            "channel": document.channel,
            "pack": document.pack,
            "sequence": document.sequence,
            "issued_at": format_time(document.issued_at),
            "expires_at": format_time(document.expires_at),
            "entries": document.entries.len(),
            "key_id": key.key_id(),
            "sha256": sha256_hex(&signed.document),
            "document": shown(&args.output),
            "signature": shown(&signature_path),
        }));
    } else {
        outln!(
            "channel   {} (pack {}) sequence {}",
            document.channel,
            document.pack,
            document.sequence
        );
        outln!(
            "expires   {} (in {}: --expires {})",
            format_time(document.expires_at),
            span(document.expires_at - now),
            args.expires.trim()
        );
        for (i, entry) in document.entries.iter().enumerate() {
            outln!("entry {i}   {}", describe(entry, now));
        }
        outln!("signed by {}", key.key_id());
        outln!(
            "wrote     {} and {}",
            shown(&args.output),
            shown(&signature_path)
        );
    }
    Ok(())
}

fn signature_path(document: &Path) -> PathBuf {
    let mut name = document.as_os_str().to_owned();
    name.push(".minisig");
    PathBuf::from(name)
}

/// One entry for humans, its ramp (if any) read at `now`.
pub(crate) fn describe(entry: &ChannelEntry, now: OffsetDateTime) -> String {
    let target = match &entry.target {
        EntryTarget::Pack(pack) => format!(
            "pack {} (schema {}, sha256 {})",
            pack.version, pack.schema, pack.sha256
        ),
        EntryTarget::Builtin => "builtin".to_string(),
    };
    let Some(rollout) = &entry.rollout else {
        return format!("clients {} -> {target}", entry.clients);
    };
    let mut text = format!(
        "clients {} -> {target} at {}% (salt {:?})",
        entry.clients, rollout.percent, rollout.salt
    );
    if let Some(schedule) = ramp_schedule(rollout, now) {
        text.push_str(&format!(", ramp: {schedule}"));
    }
    if let Some(watch) = &rollout.watch {
        text.push_str(&format!("; {}", watch_text(watch)));
    }
    text
}

/// A ramp read at `now`: `1% now, 5% at <time>, 25% at <time>` (the steps still to come),
/// or `None` for a rollout without one.
pub(crate) fn ramp_schedule(rollout: &Rollout, now: OffsetDateTime) -> Option<String> {
    let ramp = rollout.ramp.as_ref()?;
    let current = rollout.percent_at(now);
    let coming: Vec<String> = ramp
        .landings()
        .into_iter()
        .filter(|(at, _)| *at > now)
        .map(|(at, percent)| {
            let rising = if ramp.linear { "rising to " } else { "" };
            format!("{rising}{percent}% at {}", format_time(at))
        })
        .collect();
    if coming.is_empty() {
        return Some(format!(
            "{current}% now (complete since {})",
            format_time(ramp.end())
        ));
    }
    let mut parts = vec![format!("{current}% now")];
    parts.extend(coming);
    let linear = if ramp.linear {
        " (linear, whole percents)"
    } else {
        ""
    };
    Some(format!("{}{linear}", parts.join(", ")))
}

/// What the guard watches: `guard watches tool_error_rate, fallback_rate (freeze on a
/// regression)`.
pub(crate) fn watch_text(watch: &Watch) -> String {
    let action = match watch.action {
        WatchAction::Freeze => "freeze",
        WatchAction::Rollback => "rollback",
    };
    format!(
        "guard watches {} ({action} on a regression)",
        watch.metrics.join(", ")
    )
}

/// Refuses to overwrite a document of the same channel with a sequence that is not higher:
/// clients ignore an equal sequence and reject a lower one as a rollback attack.
fn check_sequence(output: &Path, channel: &str, sequence: u64) -> Result<()> {
    if sequence > MAX_SEQUENCE {
        bail!(
            "--sequence {sequence} is over the limit of {MAX_SEQUENCE} (2^53 - 1): larger \
             integers are not exact in every JSON reader, so clients refuse such a document. \
             Use the next sequence after the channel's current one"
        );
    }
    let Ok(bytes) = std::fs::read(output) else {
        return Ok(());
    };
    let Ok(existing) = serde_json::from_slice::<ChannelDocument>(&bytes) else {
        return Ok(());
    };
    if existing.channel == channel && existing.sequence >= sequence {
        // The file was written by anything, so its sequence may be anything, `u64::MAX`
        // included.
        let Some(next) = existing
            .sequence
            .checked_add(1)
            .filter(|next| *next <= MAX_SEQUENCE)
        else {
            bail!(
                "{} already holds channel {channel} at sequence {}, and no higher sequence is \
                 allowed (the limit is {MAX_SEQUENCE} = 2^53 - 1); clients reject a lower one as \
                 a rollback, so this channel cannot take another document: use a new channel name",
                shown(output),
                existing.sequence
            );
        };
        bail!(
            "{} already holds channel {channel} at sequence {}; clients ignore or reject a sequence that is not higher: use --sequence {next}",
            shown(output),
            existing.sequence,
        );
    }
    Ok(())
}

pub(crate) fn parse_expires(text: &str, now: OffsetDateTime) -> Result<OffsetDateTime> {
    let text = text.trim();
    let expires = if let Ok(at) = OffsetDateTime::parse(text, &Rfc3339) {
        at
    } else {
        let split = text
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(text.len());
        let (number, unit) = text.split_at(split);
        let Ok(count) = number.parse::<i64>() else {
            bail!(
                "--expires {text:?}: expected a duration like 30d, 12h, 90m, 2w or an RFC 3339 time"
            );
        };
        let duration = match unit {
            "s" => Duration::seconds(count),
            "m" => Duration::minutes(count),
            "h" => Duration::hours(count),
            "d" => Duration::days(count),
            "w" => Duration::weeks(count),
            _ => bail!("--expires {text:?}: unknown unit {unit:?}; use s, m, h, d or w (e.g. 30d)"),
        };
        now.checked_add(duration)
            .with_context(|| format!("--expires {text:?} is too far in the future"))?
    };
    if expires <= now {
        bail!(
            "--expires {text:?} is not in the future (now is {})",
            format_time(now)
        );
    }
    if expires - now < Duration::hours(1) {
        eprintln!(
            "warning: --expires {text}: the document expires in {} ({}); clients refuse it \
             after that and keep what they had until the next release, and a release without \
             --expires repeats the validity (an hour at least). Use an hour or more outside \
             tests",
            span(expires - now),
            format_time(expires)
        );
    }
    Ok(expires)
}

/// A duration as a person reads it, in the largest unit that divides it: `30 days`,
/// `1 hour`, `90 minutes`, `5 seconds`.
pub(crate) fn span(duration: Duration) -> String {
    let seconds = duration.whole_seconds();
    let (count, unit) = if seconds != 0 && seconds % 86_400 == 0 {
        (seconds / 86_400, "day")
    } else if seconds != 0 && seconds % 3_600 == 0 {
        (seconds / 3_600, "hour")
    } else if seconds != 0 && seconds % 60 == 0 {
        (seconds / 60, "minute")
    } else {
        (seconds, "second")
    };
    format!("{count} {unit}{}", if count == 1 { "" } else { "s" })
}

/// Parses `RANGE=TARGET[@PERCENT%[:SALT]]` (see [`ENTRY_HELP`]).
fn parse_entry(spec: &str, pack_name: &str) -> Result<ChannelEntry> {
    let (body, rollout) = split_rollout(spec)?;
    let Some((clients, target)) =
        body.char_indices()
            .filter(|&(_, c)| c == '=')
            .find_map(|(i, _)| {
                let (range, target) = (body[..i].trim(), body[i + 1..].trim());
                if range.is_empty() || target.is_empty() {
                    return None;
                }
                VersionReq::parse(range).ok().map(|req| {
                    crate::note_bare_range(range, &req);
                    (req, target)
                })
            })
    else {
        bail!(
            "expected RANGE=TARGET, e.g. '>=1.4.0, <1.5.0=dist/prompts-1.2.0.pack' or '*=builtin'"
        );
    };
    let (target, default_salt) = if target == "builtin" {
        (EntryTarget::Builtin, "builtin".to_string())
    } else {
        let pack = pack_ref(Path::new(target), pack_name)?;
        let salt = format!("{pack_name}@{}", pack.version);
        (EntryTarget::Pack(pack), salt)
    };
    let rollout = rollout.map(|(percent, salt)| Rollout {
        percent,
        salt: salt.unwrap_or(default_salt),
        ramp: None,
        watch: None,
    });
    Ok(ChannelEntry {
        clients,
        target,
        rollout,
    })
}

type RolloutSpec = Option<(u8, Option<String>)>;

/// Splits a trailing `@PERCENT%` or `@PERCENT%:SALT` off an entry. An `@` followed by
/// anything else is part of the target's path.
fn split_rollout(spec: &str) -> Result<(&str, RolloutSpec)> {
    let Some((body, suffix)) = spec.rsplit_once('@') else {
        return Ok((spec, None));
    };
    let (percent_text, salt) = match suffix.split_once(':') {
        Some((percent, salt)) => (percent, Some(salt.to_string())),
        None => (suffix, None),
    };
    let Some(number) = percent_text.trim().strip_suffix('%') else {
        return Ok((spec, None));
    };
    if number.is_empty() || !number.bytes().all(|b| b.is_ascii_digit()) {
        return Ok((spec, None));
    }
    let percent: u8 = match number.parse() {
        Ok(p) if p <= 100 => p,
        _ => bail!("rollout percent must be 0-100, found {number}"),
    };
    if let Some(salt) = &salt
        && (salt.is_empty() || salt.len() > 128)
    {
        bail!("rollout salt must be 1-128 bytes");
    }
    Ok((body, Some((percent, salt))))
}

/// A pack entry pinned by content, read from the sealed file itself.
fn pack_ref(path: &Path, pack_name: &str) -> Result<PackRef> {
    let bytes = read_limited(path, Limits::DEFAULT.max_sealed_len, "pack")?;
    let (header, _) = pack_format::read_header(&bytes, &Limits::DEFAULT)
        .with_context(|| format!("{} is not a readable pack", shown(path)))?;
    if header.name != pack_name {
        bail!(
            "{} is pack {:?}, but this channel is for pack {pack_name:?}",
            shown(path),
            header.name
        );
    }
    Ok(PackRef {
        version: header.version,
        sha256: sha256_hex(&bytes),
        size: bytes.len() as u64,
        schema: header.schema,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rollout_suffix_is_split_only_when_it_is_a_percentage() {
        assert_eq!(split_rollout("*=a.pack").unwrap(), ("*=a.pack", None));
        assert_eq!(
            split_rollout("*=a.pack@10%").unwrap(),
            ("*=a.pack", Some((10, None)))
        );
        assert_eq!(
            split_rollout("*=a.pack@5%:salt").unwrap(),
            ("*=a.pack", Some((5, Some("salt".to_string()))))
        );
        assert_eq!(
            split_rollout("*=dir@x/a.pack").unwrap(),
            ("*=dir@x/a.pack", None)
        );
        assert!(split_rollout("*=a.pack@101%").is_err());
    }

    #[test]
    fn ranges_with_equals_signs_split_at_the_right_place() {
        let entry = parse_entry(">=1.4.0, <1.5.0=builtin", "p").unwrap();
        assert_eq!(entry.clients, VersionReq::parse(">=1.4.0, <1.5.0").unwrap());
        assert_eq!(entry.target, EntryTarget::Builtin);
        let entry = parse_entry("=1.4.2 = builtin@50%", "p").unwrap();
        assert_eq!(entry.clients, VersionReq::parse("=1.4.2").unwrap());
        assert_eq!(
            entry.rollout,
            Some(Rollout {
                percent: 50,
                salt: "builtin".to_string(),
                ramp: None,
                watch: None,
            })
        );
        assert!(parse_entry("builtin", "p").is_err());
        assert!(parse_entry("not a range=builtin", "p").is_err());
    }

    #[test]
    fn expiry_accepts_durations_and_rfc3339() {
        let now = OffsetDateTime::parse("2026-01-01T00:00:00Z", &Rfc3339).unwrap();
        assert_eq!(parse_expires("30d", now).unwrap(), now + Duration::days(30));
        assert_eq!(
            parse_expires("12h", now).unwrap(),
            now + Duration::hours(12)
        );
        assert_eq!(
            parse_expires("2026-02-01T00:00:00Z", now).unwrap(),
            OffsetDateTime::parse("2026-02-01T00:00:00Z", &Rfc3339).unwrap()
        );
        assert!(parse_expires("2025-01-01T00:00:00Z", now).is_err());
        assert!(parse_expires("0d", now).is_err());
        assert!(parse_expires("30 days", now).is_err());
    }
}
