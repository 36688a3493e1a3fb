//! The `agent` front end's modules depend on each other in one direction.

use crate::module_layers;

#[test]
fn no_module_depends_back_on_a_module_that_depends_on_it() {
    module_layers::assert_no_cycle(env!("CARGO_MANIFEST_DIR"), ("init", "exec"), &[]);
}
