//! A publisher: keys made by `packer keygen`, a publish token, the packd config that trusts
//! both, and packs and channel documents made with the real `packer`.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use crate::{packer, run, workspace};

/// The config of a packd that trusts the publisher key at `signing_pub` and takes the token
/// whose SHA-256 is `token_sha256` for publishing; `extra_toml` follows.
pub fn packd_config(signing_pub: &Path, token_sha256: &str, extra_toml: &str) -> String {
    format!(
        "publisher_keys = [{:?}]\n\n[[tokens]]\nname = \"publisher\"\nsha256 = \"{token_sha256}\"\nscopes = [\"publish\"]\n{extra_toml}",
        signing_pub.display().to_string()
    )
}

/// A publisher: key directory, token, and a scratch directory for packs and documents.
pub struct Publisher {
    pub dir: tempfile::TempDir,
    pub token: String,
    sequence: AtomicU64,
}

impl Publisher {
    /// Fresh keys and a random token.
    pub fn new() -> Self {
        Self::with_token(&format!(
            "test-token-{}",
            hex::encode(rand::random::<[u8; 8]>())
        ))
    }

    /// Fresh keys (`packer keygen`, no password) in `keys/` of a new directory, and `token`.
    pub fn with_token(token: &str) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let mut cmd = packer();
        cmd.arg("keygen")
            .arg("--dir")
            .arg(dir.path().join("keys"))
            .env_remove("PROMPTPACK_KEY_PASSWORD");
        run(cmd);
        Publisher {
            dir,
            token: token.to_string(),
            sequence: AtomicU64::new(0),
        }
    }

    pub fn keys(&self) -> PathBuf {
        self.dir.path().join("keys")
    }

    /// `packd.toml` beside the keys: this publisher's key and token.
    pub fn server_config(&self) -> PathBuf {
        self.server_config_with("")
    }

    /// [`Publisher::server_config`] with `extra_toml` appended.
    pub fn server_config_with(&self, extra_toml: &str) -> PathBuf {
        let path = self.dir.path().join("packd.toml");
        let hash = pack_format::sha256_hex(self.token.as_bytes());
        let text = packd_config(&self.keys().join("signing.pub"), &hash, extra_toml);
        std::fs::write(&path, text).unwrap();
        path
    }

    /// A client config trusting this publisher.
    pub fn client_config(&self, server: &str, extra: &str) -> PathBuf {
        let path = self
            .dir
            .path()
            .join(format!("client-{}.toml", rand::random::<u32>()));
        std::fs::write(
            &path,
            format!(
                "[updates]\nserver = {server:?}\nchannel = \"stable\"\npack = \"builtin\"\ntrusted_keys = [{:?}]\ncontent_keys = [{:?}]\nattempts = 1\n{extra}",
                self.keys().join("signing.pub").display().to_string(),
                self.keys().join("content.key").display().to_string(),
            ),
        )
        .unwrap();
        path
    }

    /// Builds `packs/builtin` with `marker` appended to every template, as `version`.
    pub fn build(&self, version: &str, marker: &str) -> PathBuf {
        self.build_edited(version, marker, |_| {})
    }

    /// [`Publisher::build`], with `edit` run on the source directory before it is built.
    pub fn build_edited(&self, version: &str, marker: &str, edit: impl FnOnce(&Path)) -> PathBuf {
        let src = self.dir.path().join(format!("src-{version}"));
        copy_tree(&workspace().join("packs/builtin"), &src);
        for path in walk(&src) {
            if path.extension().is_some_and(|e| e == "hbs") {
                let mut text = std::fs::read_to_string(&path).unwrap();
                text.push_str(&format!("\n{marker}\n"));
                std::fs::write(&path, text).unwrap();
            }
        }
        edit(&src);
        let out = self.dir.path().join(format!("builtin-{version}.pack"));
        let mut cmd = packer();
        cmd.arg("build")
            .arg(&src)
            .args(["--name", "builtin", "--version", version, "--keys"]);
        cmd.arg(self.keys()).arg("-o").arg(&out);
        run(cmd);
        out
    }

    /// Signs the next channel document with `entries` (packer channel `--entry` specs).
    pub fn sign(&self, entries: &[String], expires: &str) -> (Vec<u8>, String) {
        let sequence = self.sequence.fetch_add(1, Ordering::SeqCst) + 1;
        self.sign_sequence(sequence, entries, expires)
    }

    pub fn sign_sequence(
        &self,
        sequence: u64,
        entries: &[String],
        expires: &str,
    ) -> (Vec<u8>, String) {
        let out = self
            .dir
            .path()
            .join(format!("channel-{sequence}-{}.json", rand::random::<u32>()));
        let mut cmd = packer();
        cmd.arg("channel").arg("--keys").arg(self.keys());
        cmd.args([
            "--channel",
            "stable",
            "--pack",
            "builtin",
            "--sequence",
            &sequence.to_string(),
        ]);
        cmd.args(["--expires", expires]);
        for entry in entries {
            cmd.arg("--entry").arg(entry);
        }
        cmd.arg("-o").arg(&out);
        run(cmd);
        let sig = std::fs::read_to_string(out.with_extension("json.minisig")).unwrap();
        (std::fs::read(&out).unwrap(), sig)
    }
}

impl Default for Publisher {
    fn default() -> Self {
        Self::new()
    }
}

pub fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_tree(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).unwrap();
        }
    }
}

pub fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            out.extend(walk(&path));
        } else {
            out.push(path);
        }
    }
    out
}
