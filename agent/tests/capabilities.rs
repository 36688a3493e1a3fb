//! Capability narrowing, as tables: config defaults → the agent's ceiling → the occasion →
//! the host profile. Ceilings are the real ones from the built-in pack.

use crate::common;

use std::collections::BTreeSet;

use agent_runtime::agents::AgentDefinition;
use agent_runtime::capabilities::{Resolved, resolve};
use agent_runtime::config::Config;
use agent_runtime::{Occasion, Profile, ToolId};
use common::{Turn, builtin};

fn ceiling_of(agent: &str) -> Option<agent_runtime::Ceiling> {
    AgentDefinition::builtin(agent, &builtin())
        .expect("built-in agent")
        .expect("its agent.md parses")
        .ceiling
}

fn tools(resolved: &Resolved) -> Vec<&'static str> {
    resolved
        .capabilities
        .tools
        .iter()
        .map(|t| t.as_str())
        .collect()
}

fn resolve_with(config: &str, agent: &str, occasion: Occasion, profile: Profile) -> Resolved {
    let config = Config::parse(config).expect("config parses");
    resolve(
        &config.defaults,
        ceiling_of(agent).as_ref(),
        occasion,
        profile,
    )
}

#[test]
fn builtin_ceilings_match_the_roster() {
    assert_eq!(ceiling_of("mavis"), None, "no agent.md, no ceiling");
    let names = |agent: &str| -> Vec<&'static str> {
        ceiling_of(agent)
            .unwrap()
            .tools
            .unwrap()
            .iter()
            .map(|t| t.as_str())
            .collect()
    };
    assert_eq!(
        names("explore"),
        ["read", "bash", "grep", "glob", "web_fetch"]
    );
    assert_eq!(names("worker").len(), 12);
    assert_eq!(
        names("verifier"),
        [
            "read",
            "bash",
            "task_query",
            "task_output",
            "task_stop",
            "grep",
            "glob",
            "web_fetch"
        ]
    );
    for agent in ["explore", "worker", "verifier"] {
        let disabled = ceiling_of(agent).unwrap().disabled_features;
        assert!(
            disabled.contains(&agent_runtime::Feature::Delegation),
            "{agent}"
        );
    }
}

#[test]
fn narrowing_table() {
    struct Case {
        what: &'static str,
        config: &'static str,
        agent: &'static str,
        occasion: Occasion,
        profile: Profile,
        tools: &'static [&'static str],
        delegation: bool,
        memory: bool,
        persona: bool,
    }
    let all: &[&str] = &[
        "read",
        "write",
        "edit",
        "bash",
        "task_query",
        "task_output",
        "task_stop",
        "grep",
        "glob",
        "todowrite",
        "web_fetch",
        "skill",
    ];
    let cases = [
        Case {
            what: "unset config and no ceiling: everything",
            config: "",
            agent: "mavis",
            occasion: Occasion::Root,
            profile: Profile::Cli,
            tools: all,
            delegation: true,
            memory: true,
            persona: true,
        },
        Case {
            what: "empty tool list: nothing",
            config: "[agents.default]\ntools = []",
            agent: "mavis",
            occasion: Occasion::Root,
            profile: Profile::Cli,
            tools: &[],
            delegation: true,
            memory: true,
            persona: true,
        },
        Case {
            what: "config narrower than the ceiling: the config wins",
            config: "[agents.default]\ntools = [\"read\", \"grep\", \"write\"]",
            agent: "explore",
            occasion: Occasion::TaskChild,
            profile: Profile::Cli,
            tools: &["read", "grep"],
            delegation: false,
            memory: false,
            persona: false,
        },
        Case {
            what: "ceiling narrower than the config: the ceiling wins (bash brings its task tools)",
            config: "[agents.default]\ntools = [\"read\", \"write\", \"edit\", \"bash\", \"grep\"]",
            agent: "verifier",
            occasion: Occasion::TaskChild,
            profile: Profile::Cli,
            tools: &[
                "read",
                "bash",
                "task_query",
                "task_output",
                "task_stop",
                "grep",
            ],
            delegation: false,
            memory: false,
            persona: false,
        },
        Case {
            what: "features are AND-ed: config off stays off under a ceiling that allows it",
            config: "[agents.default.features]\nmemory = false\npersona = false",
            agent: "worker",
            occasion: Occasion::TaskChild,
            profile: Profile::Cli,
            tools: all,
            delegation: false,
            memory: false,
            persona: false,
        },
        Case {
            what: "delegated child loses delegation, even without a ceiling",
            config: "",
            agent: "mavis",
            occasion: Occasion::TaskChild,
            profile: Profile::Cli,
            tools: all,
            delegation: false,
            memory: true,
            persona: true,
        },
        Case {
            what: "CLI profile: the memory feature stays (its memory is the workspace's notes)",
            config: "",
            agent: "mavis",
            occasion: Occasion::Root,
            profile: Profile::Cli,
            tools: all,
            delegation: true,
            memory: true,
            persona: true,
        },
    ];
    for case in cases {
        let resolved = resolve_with(case.config, case.agent, case.occasion, case.profile);
        let features = resolved.capabilities.features;
        assert_eq!(tools(&resolved), case.tools, "{}", case.what);
        assert_eq!(features.delegation, case.delegation, "{}", case.what);
        assert_eq!(features.memory, case.memory, "{}", case.what);
        assert_eq!(features.persona, case.persona, "{}", case.what);
        // The command line keeps no memory store of its own and schedules nothing.
        assert!(!resolved.memory_enabled, "{}", case.what);
        assert!(!resolved.scheduling, "{}", case.what);
    }
}

#[test]
fn a_ceiling_never_widens() {
    // Every subset of tools in the config stays a superset of what any agent ends up with.
    let config = Config::parse("[agents.default]\ntools = [\"read\"]").unwrap();
    for agent in agent_runtime::agents::BUILTIN_AGENTS {
        let resolved = resolve(
            &config.defaults,
            ceiling_of(agent).as_ref(),
            Occasion::Root,
            Profile::Cli,
        );
        let allowed: BTreeSet<ToolId> = [ToolId::Read].into();
        assert!(resolved.capabilities.tools.is_subset(&allowed), "{agent}");
    }
}

#[test]
fn narrowing_shows_in_the_rendered_prompt() {
    let mut turn = Turn::new("mavis");
    let full = turn.render().text;
    assert!(full.contains("# Delegation"));
    assert!(full.contains("`bash`"));
    assert!(
        !full.contains("# Scheduling"),
        "the CLI profile has no scheduling"
    );
    assert!(
        !full.contains("# Memory"),
        "the CLI profile has no memory store, and no notes were passed"
    );

    turn.config = Config::parse(
        "[agents.default]\ntools = [\"read\"]\n[agents.default.features]\ndelegation = false",
    )
    .unwrap();
    let narrow = turn.render().text;
    assert!(!narrow.contains("# Delegation"));
    assert!(!narrow.contains("`bash`"));
    assert!(!narrow.contains("# Skills"), "no skill tool, no catalog");
}

#[test]
fn bad_config_names_the_problem() {
    let err = Config::parse("[agents.default]\ntools = [\"read\", \"teleport\"]").unwrap_err();
    assert!(
        err.contains("tools") && err.contains("teleport") && err.contains("known tools"),
        "{err}"
    );
    let err = Config::parse("[agents.default.features]\nflying = true").unwrap_err();
    assert!(err.contains("flying"), "{err}");
    let err = Config::parse("[agents.default]\ntool = [\"read\"]").unwrap_err();
    assert!(err.contains("tool"), "{err}");
    // Sections that belong to other parts of the agent are left alone.
    Config::parse("[updates]\nchannel = \"stable\"").unwrap();
}

/// No search provider is built in, so web search is no capability: a config cannot turn
/// it on, and no template sees it as available.
#[test]
fn web_search_is_not_a_capability() {
    let err = Config::parse("[agents.default.features]\nweb_search = true\n").unwrap_err();
    assert!(
        err.contains("unknown feature \"web_search\"") && err.contains("delegation"),
        "{err}"
    );
    for agent in agent_runtime::agents::BUILTIN_AGENTS {
        let prompt = Turn::new(agent).render();
        assert!(
            !prompt.text.to_lowercase().contains("web search"),
            "{agent}"
        );
        assert!(!agent_runtime::tools::registered().any(|t| t == "web_search"));
    }
}
