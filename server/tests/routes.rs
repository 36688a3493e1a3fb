//! pack-protocol is the one home of packd's route templates: every path of packd's OpenAPI
//! document is one of `pack_protocol::paths::ROUTES`, every template there is served, and
//! each template's builder (which packer and the client request) reaches its route.

use crate::common;

use std::collections::BTreeSet;

use common::*;
use pack_protocol::paths;
use reqwest::StatusCode;
use serde_json::Value;

/// The difference of the two sets of paths, both ways, for the failure message.
fn drift(described: &BTreeSet<String>) -> String {
    let templates: BTreeSet<String> = paths::ROUTES.iter().map(|t| t.to_string()).collect();
    let unknown: Vec<&String> = described.difference(&templates).collect();
    let unserved: Vec<&String> = templates.difference(described).collect();
    format!(
        "in packd's OpenAPI document but not a pack-protocol template: {unknown:?}; \
         pack-protocol templates packd does not describe: {unserved:?}"
    )
}

/// The document packd builds, without starting it: routes and OpenAPI paths are registered
/// together (`app::api_routes`), so a path in it is a route packd serves.
#[test]
fn the_openapi_paths_are_the_protocol_templates() {
    let document = pack_server::app::openapi();
    let described: BTreeSet<String> = document.paths.paths.keys().cloned().collect();
    let templates: BTreeSet<String> = paths::ROUTES.iter().map(|t| t.to_string()).collect();
    assert_eq!(described, templates, "{}", drift(&described));
}

/// A running packd: the document it serves has the same paths, and the path each builder
/// makes for a template reaches a route under every method the document gives it (not the
/// fallback 404, not 405).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_template_is_served_and_its_builder_reaches_it() {
    let fx = Fixture::new("");
    let server = Packd::start(&fx.disk(), Some(&fx.config));
    let c = client();
    let spec: Value = c
        .get(server.url(paths::OPENAPI))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let items = spec["paths"].as_object().unwrap();
    let described: BTreeSet<String> = items.keys().cloned().collect();
    let templates: BTreeSet<String> = paths::ROUTES.iter().map(|t| t.to_string()).collect();
    assert_eq!(described, templates, "{}", drift(&described));

    let sha = "0".repeat(64);
    let built = [
        (paths::BLOB_ROUTE, paths::blob(&sha)),
        (paths::PACKS, paths::PACKS.to_string()),
        (paths::PACK_ROUTE, paths::pack("core")),
        (paths::CHANNELS, paths::CHANNELS.to_string()),
        (paths::CHANNEL_ROUTE, paths::channel("stable")),
        (
            paths::CHANNEL_SIGNATURE_ROUTE,
            paths::channel_signature("stable"),
        ),
        (paths::HISTORY_ROUTE, paths::history("stable")),
        (
            paths::HISTORY_DOCUMENT_ROUTE,
            paths::history_document("stable", 1),
        ),
        (
            paths::HISTORY_SIGNATURE_ROUTE,
            paths::history_signature("stable", 1),
        ),
        (paths::FLEET_ROUTE, paths::fleet("stable")),
        (paths::REPORTS_ROUTE, paths::reports("stable")),
        (paths::OUTCOMES_ROUTE, paths::outcomes("stable")),
        (paths::GUARD_ROUTE, paths::guard("stable")),
        (paths::OPENAPI, paths::OPENAPI.to_string()),
        (paths::HEALTHZ, paths::HEALTHZ.to_string()),
        (paths::READYZ, paths::READYZ.to_string()),
        (paths::METRICS, paths::METRICS.to_string()),
    ];
    let covered: BTreeSet<String> = built.iter().map(|(t, _)| t.to_string()).collect();
    assert_eq!(covered, templates, "every template is requested below");

    for (template, path) in &built {
        let methods = items[*template].as_object().unwrap().keys();
        for method in methods.filter(|m| ["get", "put", "head", "post"].contains(&m.as_str())) {
            let r = c
                .request(method.to_uppercase().parse().unwrap(), server.url(path))
                .send()
                .await
                .unwrap();
            let status = r.status();
            let body = r.text().await.unwrap();
            assert_ne!(status, StatusCode::METHOD_NOT_ALLOWED, "{method} {path}");
            assert!(
                !body.contains("\"route "),
                "{method} {path} ({template}) hit the fallback: {body}"
            );
        }
    }
}
