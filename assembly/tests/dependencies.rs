//! Prompt assembly is pure: it reads a snapshot and the data it is handed, so it links no
//! MCP client, sandbox, line editor or model provider. The closure is read from the
//! workspace's `Cargo.lock`, which lists every dependency of every feature (and
//! dev-dependencies), so a crate absent from it is absent from the assembly.

#[path = "../../tests/shared/lock_closure.rs"]
mod lock_closure;
#[path = "../../tests/shared/module_layers.rs"]
mod module_layers;

use lock_closure::closure;

#[test]
fn assembly_links_no_agent_machinery() {
    let assembly = closure("prompt-assembly", &[]);
    assert!(
        assembly.contains("pack-contract") && assembly.contains("serde_norway"),
        "the closure must be read: {assembly:?}"
    );
    for crate_name in ["agent-runtime", "rmcp", "landlock", "rustyline"] {
        assert!(
            !assembly.contains(crate_name),
            "prompt-assembly reaches {crate_name}, which only the agent runtime needs"
        );
    }
}

/// The snapshot type comes from pack-serving, which serves packs and fetches none; what
/// the assembly reaches beyond the workspace's format crates brings no network stack, async
/// runtime or scheduler, and not pack-client, which fetches. (The format crates are not
/// followed: `Cargo.lock` records one feature set for the whole workspace, so it shows
/// `backon` with tokio under pack-format too.)
#[test]
fn assembly_brings_no_network_stack_or_async_runtime() {
    let format_crates = ["pack-format", "pack-contract"];
    let assembly = closure("prompt-assembly", &format_crates);
    assert!(
        assembly.contains("pack-serving") && assembly.contains("globset"),
        "the closure must be read: {assembly:?}"
    );
    for crate_name in [
        "pack-client",
        "reqwest",
        "tokio",
        "tokio-cron-scheduler",
        "hyper",
    ] {
        assert!(
            !assembly.contains(crate_name),
            "prompt-assembly reaches {crate_name}: it renders from snapshots (pack-serving) \
             and needs nothing that fetches them"
        );
    }
    let client = closure("pack-client", &format_crates);
    assert!(
        ["reqwest", "tokio", "tokio-cron-scheduler"]
            .iter()
            .all(|c| client.contains(*c)),
        "pack-client fetches with reqwest on tokio, so the scan would see them"
    );
}

/// One idea, one module: no top-level module names a module that names it back.
#[test]
fn no_module_depends_back_on_a_module_that_depends_on_it() {
    module_layers::assert_no_cycle(env!("CARGO_MANIFEST_DIR"), ("assemble", "agents"), &[]);
}
