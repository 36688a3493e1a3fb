//! The one reader of a pack directory: every file in path order, or every problem at once.

use crate::common;

use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use common::*;
use pack_format::{
    ContentKey, DirProblem, FileProblem, FormatError, Limits, PackDir, SealOptions, read_pack_dir,
};

fn write(root: &Path, path: &str, bytes: &[u8]) {
    let path = root.join(path);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, bytes).unwrap();
}

/// What a scan of `root` found: the files' pack paths in order, the problems' paths.
fn scanned(root: &Path) -> (Vec<String>, Vec<PathBuf>) {
    let scanned = PackDir::scan(root, &Limits::DEFAULT);
    let files = scanned.files().iter().map(|f| f.path.clone()).collect();
    let problems = scanned.problems().iter().map(|p| p.path.clone()).collect();
    (files, problems)
}

fn problems(result: Result<impl std::fmt::Debug, FormatError>) -> Vec<DirProblem> {
    match result {
        Err(FormatError::PackDirectory { problems, .. }) => problems,
        other => panic!("expected the directory's problems, found {other:?}"),
    }
}

/// Flags every `.hbs` file whose text holds "BAD", on the line it is on.
fn check(path: &str, bytes: &[u8]) -> Vec<FileProblem> {
    if !path.ends_with(".hbs") {
        return Vec::new();
    }
    let text = String::from_utf8_lossy(bytes);
    text.lines()
        .enumerate()
        .filter(|(_, line)| line.contains("BAD"))
        .map(|(i, _)| FileProblem {
            line: Some(i + 1),
            message: "bad line".to_string(),
            hint: None,
        })
        .collect()
}

#[test]
fn files_come_in_byte_order_of_their_pack_paths() {
    let dir = tempfile::tempdir().unwrap();
    // A directory walk gives `a` before `a-b`; byte order puts `a-b/x` ('-' is 0x2d) before
    // `a/x` ('/' is 0x2f).
    write(dir.path(), "a/x.md", b"1");
    write(dir.path(), "a-b/x.md", b"2");
    write(dir.path(), "README.md", b"3");
    std::fs::create_dir_all(dir.path().join("empty/too")).unwrap();
    let (paths, problems) = scanned(dir.path());
    assert_eq!(paths, ["README.md", "a-b/x.md", "a/x.md"]);
    assert!(problems.is_empty(), "{problems:?}");
    let payload = read_pack_dir(dir.path(), &Limits::DEFAULT, None).unwrap();
    assert_eq!(payload.len(), 3);
    assert_eq!(payload.get("a-b/x.md"), Some(&b"2"[..]));
}

#[test]
fn a_wide_deep_tree_listed_on_several_threads_gives_every_file_once_in_order() {
    // Thousands of directories are listed on several threads at once; what comes back must
    // not depend on which thread listed what: each file once, in byte order of its path,
    // and every problem, in path order.
    let dir = tempfile::tempdir().unwrap();
    let mut expected = Vec::new();
    for top in 0..12 {
        for sub in 0..15 {
            let mut path = format!("d{top}");
            for depth in 0..(sub % 5) {
                path.push_str(&format!("/n{depth}-{sub}"));
            }
            let file = format!("{path}/f{sub}.md");
            write(dir.path(), &file, file.as_bytes());
            expected.push(file);
        }
    }
    for top in [3, 7, 11] {
        let link = dir.path().join(format!("d{top}/link"));
        std::os::unix::fs::symlink("/etc/passwd", &link).unwrap();
    }
    expected.sort();
    let (paths, links) = scanned(dir.path());
    assert_eq!(paths, expected);
    // Path order: `d11` before `d3`.
    let want: Vec<_> = [11, 3, 7]
        .iter()
        .map(|top| dir.path().join(format!("d{top}/link")))
        .collect();
    assert_eq!(links, want);
}

#[test]
fn a_tree_deeper_than_one_thread_goes_down_alone_is_listed_whole() {
    // A thread lists a directory and the ones under it down to a depth, then queues the
    // rest: every file of a 70-deep chain comes back, as does a link at the bottom.
    let dir = tempfile::tempdir().unwrap();
    let mut path = String::from("top");
    let mut expected = Vec::new();
    for depth in 0..70 {
        path.push_str(&format!("/{depth}"));
        if depth % 10 == 9 {
            let file = format!("{path}/f.md");
            write(dir.path(), &file, b"x");
            expected.push(file);
        }
    }
    let link = dir.path().join(&path).join("link");
    std::os::unix::fs::symlink("/etc/passwd", &link).unwrap();
    expected.sort();
    let (paths, problems) = scanned(dir.path());
    assert_eq!(paths, expected);
    assert_eq!(problems, [link]);
}

#[test]
fn every_problem_is_reported_at_once_with_its_path() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    write(root, "good.md", b"fine");
    write(root, "agents/t.hbs", b"line one\nBAD two\nthree BAD\n");
    std::os::unix::fs::symlink(root.join("good.md"), root.join("link.md")).unwrap();
    let fifo = root.join("pipe");
    rustix::fs::mknodat(
        rustix::fs::CWD,
        &fifo,
        rustix::fs::FileType::Fifo,
        rustix::fs::Mode::from_raw_mode(0o644),
        0,
    )
    .unwrap();
    let odd = root.join(std::ffi::OsStr::from_bytes(b"caf\xe9.md"));
    std::fs::write(&odd, b"x").unwrap();
    write(root, "PACK-INDEX.json", b"{}");
    write(root, "big.md", &[b'x'; 2000]);
    let limits = Limits {
        max_file_len: 1000,
        ..Limits::DEFAULT
    };
    let found = problems(read_pack_dir(root, &limits, Some(&check)));
    let shown: Vec<String> = found.iter().map(ToString::to_string).collect();
    let expect = [
        format!("{}:2: bad line", root.join("agents/t.hbs").display()),
        format!("{}:3: bad line", root.join("agents/t.hbs").display()),
        format!("{}: is a symbolic link", root.join("link.md").display()),
        format!("{}: not a regular file", fifo.display()),
        format!("{}: the name is not UTF-8", odd.display()),
        format!(
            "{}: unsafe name in a pack: reserved",
            root.join("PACK-INDEX.json").display()
        ),
        format!(
            "{}: 2000 bytes, over the per-file limit of 1000 bytes",
            root.join("big.md").display()
        ),
    ];
    for expected in &expect {
        assert!(
            shown.iter().any(|line| line.contains(expected.as_str())
                || line.starts_with(expected.as_str())),
            "missing {expected:?} in {shown:#?}"
        );
    }
    assert_eq!(found.len(), expect.len(), "{shown:#?}");
    // In path order, so the author reads them top to bottom.
    let mut sorted = found.clone();
    sorted.sort_by(|a, b| (&a.path, a.line).cmp(&(&b.path, b.line)));
    assert_eq!(found, sorted);
}

#[test]
fn an_empty_directory_and_limits_on_the_whole_are_problems() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("only/dirs")).unwrap();
    let found = problems(read_pack_dir(dir.path(), &Limits::DEFAULT, None));
    assert_eq!(found.len(), 1);
    assert!(found[0].message.contains("holds no files"), "{}", found[0]);

    for i in 0..5 {
        write(dir.path(), &format!("f{i}.md"), &[b'a'; 100]);
    }
    let few = Limits {
        max_file_count: 4,
        max_decompressed_len: 300,
        ..Limits::DEFAULT
    };
    let found = problems(read_pack_dir(dir.path(), &few, None));
    let text: Vec<String> = found.iter().map(ToString::to_string).collect();
    assert!(
        text.iter()
            .any(|t| t.contains("5 files, over the limit of 4")),
        "{text:?}"
    );
    assert!(
        text.iter()
            .any(|t| t.contains("500 bytes of files, over the limit of 300")),
        "{text:?}"
    );
}

#[test]
fn a_missing_directory_is_a_problem_not_a_panic() {
    let dir = tempfile::tempdir().unwrap();
    let gone = dir.path().join("nope");
    let found = problems(read_pack_dir(&gone, &Limits::DEFAULT, None));
    assert!(
        found[0].message.contains("cannot read the directory"),
        "{}",
        found[0]
    );
}

#[test]
fn a_file_that_changes_after_the_scan_is_a_problem() {
    for (listed, now, what) in [
        (&b"short"[..], &b"much longer now"[..], "grew"),
        (b"longer at first", b"short", "shrank"),
        (b"", b"x", "was empty"),
        (b"12345", b"123456", "grew by one byte"),
    ] {
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), "a.md", listed);
        write(dir.path(), "b.md", b"unchanged");
        let scanned = PackDir::scan(dir.path(), &Limits::DEFAULT);
        write(dir.path(), "a.md", now);
        let found = problems(scanned.read(&Limits::DEFAULT, None));
        assert_eq!(found.len(), 1, "{what}: {found:?}");
        assert_eq!(found[0].path, dir.path().join("a.md"), "{what}");
        assert!(
            found[0].message.contains("changed while being read"),
            "{what}: {}",
            found[0]
        );
    }
}

#[test]
fn a_file_replaced_by_a_link_after_the_scan_is_not_followed() {
    // Listed as a regular file, swapped for a link to a file outside the tree before it is
    // read: the link is refused, and nothing outside the tree is read.
    let dir = tempfile::tempdir().unwrap();
    let outside = tempfile::tempdir().unwrap();
    write(outside.path(), "secret.md", b"not for the pack");
    write(dir.path(), "notes/a.md", b"listed");
    write(dir.path(), "b.md", b"unchanged");
    let scanned = PackDir::scan(dir.path(), &Limits::DEFAULT);
    assert_eq!(scanned.files().len(), 2);
    std::fs::remove_file(dir.path().join("notes/a.md")).unwrap();
    std::os::unix::fs::symlink(
        outside.path().join("secret.md"),
        dir.path().join("notes/a.md"),
    )
    .unwrap();
    let found = problems(scanned.read(&Limits::DEFAULT, None));
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0].path, dir.path().join("notes/a.md"));
    assert!(found[0].message.contains("cannot read"), "{}", found[0]);
}

#[test]
fn a_directory_replaced_by_a_link_after_the_scan_is_not_followed() {
    // The directory is swapped for a link to one outside the tree holding a file of the
    // same name and the same bytes: still refused, since the file is not below the root.
    let dir = tempfile::tempdir().unwrap();
    let outside = tempfile::tempdir().unwrap();
    write(outside.path(), "notes/a.md", b"listed");
    write(dir.path(), "notes/a.md", b"listed");
    write(dir.path(), "b.md", b"unchanged");
    let scanned = PackDir::scan(dir.path(), &Limits::DEFAULT);
    std::fs::remove_dir_all(dir.path().join("notes")).unwrap();
    std::os::unix::fs::symlink(outside.path().join("notes"), dir.path().join("notes")).unwrap();
    let found = problems(scanned.read(&Limits::DEFAULT, None));
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0].path, dir.path().join("notes/a.md"));
    assert!(found[0].message.contains("cannot read"), "{}", found[0]);
}

#[test]
fn files_are_read_from_the_directory_that_was_scanned_even_if_it_is_moved() {
    // The scanned directory is renamed and another put at its path before the files are
    // read: the pack holds the scanned directory's files, not a mix of the two.
    let parent = tempfile::tempdir().unwrap();
    let root = parent.path().join("pack");
    write(&root, "a.md", b"scanned a");
    write(&root, "sub/b.md", b"scanned b");
    let scanned = PackDir::scan(&root, &Limits::DEFAULT);
    std::fs::rename(&root, parent.path().join("moved")).unwrap();
    write(&root, "a.md", b"another a");
    write(&root, "sub/b.md", b"another b");
    let payload = scanned.read(&Limits::DEFAULT, None).unwrap();
    assert_eq!(payload.files()["a.md"], b"scanned a");
    assert_eq!(payload.files()["sub/b.md"], b"scanned b");
}

#[test]
fn a_file_read_as_listed_gives_its_bytes_whatever_its_length() {
    let dir = tempfile::tempdir().unwrap();
    let lens = [0usize, 1, 511, 512, 4096, 65_537, 1 << 20];
    for len in lens {
        let bytes: Vec<u8> = (0..len).map(|n| b"abc \n"[n % 5]).collect();
        write(dir.path(), &format!("f{len}.md"), &bytes);
    }
    let payload = read_pack_dir(dir.path(), &Limits::DEFAULT, None).unwrap();
    for len in lens {
        let bytes = &payload.files()[&format!("f{len}.md")];
        assert_eq!(bytes.len(), len);
        assert!(
            bytes
                .iter()
                .enumerate()
                .all(|(n, b)| *b == b"abc \n"[n % 5])
        );
    }
}

#[test]
fn sealing_a_directory_gives_what_reading_it_gives() {
    let dir = tempfile::tempdir().unwrap();
    // Enough to take several frames, so the index frame goes in front of streamed ones.
    for i in 0..40 {
        let text: Vec<u8> = (0..300_000u32)
            .map(|n| b"abcdefghij \n"[((n * 7 + i) % 12) as usize])
            .collect();
        write(dir.path(), &format!("d{}/f{i}.md", i % 3), &text);
    }
    write(dir.path(), "t.hbs", b"fine\n");
    let key = ContentKey::from_parts("dir", [5; 32]).unwrap();
    let version = semver::Version::new(2, 0, 0);
    let options = seal_options(&version);
    let read = read_pack_dir(dir.path(), &Limits::DEFAULT, Some(&check)).unwrap();
    let sealed = PackDir::scan(dir.path(), &Limits::DEFAULT)
        .seal(&options, &[&key], Some(&check))
        .unwrap();
    let (header, _) = pack_format::read_header(&sealed.sealed, &Limits::DEFAULT).unwrap();
    assert!(header.segments.len() > 2, "{:?}", header.segments);
    let opened = pack_format::open(&sealed.sealed, &ring(&key), &Limits::DEFAULT).unwrap();
    assert_eq!(opened.payload, read);
    assert_eq!(sealed.index, read.index());
    // The same payload as sealing what was read.
    let (_, from_dir) =
        pack_format::pack::decrypt(&sealed.sealed, &ring(&key), &Limits::DEFAULT).unwrap();
    assert_eq!(from_dir, read.to_tar_zst(0, 1).unwrap());

    // A check's problems stop the seal, with every other problem.
    write(dir.path(), "t.hbs", b"BAD\n");
    std::os::unix::fs::symlink(dir.path().join("t.hbs"), dir.path().join("l.hbs")).unwrap();
    let found =
        problems(PackDir::scan(dir.path(), &Limits::DEFAULT).seal(&options, &[&key], Some(&check)));
    assert_eq!(found.len(), 2, "{found:?}");
}

/// Sealing options for pack "dir" at `version`, zstd level 1.
fn seal_options(version: &semver::Version) -> SealOptions<'_> {
    SealOptions {
        format: pack_format::FORMAT_VERSION,
        name: "dir",
        version,
        schema: 1,
        mtime: 0,
        zstd_level: 1,
    }
}

/// 40 files of 300 kB, `f00.md` to `f39.md`: a pack of several frames.
fn many_frames_tree() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for i in 0..40 {
        let text: Vec<u8> = (0..300_000u32)
            .map(|n| b"klmnopqrst \n"[((n * 5 + i) % 12) as usize])
            .collect();
        write(dir.path(), &format!("f{i:02}.md"), &text);
    }
    dir
}

#[test]
fn files_that_change_or_vanish_after_the_scan_stop_a_seal_of_many_frames() {
    // 40 files of 300 kB: several frames, each read by the thread that compresses it. One
    // file in an early frame and one in the last change or go away between the scan and
    // the seal; both are named, and nothing is sealed.
    let dir = many_frames_tree();
    let key = ContentKey::from_parts("dir", [6; 32]).unwrap();
    let version = semver::Version::new(1, 0, 0);
    let options = seal_options(&version);
    let scanned = PackDir::scan(dir.path(), &Limits::DEFAULT);
    write(dir.path(), "f03.md", b"shorter now");
    std::fs::remove_file(dir.path().join("f38.md")).unwrap();
    let mut found = problems(scanned.seal(&options, &[&key], None));
    found.sort_by(|a, b| a.path.cmp(&b.path));
    assert_eq!(found.len(), 2, "{found:?}");
    assert_eq!(found[0].path, dir.path().join("f03.md"));
    assert!(
        found[0].message.contains("changed while being read"),
        "{}",
        found[0]
    );
    assert_eq!(found[1].path, dir.path().join("f38.md"));
    assert!(found[1].message.contains("cannot read"), "{}", found[1]);
}

#[test]
fn a_check_that_panics_on_one_file_of_many_frames_passes_the_panic_on() {
    // The panic happens on a compressing thread; the caller sees it instead of waiting for
    // a frame that never comes.
    let dir = many_frames_tree();
    let key = ContentKey::from_parts("dir", [7; 32]).unwrap();
    let version = semver::Version::new(1, 0, 0);
    let options = seal_options(&version);
    let breaks = |path: &str, _: &[u8]| -> Vec<FileProblem> {
        assert!(path != "f21.md", "the check broke on {path}");
        Vec::new()
    };
    let scanned = PackDir::scan(dir.path(), &Limits::DEFAULT);
    let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        scanned.seal(&options, &[&key], Some(&breaks))
    }));
    let message = panicked.expect_err("the check's panic was lost");
    let message = message
        .downcast_ref::<String>()
        .cloned()
        .unwrap_or_default();
    assert!(message.contains("the check broke on f21.md"), "{message}");
}

#[test]
fn every_file_of_a_large_tree_is_checked_when_read_and_when_a_seal_stops_early() {
    // 12 MB: past the size where the checks run on every core. Every other file is flagged;
    // each must be reported, reading it into memory and sealing alike (the seal stops
    // early on the scan's problem, a link, and still checks every file).
    let dir = many_frames_tree();
    let flags_odd = |path: &str, _: &[u8]| -> Vec<FileProblem> {
        let odd = path
            .trim_end_matches(".md")
            .ends_with(['1', '3', '5', '7', '9']);
        if odd {
            vec![FileProblem {
                line: Some(1),
                message: "odd file".to_string(),
                hint: None,
            }]
        } else {
            Vec::new()
        }
    };
    let flagged: Vec<PathBuf> = (1..40)
        .step_by(2)
        .map(|i| dir.path().join(format!("f{i:02}.md")))
        .collect();

    let read = problems(read_pack_dir(
        dir.path(),
        &Limits::DEFAULT,
        Some(&flags_odd),
    ));
    let paths: Vec<PathBuf> = read.iter().map(|p| p.path.clone()).collect();
    assert_eq!(paths, flagged);

    std::os::unix::fs::symlink(dir.path().join("f00.md"), dir.path().join("link.md")).unwrap();
    let key = ContentKey::from_parts("dir", [8; 32]).unwrap();
    let version = semver::Version::new(1, 0, 0);
    let scanned = PackDir::scan(dir.path(), &Limits::DEFAULT);
    let sealed = problems(scanned.seal(&seal_options(&version), &[&key], Some(&flags_odd)));
    let mut paths: Vec<PathBuf> = sealed.iter().map(|p| p.path.clone()).collect();
    paths.sort();
    let mut expected = flagged.clone();
    expected.push(dir.path().join("link.md"));
    expected.sort();
    assert_eq!(paths, expected);
}
