//! A blob reaches clients byte for byte as stored: from storage when its cache fills, then
//! from the one shared buffer in memory, whole, in ranges and to many readers at once. Runs
//! on a data directory and on SeaweedFS.

use crate::common;

use common::*;
use reqwest::StatusCode;

fn setup(kind: Kind, extra_toml: &str) -> Option<Env> {
    Env::on(kind, Fixture::new(extra_toml), "blob-bytes")
}

on_both_backends!(a_cached_blob_is_served_as_stored_whole_and_in_ranges);

async fn a_cached_blob_is_served_as_stored_whole_and_in_ranges(env: Env) {
    let fx = &env.fx;
    let server = Packd::start(&env.backend, Some(&fx.config));
    let c = client();
    // Hex of random bytes: compresses to about half, so the sealed pack is ~100 KiB: more
    // than a socket takes in one write, so a response goes out in several.
    let noise: String = (0..100 * 1024)
        .map(|_| format!("{:02x}", rand::random::<u8>()))
        .collect();
    let pack = fx.pack("big", "1.0.0", &noise);
    assert!(pack.len() > 64 * 1024, "sealed to {} bytes", pack.len());
    let size = pack.len();
    let sha = pack_format::sha256_hex(&pack);
    let url = server.url(&format!("/v1/blobs/{sha}"));
    assert_eq!(upload(&server, &pack).await.status(), StatusCode::CREATED);

    // The first GET fills the cache, the rest are answered from it.
    for _ in 0..3 {
        let r = c.get(&url).send().await.unwrap();
        assert_eq!(r.status(), StatusCode::OK);
        assert_eq!(r.bytes().await.unwrap().as_ref(), pack.as_slice());
    }
    let ranges = [
        (format!("bytes=1000-{}", 1000 + 70_000 - 1), 1000..71_000),
        (format!("bytes=-{}", 20_000), size - 20_000..size),
        ("bytes=100-".to_string(), 100..size),
        ("bytes=5-9".to_string(), 5..10),
    ];
    for (range, want) in ranges {
        let r = c.get(&url).header("Range", &range).send().await.unwrap();
        assert_eq!(r.status(), StatusCode::PARTIAL_CONTENT, "{range}");
        assert_eq!(
            r.bytes().await.unwrap().as_ref(),
            &pack[want.clone()],
            "{range}"
        );
    }

    // Many readers at once, each on its own connection.
    let readers: Vec<_> = (0..8)
        .map(|_| {
            let url = url.clone();
            tokio::spawn(async move { client().get(&url).send().await.unwrap().bytes().await })
        })
        .collect();
    for reader in readers {
        assert_eq!(reader.await.unwrap().unwrap().as_ref(), pack.as_slice());
    }
}
