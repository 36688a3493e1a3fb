//! A pack version no channel document ever named takes other bytes: the publisher whose
//! release check refused a broken pack uploads the fix under the same version. Once a
//! document names a version (live or in any channel's history), it never changes again.
//! Every scenario runs on a data directory and on SeaweedFS.

#![allow(clippy::print_stderr)] // the race reports how its rounds went

use crate::common;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;
use pack_protocol::{FleetView, headers};
use reqwest::StatusCode;
use serde_json::Value;

fn setup(kind: Kind, extra_toml: &str) -> Option<Env> {
    Env::on(kind, Fixture::new(extra_toml), "unreleased")
}

on_both_backends!(
    an_unreleased_version_takes_other_bytes_until_a_release_names_it,
    racing_replacements_through_two_nodes_lose_none,
    a_replacement_cut_off_after_its_claim_holds_the_version_and_names_the_claim,
    a_publish_racing_a_replacement_never_releases_bytes_the_record_left,
    a_publish_that_claimed_a_version_and_did_not_commit_holds_it_and_names_the_claim,
    readers_that_read_a_record_before_it_was_replaced_see_the_replacement,
);

async fn json(response: reqwest::Response) -> Value {
    response.json().await.unwrap()
}

/// The `(code, message)` of an error answer.
async fn error(response: reqwest::Response) -> (String, String) {
    let body = json(response).await;
    let text = |field: &str| {
        body["error"][field]
            .as_str()
            .unwrap_or_default()
            .to_string()
    };
    (text("code"), text("message"))
}

/// The SHA-256 that `GET /v1/packs/{name}` gives for `version`.
async fn recorded(server: &Packd, name: &str, version: &str) -> String {
    let packs = json(
        client()
            .get(server.url(&format!("/v1/packs/{name}")))
            .send()
            .await
            .unwrap(),
    )
    .await;
    let versions = packs["versions"].as_array().unwrap();
    let found = versions
        .iter()
        .find(|v| v["version"] == version)
        .unwrap_or_else(|| panic!("no {name} {version} in {packs}"));
    found["sha256"].as_str().unwrap().to_string()
}

/// The object `key` of the test's storage, read straight from it.
fn read_key(env: &Env, key: &str) -> Option<Vec<u8>> {
    match (&env.backend, env.s3) {
        (Backend::Disk(dir), _) => std::fs::read(dir.join(key)).ok(),
        (Backend::S3 { url, .. }, Some(s3)) => s3.read(url, key),
        (backend, s3) => unreachable!("{backend:?} with {}", s3.is_some()),
    }
}

/// The location of `key` in the bucket of an S3 backend.
fn s3_location(url: &str, key: &str) -> object_store::path::Path {
    let prefix = url.strip_prefix(&format!("s3://{S3_BUCKET}/")).unwrap();
    object_store::path::Path::from(format!("{prefix}/{key}"))
}

/// Writes `key` straight into the test's storage, as a packd would have.
fn write_key(env: &Env, key: &str, bytes: Vec<u8>) {
    match (&env.backend, env.s3) {
        (Backend::Disk(dir), _) => {
            let file = dir.join(key);
            std::fs::create_dir_all(file.parent().unwrap()).unwrap();
            std::fs::write(file, bytes).unwrap();
        }
        (Backend::S3 { url, .. }, Some(s3)) => {
            let (store, location) = (s3.store(), s3_location(url, key));
            on_own_runtime(async move {
                object_store::ObjectStoreExt::put(&store, &location, bytes.into())
                    .await
                    .unwrap();
            });
        }
        (backend, s3) => unreachable!("{backend:?} with {}", s3.is_some()),
    }
}

/// Removes `key` from the test's storage, as an operator would.
fn delete_key(env: &Env, key: &str) {
    match (&env.backend, env.s3) {
        (Backend::Disk(dir), _) => std::fs::remove_file(dir.join(key)).unwrap(),
        (Backend::S3 { url, .. }, Some(s3)) => {
            let (store, location) = (s3.store(), s3_location(url, key));
            on_own_runtime(async move {
                object_store::ObjectStoreExt::delete(&store, &location)
                    .await
                    .unwrap();
            });
        }
        (backend, s3) => unreachable!("{backend:?} with {}", s3.is_some()),
    }
}

/// Every key under `dir/` of the test's storage, relative to the storage's root.
fn keys_under(env: &Env, dir: &str) -> Vec<String> {
    match (&env.backend, env.s3) {
        (Backend::Disk(root), _) => files_under(&root.join(dir))
            .into_iter()
            .map(|file| format!("{dir}/{file}"))
            .collect(),
        (Backend::S3 { url, .. }, Some(s3)) => {
            let prefix = format!("{}/", s3_location(url, ""));
            s3.keys_under(url)
                .into_iter()
                .filter_map(|key| key.strip_prefix(&prefix).map(str::to_string))
                .filter(|key| key.starts_with(&format!("{dir}/")))
                .collect()
        }
        (backend, s3) => unreachable!("{backend:?} with {}", s3.is_some()),
    }
}

async fn an_unreleased_version_takes_other_bytes_until_a_release_names_it(env: Env) {
    let fx = &env.fx;
    let server = Packd::start(&env.backend, Some(&fx.config));
    let a = fx.pack("core", "1.0.0", "a: the broken one");
    let b = fx.pack("core", "1.0.0", "b: the fix");
    let (sha_a, sha_b) = (pack_format::sha256_hex(&a), pack_format::sha256_hex(&b));
    assert_eq!(upload(&server, &a).await.status(), StatusCode::CREATED);

    let r = upload(&server, &b).await;
    assert_eq!(r.status(), StatusCode::CREATED);
    let body = json(r).await;
    assert_eq!(body["created"], true);
    assert_eq!(body["pack"]["sha256"], sha_b.as_str());
    assert_eq!(recorded(&server, "core", "1.0.0").await, sha_b);
    let r = upload(&server, &b).await;
    assert_eq!(r.status(), StatusCode::OK, "the same bytes again: a no-op");
    // The replaced blob stays: blobs are content-addressed.
    let r = client()
        .get(server.url(&format!("/v1/blobs/{sha_a}")))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);

    // A document naming the replaced bytes is refused, naming both.
    let r = publish(
        &server,
        "stable",
        &fx.publish_body(&fx.document("stable", 1, &a, "a")),
    )
    .await;
    assert_eq!(r.status(), StatusCode::UNPROCESSABLE_ENTITY);
    let (code, message) = error(r).await;
    assert_eq!(code, "pack_mismatch");
    assert!(
        message.contains(&format!(
            "pack core 1.0.0 is blob {sha_b}, the document says {sha_a}"
        )),
        "{message}"
    );

    publish_created(
        &server,
        "stable",
        &fx.publish_body(&fx.document("stable", 1, &b, "b")),
    )
    .await;
    let c = fx.pack("core", "1.0.0", "c: too late");
    let sha_c = pack_format::sha256_hex(&c);
    let r = upload(&server, &c).await;
    assert_eq!(r.status(), StatusCode::CONFLICT);
    let (code, message) = error(r).await;
    assert_eq!(code, "version_exists");
    assert_eq!(
        message,
        format!(
            "pack core 1.0.0 already exists with sha256 {sha_b}; this upload is {sha_c}: it was \
             released (channel stable sequence 1 names it), and a released version never takes \
             other bytes: publish these as a new version"
        )
    );
    assert_eq!(recorded(&server, "core", "1.0.0").await, sha_b);

    // No longer live, still released: the history counts, on every channel.
    let d = fx.pack("core", "1.1.0", "d");
    assert_eq!(upload(&server, &d).await.status(), StatusCode::CREATED);
    publish_created(
        &server,
        "stable",
        &fx.publish_body(&fx.document("stable", 2, &d, "d")),
    )
    .await;
    publish_created(
        &server,
        "beta",
        &fx.publish_body(&fx.document("beta", 1, &d, "d")),
    )
    .await;
    let r = upload(&server, &fx.pack("core", "1.0.0", "e")).await;
    assert_eq!(r.status(), StatusCode::CONFLICT);
    let (_, message) = error(r).await;
    assert!(
        message.contains("channel stable sequence 1 names it"),
        "{message}"
    );
    let r = upload(&server, &fx.pack("core", "1.1.0", "f")).await;
    assert_eq!(r.status(), StatusCode::CONFLICT);
    let (_, message) = error(r).await;
    assert!(
        message.contains("channel beta sequence 1 names it"),
        "{message}"
    );
}

/// Eight uploads of other bytes race to replace one unreleased version through two nodes.
/// Each replacement claims the record it replaces, create-only, so they form one chain from
/// the first upload to what the record holds at the end, with every upload that was told
/// `201` on it exactly once: none was overwritten unseen.
async fn racing_replacements_through_two_nodes_lose_none(env: Env) {
    const RACERS: usize = 8;
    let fx = &env.fx;
    let nodes = [
        Arc::new(Packd::start(&env.backend, Some(&fx.config))),
        Arc::new(Packd::start(&env.backend, Some(&fx.config))),
    ];
    let first = fx.pack("core", "1.0.0", "first");
    assert_eq!(
        upload(&nodes[0], &first).await.status(),
        StatusCode::CREATED
    );

    let mut racers = Vec::new();
    for id in 0..RACERS {
        let node = nodes[id % 2].clone();
        let pack = fx.pack("core", "1.0.0", &format!("racer {id}"));
        racers.push(tokio::spawn(async move {
            let r = upload(&node, &pack).await;
            let status = r.status();
            let (code, message) = match status {
                StatusCode::CREATED => Default::default(),
                _ => error(r).await,
            };
            (pack_format::sha256_hex(&pack), status, code, message)
        }));
    }
    let mut told_stored = BTreeSet::new();
    for racer in racers {
        let (sha, status, code, message) = racer.await.unwrap();
        match status {
            StatusCode::CREATED => {
                told_stored.insert(sha);
            }
            StatusCode::CONFLICT => {
                assert_eq!(code, "version_exists", "{message}");
                assert!(message.contains("it was never released"), "{message}");
            }
            other => panic!("{other}: {code} {message}"),
        }
    }
    assert!(!told_stored.is_empty(), "the first claim's winner stores");

    let claims: BTreeMap<String, String> = keys_under(&env, "pack-claims/core/1.0.0")
        .iter()
        .map(|key| {
            let claim: Value = serde_json::from_slice(&read_key(&env, key).unwrap()).unwrap();
            (
                claim["from"].as_str().unwrap().to_string(),
                claim["to"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    let mut chain = Vec::new();
    let mut at = pack_format::sha256_hex(&first);
    while let Some(next) = claims.get(&at) {
        chain.push(next.clone());
        at = next.clone();
    }
    assert_eq!(chain.len(), claims.len(), "one chain: {claims:?}");
    assert_eq!(
        chain.iter().cloned().collect::<BTreeSet<_>>(),
        told_stored,
        "every upload told 201 replaced the record once"
    );
    assert_eq!(recorded(&nodes[1], "core", "1.0.0").await, at);
}

/// A packd killed between claiming a record and writing its own leaves the record as it was:
/// the version is held, and the answer names the claim an operator may remove to free it.
async fn a_replacement_cut_off_after_its_claim_holds_the_version_and_names_the_claim(env: Env) {
    let fx = &env.fx;
    let server = Packd::start(&env.backend, Some(&fx.config));
    let a = fx.pack("core", "1.0.0", "a");
    assert_eq!(upload(&server, &a).await.status(), StatusCode::CREATED);
    let record = read_key(&env, "packs/core/1.0.0.json").unwrap();
    let claim_key = format!(
        "pack-claims/core/1.0.0/{}.json",
        pack_format::sha256_hex(&record)
    );
    let cut_off = "cc".repeat(32);
    write_key(
        &env,
        &claim_key,
        serde_json::to_vec(&serde_json::json!({
            "record": pack_format::sha256_hex(&record),
            "from": pack_format::sha256_hex(&a),
            "to": cut_off,
            "at": "2026-01-01T00:00:00Z",
            "by": "publisher",
        }))
        .unwrap(),
    );

    let b = fx.pack("core", "1.0.0", "b");
    let r = upload(&server, &b).await;
    assert_eq!(r.status(), StatusCode::CONFLICT);
    let (code, message) = error(r).await;
    assert_eq!(code, "version_exists");
    assert!(
        message.contains(&format!(
            "it was never released, but an upload of {cut_off} began replacing it at \
             2026-01-01T00:00:00Z and has not finished"
        )),
        "{message}"
    );
    assert!(
        message.contains(&format!("remove {claim_key} from the storage")),
        "{message}"
    );
    assert_eq!(
        recorded(&server, "core", "1.0.0").await,
        pack_format::sha256_hex(&a)
    );
    // Nor is the record released while that upload may still write: the claim decided.
    let r = publish(
        &server,
        "stable",
        &fx.publish_body(&fx.document("stable", 1, &a, "a")),
    )
    .await;
    assert_eq!(r.status(), StatusCode::UNPROCESSABLE_ENTITY);
    let (code, message) = error(r).await;
    assert_eq!(code, "pack_mismatch");
    assert!(
        message.contains(&format!(
            "pack core 1.0.0 is being replaced by blob {cut_off} (an upload claimed it at \
             2026-01-01T00:00:00Z), the document says {}",
            pack_format::sha256_hex(&a)
        )),
        "{message}"
    );
    assert!(
        message.contains(&format!("remove {claim_key} from the storage")),
        "{message}"
    );

    delete_key(&env, &claim_key);
    assert_eq!(upload(&server, &b).await.status(), StatusCode::CREATED);
    assert_eq!(
        recorded(&server, "core", "1.0.0").await,
        pack_format::sha256_hex(&b)
    );
}

/// A publish naming a version's first bytes races an upload of other bytes under it, through
/// two nodes, round after round. Exactly one wins each round: the document is committed and
/// the upload refused, or the record is replaced and the document refused. Whichever won,
/// every committed document names the bytes its pack version's record points at: no client
/// is ever told to fetch bytes the server says that version is not.
async fn a_publish_racing_a_replacement_never_releases_bytes_the_record_left(env: Env) {
    const ROUNDS: usize = 60;
    const TIME: Duration = Duration::from_secs(40);
    let fx = &env.fx;
    let nodes = [
        Arc::new(Packd::start(&env.backend, Some(&fx.config))),
        Arc::new(Packd::start(&env.backend, Some(&fx.config))),
    ];
    let started = Instant::now();
    let (mut published, mut replaced) = (0usize, 0usize);
    // How long the last replacement and the last publish took: one of the two starts at a
    // point inside the other's span that moves from round to round (the publish late in some
    // rounds, the replacement in others), so the two meet at every stage of each other
    // whichever is the slower on this machine.
    let mut upload_span = Duration::from_millis(5);
    let mut publish_span = Duration::from_millis(5);
    let mut sequence = 1;
    let mut round = 0;
    while round < ROUNDS && started.elapsed() < TIME {
        let version = format!("1.{round}.0");
        let old = fx.pack("core", &version, &format!("old {round}"));
        let new = fx.pack("core", &version, &format!("new {round}"));
        let (sha_old, sha_new) = (pack_format::sha256_hex(&old), pack_format::sha256_hex(&new));
        assert_eq!(upload(&nodes[0], &old).await.status(), StatusCode::CREATED);
        let body = fx.publish_body(&fx.document("race", sequence, &old, "race"));
        // From -1 (the replacement starts a whole publish late) to 1 (the publish starts a
        // whole replacement late), in 13 steps.
        let phase = (round % 13) as f64 / 6.0 - 1.0;
        let publish_delay = upload_span.mul_f64(phase.max(0.0));
        let upload_delay = publish_span.mul_f64((-phase).max(0.0));
        let (publisher, uploader) = (nodes[round % 2].clone(), nodes[(round + 1) % 2].clone());
        let publishing = tokio::spawn(async move {
            tokio::time::sleep(publish_delay).await;
            let at = Instant::now();
            let r = publish(&publisher, "race", &body).await;
            let status = r.status();
            (status, r.text().await.unwrap(), at.elapsed())
        });
        let replacing = tokio::spawn(async move {
            tokio::time::sleep(upload_delay).await;
            let at = Instant::now();
            let r = upload(&uploader, &new).await;
            let status = r.status();
            (status, r.text().await.unwrap(), at.elapsed())
        });
        let (published_status, published_text, published_took) = publishing.await.unwrap();
        let (replaced_status, replaced_text, replaced_took) = replacing.await.unwrap();
        publish_span = published_took;
        upload_span = replaced_took;
        let record = recorded(&nodes[round % 2], "core", &version).await;
        match (published_status, replaced_status) {
            (StatusCode::CREATED, StatusCode::CONFLICT) => {
                assert!(
                    replaced_text.contains("version_exists"),
                    "round {round}: {replaced_text}"
                );
                assert_eq!(
                    record, sha_old,
                    "round {round}: released, so never replaced"
                );
                published += 1;
                sequence += 1;
            }
            (StatusCode::UNPROCESSABLE_ENTITY, StatusCode::CREATED) => {
                assert!(
                    published_text.contains("pack_mismatch"),
                    "round {round}: {published_text}"
                );
                assert_eq!(
                    record, sha_new,
                    "round {round}: replaced, so never released"
                );
                replaced += 1;
            }
            (p, r) => panic!(
                "round {round}: exactly one of the publish and the replacement wins; the \
                 publish got {p} {published_text}, the replacement {r} {replaced_text} (the \
                 record is {record}; old {sha_old}, new {sha_new})"
            ),
        }
        round += 1;
    }
    eprintln!(
        "{round} rounds in {:.1} s: {published} releases won, {replaced} replacements won",
        started.elapsed().as_secs_f64()
    );
    assert!(round >= 10, "only {round} rounds ran in {TIME:?}");
    // Both sides won some rounds: the two really met.
    assert!(
        published > 0 && replaced > 0,
        "{published} releases, {replaced} replacements"
    );

    // Every committed document, read back through the other node: its pack version is still
    // the bytes it names.
    let history = json(
        client()
            .get(nodes[1].url("/v1/channels/race/history"))
            .send()
            .await
            .unwrap(),
    )
    .await;
    let entries = history["entries"].as_array().unwrap();
    assert_eq!(entries.len(), published);
    for entry in entries {
        let sequence = entry["sequence"].as_u64().unwrap();
        let document: Value = client()
            .get(nodes[1].url(&format!("/v1/channels/race/history/{sequence}")))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        for target in document["entries"].as_array().unwrap() {
            let pack = &target["target"]["pack"];
            let version = pack["version"].as_str().unwrap();
            assert_eq!(
                recorded(&nodes[1], "core", version).await,
                pack["sha256"].as_str().unwrap(),
                "sequence {sequence} names core {version}"
            );
        }
    }
}

/// A publish claims every version its document newly names before it commits the document.
/// One that claimed and then did not commit (another publisher took its sequence, or its
/// packd was killed) leaves the version held: other bytes are refused with the claim named,
/// the same bytes are still released by the next document, and deleting the claim frees
/// the version.
async fn a_publish_that_claimed_a_version_and_did_not_commit_holds_it_and_names_the_claim(
    env: Env,
) {
    let fx = &env.fx;
    let server = Packd::start(&env.backend, Some(&fx.config));
    let a = fx.pack("core", "1.0.0", "a");
    let sha_a = pack_format::sha256_hex(&a);
    assert_eq!(upload(&server, &a).await.status(), StatusCode::CREATED);
    let record = read_key(&env, "packs/core/1.0.0.json").unwrap();
    let claim_key = format!(
        "pack-claims/core/1.0.0/{}.json",
        pack_format::sha256_hex(&record)
    );
    // As a publish of stable sequence 1 leaves it when it claims and then loses its create.
    write_key(
        &env,
        &claim_key,
        serde_json::to_vec(&serde_json::json!({
            "record": pack_format::sha256_hex(&record),
            "from": sha_a,
            "at": "2026-01-01T00:00:00Z",
            "by": "publisher",
            "release": {"channel": "stable", "sequence": 1, "document": "dd".repeat(32)},
        }))
        .unwrap(),
    );

    let b = fx.pack("core", "1.0.0", "b");
    let r = upload(&server, &b).await;
    assert_eq!(r.status(), StatusCode::CONFLICT);
    let (code, message) = error(r).await;
    assert_eq!(code, "version_exists");
    assert!(
        message.contains(
            "a publish of channel stable sequence 1 claimed it for release at \
             2026-01-01T00:00:00Z"
        ),
        "{message}"
    );
    assert!(
        message.contains(&format!("removing {claim_key} from the storage")),
        "{message}"
    );
    assert_eq!(recorded(&server, "core", "1.0.0").await, sha_a);

    // The claim is a release's: a document naming these bytes goes through, and then the
    // refusal names it.
    publish_created(
        &server,
        "beta",
        &fx.publish_body(&fx.document("beta", 1, &a, "a")),
    )
    .await;
    let r = upload(&server, &b).await;
    assert_eq!(r.status(), StatusCode::CONFLICT);
    let (_, message) = error(r).await;
    assert!(
        message.contains("channel beta sequence 1 names it"),
        "{message}"
    );

    // Never named, the version is freed by removing the claim.
    let c = fx.pack("core", "2.0.0", "c");
    assert_eq!(upload(&server, &c).await.status(), StatusCode::CREATED);
    let record = read_key(&env, "packs/core/2.0.0.json").unwrap();
    let claim_key = format!(
        "pack-claims/core/2.0.0/{}.json",
        pack_format::sha256_hex(&record)
    );
    write_key(
        &env,
        &claim_key,
        serde_json::to_vec(&serde_json::json!({
            "record": pack_format::sha256_hex(&record),
            "from": pack_format::sha256_hex(&c),
            "at": "2026-01-01T00:00:00Z",
            "by": "publisher",
            "release": {"channel": "stable", "sequence": 7, "document": "dd".repeat(32)},
        }))
        .unwrap(),
    );
    let d = fx.pack("core", "2.0.0", "d");
    assert_eq!(upload(&server, &d).await.status(), StatusCode::CONFLICT);
    delete_key(&env, &claim_key);
    assert_eq!(upload(&server, &d).await.status(), StatusCode::CREATED);
    assert_eq!(
        recorded(&server, "core", "2.0.0").await,
        pack_format::sha256_hex(&d)
    );
}

/// The console's pack list and the fleet view's version labels keep the pack records they
/// read. A record replaced afterwards is read again: the console shows the new SHA-256, and
/// installs of the new bytes are labelled with their version.
async fn readers_that_read_a_record_before_it_was_replaced_see_the_replacement(env: Env) {
    let fx = &env.fx;
    let server = Packd::start(&env.backend, Some(&fx.config));
    let older = fx.pack("core", "0.9.0", "older");
    let a = fx.pack("core", "1.0.0", "a");
    let (sha_older, sha_a) = (pack_format::sha256_hex(&older), pack_format::sha256_hex(&a));
    assert_eq!(upload(&server, &older).await.status(), StatusCode::CREATED);
    assert_eq!(upload(&server, &a).await.status(), StatusCode::CREATED);
    publish_created(
        &server,
        "stable",
        &fx.publish_body(&fx.document("stable", 1, &older, "older")),
    )
    .await;
    let console = || async {
        let r = client()
            .get(server.url("/console/packs"))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::OK);
        r.text().await.unwrap()
    };
    let fleet = || async {
        let r = client()
            .get(server.url("/v1/channels/stable/fleet?days=1"))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::OK);
        r.json::<FleetView>().await.unwrap()
    };
    // Both read every record of core now, 1.0.0 as a.
    assert!(console().await.contains(&sha_a));
    fleet().await;

    let b = fx.pack("core", "1.0.0", "b");
    let sha_b = pack_format::sha256_hex(&b);
    assert_eq!(upload(&server, &b).await.status(), StatusCode::CREATED);
    let page = console().await;
    assert!(page.contains(&sha_b), "the console shows the new bytes");
    assert!(!page.contains(&sha_a), "and no longer the replaced ones");
    assert!(page.contains(&sha_older));

    publish_created(
        &server,
        "stable",
        &fx.publish_body(&fx.document("stable", 2, &b, "b")),
    )
    .await;
    let r = client()
        .get(server.url("/v1/channels/stable"))
        .header(headers::CLIENT_VERSION, "1.4.2")
        .header(headers::INSTALLED_PACK, &sha_b)
        .header(headers::INSTALL, "ab".repeat(16))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    let view = fleet().await;
    let cell = view
        .cells
        .iter()
        .find(|c| c.pack == sha_b)
        .unwrap_or_else(|| panic!("no cell of {sha_b}: {view:?}"));
    assert_eq!(
        cell.pack_version
            .as_ref()
            .map(ToString::to_string)
            .as_deref(),
        Some("1.0.0")
    );
}
