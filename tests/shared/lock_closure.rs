//! What a package links, read from the workspace's `Cargo.lock`, which lists every dependency
//! of every feature (and dev-dependencies): a crate absent from a package's closure there is
//! absent from its binary. Each crate's `tests/dependencies.rs` includes this file
//! (`#[path]`), so there is one reader of the lock for all of them.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// Every package `root` reaches in `Cargo.lock`, `root` included, not following the
/// dependencies of the packages in `opaque`.
pub fn closure(root: &str, opaque: &[&str]) -> BTreeSet<String> {
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
        if seen.insert(name.clone()) && !opaque.contains(&name.as_str()) {
            todo.extend(deps.get(&name).into_iter().flatten().cloned());
        }
    }
    seen
}
