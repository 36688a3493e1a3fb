//! The guard's invariant as a property: over generated channel documents, stop orders,
//! client releases, installs and times, an install after a stop order serves what it served
//! before, its entry's designated fallback, or the built-in pack, and no pack gains an
//! install except as the fallback of the entry that install left. The orders go through the
//! real path: signed by the guard key, verified against the offline-signed document.

use crate::common;

use std::collections::BTreeSet;

use common::*;
use pack_format::channel;
use pack_format::guard::Restricts;
use pack_format::{
    ChannelDocument, ChannelEntry, EntryTarget, FormatError, Guard, Limits, PackRef, Ramp, Rollout,
    SigningKey, Stop,
};
use proptest::prelude::*;
use time::{Duration, OffsetDateTime};

const RANGES: &[&str] = &["*", ">=2.0.0", "<2.0.0", "^1", ">=2.0.0, <3.0.0", "=2.1.0"];
const RELEASES: &[(u64, u64, u64)] = &[(1, 0, 0), (1, 5, 0), (2, 0, 0), (2, 1, 0), (3, 0, 0)];
const SALTS: &[&str] = &["a", "b", "c"];
const INSTALLS: usize = 150;

fn target(n: u8) -> EntryTarget {
    if n == 0 {
        return EntryTarget::Builtin;
    }
    EntryTarget::Pack(PackRef {
        version: semver::Version::new(u64::from(n), 0, 0),
        sha256: format!("{n:02x}").repeat(32),
        size: 10,
        schema: 1,
    })
}

/// One generated entry: range, target, and maybe a rollout (percent, salt, ramping or not).
type EntrySpec = (usize, u8, Option<(u8, usize, bool)>);

fn entry_spec() -> impl Strategy<Value = EntrySpec> {
    (
        0..RANGES.len(),
        0u8..6,
        proptest::option::of((0u8..=100, 0..SALTS.len(), any::<bool>())),
    )
}

/// The offline-signed document: issued an hour before `now()`, ramps starting then.
fn base_document(specs: &[EntrySpec], guard: &SigningKey) -> ChannelDocument {
    let start = now() - Duration::hours(1);
    let mut doc = document(5);
    doc.issued_at = start;
    doc.guard = Some(Guard::for_key(guard));
    doc.entries = specs
        .iter()
        .map(|&(range, pack, rollout)| ChannelEntry {
            clients: RANGES[range].parse().unwrap(),
            target: target(pack),
            rollout: rollout.map(|(percent, salt, ramps)| Rollout {
                ramp: ramps
                    .then(|| Ramp::parse(&format!("{}%..100%/10h", percent.min(99)), start))
                    .map(|parsed| parsed.unwrap().1),
                percent: if ramps { percent.min(99) } else { percent },
                ..Rollout::fixed(0, SALTS[salt])
            }),
        })
        .collect();
    doc
}

/// Stops on some entries: a hold at a fraction of where the rollout stands at `at`, or a
/// revert. Entries without a rollout are only reverted.
fn stops_for(base: &ChannelDocument, picks: &[(bool, bool, u8)], at: OffsetDateTime) -> Vec<Stop> {
    base.entries
        .iter()
        .zip(picks)
        .enumerate()
        .filter_map(|(entry, (e, &(stopped, hold, fraction)))| {
            if !stopped {
                return None;
            }
            match (&e.rollout, hold) {
                (Some(rollout), true) => {
                    let now = u32::from(rollout.percent_at(at));
                    Some(Stop::Hold {
                        entry,
                        percent: (now * u32::from(fraction) / 255) as u8,
                    })
                }
                (Some(_) | None, _) => Some(Stop::Revert { entry }),
            }
        })
        .collect()
}

fn order(
    base: &ChannelDocument,
    signed: &channel::SignedChannel,
    stops: Vec<Stop>,
    at: OffsetDateTime,
) -> ChannelDocument {
    ChannelDocument {
        sequence: base.sequence + 3,
        issued_at: at,
        entries: Vec::new(),
        guard: None,
        restricts: Some(Restricts {
            document: String::from_utf8(signed.document.clone()).unwrap(),
            signature: signed.signature.clone(),
            stops,
        }),
        ..base.clone()
    }
}

/// The fallback of entry `i` for release `v` as FORMAT.md states it, written out apart from
/// the code under test: for an entry with a rollout, the target of the first later entry
/// without a rollout whose range holds `v`, unless that entry is reverted; else built-in.
fn designated(
    base: &ChannelDocument,
    stops: &[Stop],
    i: usize,
    v: &semver::Version,
) -> EntryTarget {
    if base.entries[i].rollout.is_none() {
        return EntryTarget::Builtin;
    }
    for (j, later) in base.entries.iter().enumerate().skip(i + 1) {
        if later.rollout.is_some() || !later.clients.matches(v) {
            continue;
        }
        if stops.iter().any(|s| s.entry() == j) {
            return EntryTarget::Builtin;
        }
        return later.target.clone();
    }
    EntryTarget::Builtin
}

/// The index of the entry `doc` (offline-signed, no stops) selects.
fn selected_entry(
    doc: &ChannelDocument,
    v: &semver::Version,
    id: &str,
    at: OffsetDateTime,
) -> Option<usize> {
    let at = doc.ramp_time(at);
    doc.entries
        .iter()
        .position(|e| e.clients.matches(v) && e.rollout.as_ref().is_none_or(|r| r.includes(id, at)))
}

fn verify_order(
    signer: &Signer,
    guard: &SigningKey,
    doc: &ChannelDocument,
    at: OffsetDateTime,
) -> Result<channel::VerifiedChannel, FormatError> {
    let signed = doc.sign(guard)?;
    channel::verify(
        &signed.document,
        &signed.signature,
        &signer.trusted,
        at,
        &Limits::DEFAULT,
    )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 160, ..ProptestConfig::default() })]

    #[test]
    fn a_stop_order_only_ever_sends_installs_back(
        specs in proptest::collection::vec(entry_spec(), 1..7),
        picks in proptest::collection::vec((any::<bool>(), any::<bool>(), any::<u8>()), 7),
        signed_after_minutes in 0i64..900,
    ) {
        let signer = signer();
        let guard = SigningKey::generate(None).unwrap().key;
        let base = base_document(&specs, &guard);
        let signed = base.sign(&signer.key).unwrap();
        let at = now() + Duration::minutes(signed_after_minutes);
        let stops = stops_for(&base, &picks, at);
        prop_assume!(!stops.is_empty());
        let verified = verify_order(&signer, &guard, &order(&base, &signed, stops.clone(), at), at)
            .expect("a generated stop order verifies");
        let after_doc = &verified.document;

        for &(major, minor, patch) in RELEASES {
            let v = semver::Version::new(major, minor, patch);
            for hours in [0i64, 1, 4, 30] {
                let t = at + Duration::hours(hours);
                let mut gained: BTreeSet<(String, String)> = BTreeSet::new();
                for n in 0..INSTALLS {
                    let id = format!("install-{n}");
                    let before = base.select(&v, &id, t);
                    let after = after_doc.select(&v, &id, t);
                    if after == before {
                        continue;
                    }
                    let Some(entry) = selected_entry(&base, &v, &id, t) else {
                        prop_assert!(false, "{v} {id} at +{hours}h had no entry, now {after:?}");
                        unreachable!();
                    };
                    let fallback = designated(&base, &stops, entry, &v);
                    prop_assert!(
                        after == Some(&EntryTarget::Builtin) || after == Some(&fallback),
                        "{v} {id} at +{hours}h: entry {entry} served {before:?}, now {after:?}, \
                         its fallback is {fallback:?}"
                    );
                    if let Some(EntryTarget::Pack(p)) = after {
                        gained.insert((p.sha256.clone(), id));
                    }
                }
                // No pack gains an install but as the fallback of the entry it left.
                for (sha, id) in gained {
                    let entry = selected_entry(&base, &v, &id, t).unwrap();
                    prop_assert!(
                        matches!(designated(&base, &stops, entry, &v), EntryTarget::Pack(p) if p.sha256 == sha),
                        "{v} {id}: pack {sha} gained an install it is not the fallback for"
                    );
                }
            }
        }
    }

    #[test]
    fn a_hold_above_where_the_rollout_stood_is_refused(
        percent in 0u8..=99,
        over in 1u8..=100,
        signed_after_minutes in 0i64..900,
    ) {
        let signer = signer();
        let guard = SigningKey::generate(None).unwrap().key;
        let base = base_document(&[(0, 2, Some((percent, 0, true))), (0, 1, None)], &guard);
        let signed = base.sign(&signer.key).unwrap();
        let at = now() + Duration::minutes(signed_after_minutes);
        let stood = base.entries[0].rollout.as_ref().unwrap().percent_at(at);
        prop_assume!(stood < 100);
        let held = stood.saturating_add(over).min(100);
        let wide = order(&base, &signed, vec![Stop::Hold { entry: 0, percent: held }], at);
        let refused = matches!(
            verify_order(&signer, &guard, &wide, at),
            Err(FormatError::GuardOverreach { .. })
        );
        prop_assert!(refused, "a hold at {held}% where the ramp stood at {stood}%");
    }
}
