//! Writes the seed corpora of the fuzz targets: real sealed packs, their payloads, signed
//! channel documents, and a few hostile archives the format must refuse.
//!
//! `cargo run --manifest-path fuzz/Cargo.toml --example make_seeds -- fuzz/corpus`
//! (the directory defaults to `corpus` next to this crate's manifest). Files are named by
//! content, so running it again adds nothing new.

use std::path::{Path, PathBuf};

use pack_format::channel::CHANNEL_FORMAT;
use pack_format::pack::SealInput;
use pack_format::payload::INDEX_PATH;
use pack_format::{
    ChannelDocument, ChannelEntry, ContentKey, EntryTarget, PackRef, Payload, PayloadFile, Rollout,
};
use pack_format_fuzz::{LIMITS, NOW_UNIX, content_key, join_nul, signing_key};
use time::OffsetDateTime;

type Result<T> = std::result::Result<T, Box<dyn std::error::Error>>;

fn main() -> Result<()> {
    let dir = std::env::args_os()
        .nth(1)
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("corpus"));
    let mut written = 0;
    let mut put = |target: &str, bytes: &[u8]| -> Result<()> {
        let target_dir = dir.join(target);
        std::fs::create_dir_all(&target_dir)?;
        let name = &pack_format::sha256_hex(bytes)[..16];
        std::fs::write(target_dir.join(format!("seed-{name}")), bytes)?;
        written += 1;
        Ok(())
    };

    for (i, payload) in payloads()?.iter().enumerate() {
        let compressed = payload.to_tar_zst(0, 3)?;
        put("payload", &compressed)?;
        put("payload", &payload.to_tar(0)?)?;
        put("open", &compressed)?;
        let version = semver::Version::new(1, i as u64, 0);
        let input = SealInput {
            format: pack_format::FORMAT_VERSION,
            name: "seed-pack",
            version: &version,
            schema: 1 + i as u32,
            payload,
            mtime: 0,
            zstd_level: if i % 2 == 0 { 3 } else { 1 },
        };
        let other = ContentKey::from_parts("older-client", [0x11; 32])?;
        let ours = content_key();
        let keys: Vec<&ContentKey> = if i % 2 == 0 {
            vec![&ours]
        } else {
            vec![&other, &ours]
        };
        let sealed = pack_format::seal(&input, &keys)?;
        put("header", &sealed)?;
        put("open", &sealed)?;
    }
    for tar in hostile_tars()? {
        put("payload", &tar)?;
        let compressed = pack_format::compress(&tar, 3)?;
        put("payload", &compressed)?;
        put("open", &compressed)?;
    }

    let key = signing_key();
    for document in documents()? {
        let signed = document.sign(key)?;
        put(
            "channel",
            &[
                &[0u8][..],
                &join_nul(&signed.document, signed.signature.as_bytes()),
            ]
            .concat(),
        )?;
        let comment = document.trusted_comment();
        put(
            "channel",
            &[&[1u8][..], &join_nul(&signed.document, comment.as_bytes())].concat(),
        )?;
    }

    // Written to stderr: this example is a tool, and its output is a progress note.
    #[allow(clippy::print_stderr)]
    {
        eprintln!("wrote {written} seed files under {}", dir.display());
    }
    Ok(())
}

fn file(path: &str, text: &str) -> PayloadFile {
    PayloadFile {
        path: path.to_string(),
        bytes: text.as_bytes().to_vec(),
    }
}

/// Small, realistic payloads: one template, a nested tree, an empty file, unicode.
fn payloads() -> Result<Vec<Payload>> {
    // Tens of KiB of lines: more than one zstd block.
    let large: String = (0..8_000).map(|n| format!("line {n}\n")).collect();
    Ok(vec![
        Payload::new(
            [file("agents/mavis/persona.md", "You are {{agent.name}}.\n")],
            &LIMITS,
        )?,
        Payload::new(
            [
                file(
                    "agents/mavis/core.md",
                    "# Rules\n{{#each rules}}- {{this}}\n{{/each}}\n",
                ),
                file(
                    "agents/worker/core.md",
                    "Work in {{env.cwd}}. Tools: {{tools}}.\n",
                ),
                file(
                    "shared/environment.md",
                    "OS: {{env.os}}\nDate: {{env.date}}\n",
                ),
                file("shared/empty.md", ""),
                file(
                    "skills/catalog.hbs",
                    "{{#if skills}}{{#each skills}}* {{name}}: {{summary}}\n{{/each}}{{/if}}",
                ),
            ],
            &LIMITS,
        )?,
        Payload::new(
            [
                file("a/b/c/d/e/deep.md", "déjà vu — ünïcödé ✓\n"),
                file(
                    "manifest.json",
                    "{\"schema\":1,\"templates\":[\"a/b/c/d/e/deep.md\"]}",
                ),
            ],
            &LIMITS,
        )?,
        Payload::new([file("shared/large.md", &large)], &LIMITS)?,
        Payload::default(),
    ])
}

fn tar_entry(
    builder: &mut tar::Builder<Vec<u8>>,
    kind: tar::EntryType,
    path: &str,
    bytes: &[u8],
) -> Result<()> {
    let mut header = tar::Header::new_gnu();
    header.set_entry_type(kind);
    header.set_mode(0o644);
    header.set_size(bytes.len() as u64);
    header.set_mtime(0);
    // `set_path` refuses `..`; write the name bytes directly so hostile paths get in.
    let name = &mut header.as_old_mut().name;
    name.fill(0);
    name[..path.len()].copy_from_slice(path.as_bytes());
    header.set_cksum();
    builder.append(&header, bytes)?;
    Ok(())
}

/// Archives the reader must refuse, each for a different reason.
fn hostile_tars() -> Result<Vec<Vec<u8>>> {
    let index = br#"{"format":1,"files":[]}"#;
    let regular = tar::EntryType::Regular;
    let cases: Vec<Vec<(tar::EntryType, &str, &[u8])>> = vec![
        vec![
            (regular, INDEX_PATH, index),
            (tar::EntryType::Symlink, "link", b""),
        ],
        vec![
            (regular, INDEX_PATH, index),
            (regular, "../escape.md", b"x"),
        ],
        vec![(regular, INDEX_PATH, index), (regular, "/abs.md", b"x")],
        vec![
            (regular, INDEX_PATH, index),
            (tar::EntryType::Directory, "dir/", b""),
        ],
        vec![
            (regular, INDEX_PATH, index),
            (regular, "a.md", b"1"),
            (regular, "a.md", b"2"),
        ],
        vec![(regular, "not-the-index.md", b"x")],
        vec![(regular, INDEX_PATH, br#"{"format":2,"files":[]}"#)],
        vec![
            (
                regular,
                INDEX_PATH,
                br#"{"format":1,"files":[{"path":"a.md","size":1,"sha256":"00"}]}"#,
            ),
            (regular, "a.md", b"1"),
        ],
    ];
    let mut out = Vec::new();
    for case in cases {
        let mut builder = tar::Builder::new(Vec::new());
        for (kind, path, bytes) in case {
            tar_entry(&mut builder, kind, path, bytes)?;
        }
        out.push(builder.into_inner()?);
    }
    // A long path, which GNU tar stores in an extra `././@LongLink` entry.
    let long = format!("{}/template.md", "nested-directory".repeat(8));
    let payload = Payload::new([file(&long, "long path\n")], &LIMITS)?;
    out.push(payload.to_tar(0)?);
    Ok(out)
}

/// Channel documents: pack entries, a rollout, the built-in directive.
fn documents() -> Result<Vec<ChannelDocument>> {
    let at = |unix: i64| OffsetDateTime::from_unix_timestamp(unix);
    let pack = |version: &str| -> Result<EntryTarget> {
        Ok(EntryTarget::Pack(PackRef {
            version: version.parse()?,
            sha256: pack_format::sha256_hex(version.as_bytes()),
            size: 4096,
            schema: 1,
        }))
    };
    Ok(vec![
        ChannelDocument {
            format: CHANNEL_FORMAT,
            channel: "stable".to_string(),
            pack: "builtin".to_string(),
            sequence: 42,
            issued_at: at(NOW_UNIX - 3600)?,
            expires_at: at(NOW_UNIX + 86_400)?,
            entries: vec![
                ChannelEntry {
                    clients: ">=1.4.0, <1.5.0".parse()?,
                    target: pack("1.4.7")?,
                    rollout: Some(Rollout {
                        percent: 25,
                        salt: "spring-rollout".to_string(),
                        ramp: None,
                        watch: None,
                    }),
                },
                ChannelEntry {
                    clients: ">=1.4.0, <1.5.0".parse()?,
                    target: pack("1.4.6")?,
                    rollout: None,
                },
                ChannelEntry {
                    clients: "*".parse()?,
                    target: EntryTarget::Builtin,
                    rollout: None,
                },
            ],
            guard: None,
            restricts: None,
        },
        ChannelDocument {
            format: CHANNEL_FORMAT,
            channel: "beta_2".to_string(),
            pack: "agent.prompts".to_string(),
            sequence: 1,
            issued_at: at(NOW_UNIX - 10)?,
            expires_at: at(NOW_UNIX + 10)?,
            entries: vec![],
            guard: None,
            restricts: None,
        },
    ])
}
