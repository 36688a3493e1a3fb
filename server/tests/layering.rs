//! packd's modules depend on each other in one direction (the order is in `src/lib.rs`'s
//! doc): no `crate::` path may close a cycle between two top-level modules. The scan is
//! shared with every crate's dependency test; its own tests are here.

use crate::module_layers;

use std::collections::BTreeMap;

use module_layers::{code_of, crate_paths, find_cycle};

#[test]
fn no_module_depends_back_on_a_module_that_depends_on_it() {
    module_layers::assert_no_cycle(env!("CARGO_MANIFEST_DIR"), ("routes", "state"), &[]);
}

#[test]
fn the_scan_reports_a_cycle_it_is_shown() {
    let mut graph = BTreeMap::new();
    graph.insert("a".to_string(), crate_paths("use crate::{b::X, c};"));
    graph.insert("b".to_string(), crate_paths("let s = crate::a::f();"));
    graph.insert("c".to_string(), Default::default());
    assert_eq!(
        find_cycle(&graph),
        Some(vec!["a".to_string(), "b".to_string(), "a".to_string()])
    );
    graph.get_mut("b").unwrap().clear();
    assert_eq!(find_cycle(&graph), None);
}

#[test]
fn the_scan_leaves_out_comments_and_the_unit_tests() {
    let text = "use crate::a::X;\n/// See [`crate::b`].\nfn f() {}\n\n#[cfg(test)]\nmod tests {\n    use crate::c::Y;\n}\n";
    let code = code_of(text);
    assert_eq!(
        crate_paths(&code).into_iter().collect::<Vec<_>>(),
        ["a"],
        "{code}"
    );
}
