//! Skills from the pack and the project: the catalog in the prompt, the body on demand
//! with relative paths made absolute, and an unknown name answered with the list.

use crate::model_server;

use model_server::{ModelServer, exec, openai_calls, openai_text, system_of};
use serde_json::json;

#[test]
fn a_project_skill_is_listed_and_loaded_with_absolute_paths() {
    let home = tempfile::tempdir().unwrap();
    let work = tempfile::tempdir().unwrap();
    let skill_dir = work.path().join(".agents/skills/release");
    std::fs::create_dir_all(skill_dir.join("scripts")).unwrap();
    std::fs::write(skill_dir.join("scripts/tag.sh"), "#!/bin/sh\n").unwrap();
    std::fs::write(
        skill_dir.join("SKILL.md"),
        "---\nname: release\ndescription: Cuts a release of this project.\n---\n# Release\nFollow [the checklist](docs/checklist.md), then run `scripts/tag.sh` and `git push`.\n",
    )
    .unwrap();
    let server = ModelServer::start(vec![
        openai_calls(&[
            ("c1", "skill", json!({"name": "release"})),
            ("c2", "skill", json!({"name": "deploy"})),
        ]),
        openai_text("Loaded."),
    ]);
    let out = exec(&server, home.path(), work.path(), &[], &["Release it"]);
    assert!(
        out.status.success(),
        "stderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    server.assert_clean();
    let requests = server.requests();
    let system = system_of(&requests[0]);
    assert!(
        system.contains("- `release`: Cuts a release of this project."),
        "{system}"
    );
    assert!(
        system.contains("- `init`: "),
        "the pack's skills stay listed"
    );

    let messages = requests[1].body["messages"].as_array().unwrap();
    let body = messages[messages.len() - 2]["content"].as_str().unwrap();
    let dir = std::path::absolute(&skill_dir).unwrap();
    let dir = dir.display();
    assert!(
        body.contains(&format!("[the checklist]({dir}/docs/checklist.md)")),
        "{body}"
    );
    assert!(body.contains(&format!("`{dir}/scripts/tag.sh`")), "{body}");
    assert!(body.contains("`git push`"), "{body}");

    let unknown = &messages[messages.len() - 1];
    assert_eq!(
        unknown["content"],
        "unknown skill \"deploy\"; the available skills are: init, release"
    );
}
