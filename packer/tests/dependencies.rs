//! packer is the publisher's tool: `packer diff` renders prompts with the runtime's assembly
//! code, but packer never runs an agent, so it links no MCP client, sandbox or line editor.
//! The closure is read from the workspace's `Cargo.lock`, which lists every dependency of
//! every feature (and dev-dependencies), so a crate absent from it is absent from packer.

use crate::lock_closure;
use crate::module_layers;

use lock_closure::closure;

#[test]
fn packer_links_no_agent_runtime() {
    let packer = closure("packer", &[]);
    assert!(
        packer.contains("prompt-assembly") && packer.contains("pack-format"),
        "the closure must be read: {packer:?}"
    );
    for crate_name in ["agent", "agent-runtime", "rmcp", "landlock", "rustyline"] {
        assert!(
            !packer.contains(crate_name),
            "packer reaches {crate_name}: `packer diff` needs only prompt assembly \
             (prompt-assembly), not the agent that runs the prompts"
        );
    }
    let agent = closure("agent", &[]);
    assert!(
        ["agent-runtime", "rmcp", "landlock", "rustyline"]
            .iter()
            .all(|c| agent.contains(*c)),
        "the agent links all of them, so the scan would see them"
    );
}

/// One idea, one module: no top-level module names a module that names it back.
#[test]
fn no_module_depends_back_on_a_module_that_depends_on_it() {
    module_layers::assert_no_cycle(env!("CARGO_MANIFEST_DIR"), ("build", "keys"), &[]);
}
