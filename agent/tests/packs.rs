//! `agent packs`: the runtime takes its snapshots from the pack client configured in the
//! data directory; with no server it serves the built-in pack, and `pin` / `unpin`
//! persist the user's choice in the config file without disturbing the rest of it.

use std::path::Path;
use std::process::{Command, Output};

fn agent(home: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_agent"))
        .args(args)
        .env("AGENT_HOME", home)
        .output()
        .unwrap()
}

fn stdout(out: &Output) -> String {
    assert!(
        out.status.success(),
        "stderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn no_server_serves_the_builtin_pack() {
    let home = tempfile::tempdir().unwrap();
    let status = stdout(&agent(home.path(), &["packs", "status"]));
    assert!(
        status.contains("serving: builtin 0.0.0 (builtin)"),
        "{status}"
    );
    assert!(status.contains("updates: off"), "{status}");
    // Nothing is created for a client that is not configured.
    assert!(!home.path().join("packs").exists());

    let refresh = agent(home.path(), &["packs", "refresh"]);
    assert!(!refresh.status.success());
    assert!(String::from_utf8_lossy(&refresh.stderr).contains("no update server configured"));
}

#[test]
fn pin_and_unpin_persist_in_the_config_file() {
    let home = tempfile::tempdir().unwrap();
    let config = home.path().join("config.toml");
    // Port 9 (discard) refuses connections: the client opens its cache but cannot refresh.
    let original = "# my settings\n[agents.default]\ntools = [\"read\", \"grep\"]\n\n[updates]\nserver = \"http://127.0.0.1:9\"\nchannel = \"beta\"\n";
    std::fs::write(&config, original).unwrap();

    stdout(&agent(home.path(), &["packs", "pin", "1.4.2"]));
    let pinned = std::fs::read_to_string(&config).unwrap();
    assert!(pinned.contains("pin = \"1.4.2\""), "{pinned}");
    assert!(
        pinned.starts_with("# my settings\n[agents.default]"),
        "{pinned}"
    );

    let status = stdout(&agent(home.path(), &["packs", "status"]));
    assert!(status.contains("pin: 1.4.2"), "{status}");
    assert!(status.contains("channel: beta"), "{status}");
    assert!(status.contains("serving: builtin"), "{status}");
    // The cache lives under the data directory.
    assert!(home.path().join("packs").join("install-id").exists());

    let json: serde_json::Value =
        serde_json::from_str(&stdout(&agent(home.path(), &["packs", "status", "--json"]))).unwrap();
    assert_eq!(json["pin"], "1.4.2");
    assert_eq!(json["serving"]["source"], "builtin");

    // An unreachable server fails the refresh and keeps serving what it had.
    let refresh = agent(home.path(), &["packs", "refresh"]);
    assert!(!refresh.status.success());
    let status = stdout(&agent(home.path(), &["packs", "status"]));
    assert!(status.contains("serving: builtin"), "{status}");

    stdout(&agent(home.path(), &["packs", "unpin"]));
    assert_eq!(std::fs::read_to_string(&config).unwrap(), original);

    // The prompt is still rendered, from the built-in pack.
    let work = tempfile::tempdir().unwrap();
    let out = agent(
        home.path(),
        &["prompt", "--json", "--cwd", work.path().to_str().unwrap()],
    );
    let doc: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(doc["metadata"]["pack"]["source"], "builtin");
}

#[test]
fn a_bad_updates_table_is_refused() {
    let home = tempfile::tempdir().unwrap();
    std::fs::write(
        home.path().join("config.toml"),
        "[updates]\nserver = \"ftp://nope\"\n",
    )
    .unwrap();
    let out = agent(home.path(), &["packs", "status"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("[updates]"));
    let pin = agent(home.path(), &["packs", "pin", "not-a-version"]);
    assert!(!pin.status.success());
}

#[test]
fn pin_works_under_an_updates_header_with_a_comment() {
    let home = tempfile::tempdir().unwrap();
    let config = home.path().join("config.toml");
    let original = "[updates] # set by the installer\nserver = \"http://127.0.0.1:9\" # our mirror\nchannel = \"beta\"\n";
    std::fs::write(&config, original).unwrap();

    stdout(&agent(home.path(), &["packs", "pin", "1.4.2"]));
    let pinned = std::fs::read_to_string(&config).unwrap();
    // One table, the pin inside it, the user's comments kept.
    assert_eq!(pinned.matches("[updates]").count(), 1, "{pinned}");
    assert!(
        pinned.starts_with("[updates] # set by the installer\n"),
        "{pinned}"
    );
    assert!(pinned.contains("# our mirror"), "{pinned}");
    let status = stdout(&agent(home.path(), &["packs", "status"]));
    assert!(status.contains("pin: 1.4.2"), "{status}");
    assert!(status.contains("channel: beta"), "{status}");

    stdout(&agent(home.path(), &["packs", "unpin"]));
    assert_eq!(std::fs::read_to_string(&config).unwrap(), original);
}

/// The first `agent prompt` after `[updates]` is configured renders from the built-in pack
/// and says that a refresh is on its way; once that refresh has failed, the next says why
/// and how to run one.
#[test]
fn the_first_prompt_after_configuring_updates_says_what_happens_next() {
    let home = tempfile::tempdir().unwrap();
    // Port 9 (discard) refuses connections.
    std::fs::write(
        home.path().join("config.toml"),
        "[updates]\nserver = \"http://127.0.0.1:9\"\nattempts = 1\n",
    )
    .unwrap();
    let work = tempfile::tempdir().unwrap();
    let cwd = work.path().to_str().unwrap();
    let first = agent(home.path(), &["prompt", "--json", "--cwd", cwd]);
    stdout(&first);
    let said = String::from_utf8_lossy(&first.stderr);
    assert!(
        said.contains("a first refresh from http://127.0.0.1:9 started in the background"),
        "{said}"
    );

    // The refresh fails (nothing listens); the next run says so instead.
    let refresh = agent(home.path(), &["packs", "refresh"]);
    assert_eq!(refresh.status.code(), Some(3));
    let next = agent(home.path(), &["prompt", "--json", "--cwd", cwd]);
    stdout(&next);
    let said = String::from_utf8_lossy(&next.stderr);
    assert!(
        said.contains("no refresh from http://127.0.0.1:9 has succeeded yet")
            && said.contains("Connection refused")
            && said.contains("run `agent packs refresh`"),
        "{said}"
    );
}
