//! Ramps and the guard key: a ramp grows on its signed schedule with sticky buckets; a
//! document signed by the guard key is accepted only when it is a stop order within what the
//! document it restricts allows.

use crate::common;

use common::*;
use pack_format::channel::{self, SignedChannel, VerifiedChannel};
use pack_format::guard::{self, GuardAction, guard_document};
use pack_format::{
    ChannelDocument, ChannelEntry, EntryTarget, FormatError, Guard, Limits, PackRef, Ramp, Rollout,
    SigningKey, Stop,
};
use time::{Duration, OffsetDateTime};

fn pack(version: &str, byte: &str) -> EntryTarget {
    EntryTarget::Pack(PackRef {
        version: version.parse().unwrap(),
        sha256: byte.repeat(32),
        size: 10,
        schema: 1,
    })
}

/// A channel ramping 1.3.0 to clients 0.1.x over 72 hours from `now() - 1h`, over 1.2.0 for
/// the rest, delegating stops to `guard`.
fn ramping(sequence: u64, guard: &SigningKey) -> ChannelDocument {
    let start = now() - Duration::hours(1);
    let (first, ramp) = Ramp::parse("1,5,25,100%/24h", start).unwrap();
    let mut doc = document(sequence);
    doc.issued_at = start;
    doc.entries = vec![
        ChannelEntry {
            clients: ">=0.1.0, <0.2.0".parse().unwrap(),
            target: pack("1.3.0", "13"),
            rollout: Some(Rollout {
                percent: first,
                salt: "ramp-1.3.0".to_string(),
                ramp: Some(ramp),
                watch: None,
            }),
        },
        ChannelEntry {
            clients: ">=0.1.0, <0.2.0".parse().unwrap(),
            target: pack("1.2.0", "12"),
            rollout: None,
        },
    ];
    doc.guard = Some(Guard::for_key(guard));
    doc
}

struct Setup {
    signer: Signer,
    guard: SigningKey,
    base: SignedChannel,
    base_doc: ChannelDocument,
}

fn setup() -> Setup {
    let signer = signer();
    let guard = SigningKey::generate(None).unwrap().key;
    let base_doc = ramping(10, &guard);
    let base = base_doc.sign(&signer.key).unwrap();
    Setup {
        signer,
        guard,
        base,
        base_doc,
    }
}

fn verify(
    s: &Setup,
    doc: &ChannelDocument,
    key: &SigningKey,
) -> Result<VerifiedChannel, FormatError> {
    let signed = doc.sign(key).unwrap();
    channel::verify(
        &signed.document,
        &signed.signature,
        &s.signer.trusted,
        now() + Duration::hours(30),
        &Limits::DEFAULT,
    )
}

/// The stops of a stop order.
fn stops(doc: &mut ChannelDocument) -> &mut Vec<Stop> {
    &mut doc.restricts.as_mut().unwrap().stops
}

/// The installs out of 2000 on `target` at `at`, for a 0.1.5 client.
fn on(doc: &ChannelDocument, target: &EntryTarget, at: OffsetDateTime) -> Vec<String> {
    let v = semver::Version::new(0, 1, 5);
    (0..2000)
        .map(|i| format!("install-{i}"))
        .filter(|id| doc.select(&v, id, at) == Some(target))
        .collect()
}

/// What the guard signs at `now() + 30h` (the ramp at 5%) to `action` entry 0 of the base.
fn acting(s: &Setup, action: GuardAction) -> ChannelDocument {
    guard_document(&s.base, &s.base_doc, 0, action, now() + Duration::hours(30)).unwrap()
}

fn overreach(result: Result<VerifiedChannel, FormatError>, needle: &str) {
    match result {
        Err(FormatError::GuardOverreach { reason }) => {
            assert!(reason.contains(needle), "{needle:?} not in {reason:?}")
        }
        other => panic!("expected GuardOverreach ({needle}), got {other:?}"),
    }
}

#[test]
fn a_ramp_grows_on_its_schedule_and_an_install_once_in_stays_in() {
    let guard = SigningKey::generate(None).unwrap().key;
    let doc = ramping(1, &guard);
    let mut before: Vec<String> = Vec::new();
    for (hours, percent) in [(0, 1), (24, 5), (48, 25), (72, 100)] {
        let now_in = on(&doc, &pack("1.3.0", "13"), now() + Duration::hours(hours));
        let expected = 2000 * percent / 100;
        assert!(
            now_in.len().abs_diff(expected) <= expected / 3 + 10,
            "at {hours}h: {} in, expected about {expected}",
            now_in.len()
        );
        assert!(
            before.iter().all(|id| now_in.contains(id)),
            "an install left the ramp"
        );
        before = now_in;
    }
}

#[test]
fn a_clock_far_behind_the_signing_time_holds_the_starting_percentage() {
    let guard = SigningKey::generate(None).unwrap().key;
    let mut doc = ramping(1, &guard);
    // Signed two days into the ramp, when it stood at 25%.
    doc.issued_at = now() + Duration::hours(47);
    let rollout = doc.entries[0].rollout.clone().unwrap();
    let behind = doc.issued_at - Duration::hours(1);
    assert_eq!(rollout.percent_at(doc.ramp_time(behind)), 1);
    let close = doc.issued_at - Duration::minutes(5);
    assert_eq!(rollout.percent_at(doc.ramp_time(close)), 5);
}

#[test]
fn a_freeze_holds_the_installs_in_and_sends_the_later_ones_to_the_fallback() {
    let s = setup();
    let frozen = acting(&s, GuardAction::Freeze);
    assert!(frozen.entries.is_empty(), "a stop order carries no entries");
    assert_eq!(
        frozen.restricts.as_ref().unwrap().stops,
        [Stop::Hold {
            entry: 0,
            percent: 5
        }]
    );
    let verified = verify(&s, &frozen, &s.guard).unwrap();
    assert_eq!(verified.key_id, s.guard.key_id());
    assert_eq!(verified.base.as_ref().unwrap().document.sequence, 10);
    // Frozen: days later the entry still has the installs it had, and the ones the ramp
    // would have taken since stay on 1.2.0.
    let at_freeze = on(
        &s.base_doc,
        &pack("1.3.0", "13"),
        now() + Duration::hours(30),
    );
    let later = now() + Duration::hours(100);
    assert_eq!(
        on(&verified.document, &pack("1.3.0", "13"), later),
        at_freeze
    );
    assert_eq!(
        on(&verified.document, &pack("1.2.0", "12"), later).len(),
        2000 - at_freeze.len()
    );
}

#[test]
fn a_rollback_sends_every_install_of_the_entry_to_its_fallback() {
    let s = setup();
    let back = acting(&s, GuardAction::Rollback);
    assert_eq!(
        back.restricts.as_ref().unwrap().stops,
        [Stop::Revert { entry: 0 }]
    );
    let verified = verify(&s, &back, &s.guard).unwrap();
    let later = now() + Duration::hours(100);
    assert!(on(&verified.document, &pack("1.3.0", "13"), later).is_empty());
    assert_eq!(
        on(&verified.document, &pack("1.2.0", "12"), later).len(),
        2000
    );
    // Reverting the entry under it sends everyone to the built-in pack.
    let mut both = back.clone();
    stops(&mut both).push(Stop::Revert { entry: 1 });
    let verified = verify(&s, &both, &s.guard).unwrap();
    assert_eq!(
        on(&verified.document, &EntryTarget::Builtin, later).len(),
        2000
    );
}

#[test]
fn a_hold_above_the_percentage_when_signed_is_refused() {
    let s = setup();
    let mut wide = acting(&s, GuardAction::Freeze);
    stops(&mut wide)[0] = Stop::Hold {
        entry: 0,
        percent: 25,
    };
    overreach(
        verify(&s, &wide, &s.guard),
        "holds entry 0 at 25% where its rollout stood at 5%",
    );
}

#[test]
fn a_hold_on_an_entry_without_a_rollout_is_refused() {
    let s = setup();
    let mut hold = acting(&s, GuardAction::Freeze);
    stops(&mut hold).push(Stop::Hold {
        entry: 1,
        percent: 0,
    });
    overreach(verify(&s, &hold, &s.guard), "no rollout to hold");
}

#[test]
fn a_guard_document_with_entries_of_its_own_is_refused() {
    // The rewrite a guard could once sign: the offline document with one entry changed.
    let s = setup();
    let mut rewritten = acting(&s, GuardAction::Freeze);
    rewritten.entries = s.base_doc.entries.clone();
    rewritten.entries[1].rollout = Some(Rollout::fixed(0, "added"));
    overreach(verify(&s, &rewritten, &s.guard), "carries 2 entries");
}

#[test]
fn a_stop_on_an_entry_that_does_not_exist_or_twice_is_refused() {
    let s = setup();
    let mut missing = acting(&s, GuardAction::Rollback);
    stops(&mut missing)[0] = Stop::Revert { entry: 7 };
    overreach(verify(&s, &missing, &s.guard), "has 2 entries");
    let mut twice = acting(&s, GuardAction::Rollback);
    stops(&mut twice).push(Stop::Hold {
        entry: 0,
        percent: 1,
    });
    overreach(verify(&s, &twice, &s.guard), "stops entry 0 twice");
    let mut none = acting(&s, GuardAction::Rollback);
    stops(&mut none).clear();
    overreach(verify(&s, &none, &s.guard), "carries 0 stops");
}

#[test]
fn a_guard_document_that_extends_the_expiry_is_refused() {
    let s = setup();
    let mut long = acting(&s, GuardAction::Freeze);
    long.expires_at += Duration::days(1);
    overreach(verify(&s, &long, &s.guard), "extends the expiry");
}

#[test]
fn a_guard_document_that_names_a_guard_key_is_refused() {
    let s = setup();
    let mut other = acting(&s, GuardAction::Freeze);
    other.guard = Some(Guard::for_key(&SigningKey::generate(None).unwrap().key));
    overreach(verify(&s, &other, &s.guard), "names a guard key");
}

#[test]
fn a_key_the_offline_key_did_not_delegate_is_refused() {
    let s = setup();
    let stranger = SigningKey::generate(None).unwrap().key;
    let frozen = acting(&s, GuardAction::Freeze);
    match verify(&s, &frozen, &stranger) {
        Err(FormatError::GuardNotDelegated {
            key_id, sequence, ..
        }) => {
            assert_eq!(key_id, stranger.key_id());
            assert_eq!(sequence, 10);
        }
        other => panic!("expected GuardNotDelegated, got {other:?}"),
    }
}

#[test]
fn a_channel_without_a_guard_delegates_to_no_one() {
    let s = setup();
    let mut plain = s.base_doc.clone();
    plain.guard = None;
    let base = plain.sign(&s.signer.key).unwrap();
    let frozen = guard_document(&base, &plain, 0, GuardAction::Freeze, now()).unwrap();
    assert!(matches!(
        verify(&s, &frozen, &s.guard),
        Err(FormatError::GuardNotDelegated { .. })
    ));
}

#[test]
fn a_guard_document_dated_ahead_of_the_clock_is_refused() {
    let s = setup();
    // Dated 50h in, when the ramp stands at 25%, read 30h in.
    let ahead = guard_document(
        &s.base,
        &s.base_doc,
        0,
        GuardAction::Freeze,
        now() + Duration::hours(50),
    )
    .unwrap();
    overreach(verify(&s, &ahead, &s.guard), "ahead of this clock");
}

#[test]
fn a_trusted_key_does_not_sign_guard_documents() {
    let s = setup();
    let frozen = acting(&s, GuardAction::Freeze);
    overreach(verify(&s, &frozen, &s.signer.key), "not guard documents");
}

#[test]
fn a_second_guard_document_cannot_undo_the_first() {
    let s = setup();
    let verify_at = |doc: &ChannelDocument, at: OffsetDateTime| {
        let signed = doc.sign(&s.guard).unwrap();
        channel::verify(
            &signed.document,
            &signed.signature,
            &s.signer.trusted,
            at,
            &Limits::DEFAULT,
        )
        .unwrap()
    };
    let live = verify_at(
        &acting(&s, GuardAction::Rollback),
        now() + Duration::hours(30),
    );
    // A day later, an order restricting the same base that only holds entry 0 at 25%: within
    // the base, but it undoes the revert clients follow.
    let at = now() + Duration::hours(50);
    let mut undo = guard_document(&s.base, &s.base_doc, 0, GuardAction::Freeze, at).unwrap();
    undo.sequence = live.document.sequence + 1;
    let undo = verify_at(&undo, at);
    match guard::check_live(&undo, &live.document) {
        Err(FormatError::GuardOverreach { reason }) => {
            assert!(
                reason.contains("it undoes \"entry 0 reverted\""),
                "{reason}"
            )
        }
        other => panic!("expected GuardOverreach, got {other:?}"),
    }
    // Reverting another entry on top of the rollback keeps it, and is fine.
    let on_top = guard_document(&s.base, &live.document, 1, GuardAction::Rollback, at).unwrap();
    assert_eq!(
        on_top.restricts.as_ref().unwrap().stops,
        [Stop::Revert { entry: 0 }, Stop::Revert { entry: 1 }]
    );
    guard::check_live(&verify_at(&on_top, at), &live.document).unwrap();
    // A hold is kept by a lower hold or a revert, not by a higher hold.
    let held = verify_at(
        &acting(&s, GuardAction::Freeze),
        now() + Duration::hours(30),
    );
    let mut higher = guard_document(&s.base, &s.base_doc, 0, GuardAction::Freeze, at).unwrap();
    higher.sequence = held.document.sequence + 1;
    assert!(guard::check_live(&verify_at(&higher, at), &held.document).is_err());
    let rolled = guard_document(&s.base, &held.document, 0, GuardAction::Rollback, at).unwrap();
    guard::check_live(&verify_at(&rolled, at), &held.document).unwrap();
}

#[test]
fn a_guard_document_for_an_older_release_is_refused() {
    let s = setup();
    let frozen = verify(&s, &acting(&s, GuardAction::Freeze), &s.guard).unwrap();
    let mut newer = s.base_doc.clone();
    newer.sequence = 20;
    let signed = newer.sign(&s.signer.key).unwrap();
    let live = channel::verify(
        &signed.document,
        &signed.signature,
        &s.signer.trusted,
        now(),
        &Limits::DEFAULT,
    )
    .unwrap();
    match guard::check_live(&frozen, &live.document) {
        Err(FormatError::GuardOverreach { reason }) => {
            assert!(reason.contains("older than sequence 20"), "{reason}")
        }
        other => panic!("expected GuardOverreach, got {other:?}"),
    }
}
