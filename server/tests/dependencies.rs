//! packd moves packs around; it never renders one, so it links no template engine. The
//! closure is read from the workspace's `Cargo.lock`, which lists every dependency of
//! every feature (and dev-dependencies), so a crate absent from it is absent from packd.

use crate::lock_closure;

use lock_closure::closure;

#[test]
fn packd_links_no_template_engine() {
    let packd = closure("pack-server", &[]);
    assert!(
        packd.contains("pack-format") && packd.contains("axum"),
        "the closure must be read: {packd:?}"
    );
    for engine in ["handlebars", "pack-contract"] {
        assert!(
            !packd.contains(engine),
            "packd reaches {engine}: the template contract belongs in pack-contract, which \
             only packer, the client and the runtime use"
        );
    }
    assert!(
        closure("agent-runtime", &[]).contains("handlebars"),
        "the runtime renders with handlebars, so the scan would see it"
    );
}
