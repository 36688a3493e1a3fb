//! The channel page's guarded-rollout parts: a banner for each rollout a guard document froze
//! or rolled back (with the command that resumes it), each rollout's ramp schedule, its
//! outcome evidence beside the version it replaces and the guard's test of it, and the
//! guard's decisions with their reasons.

use maud::{Markup, html};
use pack_format::channel::format_time;
use pack_format::{ChannelDocument, WatchAction};
use pack_protocol::OutcomesView;
use pack_protocol::guard::{Decision, EntryLook, GuardView, MetricLook};
use time::OffsetDateTime;

use crate::console::ConsoleState;
use crate::console::entries::shell_quote;
use crate::console::layout::{percent, points, rate_interval, ratio, rollout_bar, when};
use crate::console::rollouts::{GuardDocument, LiveRollout, Side, StepState, Stop, side};
use crate::error::ApiError;
use crate::model::rfc3339;

/// Decisions listed on the page (the API gives every stored one).
pub const DECISIONS_SHOWN: usize = 20;

/// What the fleet says about a channel's rollouts.
pub struct Evidence {
    /// Outcome counts over the guard's window.
    pub outcomes: OutcomesView,
    pub guard: GuardView,
    /// The test's look at each watched rollout: the guard's latest on the live document,
    /// else computed for this page with the same code and settings.
    pub looks: Vec<EntryLook>,
    /// When the guard looked, if `looks` is its own.
    pub looked_at: Option<String>,
    pub window_days: u32,
}

/// Reads the evidence of `channel`'s rollouts: the outcome counts over the guard's window,
/// the guard's view, and its look (or this page's, the same computation) at the live document.
pub async fn evidence(
    state: &ConsoleState,
    channel: &str,
    live: &ChannelDocument,
    now: OffsetDateTime,
) -> Result<Evidence, ApiError> {
    let app = &state.app;
    let window_days = app.settings.guard.window_days;
    let outcomes = app
        .fleet
        .outcomes()
        .view(&app.storage, channel, window_days, now)
        .await?;
    let view = crate::guard::view(app, channel).await?;
    let (looks, looked_at) = match &view.last {
        Some(last) if last.sequence == live.sequence => {
            (last.entries.clone(), Some(rfc3339(last.at)))
        }
        Some(_) | None => {
            let evidence = app
                .fleet
                .outcomes()
                .evidence(&app.storage, channel, window_days, now)
                .await?;
            let looks = crate::guard::entry_looks(live, &evidence, &app.settings.guard.test, now);
            (looks, None)
        }
    };
    Ok(Evidence {
        outcomes,
        guard: view,
        looks,
        looked_at,
        window_days,
    })
}

/// What the rollout parts of a channel page are drawn from.
pub struct Rollouts<'a> {
    pub channel: &'a str,
    pub live: &'a ChannelDocument,
    pub guard: Option<&'a GuardDocument>,
    pub rollouts: &'a [LiveRollout],
    /// `packer release CHANNEL --server URL --keys KEYS`.
    pub command: &'a str,
    /// `None` when this viewer sees no fleet data.
    pub evidence: Option<&'a Evidence>,
    /// The key id the offline-signed document names as its guard.
    pub guard_key: Option<String>,
    /// Whether this packd holds that key, and how often it looks.
    pub holds_key: bool,
    pub interval_secs: u64,
    pub now: OffsetDateTime,
}

impl Rollouts<'_> {
    fn clients(range: &str) -> &str {
        if range == "*" { "every release" } else { range }
    }

    /// The decision that signed the live guard document about entry `index`.
    fn decision(&self, index: usize) -> Option<&Decision> {
        self.evidence?
            .guard
            .decisions
            .iter()
            .find(|d| d.sequence == self.live.sequence && d.entry == index)
    }

    /// The commands that undo what the guard did, first on the page's "change this" box.
    pub fn commands(&self) -> Vec<(String, String)> {
        let mut commands = Vec::new();
        for r in self.rollouts {
            let range = &r.entry.range;
            match &r.stop {
                Some(Stop::Frozen { percent }) => commands.push((
                    format!(
                        "Resume the ramp of {} from {percent} % (the offline key replaces the guard's document):",
                        r.entry.target.label()
                    ),
                    format!("{} --resume {}", self.command, shell_quote(range)),
                )),
                Some(Stop::RolledBack { to }) => commands.push((
                    format!(
                        "Keep the guard's rollback of {} as your own (signed with the offline key):",
                        r.entry.target.label()
                    ),
                    format!(
                        "{} --rollback {}",
                        self.command,
                        shell_quote(&format!("{range}={}", to.packer_arg()))
                    ),
                )),
                None => {}
            }
        }
        commands
    }

    /// A banner per rollout the live guard document froze or rolled back.
    pub fn stops(&self) -> Markup {
        let Some(guard) = self.guard else {
            return html! {};
        };
        let at = format_time(guard.at);
        let restricts = guard.base.sequence;
        html! {
            @for r in self.rollouts {
                @let version = r.entry.target.label();
                @let clients = Self::clients(&r.entry.range);
                @if let Some(stop) = &r.stop {
                    section class="stopped" aria-labelledby={ "stop-" (r.index) } data-version=(version) {
                        @match stop {
                            Stop::Frozen { percent } => {
                                h2 id={ "stop-" (r.index) } { "The rollout of " (version) " is frozen by the guard" }
                                p class="verdict" {
                                    "Frozen at " (percent) " % by the guard at " (when(&at, self.now))
                                    " (restricts sequence "
                                    a href={ "/console/channels/" (self.channel) "/history/" (restricts) } { (restricts) }
                                    ")."
                                }
                                p {
                                    "The live document, sequence " (self.live.sequence) ", is signed by the guard key: "
                                    "installs of " (clients) " stay on " (version) " at " (percent)
                                    " % and the ramp's later steps are held back. The guard can only hold back or "
                                    "roll back; clients refuse anything else it signs."
                                }
                            }
                            Stop::RolledBack { to } => {
                                h2 id={ "stop-" (r.index) } { "The rollout of " (version) " is rolled back by the guard" }
                                p class="verdict" {
                                    "Rolled back by the guard at " (when(&at, self.now))
                                    " (restricts sequence "
                                    a href={ "/console/channels/" (self.channel) "/history/" (restricts) } { (restricts) }
                                    "): installs of " (clients) " get " (to.label()) " again."
                                }
                            }
                        }
                        @if let Some(d) = self.decision(r.index) {
                            p { "Why: " (d.reason) }
                        }
                        @match stop {
                            Stop::Frozen { percent } => {
                                p { "Resuming takes the offline signing key; the ramp continues from "
                                    (percent) " %:" }
                                pre { code { (self.command) " --resume " (shell_quote(&r.entry.range)) } }
                            }
                            Stop::RolledBack { to } => {
                                p { "A document signed with the offline key replaces the guard's. To keep "
                                    "the rollback as your own:" }
                                pre { code {
                                    (self.command) " --rollback "
                                    (shell_quote(&format!("{}={}", r.entry.range, to.packer_arg())))
                                } }
                            }
                        }
                    }
                }
            }
        }
    }

    /// Each rollout: now, schedule, what the guard watches, evidence and the test's look.
    pub fn section(&self) -> Markup {
        if self.rollouts.is_empty() {
            return html! {};
        }
        html! {
            section aria-labelledby="rollouts-title" {
                h2 id="rollouts-title" { "Rollouts" }
                p class="note" {
                    "Each rollout as the offline key signed it. It replaces the next entry of its "
                    "range without a rollout, or the built-in pack when there is none: what the guard "
                    "compares it with and rolls back to. A ramp's percentage is read from its signed "
                    "schedule by every client's own clock: nothing is signed while it runs."
                    @if let Some(e) = self.evidence {
                        " Outcomes are the counts installs of the rollout's range reported over the last "
                        (e.window_days) " UTC days, the rolling-out version beside the one it replaces, "
                        "each rate with its 95 % interval; installs are added up over client releases."
                    }
                }
                @for r in self.rollouts {
                    (self.card(r))
                }
            }
        }
    }

    fn card(&self, r: &LiveRollout) -> Markup {
        let version = r.entry.target.label();
        let clients = Self::clients(&r.entry.range);
        let schedule = r.schedule(self.live.ramp_time(self.now));
        let watch = r.watch();
        html! {
            article class="rollout-card" aria-labelledby={ "rollout-" (r.index) } data-version=(version) {
                h3 id={ "rollout-" (r.index) } { (version) " for " (clients) }
                dl class="facts" {
                    div { dt { "Now" } dd {
                        (rollout_bar(r.percent))
                        @match &r.stop {
                            Some(Stop::Frozen { .. }) => { " " strong class="flag" { "frozen by the guard" } }
                            Some(Stop::RolledBack { to }) => { " " strong class="flag" { "rolled back to " (to.label()) } }
                            None => {}
                        }
                    } }
                    div { dt { "Replaces" } dd { (r.replaces.label()) } }
                    div { dt { "Schedule" } dd {
                        @match (&r.signed.ramp, schedule.last()) {
                            (Some(ramp), Some(end)) => {
                                "ramp from " (r.signed.percent) " % to " (end.percent) " %"
                                @if ramp.linear { ", in a straight line" } @else { ", in steps" }
                            }
                            _ => { "fixed at " (r.signed.percent) " %" }
                        }
                    } }
                    div { dt { "Watched by the guard" } dd {
                        @match (watch, &self.guard_key) {
                            (Some(w), Some(_)) => {
                                @for (i, m) in w.metrics.iter().enumerate() {
                                    @if i > 0 { ", " }
                                    code { (m) }
                                }
                                "; on a regression: " strong { (match w.action {
                                    WatchAction::Freeze => "freeze",
                                    WatchAction::Rollback => "roll back",
                                }) }
                            }
                            (Some(_), None) => { "asks for a guard, but the channel names no guard key" }
                            (None, _) => { "not watched" }
                        }
                    } }
                }
                @if !schedule.is_empty() {
                    div class="scroll" role="region" tabindex="0" aria-label={ "Ramp schedule of " (version) } {
                        table class="numbers schedule" {
                            caption { "Schedule of the ramp of " (version) " for " (clients) }
                            thead { tr {
                                th scope="col" { "From" }
                                th scope="col" { "Percent" }
                                th scope="col" { "Status" }
                            } }
                            tbody {
                                @for step in &schedule {
                                    tr class=(step_class(step.state)) {
                                        th scope="row" { (when(&format_time(step.at), self.now)) }
                                        td { (step.percent) " %" }
                                        td { (step_text(step.state)) }
                                    }
                                }
                            }
                        }
                    }
                }
                @if let Some(e) = self.evidence {
                    (self.outcomes(r, e))
                    @if watch.is_some() { (self.look(r, e)) }
                }
            }
        }
    }

    fn outcomes(&self, r: &LiveRollout, e: &Evidence) -> Markup {
        let sides = [
            side(&e.outcomes, &r.entry.range, &r.entry.target),
            side(&e.outcomes, &r.entry.range, &r.replaces),
        ];
        // The watched rates, else every rate.
        let metrics: Vec<String> = match r.watch() {
            Some(w) => w.metrics.clone(),
            None => sides[0]
                .rates
                .named()
                .iter()
                .map(|(name, _)| name.to_string())
                .collect(),
        };
        let version = r.entry.target.label();
        html! {
            div class="scroll" role="region" tabindex="0" aria-label={ "Outcomes of " (version) " and " (r.replaces.label()) } {
                table class="numbers evidence" {
                    caption {
                        "Outcomes, last " (e.window_days) " days: " (version) " beside "
                        (r.replaces.label()) ", which it replaces"
                    }
                    thead { tr {
                        th scope="col" { "Version" }
                        th scope="col" { "Installs" }
                        th scope="col" { "Turns" }
                        @for m in &metrics { th scope="col" { code { (m) } } }
                    } }
                    tbody {
                        @for (i, s) in sides.iter().enumerate() {
                            tr data-version=(s.target.label()) {
                                th scope="row" {
                                    (s.target.label())
                                    @if i == 0 { " (rolling out)" } @else { " (replaced)" }
                                }
                                td { (s.installs) }
                                td { (s.counts.turns) }
                                @for m in &metrics { td { (rate_of(s, m)) } }
                            }
                        }
                    }
                }
            }
        }
    }

    fn look(&self, r: &LiveRollout, e: &Evidence) -> Markup {
        let guard = &e.guard;
        let threshold = 1.0 / guard.alpha;
        let look = e.looks.iter().find(|l| l.entry == r.index);
        let version = r.entry.target.label();
        html! {
            h4 { "The guard's test" }
            p class="note" {
                @match &e.looked_at {
                    Some(at) => { "The guard's latest look, " (when(at, self.now)) ". " }
                    None => { "Computed for this page from the counts above with this packd's settings"
                        @if !self.holds_key { " (this packd holds no guard key: the one that does acts)" }
                        ". " }
                }
                "It acts when the new version is worse (difference above 0) and the likelihood ratio "
                "reaches " (ratio(threshold)) " (1/alpha, alpha " (guard.alpha) "), never before "
                (guard.min_installs) " installs on each side (each install one unit, however much it reports); the interval holds however often it looks."
            }
            @match look {
                None => p { "No look at this rollout: "
                    @match &r.stop {
                        Some(Stop::RolledBack { .. }) => "it is rolled back.",
                        _ => "it is not a rollout of a pack the guard can compare.",
                    }
                },
                Some(look) => {
                    @if look.stopped { p { strong { "The guard already acted on this rollout." } } }
                    div class="scroll" role="region" tabindex="0" aria-label={ "The guard's test of " (version) } {
                        table class="numbers looks" {
                            caption { "Each watched rate of " (version) " against " (look.replaces) }
                            thead { tr {
                                th scope="col" { "Metric" }
                                th scope="col" { "Difference" }
                                th scope="col" { "Always-valid interval" }
                                th scope="col" { "Likelihood ratio" }
                                th scope="col" { "Decision" }
                            } }
                            tbody {
                                @for m in &look.metrics {
                                    tr class=[m.regressed.then_some("flagged")] data-metric=(m.metric) {
                                        th scope="row" { code { (m.metric) } }
                                        td { @match m.difference { Some(d) => (points(d)), None => "—" } }
                                        td { @if m.difference.is_some() {
                                            "[" (points(m.low)) ", " (points(m.high)) "]"
                                        } @else { "—" } }
                                        td { (ratio(m.ratio)) " of " (ratio(threshold)) }
                                        td { (verdict(m, guard.min_installs, version, &look.replaces)) }
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
    }

    /// The guard key, and every decision stored with its reason, newest first.
    pub fn decisions(&self) -> Markup {
        let Some(e) = self.evidence else {
            return html! {};
        };
        let decisions = &e.guard.decisions;
        if self.guard_key.is_none() && decisions.is_empty() {
            return html! {};
        }
        html! {
            section aria-labelledby="guard-title" {
                h2 id="guard-title" { "The guard's decisions" }
                p class="note" {
                    @match &self.guard_key {
                        Some(key) => {
                            "The channel names guard key " code { (key) } "; "
                            @if self.holds_key {
                                "this packd holds it and looks at each watched rollout every "
                                (self.interval_secs) " s."
                            } @else {
                                "this packd does not hold it: the packd that does looks and decides."
                            }
                        }
                        None => { "The channel names no guard key now." }
                    }
                    " Each freeze or rollback is a document signed with the guard key; the reason "
                    "is what the guard's test saw."
                }
                @if decisions.is_empty() {
                    p { "No freeze or rollback yet." }
                } @else {
                    table class="cards decisions" {
                        caption class="visually-hidden" { "The guard's decisions on " (self.channel) ", newest first" }
                        thead { tr {
                            th scope="col" { "When" }
                            th scope="col" { "Action" }
                            th scope="col" { "Rollout" }
                            th scope="col" { "Guard document" }
                            th scope="col" { "Why" }
                        } }
                        tbody {
                            @for d in decisions.iter().take(DECISIONS_SHOWN) {
                                tr data-version=(d.version) {
                                    th scope="row" data-label="When" { (when(&rfc3339(d.at), self.now)) }
                                    td data-label="Action" { strong { (d.action) } " at " (d.percent) " %" }
                                    td data-label="Rollout" { (d.version) " for " (Self::clients(&d.clients)) }
                                    td data-label="Guard document" {
                                        "sequence "
                                        a href={ "/console/channels/" (self.channel) "/history/" (d.sequence) } { (d.sequence) }
                                        ", restricting "
                                        a href={ "/console/channels/" (self.channel) "/history/" (d.restricts) } { (d.restricts) }
                                    }
                                    td data-label="Why" { (d.reason) }
                                }
                            }
                        }
                    }
                    @if decisions.len() > DECISIONS_SHOWN {
                        p class="note" { "The latest " (DECISIONS_SHOWN) " of " (decisions.len())
                            "; all of them: " code { "GET /v1/channels/" (self.channel) "/guard" } "." }
                    }
                }
            }
        }
    }
}

fn step_class(state: StepState) -> &'static str {
    match state {
        StepState::Landed => "landed",
        StepState::Next => "next",
        StepState::Later => "later",
        StepState::HeldBack => "held",
    }
}

fn step_text(state: StepState) -> &'static str {
    match state {
        StepState::Landed => "landed",
        StepState::Next => "next",
        StepState::Later => "to come",
        StepState::HeldBack => "held back by the guard",
    }
}

/// One rate of a side by its name: `5.1 % [4.3–6.0 %]`.
fn rate_of(side: &Side, metric: &str) -> String {
    side.rates
        .named()
        .iter()
        .find(|(name, _)| *name == metric)
        .map_or_else(|| "unknown rate".to_string(), |(_, r)| rate_interval(r))
}

/// Regressed, no regression, or how many more installs each side needs first.
fn verdict(m: &MetricLook, min_installs: u64, new: &str, old: &str) -> Markup {
    if m.regressed {
        return html! { strong class="flag" { "Regressed" } };
    }
    if m.difference.is_some() {
        return html! { "no regression" };
    }
    let short: Vec<String> = [(m.new_installs, new), (m.old_installs, old)]
        .iter()
        .filter(|(installs, _)| *installs < min_installs)
        .enumerate()
        .map(|(i, (installs, version))| {
            let more = min_installs - installs;
            match i {
                0 => format!("needs {more} more installs on {version}"),
                _ => format!(" and {more} more on {version}"),
            }
        })
        .collect();
    let needs = if short.is_empty() {
        "needs more installs".to_string()
    } else {
        short.concat()
    };
    let rates = format!(
        "{} vs {}",
        m.new.rate.map_or("—".to_string(), percent),
        m.old.rate.map_or("—".to_string(), percent)
    );
    html! {
        (needs)
        br; span class="meta" { "so far " (rates) }
    }
}
