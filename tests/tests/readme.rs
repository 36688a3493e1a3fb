//! The README's hand-run flows, run as written: "Publishing a pack by hand", its
//! `packer diff` of the sealed pack against its source tree, then "Publishing to packd",
//! in a scratch directory that sees the repository's `packs/`, with
//! the workspace's binaries on `PATH`, against the real packd the section itself starts.
//! Only the port is changed, so parallel runs do not collide. docs/CLIENT.md's quick start
//! runs after them, as written, against that packd before it stops.

use std::process::{Command, Stdio};

use promptpack_tests::{bin, workspace};

/// The body of the first ```sh block after `heading`.
fn sh_block<'a>(readme: &'a str, heading: &str) -> &'a str {
    let section = &readme[readme
        .find(heading)
        .unwrap_or_else(|| panic!("README has no {heading:?}"))..];
    let start = section.find("```sh\n").expect("a ```sh block") + "```sh\n".len();
    let end = section[start..].find("```").expect("the block ends") + start;
    &section[start..end]
}

#[test]
fn publishing_to_packd_runs_as_written() {
    let readme = std::fs::read_to_string(workspace().join("README.md")).unwrap();
    let by_hand = sh_block(&readme, "## Publishing a pack by hand");
    let diff = sh_block(&readme, "### What a release changes: `packer diff`");
    let to_packd = sh_block(&readme, "## Publishing to packd");
    let client_md = std::fs::read_to_string(workspace().join("docs/CLIENT.md")).unwrap();
    let quick_start = sh_block(&client_md, "## Quick start");
    // The walk-through stops its packd last; the quick start runs before that.
    let (to_packd, stop) = to_packd
        .trim_end()
        .rsplit_once('\n')
        .expect("the section has more than one line");
    assert!(stop.starts_with("kill %1"), "{stop}");

    // The example's client range is the one the agent built from this tree falls into.
    let version = semver::Version::parse(env!("CARGO_PKG_VERSION")).unwrap();
    let range = format!(
        ">={}.{}.0, <{}.{}.0",
        version.major,
        version.minor,
        version.major,
        version.minor + 1
    );
    assert!(
        by_hand.contains(&range) && to_packd.contains(&range),
        "the README's client range should be {range:?}, what `agent --version` matches"
    );

    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let script = format!("{by_hand}\n{diff}\n{to_packd}\n{quick_start}\n{stop}\n")
        .replace("8470", &port.to_string());

    let dir = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(workspace().join("packs"), dir.path().join("packs")).unwrap();
    let bins = bin("pack-server", "packd");
    bin("packer", "packer");
    bin("pack-client", "pack-client");
    // The quick start leaves --cache to its default, the platform's cache directory.
    let cache_home = tempfile::tempdir().unwrap();
    let path = format!(
        "{}:{}",
        bins.parent().unwrap().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let out = Command::new("bash")
        // Whatever happens, packd started by the section does not outlive the test.
        .args(["-euo", "pipefail", "-c"])
        .arg(format!(
            "trap 'kill $(jobs -p) 2>/dev/null || true' EXIT\n{script}"
        ))
        .current_dir(dir.path())
        .env("PATH", path)
        .env_remove("PROMPTPACK_TOKEN")
        .env_remove("PROMPTPACK_SERVER")
        .env_remove("PACKD_CONFIG")
        .env_remove("PROMPTPACK_CACHE")
        .env_remove("PROMPTPACK_CONFIG")
        .env("XDG_CACHE_HOME", cache_home.path())
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "the README section failed ({}):\n{stdout}\n{stderr}\npackd log:\n{}",
        out.status,
        std::fs::read_to_string(dir.path().join("packd.log")).unwrap_or_default()
    );

    // The quick start: the refresh installed the walk-through's pack, named apart from the
    // pack compiled into the client; `show` printed a file of it; `run` said what it
    // served, and that it stopped.
    assert!(
        stdout.contains("Serving prompts 1.2.0 (remote, sha256 "),
        "{stdout}"
    );
    assert!(
        stdout.contains("serving   prompts 1.2.0 (remote, sequence 10)"),
        "{stdout}"
    );
    let persona =
        std::fs::read_to_string(workspace().join("packs/builtin/shared/persona.hbs")).unwrap();
    assert!(stdout.contains(&persona), "{stdout}");
    assert!(
        stderr.contains("serving prompts 1.2.0 (remote)")
            && stderr.contains("stopped: interrupted (SIGINT)"),
        "{stderr}"
    );
    assert!(
        cache_home
            .path()
            .join("promptpack/pack-client/state.json")
            .is_file()
    );

    // One name per thing: the walk-through's pack is `prompts`, so every `builtin` in what
    // it printed is the pack compiled into the client (`builtin 0.0.0`, a channel entry
    // `-> builtin`) or the directory it is built from (`packs/builtin`).
    let compiled_in = [
        "packs/builtin",
        "builtin 0.0.0",
        "-> builtin",
        "=builtin",
        "to builtin",
    ];
    let ambiguous: Vec<&str> = stdout
        .lines()
        .chain(stderr.lines())
        .filter(|line| {
            compiled_in
                .iter()
                .fold(line.to_string(), |rest, meant| rest.replace(meant, ""))
                .contains("builtin")
        })
        .collect();
    assert!(ambiguous.is_empty(), "{ambiguous:#?}");
    assert!(stdout.contains("-> builtin"), "{stdout}");

    // The sealed pack and the tree it was built from hold the same files and prompts.
    assert!(
        stdout.contains("nothing changes\n"),
        "packer diff -q found a difference:\n{stdout}"
    );
    assert!(stdout.contains("no differences: "), "{stdout}");

    // What the publisher sees at the end: the rollback and removal took effect, 1.2.0 is
    // what every client gets, and 1.3.0 is uploaded but live nowhere.
    let status = &stdout[stdout.rfind("\nserver http://").expect("packer status ran")..];
    // Ten documents: the six of the walk-through, and four of the guarded rollout (the guard
    // key named, the ramp, the guard's freeze, the offline key's resume).
    assert!(status.contains("sequence 10"), "{status}");
    assert!(status.contains("guard key "), "{status}");
    assert!(status.contains("*                    -> 1.2.0"), "{status}");
    assert!(!status.contains("0.2.0"), "{status}");
    assert!(status.contains("live in stable (*)"), "{status}");
    let v130 = status.lines().find(|l| l.contains("1.3.0")).unwrap();
    assert!(!v130.contains("live"), "{status}");
    // packd really served it: its log shows the ten published documents.
    let log = std::fs::read_to_string(dir.path().join("packd.log")).unwrap();
    assert_eq!(
        log.matches("channel document published").count(),
        10,
        "{log}"
    );
    assert!(dir.path().join("packd-data").is_dir());

    // Everything the walk-through wrote (the guard's private key among it) is ignored by the
    // repository, so a `git add -A` after following it commits none of it.
    for entry in std::fs::read_dir(dir.path()).unwrap() {
        let entry = entry.unwrap();
        let name = entry.file_name().into_string().unwrap();
        if name == "packs" {
            continue;
        }
        let probe = if entry.file_type().unwrap().is_dir() {
            format!("{name}/any-file")
        } else {
            name.clone()
        };
        let ignored = Command::new("git")
            .args(["check-ignore", "-q", "--no-index", &probe])
            .current_dir(workspace())
            .status()
            .unwrap();
        assert!(
            ignored.success(),
            "the README walk-through writes {name}, which .gitignore does not ignore"
        );
    }
}
