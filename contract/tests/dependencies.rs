//! pack-contract is the template contract and its strict check: packer runs it at build,
//! the client at install, the agent at render. It links no network stack or async runtime.
//! The closure is read from the workspace's `Cargo.lock`, which lists every dependency of
//! every feature (and dev-dependencies), so a crate absent from it is absent from
//! pack-contract.

#[path = "../../tests/shared/lock_closure.rs"]
mod lock_closure;
#[path = "../../tests/shared/module_layers.rs"]
mod module_layers;

use lock_closure::closure;

/// pack-format is not followed: it is checked by its own test.
#[test]
fn the_contract_links_no_network_or_async_runtime() {
    let contract = closure("pack-contract", &["pack-format"]);
    assert!(
        contract.contains("handlebars") && contract.contains("pack-format"),
        "the closure must be read: {contract:?}"
    );
    for crate_name in [
        "reqwest",
        "hyper",
        "axum",
        "tokio",
        "pack-client",
        "pack-protocol",
    ] {
        assert!(
            !contract.contains(crate_name),
            "pack-contract reaches {crate_name}; checking templates needs no network"
        );
    }
}

/// One idea, one module: no top-level module names a module that names it back.
#[test]
fn no_module_depends_back_on_a_module_that_depends_on_it() {
    module_layers::assert_no_cycle(env!("CARGO_MANIFEST_DIR"), ("validator", "pieces"), &[]);
}
