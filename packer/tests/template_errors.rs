//! A template that does not parse, as a publisher meets it: `packer build` names the file,
//! the line where the unclosed block opens and what to add, and writes nothing.

use crate::common;

use std::process::Command;

use common::{assert_fails, assert_ok, s, stderr, write_required_templates};

fn packer(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_packer"))
        .args(args)
        .env_remove("PROMPTPACK_KEY_PASSWORD")
        .env_remove("SOURCE_DATE_EPOCH")
        .output()
        .expect("packer runs")
}

#[test]
fn build_names_where_an_unclosed_block_opens_and_a_missing_brace() {
    let dir = tempfile::tempdir().unwrap();
    let keys = dir.path().join("keys");
    assert_ok(&packer(&["keygen", "--dir", s(&keys)]));
    let pack_dir = dir.path().join("prompts");
    write_required_templates(&pack_dir);
    let unclosed = pack_dir.join("agents/mavis/system.hbs");
    std::fs::create_dir_all(unclosed.parent().unwrap()).unwrap();
    std::fs::write(
        &unclosed,
        "You are {{persona}}.\n{{#if tools.read}}\nRead before you write.\n\nThe end.\n",
    )
    .unwrap();
    let brace = pack_dir.join("shared/rules.hbs");
    std::fs::write(&brace, "Rules.\n\nYou are {{persona}.\n").unwrap();
    let out = dir.path().join("p.pack");

    let result = packer(&[
        "build",
        s(&pack_dir),
        "--version",
        "1.0.0",
        "--keys",
        s(&keys),
        "-o",
        s(&out),
    ]);
    assert_fails(&result);
    let message = stderr(&result);
    assert!(
        message.contains(&format!(
            "{}:2: template does not parse: `{{{{#if}}}}` opened at line 2, column 1 is never \
             closed; add `{{{{/if}}}}`",
            s(&unclosed)
        )),
        "{message}"
    );
    assert!(
        message.contains(&format!(
            "{}:3: template does not parse: `{{{{persona}}` at line 3, column 9: missing `}}`",
            s(&brace)
        )),
        "{message}"
    );
    // Not the grammar's rule names.
    assert!(!message.contains("expected escape"), "{message}");
    assert!(!out.exists(), "nothing is written on failure");
}

#[test]
fn build_reports_each_copy_of_a_shared_template_by_its_own_path_and_line() {
    let dir = tempfile::tempdir().unwrap();
    let keys = dir.path().join("keys");
    assert_ok(&packer(&["keygen", "--dir", s(&keys)]));
    let pack_dir = dir.path().join("prompts");
    write_required_templates(&pack_dir);
    // The same block in many files, passing: checked once, it must not vouch for what
    // stands around it in the next file.
    let block = "{{#if tools.read}}\nRead {{persona}}'s notes first.\n{{/if}}\n";
    for i in 0..20 {
        let path = pack_dir.join(format!("locales/l{i}/rules.hbs"));
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, block).unwrap();
    }
    let bad = format!("{block}Ask {{{{user_name}}}}.\n");
    let copies = [
        pack_dir.join("locales/en/task.hbs"),
        pack_dir.join("locales/fr/task.hbs"),
    ];
    for copy in &copies {
        std::fs::create_dir_all(copy.parent().unwrap()).unwrap();
        std::fs::write(copy, &bad).unwrap();
    }
    let out = dir.path().join("p.pack");

    let result = packer(&[
        "build",
        s(&pack_dir),
        "--version",
        "1.0.0",
        "--keys",
        s(&keys),
        "-o",
        s(&out),
    ]);
    assert_fails(&result);
    let message = stderr(&result);
    for copy in &copies {
        assert!(
            message.contains(&format!("{}:4: unknown variable 'user_name'", s(copy))),
            "{message}"
        );
    }
    assert!(message.contains("2 problem(s)"), "{message}");
    assert!(!out.exists(), "nothing is written on failure");
}
