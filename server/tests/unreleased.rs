//! A pack version no channel document ever named takes other bytes: the publisher whose
//! release check refused a broken pack uploads the fix under the same version. Once a
//! document names a version (live or in any channel's history), it never changes again.
//! Every scenario runs on a data directory and on SeaweedFS.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use common::*;
use reqwest::StatusCode;
use serde_json::Value;

fn setup(kind: Kind, extra_toml: &str) -> Option<Env> {
    Env::on(kind, Fixture::new(extra_toml), "unreleased")
}

on_both_backends!(
    an_unreleased_version_takes_other_bytes_until_a_release_names_it,
    racing_replacements_through_two_nodes_lose_none,
    a_replacement_cut_off_after_its_claim_holds_the_version_and_names_the_claim,
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

    delete_key(&env, &claim_key);
    assert_eq!(upload(&server, &b).await.status(), StatusCode::CREATED);
    assert_eq!(
        recorded(&server, "core", "1.0.0").await,
        pack_format::sha256_hex(&b)
    );
}
