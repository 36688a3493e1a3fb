//! A version `packer release` refused is not burned: nobody received it, so the publisher
//! publishes the fix under the same version and releases that. Once released, the version
//! never takes other bytes.

use crate::common;

use common::packd::{Env, json};
use common::{assert_fails, assert_ok, stderr};

use pack_format::EntryTarget;

#[test]
fn a_damaged_pack_refused_by_release_is_republished_under_its_version_and_released() {
    let env = Env::start();
    // Damaged after sealing: the last byte belongs to the last segment's tag, so the
    // structure `packer publish` checks without keys still holds and only opening it tells.
    let sound = env.build("1.0.0", "prompts-1.0.0.pack");
    let damaged = env.path("dist/prompts-1.0.0-damaged.pack");
    let mut bytes = std::fs::read(&sound).unwrap();
    *bytes.last_mut().unwrap() ^= 0x01;
    std::fs::write(&damaged, &bytes).unwrap();
    assert_eq!(json(&env.publish(&damaged))["created"], true);

    let release = [
        "--new-channel",
        "--pack",
        "prompts",
        "--pin",
        "*=1.0.0",
        "--yes",
    ];
    let refused = env.release(&release);
    assert_fails(&refused);
    let err = stderr(&refused);
    assert!(
        err.contains("clients would refuse pack prompts 1.0.0"),
        "{err}"
    );
    assert!(err.contains("nothing was signed or published"), "{err}");
    assert_eq!(env.status()["channels"].as_array().unwrap().len(), 0);

    let fixed = env.build("1.0.0", "prompts-1.0.0-fixed.pack");
    let fixed_sha256 = pack_format::sha256_hex(&std::fs::read(&fixed).unwrap());
    let republished = json(&env.publish(&fixed));
    assert_eq!(republished["created"], true);
    assert_eq!(republished["version"], "1.0.0");
    assert_eq!(republished["sha256"], fixed_sha256.as_str());

    assert_ok(&env.release(&release));
    let live = env.live_document();
    assert_eq!(live.sequence, 1);
    let EntryTarget::Pack(target) = &live.entries[0].target else {
        panic!("expected a pack entry: {live:?}");
    };
    assert_eq!(target.version.to_string(), "1.0.0");
    assert_eq!(target.sha256, fixed_sha256);

    // Released: other bytes under 1.0.0 are refused, and packd says which release holds it.
    let late = env.build("1.0.0", "prompts-1.0.0-late.pack");
    let refused = env.publish(&late);
    assert_fails(&refused);
    let err = stderr(&refused);
    assert!(err.contains("version_exists"), "{err}");
    assert!(err.contains("channel stable sequence 1 names it"), "{err}");
}
