//! Compiles `packs/builtin` into the client. The build fails when the pack is not valid:
//! an unsafe path, an oversize file, or a template that does not fit the runtime contract.

use std::path::{Path, PathBuf};

fn main() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../packs/builtin");
    println!("cargo:rerun-if-changed={}", root.display());
    let mut files = Vec::new();
    collect(&root, &root, &mut files);
    files.sort();
    let contract = pack_contract::Contract::builtin(1).expect("schema 1 is compiled in");
    let limits = pack_format::Limits::DEFAULT;
    let mut payload_files = Vec::new();
    let mut problems = Vec::new();
    for (rel, abs) in &files {
        println!("cargo:rerun-if-changed={}", abs.display());
        let bytes = std::fs::read(abs).unwrap_or_else(|e| panic!("reading {}: {e}", abs.display()));
        if rel.ends_with(".hbs") {
            match std::str::from_utf8(&bytes) {
                Ok(text) => {
                    for e in pack_contract::validate_template_all(rel, text, &contract) {
                        problems.push(format!("packs/builtin/{e}"));
                    }
                }
                Err(_) => problems.push(format!("packs/builtin/{rel}: not UTF-8")),
            }
        }
        payload_files.push(pack_format::PayloadFile {
            path: rel.clone(),
            bytes,
        });
    }
    let payload = match pack_format::Payload::new(payload_files, &limits) {
        Ok(p) => p,
        Err(e) => panic!("packs/builtin is not a valid pack: {e}"),
    };
    if !problems.is_empty() {
        panic!("packs/builtin does not build:\n{}", problems.join("\n"));
    }
    // A content digest of the built-in pack: the SHA-256 of its canonical tar.
    let digest = pack_format::sha256_hex(&payload.to_tar(0).expect("tar of the builtin pack"));

    let mut out = String::from(
        "/// Files of `packs/builtin`, compiled in.\npub static BUILTIN_FILES: &[(&str, &[u8])] = &[\n",
    );
    for (rel, abs) in &files {
        out.push_str(&format!(
            "    ({rel:?}, include_bytes!({:?})),\n",
            abs.display().to_string()
        ));
    }
    out.push_str("];\n");
    out.push_str(&format!("/// SHA-256 of the canonical tar of `packs/builtin`.\npub const BUILTIN_SHA256: &str = {digest:?};\n"));
    let dest = PathBuf::from(std::env::var("OUT_DIR").expect("OUT_DIR")).join("builtin_pack.rs");
    std::fs::write(&dest, out).expect("writing builtin_pack.rs");
}

fn collect(root: &Path, dir: &Path, out: &mut Vec<(String, PathBuf)>) {
    let entries =
        std::fs::read_dir(dir).unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()));
    for entry in entries {
        let entry = entry.expect("directory entry");
        let path = entry.path();
        let kind = entry.file_type().expect("file type");
        if kind.is_symlink() {
            panic!(
                "packs/builtin must not contain symlinks: {}",
                path.display()
            );
        } else if kind.is_dir() {
            collect(root, &path, out);
        } else {
            let rel = path
                .strip_prefix(root)
                .expect("inside the pack")
                .to_str()
                .unwrap_or_else(|| panic!("non-UTF-8 path {}", path.display()))
                .replace('\\', "/");
            let abs = path.canonicalize().expect("canonical path");
            out.push((rel, abs));
        }
    }
}
