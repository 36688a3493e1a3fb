//! `packer publish` uploads nothing a client would refuse. A pack damaged after it was built
//! is refused, naming the file and what is wrong, and never reaches packd, where a version
//! holds one set of bytes for good: the sound pack then publishes under the same version.

use crate::common;

use common::packd::{Env, json};
use common::{assert_fails, assert_ok, s, stderr};
use pack_format::Limits;

/// Every pack packd lists, as `name version`.
fn listed(env: &Env) -> Vec<String> {
    let status = env.status();
    let mut found = Vec::new();
    for pack in status["packs"].as_array().unwrap() {
        for version in pack["versions"].as_array().unwrap() {
            found.push(format!(
                "{} {}",
                pack["name"].as_str().unwrap(),
                version["version"].as_str().unwrap()
            ));
        }
    }
    found
}

#[test]
fn a_pack_with_four_flipped_bytes_is_not_uploaded_and_its_version_stays_free() {
    let env = Env::start();
    let pack = env.build("1.0.0", "prompts-1.0.0.pack");
    let sound = std::fs::read(&pack).unwrap();
    let (_, header_len) = pack_format::read_header(&sound, &Limits::DEFAULT).unwrap();
    let middle = sound.len() / 2;
    assert!(
        middle > header_len,
        "the middle is in the encrypted payload"
    );
    let mut bytes = sound.clone();
    for byte in &mut bytes[middle..middle + 4] {
        *byte ^= 0xff;
    }
    let damaged = env.path("dist/damaged.pack");
    std::fs::write(&damaged, &bytes).unwrap();
    let keys = env.keys();

    let refused = env.packer(&[
        "publish",
        s(&damaged),
        "--keys",
        s(&keys),
        "--server",
        &env.packd.url,
    ]);
    assert_fails(&refused);
    let err = stderr(&refused);
    assert!(
        err.contains(&format!("{} was not uploaded", s(&damaged))),
        "{err}"
    );
    assert!(err.contains("failed authentication"), "{err}");
    assert!(refused.stdout.is_empty());
    assert!(listed(&env).is_empty(), "{:?}", listed(&env));

    // The pack as built publishes under the same version, and is released.
    let published = json(&env.packer(&[
        "--json",
        "publish",
        s(&pack),
        "--keys",
        s(&keys),
        "--server",
        &env.packd.url,
    ]));
    assert_eq!(published["created"], true);
    assert_eq!(published["version"], "1.0.0");
    let released = env.release(&[
        "--new-channel",
        "--pack",
        "prompts",
        "--pin",
        "*=1.0.0",
        "--yes",
    ]);
    assert_ok(&released);
    assert!(
        stderr(&released).contains("checked   pack prompts 1.0.0"),
        "{}",
        stderr(&released)
    );
    assert_eq!(env.live_document().sequence, 1);
}

#[test]
fn a_pack_whose_template_does_not_fit_the_contract_is_not_uploaded() {
    let env = Env::start();
    let bad_template = env.path("prompts/shared/bad.hbs");
    std::fs::create_dir_all(bad_template.parent().unwrap()).unwrap();
    std::fs::write(&bad_template, "{{nope}}\n").unwrap();
    let broken = env.path("dist/broken.pack");
    let keys = env.keys();
    let prompts = env.path("prompts");
    assert_ok(&env.packer(&[
        "build",
        s(&prompts),
        "--name",
        "prompts",
        "--version",
        "1.0.0",
        "--keys",
        s(&keys),
        "--no-validate",
        "-o",
        s(&broken),
    ]));

    let refused = env.packer(&[
        "publish",
        s(&broken),
        "--keys",
        s(&keys),
        "--server",
        &env.packd.url,
    ]);
    assert_fails(&refused);
    let err = stderr(&refused);
    assert!(
        err.contains("shared/bad.hbs:1: unknown variable 'nope'"),
        "{err}"
    );
    assert!(
        err.contains(&format!("{} was not uploaded", s(&broken))),
        "{err}"
    );
    assert!(listed(&env).is_empty(), "{:?}", listed(&env));

    // Fixed, the same version publishes.
    std::fs::remove_file(&bad_template).unwrap();
    let fixed = env.build("1.0.0", "fixed.pack");
    let published = json(&env.packer(&[
        "--json",
        "publish",
        s(&fixed),
        "--keys",
        s(&keys),
        "--server",
        &env.packd.url,
    ]));
    assert_eq!(published["created"], true);
    assert_eq!(listed(&env), vec!["prompts 1.0.0".to_string()]);
}

#[test]
fn a_pack_cut_short_is_refused_without_keys() {
    let env = Env::start();
    let pack = env.build("1.0.0", "prompts-1.0.0.pack");
    let bytes = std::fs::read(&pack).unwrap();
    let cut = env.path("dist/cut.pack");
    std::fs::write(&cut, &bytes[..bytes.len() - 100]).unwrap();

    let refused = env.packer(&["publish", s(&cut), "--server", &env.packd.url]);
    assert_fails(&refused);
    let err = stderr(&refused);
    assert!(
        err.contains(&format!(
            "{} is not a sealed pack clients accept; nothing was uploaded",
            s(&cut)
        )),
        "{err}"
    );
    assert!(err.contains("sealed pack is truncated"), "{err}");
    assert!(listed(&env).is_empty(), "{:?}", listed(&env));

    // Without keys a sound structure is all that is checked, and the note says so.
    let published = env.packer(&["publish", s(&pack), "--server", &env.packd.url]);
    assert_ok(&published);
    assert!(
        stderr(&published).contains("only the structure of"),
        "{}",
        stderr(&published)
    );
}
