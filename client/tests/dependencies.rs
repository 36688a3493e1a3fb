//! pack-client fetches, verifies and installs packs for any program that renders prompts
//! (the agent, the Python package, `pack-client` itself): it links none of the agent's
//! machinery and none of packd's. The closure is read from the workspace's `Cargo.lock`,
//! which lists every dependency of every feature (and dev-dependencies), so a crate absent
//! from it is absent from pack-client.

use crate::lock_closure;
use crate::module_layers;

use lock_closure::closure;

#[test]
fn the_client_links_no_agent_or_server_machinery() {
    let client = closure("pack-client", &[]);
    assert!(
        client.contains("reqwest") && client.contains("pack-serving"),
        "the closure must be read: {client:?}"
    );
    for crate_name in [
        "agent-runtime",
        "prompt-assembly",
        "rmcp",
        "landlock",
        "rustyline",
        "pack-server",
        "object_store",
        "prometheus",
        "maud",
    ] {
        assert!(
            !client.contains(crate_name),
            "pack-client reaches {crate_name}, which only the agent or packd needs"
        );
    }
}

/// One idea, one module: no top-level module names a module that names it back.
#[test]
fn no_module_depends_back_on_a_module_that_depends_on_it() {
    module_layers::assert_no_cycle(env!("CARGO_MANIFEST_DIR"), ("client", "cache"), &[]);
}
