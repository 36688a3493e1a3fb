//! A remote pack that fails anywhere during assembly yields the whole prompt from the
//! built-in pack, never a mix, and the metadata says so.

use crate::common;

use std::sync::Arc;

use agent_runtime::PromptMode;
use common::{Turn, builtin};
use pack_client::snapshot::SnapshotMeta;
use pack_client::{Snapshot, Source};

/// The built-in files, with `edit` applied, as a remote pack.
fn remote(
    edit: impl FnOnce(&mut Vec<(String, Vec<u8>)>),
) -> Result<Snapshot, pack_client::SnapshotError> {
    let base = builtin();
    let mut files: Vec<(String, Vec<u8>)> = base
        .keys()
        .into_iter()
        .map(|k| (k.to_string(), base.get(k).unwrap().to_vec()))
        .collect();
    edit(&mut files);
    Snapshot::new(
        SnapshotMeta {
            name: "acme-prompts".to_string(),
            version: semver::Version::new(2, 1, 0),
            sequence: 9,
            source: Source::Remote,
            sha256: "ab".repeat(32),
            schema: 1,
        },
        files,
    )
}

fn set(files: &mut [(String, Vec<u8>)], key: &str, bytes: &[u8]) {
    files.iter_mut().find(|(k, _)| k == key).unwrap().1 = bytes.to_vec();
}

#[test]
fn a_healthy_remote_pack_is_used_and_recorded() {
    let pack = remote(|files| {
        set(
            files,
            "models/default.hbs",
            b"# Model Notes\n- Remote notes for {{persona}}.\n",
        );
    })
    .unwrap();
    let prompt = Turn::new("mavis").render_served(Arc::new(pack));
    assert!(prompt.text.contains("Remote notes for Mavis."));
    let meta = &prompt.metadata;
    assert_eq!(meta.pack.name, "acme-prompts");
    assert_eq!(meta.pack.version, "2.1.0");
    assert_eq!(meta.pack.source, "remote");
    assert_eq!(meta.pack.sha256, "ab".repeat(32));
    assert!(meta.fallback.is_none());
}

#[test]
fn a_missing_mode_template_falls_back_to_the_builtin_prompt_whole() {
    let pack = remote(|files| {
        files.retain(|(k, _)| k != "agents/mavis/work.hbs");
        // A visible remote change elsewhere, to prove nothing of it leaks into the result.
        set(
            files,
            "shared/persona.hbs",
            b"{{#if features.persona}}REMOTE PERSONA{{/if}}\n",
        );
    })
    .unwrap();
    let mut turn = Turn::new("mavis");
    turn.mode = PromptMode::Work;
    let served = turn.render_served(Arc::new(pack));
    let builtin_only = turn.render();
    assert_eq!(served.text, builtin_only.text);
    assert!(!served.text.contains("REMOTE PERSONA"));
    let meta = &served.metadata;
    assert_eq!(meta.pack.source, "builtin");
    assert_eq!(meta.prompt_sha256, builtin_only.metadata.prompt_sha256);
    let reason = meta.fallback.as_deref().expect("fallback recorded");
    assert!(reason.contains("acme-prompts 2.1.0"), "{reason}");
    assert!(reason.contains("agents/mavis/work.hbs"), "{reason}");

    // The other modes of the same remote pack still work.
    turn.mode = PromptMode::Tui;
    let tui = turn.render_served(Arc::new(
        remote(|f| f.retain(|(k, _)| k != "agents/mavis/work.hbs")).unwrap(),
    ));
    assert_eq!(tui.metadata.pack.source, "remote");
}

#[test]
fn a_broken_ceiling_file_falls_back() {
    let pack = remote(|files| {
        set(
            files,
            "agents/explore/agent.md",
            b"---\ntools: [read, teleport]\n---\n",
        );
    })
    .unwrap();
    let served = Turn::new("explore").render_served(Arc::new(pack));
    let reason = served.metadata.fallback.expect("fallback");
    assert!(reason.contains("agents/explore/agent.md"), "{reason}");
    assert!(reason.contains("teleport"), "{reason}");
    assert_eq!(served.metadata.pack.source, "builtin");
}

#[test]
fn a_broken_model_family_list_falls_back() {
    let pack = remote(|files| set(files, "models/families.json", b"{ not json")).unwrap();
    let served = Turn::new("worker").render_served(Arc::new(pack));
    assert!(
        served
            .metadata
            .fallback
            .unwrap()
            .contains("models/families.json")
    );
}

#[test]
fn a_template_outside_the_contract_never_becomes_a_snapshot() {
    // Broken templates are refused when the snapshot is built, so they cannot go live.
    let err = remote(|files| {
        set(
            files,
            "agents/mavis/tui.hbs",
            b"Hello\n{{#if nope}}x{{/if}}\n",
        );
    })
    .unwrap_err();
    assert!(
        err.to_string()
            .contains("agents/mavis/tui.hbs:2: unknown variable 'nope'"),
        "{err}"
    );
}
