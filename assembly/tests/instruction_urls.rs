//! An instruction URL is never dropped silently: whatever fetching it gave, it is in the
//! prompt, named among the files the total budget left out, or named in a warning.

use std::collections::BTreeMap;

use prompt_assembly::instructions::{Instructions, Sources};
use proptest::prelude::*;

/// What fetching one URL gave: its text (`Some(Ok)`), a reason (`Some(Err)`), or nothing
/// (never fetched).
fn outcome() -> impl Strategy<Value = Option<Result<String, String>>> {
    prop_oneof![
        Just(None),
        "[a-z ]{0,40}".prop_map(|why| Some(Err(why))),
        // Empty, short, and larger than one file's budget.
        (0usize..3, "[a-zA-Z .\n]{0,200}").prop_map(|(size, text)| {
            Some(Ok(match size {
                0 => String::new(),
                1 => text,
                _ => text.repeat(400) + "x",
            }))
        }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn every_url_is_in_the_prompt_left_out_or_warned_about(
        fetched in proptest::collection::vec(outcome(), 1..6),
    ) {
        let work = tempfile::tempdir().unwrap();
        let mut sources = Sources::new(&work.path().join("none.md"), work.path());
        let mut map = BTreeMap::new();
        for (n, outcome) in fetched.iter().enumerate() {
            let url = format!("https://rules.example/{n}.md");
            sources.configured.push(url.clone());
            if let Some(outcome) = outcome {
                map.insert(url, outcome.clone());
            }
        }
        sources.fetched = map;
        let read = Instructions::read(&sources);
        for (n, outcome) in fetched.iter().enumerate() {
            let url = format!("https://rules.example/{n}.md");
            let shown = read.configured.iter().any(|f| f.path.to_str() == Some(url.as_str()));
            let left_out = read.left_out.iter().any(|f| f.path.to_str() == Some(url.as_str()));
            let warned = read.warnings.iter().any(|w| w.contains(&url));
            let empty = matches!(outcome, Some(Ok(text)) if text.trim().is_empty());
            prop_assert!(
                shown || left_out || warned || empty,
                "{url} ({outcome:?}) vanished: {read:?}"
            );
            if let Some(Err(_)) | None = outcome {
                prop_assert!(warned && !shown, "{url} ({outcome:?}): {read:?}");
            }
        }
    }
}
