//! Prompt assembly is pure: it reads a snapshot and the data it is handed, so it links no
//! MCP client, sandbox, line editor or model provider. The closure is read from the
//! workspace's `Cargo.lock`, which lists every dependency of every feature (and
//! dev-dependencies), so a crate absent from it is absent from the assembly.

#[path = "../../tests/shared/lock_closure.rs"]
mod lock_closure;

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

/// The snapshot type comes from pack-client, which also fetches packs (reqwest, tokio);
/// what the assembly adds beyond the workspace's pack crates may bring no network stack
/// or async runtime. (The pack crates are not followed: `Cargo.lock` records one feature
/// set for the whole workspace, so it shows `backon` with tokio under pack-format too.)
#[test]
fn assembly_brings_no_network_stack_of_its_own() {
    let pack_crates = ["pack-client", "pack-format", "pack-contract"];
    let assembly = closure("prompt-assembly", &pack_crates);
    assert!(
        assembly.contains("pack-client") && assembly.contains("globset"),
        "the closure must be read: {assembly:?}"
    );
    for crate_name in ["reqwest", "tokio", "hyper"] {
        assert!(
            !assembly.contains(crate_name),
            "prompt-assembly reaches {crate_name} other than through the pack crates"
        );
    }
    assert!(
        closure("pack-client", &[]).contains("reqwest"),
        "pack-client fetches with reqwest, so the scan would see it"
    );
}
