//! Each package's integration tests are one binary: `autotests = false` in its Cargo.toml and
//! `tests/suite.rs` naming every file as a module. A file under `tests/` that neither the
//! suite nor a `[[test]]` of Cargo.toml names would be compiled by nobody and never run:
//! this test finds such a file in any package of the workspace.

use std::path::Path;

#[test]
fn every_test_file_of_every_package_is_compiled() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let mut unnamed = Vec::new();
    let mut suites = 0;
    for package in std::fs::read_dir(root).unwrap() {
        let package = package.unwrap().path();
        let tests = package.join("tests");
        let Ok(suite) = std::fs::read_to_string(tests.join("suite.rs")) else {
            continue;
        };
        suites += 1;
        let manifest = std::fs::read_to_string(package.join("Cargo.toml")).unwrap();
        assert!(
            manifest.contains("autotests = false"),
            "{} has tests/suite.rs but still builds each test file as a binary",
            package.display()
        );
        for file in std::fs::read_dir(&tests).unwrap() {
            let file = file.unwrap().path();
            let name = file.file_name().unwrap().to_str().unwrap().to_string();
            let Some(module) = name.strip_suffix(".rs") else {
                continue;
            };
            if module == "suite"
                || suite.lines().any(|l| l.trim() == format!("mod {module};"))
                || manifest.contains(&format!("path = \"tests/{name}\""))
            {
                continue;
            }
            unnamed.push(file.display().to_string());
        }
    }
    assert!(
        suites >= 5,
        "found only {suites} packages with tests/suite.rs"
    );
    assert!(
        unnamed.is_empty(),
        "test files that no tests/suite.rs or [[test]] names (add `mod NAME;` to the \
         package's tests/suite.rs): {unnamed:?}"
    );
}
