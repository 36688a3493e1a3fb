//! The file view through the binaries: `pack-client` with `[files]` in its config keeps the
//! pack that serves as read-only files behind `<cache>/files/current`, for agents that read
//! their prompts from files, and `pack-client render` prints a template of what serves.
//! A real packd on loopback publishes; every step is a `pack-client` process.

use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, SystemTime};

use promptpack_tests::*;

struct World {
    publisher: Publisher,
    _data: tempfile::TempDir,
    packd: Packd,
    cache: tempfile::TempDir,
    config: PathBuf,
}

fn world(files: &str) -> World {
    let publisher = Publisher::new();
    let data = tempfile::tempdir().unwrap();
    let packd = Packd::start(data.path(), &publisher.server_config());
    let config = publisher.client_config(&packd.url, files);
    World {
        publisher,
        _data: data,
        packd,
        cache: tempfile::tempdir().unwrap(),
        config,
    }
}

/// A pack built from `packs/builtin` with `MARKER-<version>` in every template, uploaded:
/// its channel entry path and the name of its directory in the view.
struct Built {
    path: PathBuf,
    dir: String,
}

impl World {
    fn pack(&self, version: &str) -> Built {
        self.pack_edited(version, |_| {})
    }

    fn pack_edited(&self, version: &str, edit: impl FnOnce(&Path)) -> Built {
        let path = self
            .publisher
            .build_edited(version, &format!("MARKER-{version}"), edit);
        let sha = self.packd.upload(&self.publisher, &path);
        Built {
            path,
            dir: format!("builtin-{version}-{}", &sha[..8]),
        }
    }

    fn release(&self, entry: &str) {
        self.packd.publish(
            &self.publisher,
            &self.publisher.sign(&[format!("*={entry}")], "30d"),
        );
    }

    fn cmd(&self) -> Command {
        client_cmd(self.cache.path(), &self.config, "1.0.0")
    }

    /// `pack-client --json refresh`: the outcome's tag.
    fn refresh(&self) -> String {
        let mut cmd = self.cmd();
        cmd.args(["--json", "refresh"]);
        let out: serde_json::Value = serde_json::from_str(&run(cmd)).unwrap();
        out["outcome"]["outcome"].as_str().unwrap().to_string()
    }

    fn status(&self) -> serde_json::Value {
        let mut cmd = self.cmd();
        cmd.args(["--json", "status"]);
        serde_json::from_str(&run(cmd)).unwrap()
    }

    fn files(&self) -> PathBuf {
        self.cache.path().join("files")
    }

    /// What a reader does first: resolve the link once.
    fn resolve(&self) -> PathBuf {
        std::fs::canonicalize(self.files().join("current")).unwrap()
    }

    /// The name of the version directory the link names.
    fn current(&self) -> String {
        let resolved = self.resolve();
        resolved.file_name().unwrap().to_string_lossy().into_owned()
    }
}

fn manifest(dir: &Path) -> serde_json::Value {
    serde_json::from_slice(&std::fs::read(dir.join(".promptpack.json")).unwrap()).unwrap()
}

/// The built-in pack's directory: `builtin-0.0.0-<first 8 of its sha256>`, the digest as a
/// client with no config and an empty cache reports it.
fn builtin_dir() -> String {
    let cache = tempfile::tempdir().unwrap();
    let mut cmd = Command::new(bin("pack-client", "pack-client"));
    cmd.arg("--cache")
        .arg(cache.path())
        .args(["--json", "status"]);
    let status: serde_json::Value = serde_json::from_str(&run(cmd)).unwrap();
    let sha = status["serving"]["sha256"].as_str().unwrap().to_string();
    format!("builtin-0.0.0-{}", &sha[..8])
}

#[test]
fn the_link_follows_what_serves_and_an_old_version_goes_after_its_grace() {
    let w = world("[files]\ngrace_secs = 3\n");
    // Nothing installed yet: the first command materializes the built-in pack like any other.
    assert!(!w.files().exists());
    w.status();
    let builtin = builtin_dir();
    assert_eq!(w.current(), builtin);
    assert_eq!(manifest(&w.resolve())["source"], "builtin");

    let one = w.pack("1.0.0");
    w.release(&one.path.display().to_string());
    assert_eq!(w.refresh(), "installed");
    assert_eq!(w.current(), one.dir);
    let system = w.resolve().join("agents/explore/system.hbs");
    assert!(
        std::fs::read_to_string(&system)
            .unwrap()
            .contains("MARKER-1.0.0")
    );
    assert_eq!(
        system.metadata().unwrap().permissions().mode() & 0o777,
        0o444
    );
    let status = w.status();
    assert_eq!(
        status["files"]["dir"],
        w.resolve().display().to_string(),
        "{status}"
    );
    assert_eq!(status["files"]["error"], serde_json::Value::Null);

    // `pack-client run` keeps the view: a release reaches it through the watch.
    let mut running = w
        .cmd()
        .args(["--json", "run"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (lines, logged) = std::sync::mpsc::channel::<serde_json::Value>();
    let stderr = running.stderr.take().unwrap();
    std::thread::spawn(move || {
        use std::io::BufRead as _;
        for line in std::io::BufReader::new(stderr).lines() {
            let Ok(event) = serde_json::from_str(&line.unwrap()) else {
                continue;
            };
            if lines.send(event).is_err() {
                break;
            }
        }
    });
    let first = logged.recv_timeout(Duration::from_secs(30)).unwrap();
    assert_eq!(first["event"], "serving");
    assert_eq!(first["files"]["dir"], w.resolve().display().to_string());
    w.packd.until_watching(1.0);
    let two = w.pack("2.0.0");
    w.release(&two.path.display().to_string());
    // `run` says when the link moves: the line comes after the swap.
    loop {
        let event = logged
            .recv_timeout(Duration::from_secs(30))
            .expect("run never logged the link moving to 2.0.0");
        if event["event"] == "files_published" {
            assert_eq!(event["dir"], two.dir, "{event}");
            break;
        }
    }
    assert_eq!(w.current(), two.dir);
    // 1.0.0 stopped serving: it is still there, marked with when it stopped.
    let old = w.files().join(&one.dir);
    let retired = old.metadata().unwrap().modified().unwrap();
    assert!(
        std::fs::read_to_string(old.join("agents/explore/system.hbs"))
            .unwrap()
            .contains("MARKER-1.0.0")
    );
    // `run` sweeps every 1.5 s: the directory goes once its 3 s are over, never before.
    while old.exists() {
        let age = SystemTime::now()
            .duration_since(retired)
            .unwrap_or_default();
        assert!(
            age < Duration::from_secs(30),
            "1.0.0 still on disk {age:?} after it stopped serving"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let age = SystemTime::now().duration_since(retired).unwrap();
    assert!(
        age >= Duration::from_secs(3),
        "removed {age:?} after it stopped serving"
    );
    // The built-in pack's directory stopped serving at the first install, so it is due in the
    // same sweep; that sweep removes one directory after the other, in the order the
    // directory lists them, so it may still be going when 1.0.0's name has gone.
    let builtin_dir = w.files().join(&builtin);
    let until = std::time::Instant::now() + Duration::from_secs(10);
    while builtin_dir.exists() {
        assert!(
            std::time::Instant::now() < until,
            "the built-in pack's directory outlived 1.0.0's by 10 s, though it stopped serving first"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = running.kill();
    let _ = running.wait();
    // What serves stays.
    assert_eq!(w.current(), two.dir);
    assert!(w.files().join(&two.dir).join("shared/memory.hbs").exists());
    assert!(!builtin_dir.exists());
}

#[test]
fn a_rollback_and_a_fallback_to_the_builtin_pack_move_the_link() {
    let w = world("[files]\n");
    let one = w.pack("1.0.0");
    let two = w.pack("2.0.0");
    w.release(&one.path.display().to_string());
    assert_eq!(w.refresh(), "installed");
    w.release(&two.path.display().to_string());
    assert_eq!(w.refresh(), "installed");
    assert_eq!(w.current(), two.dir);

    // The publisher rolls back: the link names 1.0.0 again (its directory was kept: the
    // default grace is ten minutes).
    w.release(&one.path.display().to_string());
    assert_eq!(w.refresh(), "installed");
    assert_eq!(w.current(), one.dir);
    assert_eq!(manifest(&w.resolve())["version"], "1.0.0");

    // The channel sends this release to the built-in pack.
    w.release("builtin");
    assert_eq!(w.refresh(), "builtin");
    assert_eq!(w.current(), builtin_dir());
    assert_eq!(manifest(&w.resolve())["source"], "builtin");
    assert!(
        !std::fs::read_to_string(w.resolve().join("agents/explore/system.hbs"))
            .unwrap()
            .contains("MARKER-")
    );
}

#[test]
fn a_reader_holding_the_resolved_path_reads_one_version_across_a_swap() {
    let w = world("[files]\n");
    let one = w.pack("1.0.0");
    w.release(&one.path.display().to_string());
    assert_eq!(w.refresh(), "installed");

    // One request: resolve once, read a first file…
    let held = w.resolve();
    let first = std::fs::read_to_string(held.join("agents/explore/system.hbs")).unwrap();
    // …a release lands and is installed in the middle of it…
    let two = w.pack("2.0.0");
    w.release(&two.path.display().to_string());
    assert_eq!(w.refresh(), "installed");
    assert_eq!(w.current(), two.dir);
    // …and the rest of the request, under the path it resolved, is still 1.0.0, whole.
    let second = std::fs::read_to_string(held.join("shared/memory.hbs")).unwrap();
    assert!(first.contains("MARKER-1.0.0") && second.contains("MARKER-1.0.0"));
    let listed = manifest(&held);
    assert_eq!(listed["version"], "1.0.0");
    for (key, sha) in listed["files"].as_object().unwrap() {
        let bytes = std::fs::read(held.join(key)).unwrap();
        assert_eq!(&pack_format::sha256_hex(&bytes), sha, "{key}");
    }
    // The next request resolves again and reads 2.0.0.
    let next = std::fs::read_to_string(w.resolve().join("shared/memory.hbs")).unwrap();
    assert!(next.contains("MARKER-2.0.0"));
}

#[test]
fn a_view_that_cannot_be_written_keeps_its_link_and_the_pack_still_serves() {
    let w = world("[files]\n");
    let one = w.pack("1.0.0");
    w.release(&one.path.display().to_string());
    assert_eq!(w.refresh(), "installed");
    // 2.0.0 carries a file named like the view's manifest: it installs and serves, but the
    // view cannot show it.
    let two = w.pack_edited("2.0.0", |src| {
        std::fs::write(src.join(".promptpack.json"), "{}").unwrap();
    });
    w.release(&two.path.display().to_string());
    assert_eq!(w.refresh(), "installed");
    let (version, source, _) = dump(w.cache.path(), &w.config, "1.0.0");
    assert_eq!((version.as_str(), source.as_str()), ("2.0.0", "remote"));
    assert_eq!(
        w.current(),
        one.dir,
        "the link moved to a view it could not write"
    );
    assert!(!w.files().join(&two.dir).exists());
    let status = w.status();
    assert!(
        status["files"]["error"]
            .as_str()
            .is_some_and(|e| e.contains(".promptpack.json") && e.contains("previous version")),
        "{status}"
    );
    let mut cmd = w.cmd();
    cmd.arg("status");
    let said = run(cmd);
    assert!(
        said.contains(
            "files     not updated: file view: pack builtin 2.0.0 has a file named .promptpack.json"
        ),
        "{said}"
    );

    // The next good release brings the view back.
    let three = w.pack("3.0.0");
    w.release(&three.path.display().to_string());
    assert_eq!(w.refresh(), "installed");
    assert_eq!(w.current(), three.dir);
    assert_eq!(w.status()["files"]["error"], serde_json::Value::Null);
}

#[test]
fn two_releases_sharing_a_cache_keep_their_own_links_and_neither_sweeps_the_other() {
    let w = world("");
    let config_for = |link: &str| {
        w.publisher.client_config(
            &w.packd.url,
            &format!("[files]\nlink = {link:?}\ngrace_secs = 1\n"),
        )
    };
    let (config_one, config_three) = (config_for("current-1"), config_for("current-3"));
    let refresh = |config: &Path, release: &str| {
        let mut cmd = client_cmd(w.cache.path(), config, release);
        cmd.args(["--json", "refresh"]);
        let out: serde_json::Value = serde_json::from_str(&run(cmd)).unwrap();
        out["outcome"]["outcome"].as_str().unwrap().to_string()
    };
    let names = |link: &str| {
        std::fs::read_link(w.files().join(link))
            .unwrap()
            .to_string_lossy()
            .into_owned()
    };
    let one = w.pack("1.0.0");
    let two = w.pack("2.0.0");
    w.packd.publish(
        &w.publisher,
        &w.publisher.sign(
            &[
                format!(">=1.0.0, <3.0.0={}", one.path.display()),
                format!(">=3.0.0={}", two.path.display()),
            ],
            "30d",
        ),
    );
    assert_eq!(refresh(&config_one, "1.0.0"), "installed");
    assert_eq!(names("current-1"), one.dir);
    assert_eq!(refresh(&config_three, "3.0.0"), "installed");
    assert_eq!(names("current-3"), two.dir);
    assert_eq!(
        names("current-1"),
        one.dir,
        "release 3.0.0 moved 1.0.0's link"
    );
    // Release 3.0.0 served the built-in pack before its install; that directory goes after
    // its second of grace, and the two that links name stay, whoever sweeps.
    let builtin = w.files().join(builtin_dir());
    assert!(builtin.join("shared/memory.hbs").exists());
    let within = std::time::Instant::now() + Duration::from_secs(30);
    while builtin.exists() {
        assert!(
            std::time::Instant::now() < within,
            "the built-in pack's directory stayed"
        );
        let mut cmd = client_cmd(w.cache.path(), &config_one, "1.0.0");
        cmd.arg("status");
        run(cmd);
        std::thread::sleep(Duration::from_millis(100));
    }
    for (link, dir) in [("current-1", &one.dir), ("current-3", &two.dir)] {
        assert_eq!(names(link), *dir);
        assert!(
            w.files().join(dir).join("shared/memory.hbs").exists(),
            "{dir}"
        );
    }
}

#[test]
fn render_prints_a_template_of_what_serves_and_refuses_a_missing_variable() {
    // No [files]: the view is off, and render does not need it.
    let mut w = world("");
    let render = |w: &World, args: &[&str]| {
        let mut cmd = w.cmd();
        cmd.arg("render").args(args);
        cmd.output().unwrap()
    };
    let vars = r#"{"data_dir": "/home/me/.agent"}"#;

    // Nothing installed: the built-in pack renders.
    let out = render(&w, &["shared/memory.hbs", "--vars", vars]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.starts_with("# Memory\n"), "{text}");
    assert!(text.contains("(stored under /home/me/.agent)"), "{text}");
    assert!(!text.contains("MARKER-"));

    let one = w.pack("1.0.0");
    w.release(&one.path.display().to_string());
    assert_eq!(w.refresh(), "installed");
    assert!(
        !w.files().exists(),
        "the file view is written without [files]"
    );
    // With packd gone, what was installed renders.
    w.packd.stop();
    let out = render(&w, &["shared/memory.hbs", "--vars", vars]);
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.contains("(stored under /home/me/.agent)") && text.ends_with("MARKER-1.0.0\n"),
        "{text}"
    );
    let mut cmd = w.cmd();
    cmd.args(["--json", "render", "shared/memory.hbs", "--vars", vars]);
    let out: serde_json::Value = serde_json::from_str(&run(cmd)).unwrap();
    assert_eq!(out["pack"]["version"], "1.0.0");
    assert_eq!(out["text"], text);

    // The strict contract: a variable the template reads and --vars lacks is an error
    // naming it, the template line, the --vars that gives it and where the contract lists
    // them all; exit 1, nothing on stdout.
    let out = render(&w, &["shared/memory.hbs", "--vars", r#"{"persona": "x"}"#]);
    assert_eq!(out.status.code(), Some(1));
    assert!(out.stdout.is_empty());
    assert_eq!(
        String::from_utf8(out.stderr).unwrap(),
        "error: pack builtin 1.0.0: shared/memory.hbs line 2, column 51 reads variable \
         `data_dir`, which the variables given lack (templates render in strict mode: a \
         missing variable is an error, never an empty string); add it to --vars, as in \
         --vars '{\"data_dir\":\"...\"}' (contract/schema-1.json in the promptpack source \
         lists every variable a template may read, with its shape)\n"
    );
    let mut cmd = w.cmd();
    cmd.args(["--json", "render", "shared/memory.hbs"]);
    let out = cmd.output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["ok"], false);
    assert_eq!(doc["kind"], "render_failed");

    // A template the pack lacks, a file that is not a template, malformed variables.
    let out = render(&w, &["shared/nope.hbs"]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        String::from_utf8_lossy(&out.stderr),
        "error: pack builtin 1.0.0 has no file \"shared/nope.hbs\"; `pack-client dump` lists \
         every file of the pack that serves\n"
    );
    let out = render(&w, &["shared/environment.md"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("pack-client show shared/environment.md")
    );
    let out = render(&w, &["shared/memory.hbs", "--vars", "{data_dir: 1}"]);
    assert_eq!(
        out.status.code(),
        Some(2),
        "a malformed value is a usage error"
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("is not JSON"));
}
