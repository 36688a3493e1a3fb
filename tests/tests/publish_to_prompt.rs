//! The whole chain: a publisher edits a template, packer builds and signs, packd serves,
//! `agent packs refresh` installs, and `agent prompt` renders the edited text. Then the
//! publisher rolls the channel back to the built-in pack and the prompt follows.

use std::process::Command;

use promptpack_tests::*;

fn agent(home: &std::path::Path) -> Command {
    let mut cmd = Command::new(bin("agent-runtime", "agent"));
    cmd.env("AGENT_HOME", home).env_remove("AGENT_BASE_URL");
    cmd
}

fn prompt_json(home: &std::path::Path) -> serde_json::Value {
    let mut cmd = agent(home);
    cmd.args(["prompt", "--agent", "mavis", "--json"]);
    serde_json::from_str(&run(cmd)).unwrap()
}

#[test]
fn a_published_template_edit_reaches_the_rendered_prompt_and_a_rollback_removes_it() {
    let publisher = Publisher::new();
    let data = tempfile::tempdir().unwrap();
    let packd = Packd::start(data.path(), &publisher.server_config());
    let edited = publisher.build("3.1.0", "PUBLISHED-EDIT-3.1.0");
    packd.upload(&publisher, &edited);
    packd.publish(
        &publisher,
        &publisher.sign(&[format!("*={}", edited.display())], "30d"),
    );

    let home = tempfile::tempdir().unwrap();
    let client_config = std::fs::read_to_string(publisher.client_config(&packd.url, "")).unwrap();
    std::fs::write(home.path().join("config.toml"), client_config).unwrap();

    // Before any refresh: the built-in pack.
    let before = prompt_json(home.path());
    assert!(
        !before["prompt"]
            .as_str()
            .unwrap()
            .contains("PUBLISHED-EDIT")
    );

    let mut cmd = agent(home.path());
    cmd.args(["packs", "refresh"]);
    run(cmd);
    let after = prompt_json(home.path());
    let text = after["prompt"].as_str().unwrap();
    assert!(
        text.contains("PUBLISHED-EDIT-3.1.0"),
        "the installed pack is not what renders:\n{text}"
    );
    let metadata = after["metadata"].to_string();
    assert!(
        metadata.contains("3.1.0") && metadata.contains("remote"),
        "{metadata}"
    );

    // Roll back to the built-in pack: a higher sequence with a builtin entry.
    packd.publish(
        &publisher,
        &publisher.sign(&["*=builtin".to_string()], "30d"),
    );
    let mut cmd = agent(home.path());
    cmd.args(["packs", "refresh"]);
    run(cmd);
    let rolled_back = prompt_json(home.path());
    assert!(
        !rolled_back["prompt"]
            .as_str()
            .unwrap()
            .contains("PUBLISHED-EDIT")
    );
    assert!(rolled_back["metadata"].to_string().contains("builtin"));
}
