//! packer is the publisher's tool: `packer diff` renders prompts with the runtime's assembly
//! code, but packer never runs an agent, so it links no MCP client, sandbox or line editor.
//! The closure is read from the workspace's `Cargo.lock`, which lists every dependency of
//! every feature (and dev-dependencies), so a crate absent from it is absent from packer.

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
fn packer_links_no_agent_runtime() {
    let packer = closure("packer");
    assert!(
        packer.contains("prompt-assembly") && packer.contains("pack-format"),
        "the closure must be read: {packer:?}"
    );
    for crate_name in ["agent-runtime", "rmcp", "landlock", "rustyline"] {
        assert!(
            !packer.contains(crate_name),
            "packer reaches {crate_name}: `packer diff` needs only prompt assembly \
             (prompt-assembly), not the agent that runs the prompts"
        );
    }
    let runtime = closure("agent-runtime");
    assert!(
        ["rmcp", "landlock", "rustyline"]
            .iter()
            .all(|c| runtime.contains(*c)),
        "the runtime links all three, so the scan would see them"
    );
}
