//! pack-format is the bytes: it parses and seals, and reads no network, runs no async
//! runtime and renders no template, so every crate above it (packd, the client, the Python
//! package, the fuzz targets) can take it without those. The closure is read from the
//! workspace's `Cargo.lock`, which lists every dependency of every feature (and
//! dev-dependencies), so a crate absent from it is absent from pack-format.

use crate::lock_closure;
use crate::module_layers;

use lock_closure::closure;

#[test]
fn the_format_links_no_network_runtime_or_template_engine() {
    let format = closure("pack-format", &[]);
    assert!(
        format.contains("zstd") && format.contains("minisign"),
        "the closure must be read: {format:?}"
    );
    for crate_name in [
        "reqwest",
        "hyper",
        "axum",
        "tokio",
        "backon",
        "handlebars",
        "pack-protocol",
    ] {
        assert!(
            !format.contains(crate_name),
            "pack-format reaches {crate_name}; the byte format needs no network, async runtime or template engine"
        );
    }
}

/// One idea, one module: no top-level module names a module that names it back.
/// `channel` ↔ `guard` is the one cycle kept (docs/ARCHITECTURE.md says why).
#[test]
fn no_module_depends_back_on_a_module_that_depends_on_it() {
    module_layers::assert_no_cycle(
        env!("CARGO_MANIFEST_DIR"),
        ("decode", "payload"),
        &[("guard", "channel")],
    );
}
