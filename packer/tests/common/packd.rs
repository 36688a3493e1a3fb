//! A real `packd` process (promptpack-harness's) with a publisher's keys, token and pack
//! directory, for the tests of the commands that talk to it.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use pack_format::{ChannelDocument, Limits, TrustedKeys};
use promptpack_harness::{Packd, Publisher};
use serde_json::Value;

use super::{assert_ok, s, write_required_templates};

pub const TOKEN: &str = "ppt_test_publisher_token";
pub const TEMPLATE: &str = "You are {{persona}}.\n";

/// A publisher (keys in `keys/`, the token [`TOKEN`], templates in `prompts/`) and a packd
/// trusting it, over `data/` of the same directory.
pub struct Env {
    pub publisher: Publisher,
    pub packd: Packd,
}

#[track_caller]
pub fn json(output: &Output) -> Value {
    assert_ok(output);
    serde_json::from_slice(&output.stdout).expect("stdout is JSON")
}

impl Env {
    /// Keys, a pack directory, a packd config trusting the keys and one publish token.
    pub fn start() -> Env {
        let publisher = Publisher::with_token(TOKEN);
        let dir = publisher.dir.path();
        let template = dir.join("prompts/agents/mavis/system.hbs");
        std::fs::create_dir_all(template.parent().unwrap()).unwrap();
        std::fs::write(&template, TEMPLATE).unwrap();
        write_required_templates(&dir.join("prompts"));
        let packd = Packd::start(&dir.join("data"), &publisher.server_config());
        Env { publisher, packd }
    }

    pub fn path(&self, relative: &str) -> PathBuf {
        self.publisher.dir.path().join(relative)
    }

    pub fn keys(&self) -> PathBuf {
        self.publisher.keys()
    }

    /// `packer ARGS` with the token in the environment and stdin not a terminal.
    pub fn packer_with_token(&self, args: &[&str], token: Option<&str>) -> Output {
        let mut command = Command::new(env!("CARGO_BIN_EXE_packer"));
        command
            .args(args)
            .env_remove("PROMPTPACK_KEY_PASSWORD")
            .env_remove("PROMPTPACK_SERVER")
            .env_remove("PROMPTPACK_TOKEN")
            .env_remove("SOURCE_DATE_EPOCH")
            .stdin(Stdio::null());
        if let Some(token) = token {
            command.env("PROMPTPACK_TOKEN", token);
        }
        command.output().expect("packer runs")
    }

    pub fn packer(&self, args: &[&str]) -> Output {
        self.packer_with_token(args, Some(TOKEN))
    }

    /// Builds `prompts/` as `version` into `dist/NAME`; every build has fresh random bytes.
    pub fn build(&self, version: &str, name: &str) -> PathBuf {
        let out = self.path(&format!("dist/{name}"));
        assert_ok(&self.packer(&[
            "build",
            s(&self.path("prompts")),
            "--name",
            "prompts",
            "--version",
            version,
            "--keys",
            s(&self.keys()),
            "-o",
            s(&out),
        ]));
        out
    }

    pub fn publish(&self, pack: &Path) -> Output {
        self.packer(&["--json", "publish", s(pack), "--server", &self.packd.url])
    }

    pub fn release(&self, extra: &[&str]) -> Output {
        let keys = self.keys();
        let mut args = vec![
            "--json",
            "release",
            "stable",
            "--server",
            &self.packd.url,
            "--keys",
            s(&keys),
        ];
        args.extend_from_slice(extra);
        self.packer(&args)
    }

    pub fn status(&self) -> Value {
        json(&self.packer(&["status", "--server", &self.packd.url, "--json"]))
    }

    /// The live document, fetched straight from packd and verified the way a client does.
    pub fn live_document(&self) -> ChannelDocument {
        let get = |path: &str| -> Vec<u8> {
            let response = reqwest::blocking::get(format!("{}{path}", self.packd.url)).unwrap();
            assert!(response.status().is_success(), "GET {path}: {response:?}");
            response.bytes().unwrap().to_vec()
        };
        let document = get("/v1/channels/stable");
        let signature = String::from_utf8(get("/v1/channels/stable/signature")).unwrap();
        let mut trusted = TrustedKeys::new();
        trusted.add_file(&self.keys().join("signing.pub")).unwrap();
        pack_format::channel::verify(
            &document,
            &signature,
            &trusted,
            time::OffsetDateTime::now_utc(),
            &Limits::DEFAULT,
        )
        .expect("the live document verifies")
        .document
    }
}
