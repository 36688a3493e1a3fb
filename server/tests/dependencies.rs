//! packd moves packs around; it never renders one, so it links no template engine. The
//! closure is read from the workspace's `Cargo.lock`, which lists every dependency of
//! every feature (and dev-dependencies), so a crate absent from it is absent from packd.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// Every package `root` reaches in `Cargo.lock`, `root` included.
fn closure(root: &str) -> BTreeSet<String> {
    let lock = Path::new(env!("CARGO_MANIFEST_DIR")).join("../Cargo.lock");
    let text = std::fs::read_to_string(&lock).unwrap();
    let lock: toml::Table = toml::from_str(&text).unwrap();
    let mut deps: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for package in lock["package"].as_array().unwrap() {
        let name = package["name"].as_str().unwrap().to_string();
        let entry = deps.entry(name).or_default();
        for dep in package
            .get("dependencies")
            .and_then(|d| d.as_array())
            .into_iter()
            .flatten()
        {
            // "name", or "name version" when several versions are locked.
            let dep = dep.as_str().unwrap();
            entry.push(dep.split(' ').next().unwrap().to_string());
        }
    }
    let mut seen = BTreeSet::new();
    let mut todo = vec![root.to_string()];
    while let Some(name) = todo.pop() {
        if seen.insert(name.clone()) {
            todo.extend(deps.get(&name).into_iter().flatten().cloned());
        }
    }
    seen
}

#[test]
fn packd_links_no_template_engine() {
    let packd = closure("pack-server");
    assert!(
        packd.contains("pack-format") && packd.contains("axum"),
        "the closure must be read: {packd:?}"
    );
    for engine in ["handlebars", "pack-contract"] {
        assert!(
            !packd.contains(engine),
            "packd reaches {engine}: the template contract belongs in pack-contract, which \
             only packer, the client and the runtime use"
        );
    }
    assert!(
        closure("agent-runtime").contains("handlebars"),
        "the runtime renders with handlebars, so the scan would see it"
    );
}
