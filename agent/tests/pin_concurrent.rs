//! `agent packs pin` / `unpin` from several processes at once: each edit is made under a
//! lock on the config file's latest text, through a temporary file of its own, so every
//! call succeeds and the file left is whole, with the user's other settings in it.

use std::path::Path;
use std::process::{Child, Command, Output, Stdio};

fn spawn_agent(home: &Path, args: &[&str]) -> Child {
    Command::new(env!("CARGO_BIN_EXE_agent"))
        .args(args)
        .env("AGENT_HOME", home)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

#[test]
fn concurrent_pins_and_unpins_all_succeed_and_leave_a_whole_config() {
    let home = tempfile::tempdir().unwrap();
    let config = home.path().join("config.toml");
    // A config with some weight to it, so that writing it takes a moment.
    let mut original = String::from("# my settings\n");
    for i in 0..2000 {
        original.push_str(&format!("# note {i}: kept through every pin\n"));
    }
    original.push_str(
        "[agents.default]\ntools = [\"read\", \"grep\"]\n\n[updates]\nserver = \"http://127.0.0.1:9\"\nchannel = \"beta\"\n",
    );
    std::fs::write(&config, &original).unwrap();

    let versions: Vec<String> = (0..8).map(|i| format!("1.{i}.0")).collect();
    for round in 0..4 {
        let children: Vec<Child> = versions
            .iter()
            .enumerate()
            .map(|(i, version)| {
                // Every fourth call unpins: a pin and an unpin race as well.
                if i % 4 == 3 {
                    spawn_agent(home.path(), &["packs", "unpin"])
                } else {
                    spawn_agent(home.path(), &["packs", "pin", version])
                }
            })
            .collect();
        let outputs: Vec<Output> = children
            .into_iter()
            .map(|child| child.wait_with_output().unwrap())
            .collect();
        for out in &outputs {
            assert!(
                out.status.success(),
                "round {round}: every call succeeds; stderr: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }

        let text = std::fs::read_to_string(&config).unwrap();
        let doc: toml::Table = toml::from_str(&text)
            .unwrap_or_else(|e| panic!("round {round}: the config is valid TOML ({e}):\n{text}"));
        assert!(
            text.starts_with(&original[..original.find("[agents.default]").unwrap()]),
            "round {round}: the comments are kept"
        );
        assert_eq!(doc["updates"]["channel"].as_str(), Some("beta"));
        assert_eq!(
            doc["updates"]["server"].as_str(),
            Some("http://127.0.0.1:9")
        );
        assert_eq!(
            doc["agents"]["default"]["tools"].as_array().map(Vec::len),
            Some(2)
        );
        if let Some(pin) = doc["updates"].get("pin") {
            let pin = pin.as_str().unwrap();
            assert!(
                versions.iter().any(|v| v == pin),
                "round {round}: the pin is one that was asked for: {pin}"
            );
        }
    }
    let left: Vec<String> = std::fs::read_dir(home.path())
        .unwrap()
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|name| name.contains(".tmp"))
        .collect();
    assert!(left.is_empty(), "no temporary file is left: {left:?}");
}
