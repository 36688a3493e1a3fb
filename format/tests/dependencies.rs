//! pack-format is the bytes: it parses and seals, and reads no network, runs no async
//! runtime and renders no template, so every crate above it (packd, the client, the Python
//! package, the fuzz targets) can take it without those. The closure is read from the
//! workspace's `Cargo.lock`, which lists every dependency of every feature (and
//! dev-dependencies), so a crate absent from it is absent from pack-format.

#[path = "../../tests/shared/lock_closure.rs"]
mod lock_closure;

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
