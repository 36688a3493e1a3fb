//! The variable contract: the built-in pack satisfies it, an undeclared variable fails with
//! `file:line`, and a missing variable is an error even inside `{{#if}}`.
//!
//! `packer build` runs the same `validate_template_all`; packer/tests/cli.rs covers the
//! command itself (exit status and the printed `FILE:LINE`).

use crate::common;

use agent_runtime::capabilities::{Capabilities, Occasion, Profile, resolve};
use agent_runtime::context::{self, ContextInputs};
use agent_runtime::error::PromptError;
use common::builtin;
use pack_contract::{Contract, strict_registry, validate_template_all};

fn contract() -> Contract {
    Contract::builtin(1).unwrap()
}

#[test]
fn undeclared_variable_in_a_copy_of_a_builtin_template_fails_with_file_and_line() {
    let snapshot = builtin();
    let source = std::str::from_utf8(snapshot.get("agents/worker/system.hbs").unwrap()).unwrap();
    assert!(validate_template_all("agents/worker/system.hbs", source, &contract()).is_empty());

    let mut lines: Vec<&str> = source.lines().collect();
    lines.insert(4, "Ask {{nope}} first.");
    let broken = lines.join("\n");
    let errors = validate_template_all("agents/worker/system.hbs", &broken, &contract());
    let shown: Vec<String> = errors.iter().map(ToString::to_string).collect();
    assert_eq!(
        shown,
        ["agents/worker/system.hbs:5: unknown variable 'nope'"]
    );
}

#[test]
fn the_builtin_pack_has_every_required_template_and_tool_description() {
    let snapshot = builtin();
    let contract = contract();
    assert!(!contract.required_templates().is_empty());
    for key in contract.required_templates() {
        assert!(snapshot.get(key).is_some(), "packs/builtin lacks {key}");
    }
    for tool in agent_runtime::ToolId::ALL {
        let key = format!("tools/{}.md", tool.as_str());
        assert!(snapshot.get(&key).is_some(), "packs/builtin lacks {key}");
    }
    assert!(snapshot.get("skills/init/SKILL.md").is_some());
}

#[test]
fn a_missing_condition_variable_is_a_render_error() {
    // Plain handlebars strict mode quietly takes the else branch of `{{#if missing}}`; the
    // registry the runtime renders with refuses it like any other missing variable.
    let mut registry = strict_registry();
    registry
        .register_template_string("t", "{{#if missing}}yes{{else}}no{{/if}}")
        .unwrap();
    assert!(registry.render("t", &serde_json::json!({})).is_err());
    registry
        .register_template_string("v", "{{missing}}")
        .unwrap();
    assert!(registry.render("v", &serde_json::json!({})).is_err());
    // The pack validator refuses the `#if` form up front.
    let errors = validate_template_all("t.hbs", "{{#if missing}}yes{{/if}}", &contract());
    assert_eq!(errors[0].to_string(), "t.hbs:1: unknown variable 'missing'");
}

fn full_context() -> serde_json::Value {
    let resolved = resolve(
        &Capabilities::everything(),
        None,
        Occasion::Root,
        Profile::Cli,
    );
    context::build(&ContextInputs {
        resolved: &resolved,
        persona: "Mavis",
        data_dir: "/d",
        role_directory: "/d/agents/mavis",
        skills: &[],
        custom_agents: &[],
        mcp_servers: &[],
        interactive: true,
        task_child: false,
        cli: true,
    })
}

#[test]
fn the_runtime_context_provides_every_contract_variable() {
    context::conforms(&full_context(), &contract()).unwrap();
}

#[test]
fn a_context_missing_a_variable_is_refused_before_rendering() {
    let mut context = full_context();
    context["surface"].as_object_mut().unwrap().remove("cli");
    let err = context::conforms(&context, &contract()).unwrap_err();
    assert!(
        matches!(err, PromptError::Context { ref path, .. } if path == "surface.cli"),
        "{err}"
    );
    let mut context = full_context();
    context["tools"]["read"] = serde_json::json!("yes");
    assert!(context::conforms(&context, &contract()).is_err());
}
