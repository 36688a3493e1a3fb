//! The HTTP API against real `packd` processes on loopback. Every scenario runs twice: on a
//! data directory, and on a real distributed object store (SeaweedFS) started by the tests.

#![allow(clippy::print_stderr)] // tests report what they measured

use crate::common;

use std::collections::BTreeSet;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::Arc;
use std::time::Duration;

use common::*;
use pack_format::{Limits, TrustedKeys};
use reqwest::StatusCode;
use serde_json::Value;

fn setup(kind: Kind, extra_toml: &str) -> Option<Env> {
    Env::on(kind, Fixture::new(extra_toml), "deploy")
}

on_both_backends!(
    publish_fetch_revalidate_and_publish_again,
    tokens_are_required_to_publish,
    private_deployment_needs_a_read_token,
    bad_documents_are_refused_and_change_nothing,
    bad_uploads_are_refused_and_change_nothing,
    blobs_serve_ranges_and_cache_forever,
    two_nodes_and_40_racing_releases_leave_a_contiguous_history,
    kill_9_during_a_publish_leaves_the_highest_commit_live,
    kill_9_during_an_upload_leaves_nothing_partial,
);

fn blob_url(server: &Packd, sha: &str) -> String {
    server.url(&format!("/v1/blobs/{sha}"))
}

async fn json(response: reqwest::Response) -> Value {
    response.json().await.unwrap()
}

async fn error_code(response: reqwest::Response) -> String {
    let body = json(response).await;
    body["error"]["code"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

fn trusted(fx: &Fixture) -> TrustedKeys {
    let mut keys = TrustedKeys::new();
    keys.add_signing_key(&fx.signing);
    keys
}

fn header(response: &reqwest::Response, name: &str) -> String {
    response
        .headers()
        .get(name)
        .map(|v| v.to_str().unwrap().to_string())
        .unwrap_or_default()
}

async fn publish_fetch_revalidate_and_publish_again(env: Env) {
    let fx = &env.fx;
    let server = Packd::start(&env.backend, Some(&fx.config));
    let c = client();

    let pack1 = fx.pack("core", "1.0.0", "one");
    let r = upload(&server, &pack1).await;
    assert_eq!(r.status(), StatusCode::CREATED);
    let body = json(r).await;
    assert_eq!(body["created"], true);
    assert_eq!(body["pack"]["name"], "core");
    assert_eq!(body["pack"]["version"], "1.0.0");
    assert_eq!(body["pack"]["size"], pack1.len() as u64);
    let r = upload(&server, &pack1).await;
    assert_eq!(
        r.status(),
        StatusCode::OK,
        "an identical re-upload is a no-op"
    );
    assert_eq!(json(r).await["created"], false);

    let doc1 = fx.document("stable", 1, &pack1, "a");
    let body1 = fx.publish_body(&doc1);
    let r = publish(&server, "stable", &body1).await;
    assert_eq!(r.status(), StatusCode::CREATED);
    let published = json(r).await;
    assert_eq!(published["channel"]["sequence"], 1);

    let r = c
        .get(server.url("/v1/channels/stable"))
        .header("X-Promptpack-Client-Version", "1.4.2")
        .header("X-Promptpack-Installed-Pack", "core@0.9.0")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(header(&r, "cache-control"), "no-cache");
    assert_eq!(header(&r, "x-promptpack-sequence"), "1");
    let etag1 = header(&r, "etag");
    assert_eq!(etag1, published["etag"]);
    let doc_bytes = r.bytes().await.unwrap();
    assert_eq!(
        doc_bytes.as_ref(),
        body1["document"].as_str().unwrap().as_bytes(),
        "served exactly as signed"
    );
    assert_eq!(
        etag1,
        format!("\"{}\"", pack_format::sha256_hex(&doc_bytes))
    );

    let signature = c
        .get(server.url("/v1/channels/stable/signature"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let verified = pack_format::channel::verify(
        &doc_bytes,
        &signature,
        &trusted(fx),
        time::OffsetDateTime::now_utc(),
        &Limits::default(),
    )
    .unwrap();
    assert_eq!(verified.document.sequence, 1);

    let r = c
        .get(server.url("/v1/channels/stable"))
        .header("If-None-Match", &etag1)
        .header("X-Promptpack-Client-Version", "1.4.2")
        .header("X-Promptpack-Installed-Pack", "core@1.0.0")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::NOT_MODIFIED);
    assert_eq!(header(&r, "etag"), etag1);
    assert!(r.bytes().await.unwrap().is_empty());

    let pack2 = fx.pack("core", "1.1.0", "two");
    assert_eq!(upload(&server, &pack2).await.status(), StatusCode::CREATED);
    let doc2 = fx.document("stable", 2, &pack2, "b");
    let body2 = fx.publish_body(&doc2);
    assert_eq!(
        publish(&server, "stable", &body2).await.status(),
        StatusCode::CREATED
    );

    let r = c
        .get(server.url("/v1/channels/stable"))
        .header("If-None-Match", &etag1)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK, "the old ETag no longer matches");
    let etag2 = header(&r, "etag");
    assert_ne!(etag2, etag1);
    assert_eq!(header(&r, "x-promptpack-sequence"), "2");
    assert_eq!(r.text().await.unwrap(), body2["document"].as_str().unwrap());

    // History keeps both, and each old document is still served with its signature.
    let history = json(
        c.get(server.url("/v1/channels/stable/history"))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(history["live_sequence"], 2);
    let sequences: Vec<u64> = history["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["sequence"].as_u64().unwrap())
        .collect();
    assert_eq!(sequences, vec![1, 2]);
    // Each names the token that published it (by its config name, never the token).
    for entry in history["entries"].as_array().unwrap() {
        assert_eq!(entry["published_by"], "publisher", "{entry}");
    }
    assert!(!history.to_string().contains(PUBLISH_TOKEN));
    let old = c
        .get(server.url("/v1/channels/stable/history/1"))
        .send()
        .await
        .unwrap();
    assert_eq!(header(&old, "etag"), etag1);
    let old = old.bytes().await.unwrap();
    let old_sig = c
        .get(server.url("/v1/channels/stable/history/1/signature"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    pack_format::channel::verify_ignoring_expiry(&old, &old_sig, &trusted(fx), &Limits::default())
        .unwrap();

    let packs = json(c.get(server.url("/v1/packs")).send().await.unwrap()).await;
    let versions: Vec<&str> = packs["packs"][0]["versions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["version"].as_str().unwrap())
        .collect();
    assert_eq!(versions, vec!["1.0.0", "1.1.0"]);
    let one = json(c.get(server.url("/v1/packs/core")).send().await.unwrap()).await;
    assert_eq!(one["versions"].as_array().unwrap().len(), 2);
    let channels = json(c.get(server.url("/v1/channels")).send().await.unwrap()).await;
    assert_eq!(channels["channels"][0]["channel"], "stable");
    assert_eq!(channels["channels"][0]["sequence"], 2);

    let metrics = metrics_text(&server).await;
    assert!(
        metrics.contains(
            r#"packd_channel_fetches_total{channel="stable",client_version="1.4.2",installed_pack="core@1.0.0",result="304"} 1"#
        ),
        "{metrics}"
    );
    assert!(metrics.contains(
        r#"packd_channel_fetches_total{channel="stable",client_version="1.4.2",installed_pack="core@0.9.0",result="200"} 1"#
    ));
    assert!(metrics.contains(
        r#"packd_http_requests_total{method="PUT",route="/v1/channels/{channel}",status="201"} 2"#
    ));
    assert!(metrics.contains(r#"packd_http_response_bytes_total{route="/v1/channels/{channel}"}"#));
    assert!(
        metrics.contains("packd_channel_not_modified_ratio 0.333"),
        "{metrics}"
    );
}

async fn tokens_are_required_to_publish(env: Env) {
    let fx = &env.fx;
    let server = Packd::start(&env.backend, Some(&fx.config));
    let c = client();
    let pack = fx.pack("core", "1.0.0", "one");
    let url = blob_url(&server, &pack_format::sha256_hex(&pack));

    let r = c.put(&url).body(pack.clone()).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
    assert_eq!(header(&r, "www-authenticate"), "Bearer");
    assert_eq!(error_code(r).await, "unauthorized");
    let r = c
        .put(&url)
        .bearer_auth("not-a-token")
        .body(pack.clone())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::UNAUTHORIZED);

    assert_eq!(upload(&server, &pack).await.status(), StatusCode::CREATED);
    let body = fx.publish_body(&fx.document("stable", 1, &pack, "a"));
    let r = c
        .put(server.url("/v1/channels/stable"))
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
    let r = c
        .put(server.url("/v1/channels/stable"))
        .bearer_auth(PUBLISH_TOKEN.to_uppercase())
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::UNAUTHORIZED);

    // A public deployment: clients read without a token.
    assert_eq!(
        c.get(server.url("/v1/channels/stable"))
            .send()
            .await
            .unwrap()
            .status(),
        StatusCode::NOT_FOUND
    );
    assert_eq!(
        publish(&server, "stable", &body).await.status(),
        StatusCode::CREATED
    );
    assert_eq!(
        c.get(server.url("/v1/channels/stable"))
            .send()
            .await
            .unwrap()
            .status(),
        StatusCode::OK
    );
}

async fn private_deployment_needs_a_read_token(env: Env) {
    // Same storage, but a config with a read-scoped token: reads need a token too.
    let fx = Fixture::new(&Fixture::read_token_toml());
    let server = Packd::start(&env.backend, Some(&fx.config));
    let c = client();
    let pack = fx.pack("core", "1.0.0", "one");
    let sha = pack_format::sha256_hex(&pack);

    let r = c
        .put(blob_url(&server, &sha))
        .bearer_auth(READ_ONLY_TOKEN)
        .body(pack.clone())
        .send()
        .await
        .unwrap();
    assert_eq!(
        r.status(),
        StatusCode::FORBIDDEN,
        "a read token cannot upload"
    );
    assert_eq!(error_code(r).await, "forbidden");
    assert_eq!(upload(&server, &pack).await.status(), StatusCode::CREATED);
    let body = fx.publish_body(&fx.document("stable", 1, &pack, "a"));
    let r = c
        .put(server.url("/v1/channels/stable"))
        .bearer_auth(READ_ONLY_TOKEN)
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(
        r.status(),
        StatusCode::FORBIDDEN,
        "a read token cannot publish"
    );
    assert_eq!(
        publish(&server, "stable", &body).await.status(),
        StatusCode::CREATED
    );

    for path in [
        "/v1/channels/stable",
        "/v1/channels",
        "/v1/packs",
        &format!("/v1/blobs/{sha}"),
    ] {
        let r = c.get(server.url(path)).send().await.unwrap();
        assert_eq!(
            r.status(),
            StatusCode::UNAUTHORIZED,
            "{path} without a token"
        );
        let r = c
            .get(server.url(path))
            .bearer_auth(READ_ONLY_TOKEN)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::OK, "{path} with the read token");
        let r = c
            .get(server.url(path))
            .bearer_auth(PUBLISH_TOKEN)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::OK, "{path} with the publish token");
    }
    let r = c.get(server.url("/healthz")).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::OK, "health checks stay open");
}

async fn bad_documents_are_refused_and_change_nothing(env: Env) {
    let fx = &env.fx;
    let server = Packd::start(&env.backend, Some(&fx.config));
    let c = client();
    let pack = fx.pack("core", "1.0.0", "one");
    assert_eq!(upload(&server, &pack).await.status(), StatusCode::CREATED);
    let r = publish(
        &server,
        "stable",
        &fx.publish_body(&fx.document("stable", 5, &pack, "a")),
    )
    .await;
    assert_eq!(
        r.status(),
        StatusCode::CONFLICT,
        "a new channel starts at 1"
    );
    let body = json(r).await;
    assert_eq!(body["error"]["code"], "stale_sequence", "{body}");
    assert_eq!(body["error"]["current_sequence"], 0, "{body}");
    for sequence in 1..5 {
        let body = fx.publish_body(&fx.document("stable", sequence, &pack, "early"));
        assert_eq!(
            publish(&server, "stable", &body).await.status(),
            StatusCode::CREATED
        );
    }
    let good = fx.publish_body(&fx.document("stable", 5, &pack, "a"));
    assert_eq!(
        publish(&server, "stable", &good).await.status(),
        StatusCode::CREATED
    );
    let r = publish(&server, "stable", &good).await;
    assert_eq!(
        r.status(),
        StatusCode::OK,
        "re-publishing the live document is a no-op"
    );
    assert_eq!(json(r).await["created"], false);

    let next = fx.publish_body(&fx.document("stable", 6, &pack, "b"));
    let cases: Vec<(&str, Value, StatusCode, &str)> = vec![
        (
            "unsigned",
            serde_json::json!({"document": next["document"], "signature": ""}),
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_signature",
        ),
        (
            "signed by a key the server does not trust",
            {
                let other = pack_format::SigningKey::generate(None).unwrap().key;
                let signed = fx.document("stable", 6, &pack, "b").sign(&other).unwrap();
                serde_json::json!({"document": String::from_utf8(signed.document).unwrap(), "signature": signed.signature})
            },
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_signature",
        ),
        (
            "changed after signing",
            serde_json::json!({
                "document": next["document"].as_str().unwrap().replace("\"sequence\": 6", "\"sequence\": 7"),
                "signature": next["signature"],
            }),
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_signature",
        ),
        (
            "for another channel",
            fx.publish_body(&fx.document("beta", 6, &pack, "b")),
            StatusCode::UNPROCESSABLE_ENTITY,
            "channel_mismatch",
        ),
        (
            "pointing at a pack never uploaded",
            fx.publish_body(&fx.document("stable", 6, &fx.pack("core", "9.0.0", "never"), "b")),
            StatusCode::UNPROCESSABLE_ENTITY,
            "missing_blobs",
        ),
        (
            "expired",
            {
                let mut doc = fx.document("stable", 6, &pack, "b");
                doc.issued_at -= time::Duration::days(60);
                doc.expires_at = doc.issued_at + time::Duration::days(1);
                fx.publish_body(&doc)
            },
            StatusCode::UNPROCESSABLE_ENTITY,
            "expired",
        ),
        (
            "the same sequence again",
            fx.publish_body(&fx.document("stable", 5, &pack, "other")),
            StatusCode::CONFLICT,
            "stale_sequence",
        ),
        (
            "a lower sequence",
            fx.publish_body(&fx.document("stable", 4, &pack, "other")),
            StatusCode::CONFLICT,
            "stale_sequence",
        ),
        (
            "a sequence that skips one",
            fx.publish_body(&fx.document("stable", 7, &pack, "other")),
            StatusCode::CONFLICT,
            "stale_sequence",
        ),
        (
            "not JSON of the documented shape",
            serde_json::json!({"doc": "x"}),
            StatusCode::BAD_REQUEST,
            "invalid_body",
        ),
    ];
    for (what, body, status, code) in cases {
        let r = publish(&server, "stable", &body).await;
        assert_eq!(r.status(), status, "{what}");
        let body = json(r).await;
        assert_eq!(body["error"]["code"], code, "{what}: {body}");
        assert!(!body["error"]["message"].as_str().unwrap().is_empty());
        if code == "missing_blobs" {
            assert_eq!(body["error"]["missing"].as_array().unwrap().len(), 1);
        }
        if code == "stale_sequence" {
            assert_eq!(body["error"]["current_sequence"], 5);
        }
    }

    let r = c
        .get(server.url("/v1/channels/stable"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.text().await.unwrap(), good["document"].as_str().unwrap());
    let history = json(
        c.get(server.url("/v1/channels/stable/history"))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(history["total"], 5, "{history}");
    assert_eq!(history["live_sequence"], 5, "{history}");
    let r = c.get(server.url("/v1/channels/beta")).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::NOT_FOUND);
    assert_eq!(
        publish(&server, "stable", &next).await.status(),
        StatusCode::CREATED
    );
}

async fn bad_uploads_are_refused_and_change_nothing(env: Env) {
    let fx = &env.fx;
    let server = Packd::start(&env.backend, Some(&fx.config));
    let c = client();
    let pack = fx.pack("core", "1.0.0", "one");
    let sha = pack_format::sha256_hex(&pack);

    let wrong = "0".repeat(64);
    let r = c
        .put(blob_url(&server, &wrong))
        .bearer_auth(PUBLISH_TOKEN)
        .body(pack.clone())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(error_code(r).await, "hash_mismatch");

    let garbage = b"definitely not a sealed pack".to_vec();
    let r = c
        .put(blob_url(&server, &pack_format::sha256_hex(&garbage)))
        .bearer_auth(PUBLISH_TOKEN)
        .body(garbage.clone())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(error_code(r).await, "invalid_pack");

    let r = c
        .put(server.url("/v1/blobs/NOT-A-HASH"))
        .bearer_auth(PUBLISH_TOKEN)
        .body(pack.clone())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::BAD_REQUEST);
    assert_eq!(error_code(r).await, "invalid_sha256");

    assert_eq!(upload(&server, &pack).await.status(), StatusCode::CREATED);
    // Other bytes under a version no channel document names replace it (a release naming
    // it makes it fixed: tests/unreleased.rs).
    let same_version = fx.pack("core", "1.0.0", "different bytes");
    let r = upload(&server, &same_version).await;
    assert_eq!(r.status(), StatusCode::CREATED);

    // Over the limit, declared up front: refused before the body is read.
    let oversize = MAX_BLOB_BYTES + 1;
    let request = format!(
        "PUT /v1/blobs/{sha} HTTP/1.1\r\nHost: test\r\nAuthorization: Bearer {PUBLISH_TOKEN}\r\n\
         Content-Length: {oversize}\r\n\r\n"
    );
    let answer = raw_exchange(server.addr, request.as_bytes(), Duration::from_secs(10));
    assert!(answer.starts_with("HTTP/1.1 413"), "{answer}");
    assert!(answer.contains("payload_too_large"), "{answer}");

    // Over the limit, chunked with no length: refused while reading.
    let mut request = format!(
        "PUT /v1/blobs/{sha} HTTP/1.1\r\nHost: test\r\nAuthorization: Bearer {PUBLISH_TOKEN}\r\n\
         Transfer-Encoding: chunked\r\n\r\n"
    )
    .into_bytes();
    let chunk = vec![b'x'; 64 * 1024];
    for _ in 0..5 {
        request.extend_from_slice(format!("{:x}\r\n", chunk.len()).as_bytes());
        request.extend_from_slice(&chunk);
        request.extend_from_slice(b"\r\n");
    }
    request.extend_from_slice(b"0\r\n\r\n");
    let answer = raw_exchange(server.addr, &request, Duration::from_secs(10));
    assert!(answer.starts_with("HTTP/1.1 413"), "{answer}");

    let r = c
        .get(blob_url(&server, &pack_format::sha256_hex(&garbage)))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::NOT_FOUND);
    // The one version points at the bytes that replaced the first upload.
    let packs = json(c.get(server.url("/v1/packs")).send().await.unwrap()).await;
    assert_ne!(packs["packs"][0]["versions"][0]["sha256"], sha);
    assert_eq!(
        packs["packs"][0]["versions"][0]["sha256"],
        pack_format::sha256_hex(&same_version)
    );
    assert_eq!(packs["packs"][0]["versions"].as_array().unwrap().len(), 1);
}

async fn blobs_serve_ranges_and_cache_forever(env: Env) {
    let fx = &env.fx;
    let server = Packd::start(&env.backend, Some(&fx.config));
    let c = client();
    let pack = fx.pack("core", "1.0.0", "one");
    let sha = pack_format::sha256_hex(&pack);
    let url = blob_url(&server, &sha);
    assert_eq!(
        c.get(&url).send().await.unwrap().status(),
        StatusCode::NOT_FOUND,
        "not there before the upload"
    );
    assert_eq!(upload(&server, &pack).await.status(), StatusCode::CREATED);
    let size = pack.len() as u64;

    let r = c.get(&url).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(
        header(&r, "cache-control"),
        "public, max-age=31536000, immutable"
    );
    assert_eq!(header(&r, "etag"), format!("\"{sha}\""));
    assert_eq!(header(&r, "accept-ranges"), "bytes");
    assert_eq!(r.bytes().await.unwrap().as_ref(), pack.as_slice());

    let r = c
        .get(&url)
        .header("Range", "bytes=0-9")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::PARTIAL_CONTENT);
    assert_eq!(header(&r, "content-range"), format!("bytes 0-9/{size}"));
    assert_eq!(r.bytes().await.unwrap().as_ref(), &pack[..10]);

    let r = c
        .get(&url)
        .header("Range", "bytes=-16")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::PARTIAL_CONTENT);
    assert_eq!(r.bytes().await.unwrap().as_ref(), &pack[pack.len() - 16..]);

    let r = c
        .get(&url)
        .header("Range", "bytes=100-")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::PARTIAL_CONTENT);
    assert_eq!(r.bytes().await.unwrap().as_ref(), &pack[100..]);

    let r = c
        .get(&url)
        .header("Range", format!("bytes={size}-"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::RANGE_NOT_SATISFIABLE);
    assert_eq!(header(&r, "content-range"), format!("bytes */{size}"));

    let r = c
        .get(&url)
        .header("Range", "bytes=0-9")
        .header("If-Range", "\"some-other-etag\"")
        .send()
        .await
        .unwrap();
    assert_eq!(
        r.status(),
        StatusCode::OK,
        "a stale If-Range gets the whole blob"
    );

    let r = c
        .get(&url)
        .header("If-None-Match", format!("\"{sha}\""))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::NOT_MODIFIED);

    let r = c.head(&url).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(header(&r, "content-length"), size.to_string());
    let r = c
        .head(blob_url(&server, &"a".repeat(64)))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::NOT_FOUND);
}

/// The live sequence as `server` answers it (0: nothing published).
async fn live_sequence(c: &reqwest::Client, base: &str) -> u64 {
    // As packer reads it: storage's answer, not one from memory.
    let r = c
        .get(format!("{base}/v1/channels/stable"))
        .header("cache-control", "no-cache")
        .send()
        .await
        .unwrap();
    match r.status() {
        StatusCode::NOT_FOUND => 0,
        StatusCode::OK => {
            let doc: Value = serde_json::from_slice(&r.bytes().await.unwrap()).unwrap();
            doc["sequence"].as_u64().unwrap()
        }
        other => panic!("GET channel: {other}"),
    }
}

/// `(sequence, sha256)` of every document in the channel's history, and the live sequence
/// the history route reports.
async fn history_of(server: &Packd) -> (Vec<(u64, String)>, u64) {
    let history = json(
        client()
            .get(server.url("/v1/channels/stable/history"))
            .send()
            .await
            .unwrap(),
    )
    .await;
    let entries = history["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["sequence"].as_u64().unwrap(),
                e["sha256"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    (entries, history["live_sequence"].as_u64().unwrap())
}

const RACERS: usize = 40;

/// Two processes over one storage and 40 releases at once, half through each: every racer
/// reads the live sequence, signs live + 1 and publishes, and on a 409 reads again and
/// retries, as `packer release` tells its user to. No update may be lost and none may
/// appear twice: the history is exactly 1..=40, each document one racer was told was
/// created, and the live document is the last.
async fn two_nodes_and_40_racing_releases_leave_a_contiguous_history(env: Env) {
    let fx = Arc::new(env.fx);
    let a = Packd::start(&env.backend, Some(&fx.config));
    let b = Packd::start(&env.backend, Some(&fx.config));
    let pack = Arc::new(fx.pack("core", "1.0.0", "one"));
    assert_eq!(upload(&a, &pack).await.status(), StatusCode::CREATED);
    assert_eq!(
        upload(&b, &pack).await.status(),
        StatusCode::OK,
        "b sees a's upload"
    );

    let started = std::time::Instant::now();
    let mut racers = Vec::new();
    for id in 0..RACERS {
        let base = if id % 2 == 0 { &a.url } else { &b.url }.clone();
        let fx = fx.clone();
        let pack = pack.clone();
        racers.push(tokio::spawn(async move {
            let c = client();
            let (mut stale, mut taken) = (0, 0);
            for _attempt in 0..(4 * RACERS) {
                let sequence = live_sequence(&c, &base).await + 1;
                let body = fx.publish_body(&fx.document(
                    "stable",
                    sequence,
                    &pack,
                    &format!("racer{id}-{sequence}"),
                ));
                let sha = pack_format::sha256_hex(body["document"].as_str().unwrap().as_bytes());
                let r = c
                    .put(format!("{base}/v1/channels/stable"))
                    .bearer_auth(PUBLISH_TOKEN)
                    .json(&body)
                    .send()
                    .await
                    .unwrap();
                match r.status() {
                    StatusCode::CREATED => return ((sequence, sha), stale, taken),
                    StatusCode::CONFLICT => match error_code(r).await.as_str() {
                        "stale_sequence" => stale += 1,
                        "sequence_taken" => taken += 1,
                        other => panic!("racer {id}: 409 {other}"),
                    },
                    other => panic!(
                        "racer {id}: unexpected {other}: {}",
                        r.text().await.unwrap()
                    ),
                }
            }
            panic!("racer {id} ran out of attempts");
        }));
    }
    let mut accepted = BTreeSet::new();
    let (mut stale, mut taken) = (0, 0);
    for racer in racers {
        let (won, s, t) = racer.await.unwrap();
        assert!(accepted.insert(won.clone()), "accepted twice: {won:?}");
        stale += s;
        taken += t;
    }
    eprintln!(
        "{RACERS} racing releases over two nodes: {RACERS} created, {stale} refused as \
         stale_sequence, {taken} as sequence_taken, in {} ms",
        started.elapsed().as_millis()
    );
    let sequences: Vec<u64> = accepted.iter().map(|(s, _)| *s).collect();
    assert_eq!(
        sequences,
        (1..=RACERS as u64).collect::<Vec<_>>(),
        "one document created per sequence, no gaps"
    );

    let c = client();
    for server in [&a, &b] {
        let r = c
            .get(server.url("/v1/channels/stable"))
            .header("cache-control", "no-cache")
            .send()
            .await
            .unwrap();
        let live = r.bytes().await.unwrap();
        assert!(
            accepted.contains(&(RACERS as u64, pack_format::sha256_hex(&live))),
            "the live document is the one created as the last sequence"
        );
        let (listed, live_sequence) = history_of(server).await;
        assert_eq!(live_sequence, RACERS as u64);
        assert_eq!(
            listed.into_iter().collect::<BTreeSet<_>>(),
            accepted,
            "history holds exactly every created document"
        );
    }
}

const KILLS: usize = 20;

/// The sequence the head hint of `channel` names, read straight from storage (0: none).
fn head_hint(env: &Env, channel: &str) -> u64 {
    let key = format!("channels/{channel}/head.json");
    let bytes = match (&env.backend, env.s3) {
        (Backend::Disk(dir), _) => std::fs::read(dir.join(&key)).ok(),
        (Backend::S3 { url, .. }, Some(s3)) => s3.read(url, &key),
        (backend, s3) => unreachable!("{backend:?} with {}", s3.is_some()),
    };
    bytes.map_or(0, |b| {
        serde_json::from_slice::<Value>(&b).unwrap()["sequence"]
            .as_u64()
            .unwrap()
    })
}

/// `kill -9` a packd while it publishes, 20 times at random moments. Whatever the moment,
/// the restarted packd serves the highest committed sequence as live (a document whose
/// create went through is live at once, even if packd died before updating the head hint),
/// and the next release, signed for live + 1, succeeds.
async fn kill_9_during_a_publish_leaves_the_highest_commit_live(env: Env) {
    let fx = &env.fx;
    let mut server = Packd::start(&env.backend, Some(&fx.config));
    let pack = fx.pack("core", "1.0.0", "one");
    assert_eq!(upload(&server, &pack).await.status(), StatusCode::CREATED);
    let first = fx.publish_body(&fx.document("stable", 1, &pack, "first"));
    let started = std::time::Instant::now();
    assert_eq!(
        publish(&server, "stable", &first).await.status(),
        StatusCode::CREATED
    );
    // Kills land anywhere from before the request arrives to after the answer: the delay is
    // drawn from twice the time the last publish took.
    let mut publish_time = started.elapsed();
    let c = client();
    let (mut committed, mut not_committed, mut hint_behind) = (0, 0, 0);
    for kill in 0..KILLS {
        let before = live_sequence(&c, &server.url).await;
        let body =
            fx.publish_body(&fx.document("stable", before + 1, &pack, &format!("killed{kill}")));
        let sha = pack_format::sha256_hex(body["document"].as_str().unwrap().as_bytes());
        let url = server.url("/v1/channels/stable");
        let in_flight = tokio::spawn(async move {
            // The answer never comes: packd dies first, or just after.
            let _ = client()
                .put(url)
                .bearer_auth(PUBLISH_TOKEN)
                .json(&body)
                .send()
                .await;
        });
        let window = 2 * publish_time.as_micros().max(1) as u64;
        tokio::time::sleep(Duration::from_micros(rand::random_range(0..window))).await;
        server.stop();
        in_flight.await.unwrap();
        let hint = head_hint(&env, "stable");
        server.restart();

        let (history, history_live) = history_of(&server).await;
        let highest = history.last().unwrap().clone();
        let live = c
            .get(server.url("/v1/channels/stable"))
            .send()
            .await
            .unwrap();
        assert_eq!(
            header(&live, "x-promptpack-sequence"),
            highest.0.to_string()
        );
        let live = live.bytes().await.unwrap();
        assert_eq!(
            pack_format::sha256_hex(&live),
            highest.1,
            "kill {kill}: the live document is the highest committed one"
        );
        assert_eq!(history_live, highest.0);
        assert_eq!(
            history.iter().map(|(s, _)| *s).collect::<Vec<_>>(),
            (1..=highest.0).collect::<Vec<_>>(),
            "kill {kill}: the history stays contiguous"
        );
        if highest.0 == before + 1 {
            assert_eq!(highest.1, sha);
            committed += 1;
            if hint < highest.0 {
                hint_behind += 1;
            }
        } else {
            assert_eq!(highest.0, before, "kill {kill}");
            not_committed += 1;
        }

        let next =
            fx.publish_body(&fx.document("stable", highest.0 + 1, &pack, &format!("after{kill}")));
        let started = std::time::Instant::now();
        let r = publish(&server, "stable", &next).await;
        publish_time = started.elapsed();
        assert_eq!(
            r.status(),
            StatusCode::CREATED,
            "kill {kill}: the next release"
        );
    }
    eprintln!(
        "kill -9 during a publish, {KILLS} times: {committed} had committed (live at once after \
         the restart; {hint_behind} of them before the head hint was written), {not_committed} \
         had not; every next release was created (the last publish took {} ms)",
        publish_time.as_millis()
    );
}

/// A publisher's connection dies mid-upload because the server is killed; a restarted server
/// shows nothing of it and serves the state from before.
async fn kill_9_during_an_upload_leaves_nothing_partial(env: Env) {
    let fx = &env.fx;
    let mut server = Packd::start(&env.backend, Some(&fx.config));
    let pack1 = fx.pack("core", "1.0.0", "one");
    assert_eq!(upload(&server, &pack1).await.status(), StatusCode::CREATED);
    let body1 = fx.publish_body(&fx.document("stable", 1, &pack1, "a"));
    assert_eq!(
        publish(&server, "stable", &body1).await.status(),
        StatusCode::CREATED
    );

    let pack2 = fx.pack("core", "2.0.0", &"big ".repeat(4000));
    let sha2 = pack_format::sha256_hex(&pack2);
    let mut stream = TcpStream::connect(server.addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    let head = format!(
        "PUT /v1/blobs/{sha2} HTTP/1.1\r\nHost: test\r\nAuthorization: Bearer {PUBLISH_TOKEN}\r\n\
         Content-Type: application/octet-stream\r\nContent-Length: {}\r\n\
         Expect: 100-continue\r\n\r\n",
        pack2.len()
    );
    stream.write_all(head.as_bytes()).unwrap();
    // The sign that the upload is in flight: packd took the token and asks for the body.
    let mut interim = Vec::new();
    let mut byte = [0u8; 1];
    while !interim.ends_with(b"\r\n\r\n") && stream.read(&mut byte).unwrap() == 1 {
        interim.push(byte[0]);
    }
    let interim = String::from_utf8_lossy(&interim);
    assert!(interim.starts_with("HTTP/1.1 100 "), "{interim}");
    stream.write_all(&pack2[..pack2.len() / 2]).unwrap();
    stream.flush().unwrap();
    server.stop();
    drop(stream);

    server.restart();
    let c = client();
    for request in [
        c.get(blob_url(&server, &sha2)),
        c.head(blob_url(&server, &sha2)),
    ] {
        assert_eq!(
            request.send().await.unwrap().status(),
            StatusCode::NOT_FOUND
        );
    }
    let packs = json(c.get(server.url("/v1/packs")).send().await.unwrap()).await;
    assert_eq!(
        packs["packs"][0]["versions"].as_array().unwrap().len(),
        1,
        "{packs}"
    );
    let live = c
        .get(server.url("/v1/channels/stable"))
        .send()
        .await
        .unwrap();
    assert_eq!(
        live.text().await.unwrap(),
        body1["document"].as_str().unwrap()
    );
    let blob = c
        .get(blob_url(&server, &pack_format::sha256_hex(&pack1)))
        .send()
        .await
        .unwrap();
    assert_eq!(blob.bytes().await.unwrap().as_ref(), pack1.as_slice());

    // Not even a stray file or object with the hash in its name, on disk or in the bucket.
    let names = match (&env.backend, env.s3) {
        (Backend::Disk(dir), _) => files_under(dir),
        (Backend::S3 { url, .. }, Some(s3)) => s3.keys_under(url),
        (backend, s3) => unreachable!("{backend:?} with {}", s3.is_some()),
    };
    assert!(
        !names.iter().any(|f| f.contains(&sha2) || f.contains('#')),
        "{names:?}"
    );

    // And the interrupted upload can simply be sent again.
    assert_eq!(upload(&server, &pack2).await.status(), StatusCode::CREATED);
}
