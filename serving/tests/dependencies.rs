//! pack-serving is what a renderer needs (snapshots, the store, the built-in pack): it
//! links no HTTP client, async runtime, scheduler or retry crate, so the agent's prompt
//! assembly and `packer diff` do not either. The closure is read from the workspace's
//! `Cargo.lock`, which lists every dependency of every feature (and dev-dependencies), so a
//! crate absent from it is absent from pack-serving.

#[path = "../../tests/shared/lock_closure.rs"]
mod lock_closure;
#[path = "../../tests/shared/module_layers.rs"]
mod module_layers;

use lock_closure::closure;

/// The format crates are not followed: `Cargo.lock` records one feature set for the whole
/// workspace, so it shows `backon` with tokio under pack-format, which pack-client turns on.
#[test]
fn serving_links_no_network_stack_or_async_runtime() {
    let format_crates = ["pack-format", "pack-contract"];
    let serving = closure("pack-serving", &format_crates);
    assert!(
        serving.contains("handlebars") && serving.contains("arc-swap"),
        "the closure must be read: {serving:?}"
    );
    for crate_name in [
        "pack-client",
        "pack-protocol",
        "reqwest",
        "hyper",
        "tokio",
        "tokio-cron-scheduler",
        "backon",
    ] {
        assert!(
            !serving.contains(crate_name),
            "pack-serving reaches {crate_name}, which only fetching packs needs"
        );
    }
    let client = closure("pack-client", &format_crates);
    assert!(
        ["reqwest", "tokio", "tokio-cron-scheduler", "backon"]
            .iter()
            .all(|c| client.contains(*c)),
        "pack-client links all of them, so the scan would see them"
    );
}

/// One idea, one module: no top-level module names a module that names it back.
#[test]
fn no_module_depends_back_on_a_module_that_depends_on_it() {
    module_layers::assert_no_cycle(env!("CARGO_MANIFEST_DIR"), ("store", "snapshot"), &[]);
}
