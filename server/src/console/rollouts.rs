//! Rollouts as a publisher follows them: for each rollout the offline key signed, the
//! percentage clients use now, its ramp's schedule (which steps have landed), what the guard
//! watches, and what a guard document did to it; and the outcome evidence of the rolling-out
//! pack beside the pack it replaces.
//!
//! A stop order names, per entry of the document it restricts, a hold or a revert
//! (`pack_format::guard`); its stops say what the guard did.

use pack_format::{ChannelDocument, EntryTarget, Rollout, Watch};
use pack_protocol::outcomes::{OutcomeCounts, OutcomeRates, OutcomesView};
use time::OffsetDateTime;

use super::entries::{Entry, Target};

/// A live document signed by the guard key, and the offline-signed one it restricts.
#[derive(Debug, Clone)]
pub struct GuardDocument {
    /// The document it restricts, as the offline key signed it (packd verified the pair
    /// before it stored the guard document).
    pub base: ChannelDocument,
    /// When the guard signed.
    pub at: OffsetDateTime,
}

impl GuardDocument {
    /// The stop order `live` is, if it is one.
    pub fn of(live: &ChannelDocument) -> Option<GuardDocument> {
        let restricts = live.restricts.as_ref()?;
        Some(GuardDocument {
            base: restricts.parse_document()?,
            at: live.issued_at,
        })
    }
}

/// What the guard did to a rollout.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Stop {
    /// Held at `percent`, where the ramp stood when the guard signed.
    Frozen { percent: u8 },
    /// Sent the range's installs back to `to`.
    RolledBack { to: Target },
}

/// Where one point of a ramp's schedule stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StepState {
    Landed,
    /// The first step still to come.
    Next,
    Later,
    /// Would have come after the guard stopped the ramp: clients do not take it.
    HeldBack,
}

/// One point of a ramp: from `at`, `percent` of the range.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Step {
    pub at: OffsetDateTime,
    pub percent: u8,
    pub state: StepState,
}

/// One rollout of the offline-signed document, as clients see it now.
#[derive(Debug, Clone)]
pub struct LiveRollout {
    /// Its index among the document's entries (the guard's `entry`).
    pub index: usize,
    /// The entry as the offline key signed it (at its starting percentage).
    pub entry: Entry,
    /// The rollout as signed: salt, ramp, watch.
    pub signed: Rollout,
    /// What it replaces ([`ChannelDocument::replaced`]).
    pub replaces: Target,
    /// The percentage clients use now (0 once rolled back).
    pub percent: u8,
    pub stop: Option<Stop>,
    /// When the guard signed, if it stopped this rollout.
    pub stopped_at: Option<OffsetDateTime>,
}

impl LiveRollout {
    pub fn watch(&self) -> Option<&Watch> {
        self.signed.watch.as_ref()
    }

    /// The ramp's start and every step, each with where it stands at `now` (empty without a
    /// ramp). `ramp_time` is the live document's [`ChannelDocument::ramp_time`] of now.
    pub fn schedule(&self, ramp_time: OffsetDateTime) -> Vec<Step> {
        let Some(ramp) = &self.signed.ramp else {
            return Vec::new();
        };
        let mut next_seen = false;
        std::iter::once((ramp.start, self.signed.percent))
            .chain(ramp.landings())
            .map(|(at, percent)| {
                let state = match self.stopped_at {
                    Some(stopped) if at > stopped => StepState::HeldBack,
                    _ if at <= ramp_time => StepState::Landed,
                    _ if next_seen => StepState::Later,
                    _ => {
                        next_seen = true;
                        StepState::Next
                    }
                };
                Step { at, percent, state }
            })
            .collect()
    }
}

fn target(t: &EntryTarget) -> Target {
    match t {
        EntryTarget::Pack(p) => Target::Pack {
            version: p.version.to_string(),
            sha256: p.sha256.clone(),
            size: p.size,
            schema: p.schema,
        },
        EntryTarget::Builtin => Target::Builtin,
    }
}

/// Every rollout of the offline-signed document behind `live` (`live` itself, or the one
/// `guard` restricts), in entry order, with what clients use at `now`.
pub fn live_rollouts(
    live: &ChannelDocument,
    guard: Option<&GuardDocument>,
    now: OffsetDateTime,
) -> Vec<LiveRollout> {
    let at = live.ramp_time(now);
    let base = guard.map_or(live, |g| &g.base);
    let stops = live.restricts.as_ref();
    base.entries
        .iter()
        .enumerate()
        .filter_map(|(index, signed)| {
            let rollout = signed.rollout.as_ref()?;
            let stop = stops
                .and_then(|r| r.stop_for(index))
                .map(|stop| match *stop {
                    pack_format::Stop::Hold { percent, .. } => Stop::Frozen {
                        percent: percent.min(rollout.percent_at(at)),
                    },
                    pack_format::Stop::Revert { .. } => Stop::RolledBack {
                        to: fallback_target(live, index),
                    },
                });
            let percent = match &stop {
                Some(Stop::RolledBack { .. }) => 0,
                Some(Stop::Frozen { percent }) => *percent,
                None => rollout.percent_at(at),
            };
            Some(LiveRollout {
                index,
                entry: Entry::of(signed),
                signed: rollout.clone(),
                replaces: fallback_target(live, index),
                percent,
                stopped_at: stop.as_ref().and(guard.map(|g| g.at)),
                stop,
            })
        })
        .collect()
}

/// Where a stop sends the installs of entry `index` (`ChannelDocument::fallback`); where that
/// depends on the release, the console compares with the built-in pack.
fn fallback_target(live: &ChannelDocument, index: usize) -> Target {
    target(live.range_fallback(index).unwrap_or(&EntryTarget::Builtin))
}

/// The outcome counts of one pack on the client releases of one range.
#[derive(Debug, Clone, PartialEq)]
pub struct Side {
    pub target: Target,
    /// Installs that reported, added up over the releases (an install that changed release
    /// in the window counts once for each).
    pub installs: u64,
    pub counts: OutcomeCounts,
    pub rates: OutcomeRates,
}

/// The counts of `target` summed over the rows of `view` whose client release `clients`
/// matches, as the guard sums them.
pub fn side(view: &OutcomesView, clients: &str, target: &Target) -> Side {
    let range = semver::VersionReq::parse(clients).ok();
    let key = target.sha256().unwrap_or("builtin");
    let mut counts = OutcomeCounts::default();
    let mut installs = 0u64;
    for row in view.rows.iter().filter(|r| {
        r.pack == key
            && range
                .as_ref()
                .is_some_and(|range| range.matches(&r.client_version))
    }) {
        counts.sum(&row.counts);
        installs = installs.saturating_add(row.installs);
    }
    Side {
        target: target.clone(),
        installs,
        rates: OutcomeRates::of(&counts),
        counts,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pack_format::channel::SignedChannel;
    use pack_format::guard::{GuardAction, guard_document};
    use pack_format::{ChannelEntry, PackRef, Ramp, WatchAction};
    use pack_protocol::outcomes::OutcomeRow;

    const T0: OffsetDateTime = time::macros::datetime!(2026-12-01 00:00 UTC);

    fn pack(version: &str) -> EntryTarget {
        EntryTarget::Pack(PackRef {
            version: semver::Version::parse(version).unwrap(),
            sha256: pack_format::sha256_hex(version.as_bytes()),
            size: 10,
            schema: 1,
        })
    }

    /// 1.1.0 ramping over 1.0.0 for 1.4.x, 5 % at T0 then 25, 50, 100 % an hour apart.
    fn ramping() -> ChannelDocument {
        let range: semver::VersionReq = ">=1.4.0, <1.5.0".parse().unwrap();
        let (first, ramp) = Ramp::parse("5,25,50,100%/1h", T0).unwrap();
        ChannelDocument {
            format: 1,
            channel: "stable".into(),
            pack: "core".into(),
            sequence: 1,
            issued_at: T0,
            expires_at: T0 + time::Duration::days(30),
            entries: vec![
                ChannelEntry {
                    clients: range.clone(),
                    target: pack("1.1.0"),
                    rollout: Some(Rollout {
                        percent: first,
                        salt: "s".into(),
                        ramp: Some(ramp),
                        watch: Some(Watch {
                            metrics: vec!["tool_error_rate".into()],
                            action: WatchAction::Freeze,
                        }),
                    }),
                },
                ChannelEntry {
                    clients: range,
                    target: pack("1.0.0"),
                    rollout: None,
                },
            ],
            guard: None,
            restricts: None,
        }
    }

    fn guarded(base: &ChannelDocument, action: GuardAction, at: OffsetDateTime) -> ChannelDocument {
        let signed = SignedChannel {
            document: base.to_bytes(),
            signature: "sig".into(),
        };
        let order = guard_document(&signed, base, 0, action, at).unwrap();
        pack_format::guard::effective(&order).unwrap()
    }

    fn states(steps: &[Step]) -> Vec<(u8, StepState)> {
        steps.iter().map(|s| (s.percent, s.state)).collect()
    }

    #[test]
    fn a_ramp_shows_which_steps_landed_and_which_comes_next() {
        let doc = ramping();
        let now = T0 + time::Duration::minutes(90);
        let rollouts = live_rollouts(&doc, None, now);
        assert_eq!(rollouts.len(), 1);
        let r = &rollouts[0];
        assert_eq!((r.percent, r.stop.clone()), (25, None));
        assert_eq!(r.replaces.label(), "1.0.0");
        use StepState::*;
        assert_eq!(
            states(&r.schedule(doc.ramp_time(now))),
            [(5, Landed), (25, Landed), (50, Next), (100, Later)]
        );
    }

    #[test]
    fn a_freeze_holds_the_percentage_and_holds_back_the_later_steps() {
        let base = ramping();
        let frozen_at = T0 + time::Duration::minutes(70);
        let live = guarded(&base, GuardAction::Freeze, frozen_at);
        let guard = GuardDocument::of(&live).expect("a guard document");
        assert_eq!(guard.base.sequence, 1);
        // Hours later the ramp would be at 100 %; clients hold 25 %.
        let now = T0 + time::Duration::hours(5);
        let r = &live_rollouts(&live, Some(&guard), now)[0];
        assert_eq!(r.stop, Some(Stop::Frozen { percent: 25 }));
        assert_eq!((r.percent, r.stopped_at), (25, Some(frozen_at)));
        use StepState::*;
        assert_eq!(
            states(&r.schedule(live.ramp_time(now))),
            [(5, Landed), (25, Landed), (50, HeldBack), (100, HeldBack)]
        );
    }

    #[test]
    fn a_rollback_sends_the_range_to_what_the_rollout_replaced() {
        let base = ramping();
        let live = guarded(
            &base,
            GuardAction::Rollback,
            T0 + time::Duration::minutes(10),
        );
        let guard = GuardDocument::of(&live).unwrap();
        let r = &live_rollouts(&live, Some(&guard), T0 + time::Duration::hours(1))[0];
        assert_eq!(r.entry.target.label(), "1.1.0");
        assert_eq!(r.percent, 0);
        match &r.stop {
            Some(Stop::RolledBack { to }) => assert_eq!(to.label(), "1.0.0"),
            other => panic!("{other:?}"),
        }
        assert!(GuardDocument::of(&base).is_none());
    }

    #[test]
    fn evidence_sums_the_releases_of_the_range_only() {
        let row = |pack: &str, release: &str, calls: u64, errors: u64| {
            let counts = OutcomeCounts {
                turns: calls,
                tool_calls: calls,
                tool_errors: errors,
                ..OutcomeCounts::default()
            };
            OutcomeRow {
                pack: pack.to_string(),
                pack_name: "core".into(),
                pack_version: "1.1.0".parse().unwrap(),
                client_version: release.parse().unwrap(),
                installs: 2,
                reports: 2,
                rates: OutcomeRates::of(&counts),
                counts,
            }
        };
        let new = Entry::of(&ramping().entries[0]).target;
        let sha = new.sha256().unwrap().to_string();
        let view = OutcomesView {
            channel: "stable".into(),
            days: vec![],
            confidence: 0.95,
            rows: vec![
                row(&sha, "1.4.0", 100, 10),
                row(&sha, "1.4.7", 300, 10),
                row(&sha, "1.5.0", 1000, 900),
                row("builtin", "1.4.0", 50, 50),
            ],
            overflow: false,
            sources: 1,
        };
        let s = side(&view, ">=1.4.0, <1.5.0", &new);
        assert_eq!((s.installs, s.counts.tool_calls), (4, 400));
        assert_eq!(s.rates.tool_error_rate.events, 20);
        let builtin = side(&view, ">=1.4.0, <1.5.0", &Target::Builtin);
        assert_eq!(builtin.counts.tool_errors, 50);
    }
}
