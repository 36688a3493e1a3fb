//! `/metrics` stays bounded whatever clients send and however large the fleet: each label
//! takes at most 64 values, and each metric family at most 1,024 series; what comes after
//! is counted in one series labelled `other`, and the exposition says how many label
//! combinations went there.

use crate::common;

use std::collections::BTreeMap;

use base64::Engine as _;
use common::*;
use pack_protocol::{headers, paths};
use reqwest::StatusCode;

/// Series a metric family keeps before it folds new label combinations into `other`.
const MAX_SERIES: usize = 1024;

/// The samples of `family` in `text`: labels → value.
fn samples(text: &str, family: &str) -> BTreeMap<String, f64> {
    text.lines()
        .filter_map(|line| line.strip_prefix(family)?.strip_prefix('{'))
        .map(|rest| {
            let (labels, value) = rest.rsplit_once("} ").unwrap();
            (labels.to_string(), value.parse().unwrap())
        })
        .collect()
}

/// Whether every label in `labels` (`name="value",…`) is `other`.
fn all_other(labels: &str) -> bool {
    labels.split(',').all(|pair| pair.ends_with("=\"other\""))
}

/// 34 client releases × 34 installed packs fetch a channel: 1,156 label combinations, each
/// label within its 64 values. The first 1,024 keep a series each, the other 132 fetches are
/// counted in `other`, and `packd_metrics_series_folded` says 132.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fetches_from_more_label_combinations_than_a_family_keeps_fold_into_other() {
    let fx = Fixture::new("");
    let server = Packd::start(&fx.disk(), Some(&fx.config));
    let pack = fx.pack("core", "1.0.0", "metrics");
    assert_eq!(upload(&server, &pack).await.status(), StatusCode::CREATED);
    publish_created(
        &server,
        "stable",
        &fx.publish_body(&fx.document("stable", 1, &pack, "metrics")),
    )
    .await;

    const SIDE: usize = 34;
    let c = client();
    let url = server.url(&paths::channel("stable"));
    for release in 0..SIDE {
        for installed in 0..SIDE {
            let r = c
                .get(&url)
                .header(headers::CLIENT_VERSION, format!("1.0.{release}"))
                .header(headers::INSTALLED_PACK, format!("{installed:064x}"))
                .send()
                .await
                .unwrap();
            assert_eq!(r.status(), StatusCode::OK);
        }
    }

    let text = metrics_text(&server).await;
    let fetches = samples(&text, "packd_channel_fetches_total");
    let folded = SIDE * SIDE - MAX_SERIES;
    assert_eq!(
        fetches.len(),
        MAX_SERIES + 1,
        "{MAX_SERIES} series and `other`"
    );
    let other: Vec<f64> = fetches
        .iter()
        .filter(|(labels, _)| all_other(labels))
        .map(|(_, value)| *value)
        .collect();
    assert_eq!(other, [folded as f64], "{fetches:?}");
    // Nothing is lost: every fetch is counted in some series.
    assert_eq!(fetches.values().sum::<f64>(), (SIDE * SIDE) as f64);
    assert!(
        text.contains(&format!(
            "packd_metrics_series_folded{{family=\"packd_channel_fetches_total\"}} {folded}\n"
        )),
        "{text}"
    );
    // The share of 304s is over every fetch, folded ones included.
    assert!(
        text.contains("packd_channel_not_modified_ratio 0\n"),
        "{text}"
    );
}

/// Five channels whose fleet view holds 256 cells each: 1,280 series of
/// `packd_fleet_installs`. The 1,024 largest are kept, the 256 smallest add up in `other`,
/// and `packd_metrics_series_folded` says 256.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fleet_of_more_cells_than_a_family_keeps_folds_the_smallest_into_other() {
    const CHANNELS: usize = 5;
    const CELLS: usize = 256;
    let fx = Fixture::new("");
    let data = fx.dir.path().join("data");
    let today = time::OffsetDateTime::now_utc().date();
    let day = format!(
        "{:04}-{:02}-{:02}",
        today.year(),
        u8::from(today.month()),
        today.day()
    );
    let b64 = base64::engine::general_purpose::STANDARD;
    for channel in 0..CHANNELS {
        // Cell n counts n + 1 installs (exact sketches), so the smallest are the first cells
        // of every channel.
        let cells: Vec<serde_json::Value> = (0..CELLS)
            .map(|cell| {
                let hashes: Vec<u8> = (0..=cell as u64)
                    .flat_map(|h| (h + 1).to_be_bytes())
                    .collect();
                serde_json::json!({
                    "client_version": format!("1.0.{cell}"),
                    "pack": "builtin",
                    "sketch": {"exact": b64.encode(hashes)},
                })
            })
            .collect();
        let file = serde_json::json!({
            "format": 1, "channel": format!("ch{channel}"), "day": day,
            "node": "0000000000000001", "written_at": format!("{day}T00:00:01Z"),
            "overflow": false, "cells": cells, "failures": [],
        });
        let dir = data.join(format!("fleet/ch{channel}/{day}"));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(
            dir.join("0000000000000001.json"),
            serde_json::to_vec(&file).unwrap(),
        )
        .unwrap();
    }
    let server = Packd::start(&fx.disk(), Some(&fx.config));

    let text = metrics_text(&server).await;
    let installs = samples(&text, "packd_fleet_installs");
    let folded = CHANNELS * CELLS - MAX_SERIES;
    assert_eq!(
        installs.len(),
        MAX_SERIES + 1,
        "{MAX_SERIES} series and `other`"
    );
    // The smallest cells went: the five channels' cells of 1 to 51 installs, and one of
    // their five cells of 52.
    let smallest_kept = installs
        .iter()
        .filter(|(labels, _)| !all_other(labels))
        .map(|(_, value)| *value)
        .fold(f64::INFINITY, f64::min);
    assert_eq!(smallest_kept, 52.0);
    let expected_other = (CHANNELS * (1..=51).sum::<usize>() + 52) as f64;
    let other: Vec<f64> = installs
        .iter()
        .filter(|(labels, _)| all_other(labels))
        .map(|(_, value)| *value)
        .collect();
    assert_eq!(other, [expected_other], "{installs:?}");
    assert!(
        text.contains(&format!(
            "packd_metrics_series_folded{{family=\"packd_fleet_installs\"}} {folded}\n"
        )),
        "{text}"
    );
}
