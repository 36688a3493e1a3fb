//! Entry selection: client version ranges, staged rollouts, and the builtin directive.

use crate::common;

use common::*;
use pack_format::{ChannelEntry, EntryTarget, PackRef, Rollout, rollout_bucket};

fn pack(version: &str) -> EntryTarget {
    EntryTarget::Pack(PackRef {
        version: version.parse().unwrap(),
        sha256: "cd".repeat(32),
        size: 10,
        schema: 1,
    })
}

fn entry(range: &str, target: EntryTarget, rollout: Option<(u8, &str)>) -> ChannelEntry {
    ChannelEntry {
        clients: range.parse().unwrap(),
        target,
        rollout: rollout.map(|(percent, salt)| Rollout {
            percent,
            salt: salt.to_string(),
            ramp: None,
            watch: None,
        }),
    }
}

#[test]
fn clients_get_the_pack_pinned_to_their_range() {
    let mut doc = document(1);
    doc.entries = vec![
        entry(">=1.4.0, <1.5.0", pack("1.0.0"), None),
        entry(">=1.5.0", pack("2.0.0"), None),
    ];
    let v142 = semver::Version::new(1, 4, 2);
    let v150 = semver::Version::new(1, 5, 0);
    let v130 = semver::Version::new(1, 3, 0);
    assert_eq!(*doc.select(&v142, "id", now()).unwrap(), pack("1.0.0"));
    assert_eq!(*doc.select(&v150, "id", now()).unwrap(), pack("2.0.0"));
    assert!(doc.select(&v130, "id", now()).is_none());
}

#[test]
fn a_ten_percent_rollout_holds_per_install_and_shrinks_monotonically() {
    let ids: Vec<String> = (0..1000).map(|i| format!("install-{i}")).collect();
    let mut doc = document(1);
    doc.entries = vec![
        entry("*", pack("2.0.0"), Some((10, "rollout-2"))),
        entry("*", pack("1.0.0"), None),
    ];
    let v = semver::Version::new(1, 4, 0);
    let on_new: Vec<&String> = ids
        .iter()
        .filter(|id| *doc.select(&v, id, now()).unwrap() == pack("2.0.0"))
        .collect();
    assert!(
        (70..=130).contains(&on_new.len()),
        "10% ± 3 of 1000, got {}",
        on_new.len()
    );
    // Stable: asking again gives the same answer.
    for id in &on_new {
        assert_eq!(*doc.select(&v, id, now()).unwrap(), pack("2.0.0"));
    }
    // Lowering the percentage takes installs back, and never adds new ones.
    doc.entries[0].rollout.as_mut().unwrap().percent = 5;
    let still: Vec<&String> = ids
        .iter()
        .filter(|id| *doc.select(&v, id, now()).unwrap() == pack("2.0.0"))
        .collect();
    assert!(still.len() < on_new.len());
    assert!(still.iter().all(|id| on_new.contains(id)));
}

#[test]
fn buckets_spread_evenly_and_depend_on_the_salt() {
    let mut counts = [0u32; 100];
    for i in 0..10_000 {
        counts[rollout_bucket("salt", &format!("id-{i}")) as usize] += 1;
    }
    assert!(
        counts.iter().all(|&c| (50..=150).contains(&c)),
        "{counts:?}"
    );
    let differ = (0..100)
        .filter(|i| {
            rollout_bucket("a", &format!("id-{i}")) != rollout_bucket("b", &format!("id-{i}"))
        })
        .count();
    assert!(differ > 80);
}

#[test]
fn a_builtin_entry_sends_clients_back_to_the_embedded_pack() {
    let mut doc = document(9);
    doc.entries = vec![
        entry(">=1.5.0", EntryTarget::Builtin, None),
        entry("*", pack("1.0.0"), None),
    ];
    assert_eq!(
        doc.select(&semver::Version::new(1, 5, 3), "x", now())
            .unwrap()
            .clone(),
        EntryTarget::Builtin
    );
    assert_eq!(
        doc.select(&semver::Version::new(1, 4, 3), "x", now())
            .unwrap()
            .clone(),
        pack("1.0.0")
    );
}

#[test]
fn channel_documents_round_trip_through_json() {
    let doc = document(4);
    let bytes = doc.to_bytes();
    let text = String::from_utf8(bytes.clone()).unwrap();
    assert!(text.contains("\"builtin\""), "{text}");
    let back: pack_format::ChannelDocument = serde_json::from_slice(&bytes).unwrap();
    assert_eq!(back, doc);
}
