//! `packer status --outcomes`: how the turns of each pack version went on each client
//! release, from `GET /v1/channels/{channel}/outcomes`, as rates with their 95 % intervals,
//! so a version being rolled out shows beside the one it replaces.

use anyhow::Result;
use clap::{ArgAction, ArgMatches, Args, FromArgMatches};
use pack_protocol::{OutcomeRow, OutcomesView, Rate};
use serde_json::{Value, json};

use crate::print_json;
use crate::remote::model::ChannelList;
use crate::remote::{Remote, ServerArgs, ServerError};
use crate::status::StatusArgs;

const OUTCOMES: &str = "outcomes";
const DAYS: &str = "days";

/// `packer status`'s arguments and `--outcomes`. The status's own arguments stay its own;
/// the server arguments are read from the same matches, where `status` flattened them.
pub struct StatusCommand {
    pub status: StatusArgs,
    server: ServerArgs,
    outcomes: bool,
    days: u32,
}

impl FromArgMatches for StatusCommand {
    fn from_arg_matches(matches: &ArgMatches) -> Result<Self, clap::Error> {
        Ok(StatusCommand {
            status: StatusArgs::from_arg_matches(matches)?,
            server: ServerArgs::from_arg_matches(matches)?,
            outcomes: matches.get_flag(OUTCOMES),
            days: matches.get_one::<u32>(DAYS).copied().unwrap_or(7),
        })
    }

    fn update_from_arg_matches(&mut self, matches: &ArgMatches) -> Result<(), clap::Error> {
        *self = StatusCommand::from_arg_matches(matches)?;
        Ok(())
    }
}

impl Args for StatusCommand {
    fn augment_args(cmd: clap::Command) -> clap::Command {
        with_outcomes(StatusArgs::augment_args(cmd))
    }

    fn augment_args_for_update(cmd: clap::Command) -> clap::Command {
        with_outcomes(StatusArgs::augment_args_for_update(cmd))
    }
}

/// Adds `--outcomes` (its help after the status's own), and lets `--days` size its
/// window too, not only the fleet's.
fn with_outcomes(cmd: clap::Command) -> clap::Command {
    let status_help = cmd
        .get_after_help()
        .map(|help| format!("{help}\n\n"))
        .unwrap_or_default();
    cmd.arg(
        clap::Arg::new(OUTCOMES)
            .long(OUTCOMES)
            .action(ArgAction::SetTrue)
            .help("Show outcome counts per pack version × client release: turns and each rate with its 95 % interval"),
    )
    .group(
        clap::ArgGroup::new("views")
            .args(["fleet", OUTCOMES])
            .multiple(true),
    )
    .mut_arg(DAYS, |days| {
        days.requires(clap::builder::Resettable::<clap::Id>::Reset)
            .requires("views")
            .help("UTC days the fleet view and the outcome counts cover, today included (1 to 7)")
    })
    .after_help(format!(
        "{status_help}With --outcomes it also reads GET /v1/channels/{{channel}}/outcomes: per pack\n\
         version and client release, the turns (model calls) installs counted over the last --days\n\
         UTC days and the rate of tool errors and permission denials (per tool call), model\n\
         errors, aborted turns and built-in fallbacks (per turn) and failed `agent exec` runs,\n\
         each with its 95 % Wilson score interval. With --json and --outcomes the answer is one\n\
         object: the server and every channel's outcome counts."
    ))
}

/// Runs `packer status`, and with `--outcomes` prints the outcome counts after it.
pub fn run(command: &StatusCommand, json: bool) -> Result<()> {
    if !command.outcomes {
        return crate::status::run(&command.status, json);
    }
    let remote = Remote::new(&command.server, false)?;
    let list: ChannelList = remote.get_json(pack_protocol::paths::CHANNELS)?;
    let mut views = Vec::with_capacity(list.channels.len());
    for summary in &list.channels {
        views.push((
            summary.channel.clone(),
            view(&remote, &summary.channel, command.days)?,
        ));
    }
    if json {
        let channels: Vec<Value> = views
            .iter()
            .map(|(channel, view)| match view {
                Ok(view) => serde_json::to_value(view).unwrap_or(Value::Null),
                Err(reason) => json!({ "channel": channel, "unavailable": reason }),
            })
            .collect();
        print_json(&json!({ "server": remote.base(), "outcomes": channels }));
        return Ok(());
    }
    crate::status::run(&command.status, json)?;
    for (channel, view) in &views {
        outln!();
        match view {
            Ok(view) => {
                for line in lines(view) {
                    outln!("{line}");
                }
            }
            Err(reason) => outln!("outcomes of {channel}: {reason}"),
        }
    }
    Ok(())
}

/// The outcome counts of `channel`; `Err` with a note when the server keeps none.
fn view(remote: &Remote, channel: &str, days: u32) -> Result<Result<OutcomesView, String>> {
    let path = format!(
        "{}?{}={days}",
        pack_protocol::paths::outcomes(channel),
        pack_protocol::paths::DAYS_PARAM
    );
    match remote.get_json::<OutcomesView>(&path) {
        Ok(view) => Ok(Ok(view)),
        Err(e) => match e.downcast_ref::<ServerError>() {
            Some(server) if server.code.as_deref() == Some("fleet_disabled") => Ok(Err(
                "off on this server ([fleet] enabled = false in its config)".to_string(),
            )),
            // An older packd: no such route.
            Some(server) if server.status == reqwest::StatusCode::NOT_FOUND => Ok(Err(format!(
                "this server keeps no outcome counts ({})",
                server.message
            ))),
            Some(_) | None => Err(e),
        },
    }
}

/// A rate as `2.1% [1.5–2.9]`, or `-` with nothing to divide by.
fn rate(rate: &Rate) -> String {
    match rate.rate {
        Some(point) => format!(
            "{:.1}% [{:.1}–{:.1}]",
            point * 100.0,
            rate.low * 100.0,
            rate.high * 100.0
        ),
        None => "-".to_string(),
    }
}

/// How a row's pack is called: its version, and `built-in` for the pack compiled in.
fn pack_label(row: &OutcomeRow) -> String {
    if row.pack == pack_protocol::headers::INSTALLED_BUILTIN {
        format!("{} (built-in)", row.pack_version)
    } else {
        row.pack_version.to_string()
    }
}

/// A table per channel: one line per client release × pack version, the versions of one
/// release together, newest first, so a version being rolled out sits on top of the one it
/// replaces.
fn lines(view: &OutcomesView) -> Vec<String> {
    let days = view.days.len();
    let mut out = vec![format!(
        "outcomes of {}, last {days} UTC day{}, rate [95% interval]{}",
        view.channel,
        if days == 1 { "" } else { "s" },
        if view.overflow {
            " (some reports were refused: a server's cap on rows or installs per day was reached)"
        } else {
            ""
        }
    )];
    if view.rows.is_empty() {
        out.push("  no outcome counts reported yet".to_string());
        return out;
    }
    let mut rows: Vec<&OutcomeRow> = view.rows.iter().collect();
    rows.sort_by(|a, b| {
        b.client_version
            .cmp(&a.client_version)
            .then_with(|| b.pack_version.cmp(&a.pack_version))
            .then_with(|| a.pack.cmp(&b.pack))
    });
    let header = [
        "release",
        "pack",
        "installs",
        "turns",
        "tool errors",
        "denials",
        "model errors",
        "aborted",
        "fallbacks",
        "exec failures",
    ];
    let mut table: Vec<Vec<String>> = vec![header.iter().map(|h| h.to_string()).collect()];
    for row in rows {
        let r = &row.rates;
        table.push(vec![
            row.client_version.to_string(),
            pack_label(row),
            row.installs.to_string(),
            row.counts.turns.to_string(),
            rate(&r.tool_error_rate),
            rate(&r.denial_rate),
            rate(&r.model_error_rate),
            rate(&r.aborted_rate),
            rate(&r.fallback_rate),
            rate(&r.exec_failure_rate),
        ]);
    }
    let widths: Vec<usize> = (0..header.len())
        .map(|c| {
            table
                .iter()
                .map(|r| r[c].chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    for row in table {
        let cells: Vec<String> = row
            .iter()
            .zip(&widths)
            .map(|(cell, width)| format!("{cell:<width$}"))
            .collect();
        out.push(format!("  {}", cells.join("  ").trim_end()));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use pack_protocol::{OutcomeCounts, OutcomeRates};

    fn row(release: &str, version: &str, turns: u64, errors: u64) -> OutcomeRow {
        let counts = OutcomeCounts {
            turns,
            tool_calls: turns,
            tool_errors: errors,
            ..OutcomeCounts::default()
        };
        OutcomeRow {
            pack: format!("{:064x}", version.len()),
            pack_name: "core".to_string(),
            pack_version: version.parse().unwrap(),
            client_version: release.parse().unwrap(),
            installs: 3,
            reports: 3,
            rates: OutcomeRates::of(&counts),
            counts,
        }
    }

    #[test]
    fn versions_of_one_release_sit_together_newest_first_with_their_intervals() {
        let view = OutcomesView {
            channel: "stable".to_string(),
            days: vec!["2026-03-01".to_string(); 7],
            confidence: 0.95,
            rows: vec![
                row("1.4.2", "1.3.0", 263, 81),
                row("1.5.0", "1.3.0", 10, 0),
                row("1.4.2", "1.10.0", 100, 1),
            ],
            overflow: false,
            sources: 1,
        };
        let out = lines(&view);
        assert!(out[0].contains("last 7 UTC days"), "{out:?}");
        let body: Vec<&str> = out[2..].iter().map(|l| l.trim()).collect();
        fn first_two(line: &str) -> Vec<&str> {
            line.split_whitespace().take(2).collect()
        }
        assert_eq!(first_two(body[0]), ["1.5.0", "1.3.0"], "{body:?}");
        assert_eq!(first_two(body[1]), ["1.4.2", "1.10.0"], "{body:?}");
        assert_eq!(first_two(body[2]), ["1.4.2", "1.3.0"], "{body:?}");
        // 81 of 263: 30.8 % in [25.5, 36.6] (Newcombe's example).
        assert!(body[2].contains("30.8% [25.5–36.6]"), "{body:?}");
        assert!(body[1].contains("1.0% [0.2–5.4]"), "{body:?}");
        // No exec runs: nothing to divide by.
        assert!(body[1].trim_end().ends_with('-'), "{body:?}");
    }
}
