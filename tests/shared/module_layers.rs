//! Which top-level modules of a crate name which others (`crate::` paths in `src/`), and the
//! first cycle among them. Included by each crate's `tests/dependencies.rs`: a cycle between
//! two modules usually means a third, missing one (docs/ARCHITECTURE.md lists the few left).
//!
//! Doc comments, comments and `#[cfg(test)] mod tests` blocks are left out: a test may build
//! its input with a module the code itself never calls.

#![allow(dead_code)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

pub type Graph = BTreeMap<String, BTreeSet<String>>;

/// The top-level module a source file belongs to (`routes/blobs.rs` → `routes`).
fn module_of(src: &Path, file: &Path) -> String {
    let relative = file.strip_prefix(src).unwrap();
    let first = relative.components().next().unwrap().as_os_str();
    Path::new(first)
        .file_stem()
        .unwrap()
        .to_string_lossy()
        .into_owned()
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// `text` without comment lines and without its unit-test module (by convention the last
/// item of a file, opened by `#[cfg(test)]` followed by `mod`).
pub fn code_of(text: &str) -> String {
    let mut code = String::new();
    let mut lines = text.lines().peekable();
    while let Some(line) = lines.next() {
        let trimmed = line.trim_start();
        if trimmed == "#[cfg(test)]"
            && lines
                .peek()
                .is_some_and(|next| next.trim_start().starts_with("mod "))
        {
            break;
        }
        if trimmed.starts_with("//") {
            continue;
        }
        code.push_str(line);
        code.push('\n');
    }
    code
}

/// Every top-level module named by a `crate::` path in `text`, including each one of a
/// grouped `use crate::{a, b::c}`.
pub fn crate_paths(text: &str) -> BTreeSet<String> {
    let ident = |s: &str| -> String {
        s.chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect()
    };
    let mut found = BTreeSet::new();
    for (at, _) in text.match_indices("crate::") {
        // A preceding identifier character means another path, such as `other_crate::`.
        if text[..at]
            .chars()
            .next_back()
            .is_some_and(|c| c.is_alphanumeric() || c == '_')
        {
            continue;
        }
        let rest = &text[at + "crate::".len()..];
        if let Some(group) = rest.strip_prefix('{') {
            let mut depth = 0usize;
            let mut start = 0;
            for (i, c) in group.char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' if depth == 0 => {
                        found.insert(ident(group[start..i].trim_start()));
                        break;
                    }
                    '}' => depth -= 1,
                    ',' if depth == 0 => {
                        found.insert(ident(group[start..i].trim_start()));
                        start = i + 1;
                    }
                    _ => {}
                }
            }
        } else {
            found.insert(ident(rest));
        }
    }
    found.retain(|m| !m.is_empty());
    found
}

/// The module graph of the crate whose manifest directory is `crate_dir`.
pub fn graph(crate_dir: &str) -> Graph {
    let src = Path::new(crate_dir).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let mut graph = Graph::new();
    for file in files {
        let module = module_of(&src, &file);
        if module == "lib" || module == "main" {
            continue;
        }
        let text = std::fs::read_to_string(&file).unwrap();
        let uses = graph.entry(module.clone()).or_default();
        uses.extend(
            crate_paths(&code_of(&text))
                .into_iter()
                .filter(|m| *m != module),
        );
    }
    graph
}

/// The first cycle found, as the path of modules around it.
pub fn find_cycle(graph: &Graph) -> Option<Vec<String>> {
    fn visit(
        node: &str,
        graph: &Graph,
        done: &mut BTreeSet<String>,
        path: &mut Vec<String>,
    ) -> Option<Vec<String>> {
        if let Some(at) = path.iter().position(|n| n == node) {
            let mut cycle = path[at..].to_vec();
            cycle.push(node.to_string());
            return Some(cycle);
        }
        if done.contains(node) {
            return None;
        }
        path.push(node.to_string());
        for next in graph.get(node).into_iter().flatten() {
            if let Some(cycle) = visit(next, graph, done, path) {
                return Some(cycle);
            }
        }
        path.pop();
        done.insert(node.to_string());
        None
    }
    let mut done = BTreeSet::new();
    graph
        .keys()
        .find_map(|node| visit(node, graph, &mut done, &mut Vec::new()))
}

/// Fails when the crate at `crate_dir` has a module cycle other than the `known` ones, each
/// given as the edge `(from, to)` that closes it (docs/ARCHITECTURE.md says why each stays).
/// A known edge that no longer exists fails too, so the list and the docs shrink with the
/// code. `edge` is one edge the scan must see, so an empty scan cannot pass.
pub fn assert_no_cycle(crate_dir: &str, edge: (&str, &str), known: &[(&str, &str)]) {
    let mut graph = graph(crate_dir);
    assert!(
        graph.get(edge.0).is_some_and(|uses| uses.contains(edge.1)),
        "the scan must see {} use {}: {graph:?}",
        edge.0,
        edge.1
    );
    for (from, to) in known {
        assert!(
            graph.get_mut(*from).is_some_and(|uses| uses.remove(*to)),
            "{from} no longer uses {to}: take the cycle off the known list and docs/ARCHITECTURE.md"
        );
    }
    if let Some(cycle) = find_cycle(&graph) {
        panic!(
            "module cycle {}: make the dependency point one way, through a module of its own if \
             one is missing (docs/ARCHITECTURE.md)",
            cycle.join(" -> ")
        );
    }
}
