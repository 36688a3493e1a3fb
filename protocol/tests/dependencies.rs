//! pack-protocol is packd's protocol written once (paths, headers, bodies, the retry
//! schedule): data and pure functions, with no HTTP client or server of its own, so packd,
//! packer, the client and the agent each bring the HTTP stack they chose. The closure is read
//! from the workspace's `Cargo.lock`, which lists every dependency of every feature (and
//! dev-dependencies), so a crate absent from it is absent from pack-protocol.

#[path = "../../tests/shared/lock_closure.rs"]
mod lock_closure;
#[path = "../../tests/shared/module_layers.rs"]
mod module_layers;

use lock_closure::closure;

/// `backon` is not followed: `Cargo.lock` records one feature set for the whole workspace,
/// and the client turns on its tokio sleeper.
#[test]
fn the_protocol_links_no_http_stack_or_template_engine() {
    let protocol = closure("pack-protocol", &["backon"]);
    assert!(
        protocol.contains("pack-format") && protocol.contains("backon"),
        "the closure must be read: {protocol:?}"
    );
    for crate_name in [
        "reqwest",
        "hyper",
        "axum",
        "tokio",
        "handlebars",
        "pack-client",
    ] {
        assert!(
            !protocol.contains(crate_name),
            "pack-protocol reaches {crate_name}; the protocol is data, the HTTP stack is each binary's"
        );
    }
}

/// One idea, one module: no top-level module names a module that names it back.
#[test]
fn no_module_depends_back_on_a_module_that_depends_on_it() {
    module_layers::assert_no_cycle(env!("CARGO_MANIFEST_DIR"), ("outcomes", "fleet"), &[]);
}
