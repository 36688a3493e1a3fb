//! Fills a running packd for `scripts/bench-console.sh`: CHANNELS channels of HISTORY signed
//! documents each, packs to point them at, and a fleet of installs with failure reports.
//!
//! ```sh
//! cargo run --release -p pack-server --example console_seed -- \
//!     --server http://127.0.0.1:8470 --data-dir DIR --keys KEYDIR --token TOKEN \
//!     [--channels 100] [--history 1000]
//! ```
//!
//! Packs are uploaded and the last document of every channel is published through the API,
//! so packd itself checks that the history below it is one it accepts. The documents before
//! it are signed like any other and written into the data directory exactly as packd writes
//! them (`channels/{c}/history/{sequence:020}.json`): publishing 100,000 documents one by one
//! would only time fsync. KEYDIR holds the publisher's `signing.key` (no password) from
//! `packer keygen`, and packd must trust its `signing.pub`.

#![allow(clippy::print_stdout, clippy::print_stderr)]

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use pack_format::{
    ChannelDocument, ChannelEntry, ContentKey, EntryTarget, Limits, PackRef, Payload, PayloadFile,
    Rollout, SealInput, SigningKey,
};
use pack_protocol::{headers, paths};
use pack_server::model::{ChannelRecord, ChannelSummary};
use time::OffsetDateTime;

struct Args {
    server: String,
    data_dir: PathBuf,
    keys: PathBuf,
    token: String,
    channels: usize,
    history: u64,
}

fn args() -> Result<Args> {
    let mut it = std::env::args().skip(1);
    let (mut server, mut data_dir, mut keys, mut token) = (None, None, None, None);
    let (mut channels, mut history) = (100, 1000);
    while let Some(flag) = it.next() {
        let value = it.next().with_context(|| format!("{flag} needs a value"))?;
        match flag.as_str() {
            "--server" => server = Some(value),
            "--data-dir" => data_dir = Some(PathBuf::from(value)),
            "--keys" => keys = Some(PathBuf::from(value)),
            "--token" => token = Some(value),
            "--channels" => channels = value.parse()?,
            "--history" => history = value.parse()?,
            other => bail!("unknown flag {other}"),
        }
    }
    Ok(Args {
        server: server.context("--server URL")?,
        data_dir: data_dir.context("--data-dir DIR")?,
        keys: keys.context("--keys DIR")?,
        token: token.context("--token TOKEN")?,
        channels,
        history: history.max(1),
    })
}

/// A small sealed pack whose bytes depend on `name` and `version`.
fn pack(name: &str, version: &str, content: &ContentKey) -> Result<Vec<u8>> {
    let payload = Payload::new(
        [PayloadFile {
            path: "agents/mavis/tui.hbs".to_string(),
            bytes: format!("You are {name} {version}.\n").into_bytes(),
        }],
        &Limits::default(),
    )?;
    let version = semver::Version::parse(version)?;
    Ok(pack_format::seal(
        &SealInput {
            format: pack_format::FORMAT_VERSION,
            name,
            version: &version,
            schema: 1,
            payload: &payload,
            mtime: 0,
            zstd_level: 3,
        },
        &[content],
    )?)
}

fn pack_ref(bytes: &[u8], version: &str) -> Result<PackRef> {
    Ok(PackRef {
        version: semver::Version::parse(version)?,
        sha256: pack_format::sha256_hex(bytes),
        size: bytes.len() as u64,
        schema: 1,
    })
}

/// The entries of document `sequence`: a cycle of pin, staged rollout in steps, finish,
/// over five versions, with a rollback now and then.
fn entries(sequence: u64, refs: &[PackRef]) -> Vec<ChannelEntry> {
    let range = semver::VersionReq::parse(">=1.4.0, <1.5.0").unwrap();
    let all = semver::VersionReq::STAR;
    let step = (sequence % 6) as usize;
    let base = ((sequence / 6) as usize) % refs.len();
    let next = (base + 1) % refs.len();
    let pin = |clients: &semver::VersionReq, r: &PackRef| ChannelEntry {
        clients: clients.clone(),
        target: EntryTarget::Pack(r.clone()),
        rollout: None,
    };
    match step {
        0 => vec![pin(&all, &refs[base])],
        1..=4 => vec![
            ChannelEntry {
                clients: range.clone(),
                target: EntryTarget::Pack(refs[next].clone()),
                rollout: Some(Rollout {
                    percent: [5, 10, 25, 50][step - 1],
                    salt: format!("rollout-{sequence}"),
                    ramp: None,
                    watch: None,
                }),
            },
            pin(&all, &refs[base]),
        ],
        _ if sequence % 12 == 11 => vec![
            ChannelEntry {
                clients: range,
                target: EntryTarget::Builtin,
                rollout: None,
            },
            pin(&all, &refs[base]),
        ],
        _ => vec![pin(&range, &refs[next]), pin(&all, &refs[base])],
    }
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<()> {
    let args = args()?;
    let started = Instant::now();
    let key = SigningKey::load(&args.keys.join("signing.key"), None)
        .context("opening signing.key (without a password)")?;
    let content = ContentKey::generate();
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(60))
        .build()?;

    // Ten packs of five versions, uploaded.
    let mut refs: Vec<(String, Vec<PackRef>)> = Vec::new();
    for p in 0..10 {
        let name = format!("pack-{p}");
        let mut versions = Vec::new();
        for v in 0..5 {
            let version = format!("1.{v}.0");
            let bytes = pack(&name, &version, &content)?;
            let sha = pack_format::sha256_hex(&bytes);
            let r = http
                .put(format!("{}{}", args.server, paths::blob(&sha)))
                .bearer_auth(&args.token)
                .body(bytes.clone())
                .send()
                .await?;
            if !r.status().is_success() {
                bail!(
                    "upload {name} {version}: {} {}",
                    r.status(),
                    r.text().await?
                );
            }
            versions.push(pack_ref(&bytes, &version)?);
        }
        refs.push((name, versions));
    }

    let now = OffsetDateTime::now_utc();
    let expires = now + time::Duration::days(30);
    for c in 0..args.channels {
        let channel = format!("ch-{c:03}");
        let (pack_name, versions) = &refs[c % refs.len()];
        let document = |sequence: u64| ChannelDocument {
            format: 1,
            channel: channel.clone(),
            pack: pack_name.clone(),
            sequence,
            issued_at: now - time::Duration::minutes(args.history as i64 - sequence as i64 + 1),
            expires_at: expires,
            entries: entries(sequence, versions),
            guard: None,
            restricts: None,
        };
        let dir = args
            .data_dir
            .join("channels")
            .join(&channel)
            .join("history");
        std::fs::create_dir_all(&dir)?;
        for sequence in 1..args.history {
            let doc = document(sequence);
            let signed = doc.sign(&key)?;
            let record = ChannelRecord::new(
                ChannelSummary {
                    channel: channel.clone(),
                    pack: pack_name.clone(),
                    sequence,
                    sha256: pack_format::sha256_hex(&signed.document),
                    key_id: key.key_id(),
                    issued_at: doc.issued_at,
                    expires_at: doc.expires_at,
                    published_at: doc.issued_at + time::Duration::seconds(5),
                    published_by: Some(
                        ["release-ci", "alice", "bob"][sequence as usize % 3].into(),
                    ),
                },
                String::from_utf8(signed.document)?,
                signed.signature,
            );
            std::fs::write(
                dir.join(format!("{sequence:020}.json")),
                serde_json::to_vec(&record)?,
            )?;
        }
        // The last one through packd, which checks it is exactly the next sequence.
        let signed = document(args.history).sign(&key)?;
        let r = http
            .put(format!("{}{}", args.server, paths::channel(&channel)))
            .bearer_auth(&args.token)
            .json(&serde_json::json!({
                "document": String::from_utf8(signed.document)?,
                "signature": signed.signature,
            }))
            .send()
            .await?;
        if r.status() != reqwest::StatusCode::CREATED {
            bail!(
                "publish {channel} {}: {} {}",
                args.history,
                r.status(),
                r.text().await?
            );
        }
    }
    eprintln!(
        "{} channels × {} documents in {:.1} s",
        args.channels,
        args.history,
        started.elapsed().as_secs_f64()
    );

    // A fleet: 20 installs per channel on two versions, five failure reports on every
    // tenth channel.
    for c in 0..args.channels {
        let channel = format!("ch-{c:03}");
        let versions = &refs[c % refs.len()].1;
        for i in 0..20u64 {
            let install =
                pack_protocol::fleet::install_hash(&args.server, &channel, &format!("{c}-{i}"));
            let pack = &versions[(i % 2) as usize].sha256;
            http.get(format!("{}{}", args.server, paths::channel(&channel)))
                .header(headers::INSTALL, &install)
                .header(headers::CLIENT_VERSION, format!("1.4.{}", i % 3))
                .header(headers::INSTALLED_PACK, pack)
                .send()
                .await?
                .error_for_status()?;
            if c % 10 == 0 && i < 5 {
                http.post(format!("{}{}", args.server, paths::reports(&channel)))
                    .header(headers::INSTALL, &install)
                    .json(&serde_json::json!({"channel": channel, "pack": versions[1].sha256,
                                              "reason": "render_failed", "client_version": "1.4.0"}))
                    .send()
                    .await?
                    .error_for_status()?;
            }
        }
    }
    eprintln!("seeded in {:.1} s", started.elapsed().as_secs_f64());
    Ok(())
}
