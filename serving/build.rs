//! Compiles `packs/builtin` into the client. The build fails when the pack is not valid:
//! any problem the pack-directory reader finds (an unsafe path, a link, an oversize file, a
//! template that does not fit the runtime contract), or a template the contract requires
//! that is missing.

use std::path::{Path, PathBuf};

use pack_contract::{Contract, read_complete_pack};
use pack_format::{FormatError, Limits};

fn main() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../packs/builtin");
    println!("cargo:rerun-if-changed={}", root.display());
    let contract = Contract::builtin(1).expect("schema 1 is compiled in");
    let limits = Limits::DEFAULT;
    let payload = match read_complete_pack(&root, &contract, &limits) {
        Ok(payload) => payload,
        Err(FormatError::PackDirectory { problems, .. }) => {
            let lines: Vec<String> = problems.iter().map(ToString::to_string).collect();
            panic!("packs/builtin does not build:\n{}", lines.join("\n"));
        }
        Err(e) => panic!("packs/builtin is not a valid pack: {e}"),
    };
    // A content digest of the built-in pack: the SHA-256 of its canonical tar.
    let digest = pack_format::sha256_hex(&payload.to_tar(0).expect("tar of the builtin pack"));

    let mut out = String::from(
        "/// Files of `packs/builtin`, compiled in.\npub static BUILTIN_FILES: &[(&str, &[u8])] = &[\n",
    );
    for path in payload.files().keys() {
        let disk = root.join(path);
        println!("cargo:rerun-if-changed={}", disk.display());
        let abs = disk.canonicalize().expect("canonical path");
        out.push_str(&format!(
            "    ({path:?}, include_bytes!({:?})),\n",
            abs.display().to_string()
        ));
    }
    out.push_str("];\n");
    out.push_str(&format!("/// SHA-256 of the canonical tar of `packs/builtin`.\npub const BUILTIN_SHA256: &str = {digest:?};\n"));
    let dest = PathBuf::from(std::env::var("OUT_DIR").expect("OUT_DIR")).join("builtin_pack.rs");
    std::fs::write(&dest, out).expect("writing builtin_pack.rs");
}
