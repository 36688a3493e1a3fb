//! The agent's core is a library: the line editor and Landlock belong to the `agent`
//! binary's front end (the interactive session and the sandbox launcher), so a program that
//! embeds the runtime links neither. The closure is read from the workspace's `Cargo.lock`,
//! which lists every dependency of every feature (and dev-dependencies), so a crate absent
//! from it is absent from the library.

#[path = "../../tests/shared/lock_closure.rs"]
mod lock_closure;
#[path = "../../tests/shared/module_layers.rs"]
mod module_layers;

use lock_closure::closure;

#[test]
fn the_runtime_links_no_front_end() {
    let runtime = closure("agent-runtime", &[]);
    assert!(
        runtime.contains("rmcp") && runtime.contains("prompt-assembly"),
        "the closure must be read: {runtime:?}"
    );
    for crate_name in ["agent", "rustyline", "landlock"] {
        assert!(
            !runtime.contains(crate_name),
            "agent-runtime reaches {crate_name}, which only the agent binary's front end needs"
        );
    }
    let front_end = closure("agent", &[]);
    assert!(
        front_end.contains("rustyline") && front_end.contains("landlock"),
        "the front end links the line editor and the sandbox: {front_end:?}"
    );
}

/// One idea, one module: no top-level module names a module that names it back.
#[test]
fn no_module_depends_back_on_a_module_that_depends_on_it() {
    module_layers::assert_no_cycle(env!("CARGO_MANIFEST_DIR"), ("agent_loop", "tools"), &[]);
}
