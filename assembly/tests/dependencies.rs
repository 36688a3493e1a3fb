//! Prompt assembly is pure: it reads a snapshot and the data it is handed, so it links no
//! MCP client, sandbox, line editor or model provider. The closure is read from the
//! workspace's `Cargo.lock`, which lists every dependency of every feature (and
//! dev-dependencies), so a crate absent from it is absent from the assembly.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// Every package `root` reaches in `Cargo.lock`, `root` included, not following the
/// dependencies of the packages in `opaque`.
fn closure(root: &str, opaque: &[&str]) -> BTreeSet<String> {
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

#[test]
fn assembly_links_no_agent_machinery() {
    let assembly = closure("prompt-assembly", &[]);
    assert!(
        assembly.contains("pack-contract") && assembly.contains("serde_norway"),
        "the closure must be read: {assembly:?}"
    );
    for crate_name in ["agent-runtime", "rmcp", "landlock", "rustyline"] {
        assert!(
            !assembly.contains(crate_name),
            "prompt-assembly reaches {crate_name}, which only the agent runtime needs"
        );
    }
}

/// The snapshot type comes from pack-client, which also fetches packs (reqwest, tokio);
/// what the assembly adds beyond the workspace's pack crates may bring no network stack
/// or async runtime. (The pack crates are not followed: `Cargo.lock` records one feature
/// set for the whole workspace, so it shows `backon` with tokio under pack-format too.)
#[test]
fn assembly_brings_no_network_stack_of_its_own() {
    let pack_crates = ["pack-client", "pack-format", "pack-contract"];
    let assembly = closure("prompt-assembly", &pack_crates);
    assert!(
        assembly.contains("pack-client") && assembly.contains("globset"),
        "the closure must be read: {assembly:?}"
    );
    for crate_name in ["reqwest", "tokio", "hyper"] {
        assert!(
            !assembly.contains(crate_name),
            "prompt-assembly reaches {crate_name} other than through the pack crates"
        );
    }
    assert!(
        closure("pack-client", &[]).contains("reqwest"),
        "pack-client fetches with reqwest, so the scan would see it"
    );
}
