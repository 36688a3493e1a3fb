//! Channel entries as a person reads them, and what changed between two documents.

use pack_format::{ChannelDocument, ChannelEntry, EntryTarget};
use time::OffsetDateTime;

/// One entry of a channel document.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// The client release range, as semver writes it (`>=1.4.0, <1.5.0`, `*`).
    pub range: String,
    pub target: Target,
    /// Rollout percent, when the entry is a staged rollout.
    pub rollout: Option<u8>,
    /// The percentage a ramp takes the rollout to: as signed ([`Entry::of`]), or while it
    /// still climbs ([`entries_at`]).
    pub ramp_to: Option<u8>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    Pack {
        version: String,
        sha256: String,
        size: u64,
        schema: u32,
    },
    Builtin,
}

impl Target {
    /// `1.2.0`, or `built-in`.
    pub fn label(&self) -> &str {
        match self {
            Target::Pack { version, .. } => version,
            Target::Builtin => "built-in",
        }
    }

    /// What `packer release` calls it: the version, or `builtin`.
    pub fn packer_arg(&self) -> &str {
        match self {
            Target::Pack { version, .. } => version,
            Target::Builtin => "builtin",
        }
    }

    pub fn sha256(&self) -> Option<&str> {
        match self {
            Target::Pack { sha256, .. } => Some(sha256),
            Target::Builtin => None,
        }
    }
}

impl Entry {
    pub fn of(entry: &ChannelEntry) -> Entry {
        Entry {
            range: entry.clients.to_string(),
            target: match &entry.target {
                EntryTarget::Pack(r) => Target::Pack {
                    version: r.version.to_string(),
                    sha256: r.sha256.clone(),
                    size: r.size,
                    schema: r.schema,
                },
                EntryTarget::Builtin => Target::Builtin,
            },
            rollout: entry.rollout.as_ref().map(|r| r.percent),
            ramp_to: entry
                .rollout
                .as_ref()
                .and_then(|r| Some(r.ramp.as_ref()?.steps.last()?.percent)),
        }
    }

    /// `>=1.4.0, <1.5.0 → 1.2.0 (rollout 10 %)`.
    pub fn describe(&self) -> String {
        let clients = if self.range == "*" {
            "every release".to_string()
        } else {
            self.range.clone()
        };
        match (self.rollout, self.ramp_to) {
            (Some(p), Some(to)) => format!(
                "{clients} → {} (rollout {p} %, ramping to {to} %)",
                self.target.label()
            ),
            (Some(p), None) => format!("{clients} → {} (rollout {p} %)", self.target.label()),
            (None, _) => format!("{clients} → {}", self.target.label()),
        }
    }
}

/// The entries of a document as signed, in order (a ramp's rollout at its starting
/// percentage).
pub fn entries(doc: &ChannelDocument) -> Vec<Entry> {
    doc.entries
        .iter()
        .enumerate()
        .map(|(i, e)| {
            // A stop order's hold fixes the rollout where it holds it; a revert empties it.
            let held = match doc.restricts.as_ref().and_then(|r| r.stop_for(i)) {
                None => return Entry::of(e),
                Some(pack_format::Stop::Hold { percent, .. }) => *percent,
                Some(pack_format::Stop::Revert { .. }) => 0,
            };
            Entry {
                rollout: Some(held),
                ramp_to: None,
                ..Entry::of(e)
            }
        })
        .collect()
}

/// The entries of a live document as clients read them at `now`: each ramp's rollout at its
/// percentage of now (read at [`ChannelDocument::ramp_time`], as a client with this clock
/// reads it), with where it climbs to only while it still climbs.
pub fn entries_at(doc: &ChannelDocument, now: OffsetDateTime) -> Vec<Entry> {
    let at = doc.ramp_time(now);
    doc.entries
        .iter()
        .enumerate()
        .map(|(i, e)| {
            // A stop order's hold caps the rollout and stops its ramp; a revert empties it.
            let stop = doc.restricts.as_ref().and_then(|r| r.stop_for(i));
            let cap = match stop {
                None => 100,
                Some(pack_format::Stop::Hold { percent, .. }) => *percent,
                Some(pack_format::Stop::Revert { .. }) => 0,
            };
            let climbing = e
                .rollout
                .as_ref()
                .and_then(|r| r.ramp.as_ref())
                .filter(|ramp| stop.is_none() && ramp.end() > at);
            Entry {
                rollout: match (&e.rollout, stop) {
                    (Some(r), _) => Some(r.percent_at(at).min(cap)),
                    (None, Some(_)) => Some(0),
                    (None, None) => None,
                },
                ramp_to: climbing.and_then(|ramp| Some(ramp.steps.last()?.percent)),
                ..Entry::of(e)
            }
        })
        .collect()
}

/// One difference between two documents' entries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Change {
    Added(Entry),
    Removed(Entry),
    /// Same range and target; the rollout percent or its ramp changed (`None`: no rollout,
    /// all of the range). `entry` is the new entry, with the percentage it goes to and where
    /// its ramp climbs to.
    Rollout {
        entry: Entry,
        from: Option<u8>,
        /// Where the old entry's ramp climbed to, if it had one.
        from_ramp: Option<u8>,
        to: Option<u8>,
    },
    PackName {
        from: String,
        to: String,
    },
}

impl Change {
    /// `+`, `−` or `~`, for the eye; the text says the same in words.
    pub fn sign(&self) -> &'static str {
        match self {
            Change::Added(_) => "+",
            Change::Removed(_) => "−",
            Change::Rollout { .. } | Change::PackName { .. } => "~",
        }
    }

    pub fn describe(&self) -> String {
        let percent = |p: Option<u8>, ramp: Option<u8>| match (p, ramp) {
            (Some(p), Some(to)) => format!("{p} % ramping to {to} %"),
            (Some(p), None) => format!("{p} %"),
            (None, _) => "all".to_string(),
        };
        match self {
            Change::Added(e) => format!("added {}", e.describe()),
            Change::Removed(e) => format!("removed {}", e.describe()),
            Change::Rollout {
                entry,
                from,
                from_ramp,
                to,
            } => format!(
                "{} for {}: rollout {} → {}",
                entry.target.label(),
                if entry.range == "*" {
                    "every release"
                } else {
                    &entry.range
                },
                percent(*from, *from_ramp),
                percent(*to, entry.ramp_to)
            ),
            Change::PackName { from, to } => format!("pack {from} → {to}"),
        }
    }
}

/// What changed from `old` (`None`: nothing before, every entry is new) to `new`. Entries are
/// matched by range and target, in order; a matched pair whose rollout differs is one
/// [`Change::Rollout`].
pub fn diff(old: Option<&ChannelDocument>, new: &ChannelDocument) -> Vec<Change> {
    let mut changes = Vec::new();
    let before = old.map(entries).unwrap_or_default();
    let after = entries(new);
    if let Some(old) = old
        && old.pack != new.pack
    {
        changes.push(Change::PackName {
            from: old.pack.clone(),
            to: new.pack.clone(),
        });
    }
    let mut unmatched: Vec<Option<&Entry>> = before.iter().map(Some).collect();
    let mut added = Vec::new();
    for entry in &after {
        let found = unmatched.iter_mut().find(|slot| {
            slot.is_some_and(|old| old.range == entry.range && old.target == entry.target)
        });
        match found.and_then(Option::take) {
            Some(old) if old.rollout != entry.rollout || old.ramp_to != entry.ramp_to => changes
                .push(Change::Rollout {
                    entry: entry.clone(),
                    from: old.rollout,
                    from_ramp: old.ramp_to,
                    to: entry.rollout,
                }),
            Some(_) => {}
            None => added.push(Change::Added(entry.clone())),
        }
    }
    changes.extend(
        unmatched
            .into_iter()
            .flatten()
            .map(|e| Change::Removed(e.clone())),
    );
    changes.extend(added);
    changes
}

/// Quotes `text` for a POSIX shell when it needs it.
pub fn shell_quote(text: &str) -> String {
    let plain = !text.is_empty()
        && text
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_./:=@%+,".contains(&b));
    if plain {
        text.to_string()
    } else {
        format!("'{}'", text.replace('\'', r"'\''"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pack_format::{PackRef, Ramp, Rollout};

    fn entry(range: &str, version: Option<&str>, rollout: Option<u8>) -> ChannelEntry {
        ChannelEntry {
            clients: semver::VersionReq::parse(range).unwrap(),
            target: match version {
                Some(v) => EntryTarget::Pack(PackRef {
                    version: semver::Version::parse(v).unwrap(),
                    sha256: pack_format::sha256_hex(v.as_bytes()),
                    size: 10,
                    schema: 1,
                }),
                None => EntryTarget::Builtin,
            },
            rollout: rollout.map(|percent| Rollout {
                percent,
                salt: "s".into(),
                ramp: None,
                watch: None,
            }),
        }
    }

    fn doc(entries: Vec<ChannelEntry>) -> ChannelDocument {
        ChannelDocument {
            format: 1,
            channel: "stable".into(),
            pack: "core".into(),
            sequence: 1,
            issued_at: OffsetDateTime::UNIX_EPOCH,
            expires_at: OffsetDateTime::UNIX_EPOCH,
            entries,
            guard: None,
            restricts: None,
        }
    }

    #[test]
    fn the_first_document_adds_every_entry() {
        let new = doc(vec![entry("*", Some("1.0.0"), None)]);
        let changes = diff(None, &new);
        assert_eq!(changes.len(), 1);
        assert_eq!(changes[0].describe(), "added every release → 1.0.0");
    }

    #[test]
    fn a_wider_rollout_is_one_change() {
        let range = ">=1.4.0, <1.5.0";
        let old = doc(vec![
            entry(range, Some("1.2.0"), Some(10)),
            entry("*", Some("1.1.0"), None),
        ]);
        let new = doc(vec![
            entry(range, Some("1.2.0"), Some(50)),
            entry("*", Some("1.1.0"), None),
        ]);
        let changes = diff(Some(&old), &new);
        assert_eq!(
            changes.iter().map(Change::describe).collect::<Vec<_>>(),
            ["1.2.0 for >=1.4.0, <1.5.0: rollout 10 % → 50 %"]
        );
    }

    #[test]
    fn a_rollback_removes_the_rollout_and_points_the_range_elsewhere() {
        let range = ">=1.4.0, <1.5.0";
        let old = doc(vec![
            entry(range, Some("1.2.0"), Some(50)),
            entry(range, Some("1.1.0"), None),
        ]);
        let new = doc(vec![entry(range, None, None)]);
        let described: Vec<String> = diff(Some(&old), &new)
            .iter()
            .map(|c| format!("{} {}", c.sign(), c.describe()))
            .collect();
        assert_eq!(
            described,
            [
                "− removed >=1.4.0, <1.5.0 → 1.2.0 (rollout 50 %)",
                "− removed >=1.4.0, <1.5.0 → 1.1.0",
                "+ added >=1.4.0, <1.5.0 → built-in",
            ]
        );
    }

    #[test]
    fn a_renewed_document_changes_no_entry() {
        let old = doc(vec![entry("*", Some("1.0.0"), None)]);
        assert!(diff(Some(&old), &old.clone()).is_empty());
    }

    #[test]
    fn a_live_ramp_reads_at_its_percentage_of_now_and_climbs_until_its_end() {
        let t0 = OffsetDateTime::UNIX_EPOCH + time::Duration::days(20_000);
        let (first, ramp) = Ramp::parse("5,25,100%/1h", t0).unwrap();
        let mut ramping = entry("*", Some("1.1.0"), Some(first));
        ramping.rollout.as_mut().unwrap().ramp = Some(ramp);
        let mut d = doc(vec![ramping, entry("*", Some("1.0.0"), None)]);
        d.issued_at = t0;
        let at = |minutes: i64| entries_at(&d, t0 + time::Duration::minutes(minutes));
        assert_eq!((at(30)[0].rollout, at(30)[0].ramp_to), (Some(5), Some(100)));
        assert_eq!(at(90)[0].rollout, Some(25));
        assert_eq!((at(120)[0].rollout, at(120)[0].ramp_to), (Some(100), None));
        assert_eq!(at(120)[1].rollout, None);
        // As signed, the entry is at its start, ramping to its last step.
        assert_eq!(
            entries(&d)[0].describe(),
            "every release → 1.1.0 (rollout 5 %, ramping to 100 %)"
        );
    }

    #[test]
    fn a_frozen_ramp_is_one_change_from_ramping_to_held() {
        let t0 = OffsetDateTime::UNIX_EPOCH + time::Duration::days(20_000);
        let (first, ramp) = Ramp::parse("5,25,100%/1h", t0).unwrap();
        let mut ramping = entry("*", Some("1.1.0"), Some(first));
        ramping.rollout.as_mut().unwrap().ramp = Some(ramp);
        let old = doc(vec![ramping.clone(), entry("*", Some("1.0.0"), None)]);
        ramping.rollout.as_mut().unwrap().ramp = None;
        let frozen = doc(vec![ramping, entry("*", Some("1.0.0"), None)]);
        let described: Vec<String> = diff(Some(&old), &frozen)
            .iter()
            .map(Change::describe)
            .collect();
        assert_eq!(
            described,
            ["1.1.0 for every release: rollout 5 % ramping to 100 % → 5 %"]
        );
    }

    #[test]
    fn shell_quoting_keeps_a_range_one_argument() {
        assert_eq!(shell_quote("stable"), "stable");
        assert_eq!(shell_quote("*=1.2.0"), "'*=1.2.0'");
        assert_eq!(
            shell_quote(">=1.4.0, <1.5.0=1.2.0@10"),
            "'>=1.4.0, <1.5.0=1.2.0@10'"
        );
        assert_eq!(shell_quote("it's"), r"'it'\''s'");
    }
}
