//! The test vectors of docs/FORMAT.md (`format/tests/vectors/*.json`): fixed inputs and the
//! exact bytes they give, for anyone reimplementing the format to check against.
//!
//! Sealing the vector's inputs with its fixed data key and nonces must give its sealed
//! bytes exactly, and its sealed bytes must open to its files. The channel vector's document
//! bytes must be what the document serialises to, and its signature must verify (minisign
//! signatures carry random noise, so they are checked, not recomputed). The vector files are written
//! by this test only when `PROMPTPACK_WRITE_VECTORS=1` is set (after a deliberate change of
//! the format); otherwise they are only read and compared.

use std::path::{Path, PathBuf};

use pack_format::channel::{self, ChannelDocument};
use pack_format::pack::{self, SealSecrets};
use pack_format::{
    ContentKey, ContentKeyRing, Limits, Payload, PayloadFile, SealInput, Segment, SigningKey,
    TrustedKeys, rollout_bucket, sha256_hex,
};
use serde_json::{Value, json};
use time::OffsetDateTime;

fn vector_path(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/vectors")
        .join(name)
}

/// Hex in lines of 64 bytes, so a vector file diffs and reads line by line.
fn hex_lines(bytes: &[u8]) -> Value {
    bytes.chunks(64).map(hex::encode).collect()
}

fn unhex_lines(value: &Value) -> Vec<u8> {
    let text: String = value
        .as_array()
        .expect("hex lines")
        .iter()
        .map(|line| line.as_str().expect("a hex line"))
        .collect();
    hex::decode(text).expect("hex")
}

fn unhex<const N: usize>(value: &Value) -> [u8; N] {
    hex::decode(value.as_str().expect("hex text"))
        .expect("hex")
        .try_into()
        .expect("length")
}

/// Reads a vector file, or (re)writes it from `computed` when asked to.
fn load(name: &str, computed: &Value) -> Value {
    let path = vector_path(name);
    if std::env::var_os("PROMPTPACK_WRITE_VECTORS").is_some_and(|v| v == "1") {
        let text = serde_json::to_string_pretty(computed).unwrap() + "\n";
        std::fs::write(&path, text).unwrap();
    }
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    serde_json::from_str(&text).unwrap()
}

// ---- the sealed pack ----

/// The inputs of the format-2 vector. The format-1 vector (`pack-v1.json`) has the same
/// files and keys, with a 12-byte `payload_nonce` in place of the `nonce_prefix`; it is only
/// opened now, since this crate seals format 2.
const PACK_INPUTS: &str = r#"{
  "content_keys": [
    { "id": "vector-key-1", "key": "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f" },
    { "id": "vector-key-2", "key": "202122232425262728292a2b2c2d2e2f303132333435363738393a3b3c3d3e3f" }
  ],
  "data_key": "404142434445464748494a4b4c4d4e4f505152535455565758595a5b5c5d5e5f",
  "nonce_prefix": "60616263646566",
  "slot_nonces": ["707172737475767778797a7b", "808182838485868788898a8b"],
  "name": "vector",
  "version": "1.0.0",
  "schema": 1,
  "mtime": 1700000000,
  "zstd_level": 19,
  "files": [
    { "path": "agents/mavis/system.hbs", "text": "You are {{persona}}.\n" },
    { "path": "README.md", "text": "Uppercase sorts first: paths are ordered by their UTF-8 bytes.\n" },
    { "path": "shared/a-directory-name-long-enough-that-the-whole-path/does-not-fit-into-the-100-byte-name-field-of-a-tar-header.md", "text": "A path over 100 bytes takes a GNU long-name entry.\n" }
  ]
}"#;

/// Where the three-segment example cuts the `tar` (a reader must not assume segments
/// hold whole entries: these cuts fall inside them).
const THREE_SEGMENT_CUTS: [usize; 2] = [700, 2_000];

struct PackInputs {
    format: u32,
    keys: Vec<ContentKey>,
    name: String,
    version: semver::Version,
    schema: u32,
    mtime: u64,
    zstd_level: i32,
    payload: Payload,
    files: Vec<(String, Vec<u8>)>,
    raw: Value,
}

impl PackInputs {
    fn secrets(&self) -> SealSecrets {
        SealSecrets::new(
            unhex(&self.raw["data_key"]),
            unhex(&self.raw["nonce_prefix"]),
            self.raw["slot_nonces"]
                .as_array()
                .unwrap()
                .iter()
                .map(unhex)
                .collect(),
        )
    }

    fn input(&self) -> SealInput<'_> {
        SealInput {
            format: self.format,
            name: &self.name,
            version: &self.version,
            schema: self.schema,
            payload: &self.payload,
            mtime: self.mtime,
            zstd_level: self.zstd_level,
        }
    }

    fn key_refs(&self) -> Vec<&ContentKey> {
        self.keys.iter().collect()
    }
}

fn pack_inputs() -> PackInputs {
    pack_inputs_of(serde_json::from_str(PACK_INPUTS).unwrap())
}

/// The inputs of a pack vector: `files` given as text.
fn pack_inputs_of(raw: Value) -> PackInputs {
    let keys = raw["content_keys"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| ContentKey::from_parts(k["id"].as_str().unwrap(), unhex(&k["key"])).unwrap())
        .collect();
    let files: Vec<(String, Vec<u8>)> = raw["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            (
                f["path"].as_str().unwrap().to_string(),
                f["text"].as_str().unwrap().as_bytes().to_vec(),
            )
        })
        .collect();
    let payload = Payload::new(
        files.iter().map(|(path, bytes)| PayloadFile {
            path: path.clone(),
            bytes: bytes.clone(),
        }),
        &Limits::DEFAULT,
    )
    .unwrap();
    PackInputs {
        format: raw["format"]
            .as_u64()
            .map_or(pack_format::FORMAT_VERSION, |f| f as u32),
        keys,
        name: raw["name"].as_str().unwrap().to_string(),
        version: raw["version"].as_str().unwrap().parse().unwrap(),
        schema: raw["schema"].as_u64().unwrap() as u32,
        mtime: raw["mtime"].as_u64().unwrap(),
        zstd_level: raw["zstd_level"].as_i64().unwrap() as i32,
        payload,
        files,
        raw,
    }
}

fn seal_inputs(inputs: &PackInputs) -> Vec<u8> {
    pack::seal_with_secrets(&inputs.input(), &inputs.key_refs(), inputs.secrets()).unwrap()
}

/// The three-segment example: the tar cut at [`THREE_SEGMENT_CUTS`], each piece its own zstd
/// frame and segment, sealed with the same secrets.
fn three_segments(inputs: &PackInputs) -> (Vec<Vec<u8>>, Vec<Segment>, Vec<u8>) {
    let tar = inputs.payload.to_tar(inputs.mtime).unwrap();
    let [a, b] = THREE_SEGMENT_CUTS;
    let pieces = [&tar[..a], &tar[a..b], &tar[b..]];
    let frames: Vec<Vec<u8>> = pieces
        .iter()
        .map(|piece| pack_format::compress(piece, inputs.zstd_level).unwrap())
        .collect();
    let segments: Vec<Segment> = frames
        .iter()
        .zip(pieces)
        .map(|(frame, piece)| Segment {
            len: frame.len() as u64,
            tar_len: piece.len() as u64,
        })
        .collect();
    let sealed = pack::seal_segments(
        &inputs.input(),
        frames.concat(),
        &segments,
        &inputs.key_refs(),
        inputs.secrets(),
    )
    .unwrap();
    (frames, segments, sealed)
}

fn header_text(sealed: &[u8]) -> String {
    let (_, header_len) = pack::read_header(sealed, &Limits::DEFAULT).unwrap();
    String::from_utf8(sealed[pack::PREFIX_LEN..header_len].to_vec()).unwrap()
}

/// What the inputs give today, in the vector file's layout.
fn computed_pack_vector(inputs: &PackInputs) -> Value {
    let tar = inputs.payload.to_tar(inputs.mtime).unwrap();
    let compressed = inputs
        .payload
        .to_tar_zst(inputs.mtime, inputs.zstd_level)
        .unwrap();
    let sealed = seal_inputs(inputs);
    let (header, _) = pack::read_header(&sealed, &Limits::DEFAULT).unwrap();
    let index = tar_entry(&tar, "PACK-INDEX.json");
    let (frames, segments, segmented) = three_segments(inputs);
    json!({
        "description": "A format-2 sealed pack from fixed inputs; see docs/FORMAT.md, \"Test \
            vectors\". Hex fields are split into lines of 64 bytes: join the lines, then decode.",
        "inputs": inputs.raw,
        "content_key_files": inputs.keys.iter().map(|k| k.to_file_text().to_string()).collect::<Vec<_>>(),
        "index_json": String::from_utf8(index).unwrap(),
        "tar": hex_lines(&tar),
        "tar_sha256": sha256_hex(&tar),
        "payload_zstd": hex_lines(&compressed),
        "payload_zstd_sha256": sha256_hex(&compressed),
        "segments": header.segments,
        "header_json": header_text(&sealed),
        "sealed": hex_lines(&sealed),
        "sealed_sha256": sha256_hex(&sealed),
        "three_segments": {
            "description": "The same tar cut at the byte offsets in `cuts` (inside entries: \
                segments need not hold whole entries), each piece compressed as one zstd \
                frame and sealed as one segment with the same secrets, to show the segment \
                counter and the last-segment flag in the nonces.",
            "cuts": THREE_SEGMENT_CUTS,
            "frames": frames.iter().map(|f| hex_lines(f)).collect::<Vec<_>>(),
            "segments": segments,
            "header_json": header_text(&segmented),
            "sealed": hex_lines(&segmented),
            "sealed_sha256": sha256_hex(&segmented),
        },
    })
}

/// The bytes of the entry at `path` in a `tar`, read with the `tar` crate.
fn tar_entry(tar: &[u8], path: &str) -> Vec<u8> {
    let mut archive = tar::Archive::new(tar);
    for entry in archive.entries().unwrap() {
        let mut entry = entry.unwrap();
        if entry.path_bytes().as_ref() == path.as_bytes() {
            let mut bytes = Vec::new();
            std::io::Read::read_to_end(&mut entry, &mut bytes).unwrap();
            return bytes;
        }
    }
    panic!("{path} is not in the tar");
}

#[test]
fn sealing_the_pack_vector_inputs_gives_the_vector_bytes() {
    let inputs = pack_inputs();
    let computed = computed_pack_vector(&inputs);
    let vector = load("pack-v2.json", &computed);
    assert_eq!(
        vector["inputs"], inputs.raw,
        "the vector was made from these inputs"
    );

    // Layer by layer, so a difference names the layer it is in.
    let tar = inputs.payload.to_tar(inputs.mtime).unwrap();
    assert_eq!(tar, unhex_lines(&vector["tar"]), "the canonical tar");
    assert_eq!(
        inputs
            .payload
            .to_tar_zst(inputs.mtime, inputs.zstd_level)
            .unwrap(),
        unhex_lines(&vector["payload_zstd"]),
        "the compressed payload"
    );
    let sealed = seal_inputs(&inputs);
    let expected = unhex_lines(&vector["sealed"]);
    assert_eq!(
        sealed.len(),
        expected.len(),
        "the sealed length; header now {}",
        header_text(&sealed)
    );
    assert_eq!(sealed, expected, "the sealed bytes");
    assert_eq!(sha256_hex(&sealed), vector["sealed_sha256"]);
    assert_eq!(
        three_segments(&inputs).2,
        unhex_lines(&vector["three_segments"]["sealed"]),
        "the three-segment example"
    );
    assert_eq!(computed, vector, "every field of the vector");

    // Sealing is deterministic only through the explicit secrets: the normal path draws
    // fresh ones and gives other bytes.
    let random = pack_format::seal(&inputs.input(), &inputs.key_refs()).unwrap();
    assert_ne!(random, sealed);
}

/// Opens `sealed` with each of the vector's content-key files, as a reader loads them.
fn assert_opens_with_either_key(sealed: &[u8], vector: &Value, inputs: &PackInputs) {
    let key_files = vector["content_key_files"].as_array().unwrap();
    assert_eq!(key_files.len(), inputs.keys.len());
    for (text, key) in key_files.iter().zip(&inputs.keys) {
        let loaded =
            ContentKey::from_file_text(Path::new("vector.key"), text.as_str().unwrap()).unwrap();
        assert_eq!(loaded.id(), key.id());
        let opened = pack::open(sealed, &ContentKeyRing::new([loaded]), &Limits::DEFAULT).unwrap();
        assert_eq!(opened.header.name, inputs.name);
        assert_eq!(opened.header.version, inputs.version);
        assert_eq!(opened.header.schema, inputs.schema);
        assert_eq!(opened.sha256, sha256_hex(sealed));
        let mut expected = inputs.files.clone();
        expected.sort();
        let files: Vec<(String, Vec<u8>)> = opened.payload.into_files().into_iter().collect();
        assert_eq!(files, expected);
    }
}

#[test]
fn the_pack_vectors_open_to_their_files_with_either_content_key() {
    let inputs = pack_inputs();
    let vector = load("pack-v2.json", &computed_pack_vector(&inputs));
    let sealed = unhex_lines(&vector["sealed"]);
    assert_opens_with_either_key(&sealed, &vector, &inputs);
    assert_opens_with_either_key(
        &unhex_lines(&vector["three_segments"]["sealed"]),
        &vector,
        &inputs,
    );
    // Decrypting gives the vector's compressed payload, which decompresses to its tar.
    let ring = ContentKeyRing::new(inputs.keys.clone());
    let (_, compressed) = pack::decrypt(&sealed, &ring, &Limits::DEFAULT).unwrap();
    assert_eq!(compressed, unhex_lines(&vector["payload_zstd"]));
    assert_eq!(
        pack_format::decompress(&compressed, &Limits::DEFAULT).unwrap(),
        unhex_lines(&vector["tar"])
    );

    // The format-1 vector (what packers wrote before format 2) still opens, to the same
    // files and the same payload.
    let v1 = serde_json::from_str::<Value>(
        &std::fs::read_to_string(vector_path("pack-v1.json")).unwrap(),
    )
    .unwrap();
    let sealed_v1 = unhex_lines(&v1["sealed"]);
    let (header, _) = pack::read_header(&sealed_v1, &Limits::DEFAULT).unwrap();
    assert_eq!(header.format, pack::FORMAT_V1);
    assert_opens_with_either_key(&sealed_v1, &v1, &inputs);
    let (_, compressed_v1) = pack::decrypt(&sealed_v1, &ring, &Limits::DEFAULT).unwrap();
    assert_eq!(compressed_v1, unhex_lines(&v1["payload_zstd"]));
    assert_eq!(v1["tar"], vector["tar"], "both formats carry the same tar");
}

// ---- frames: where a `tar` over 8 MiB is cut ----

/// The frames vector's inputs: two payloads over 8 MiB, given by rule rather than byte by
/// byte (megabytes have no place in the repository). A file spec with a `count` stands for
/// `count` files, `{i:04}` in its path replaced by 0, 1, 2, … as four digits; every file's
/// bytes are [`file_text`].
const FRAMES_INPUTS: &str = r#"{
  "mtime": 1700000000,
  "zstd_level": 3,
  "cases": [
    {
      "name": "more than 8 MiB of file data",
      "files": [
        { "path": "files/00.md", "size": 1500000 },
        { "path": "files/01.md", "size": 700000 },
        { "path": "files/02.md", "size": 300000 },
        { "path": "files/03.md", "size": 2500000 },
        { "path": "files/04.md", "size": 1000000 },
        { "path": "files/05.md", "size": 9000000 },
        { "path": "files/06.md", "size": 3000000 },
        { "path": "files/07.md", "size": 3000000 },
        { "path": "files/08.md", "size": 2000000 },
        { "path": "files/09.md", "size": 1200000 },
        { "path": "files/10-a-name-long-enough-that-the-whole-path-does-not-fit-into-the-100-byte-name-field.md", "size": 800000 },
        { "path": "files/11.md", "size": 400000 },
        { "path": "files/12.md", "size": 150000 },
        { "path": "files/13.md", "size": 90000 },
        { "path": "files/14.md", "size": 40000 },
        { "path": "files/15.md", "size": 20000 },
        { "path": "files/16.md", "size": 5000 },
        { "path": "files/17.md", "size": 1000 },
        { "path": "files/18.md", "size": 100 },
        { "path": "files/19.md", "size": 0 }
      ]
    },
    {
      "name": "a tar over 8 MiB from less than 8 MiB of file data",
      "files": [
        { "path": "many/{i:04}.txt", "count": 4000, "size": 1537 }
      ]
    }
  ]
}"#;

/// A file's bytes in the frames vector: the lines `{path} {n}\n` for n = 0, 1, 2, …, one
/// after the other, cut to `size` bytes.
fn file_text(path: &str, size: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(size + path.len() + 24);
    let mut n = 0u64;
    while out.len() < size {
        out.extend_from_slice(format!("{path} {n}\n").as_bytes());
        n += 1;
    }
    out.truncate(size);
    out
}

/// The files of one case of [`FRAMES_INPUTS`].
fn frame_case_files(case: &Value) -> Vec<(String, Vec<u8>)> {
    let mut files = Vec::new();
    for spec in case["files"].as_array().unwrap() {
        let pattern = spec["path"].as_str().unwrap();
        let size = spec["size"].as_u64().unwrap() as usize;
        for i in 0..spec["count"].as_u64().unwrap_or(1) {
            let path = pattern.replace("{i:04}", &format!("{i:04}"));
            let bytes = file_text(&path, size);
            files.push((path, bytes));
        }
    }
    files
}

/// What one case gives: its `tar`, where the sealer cuts it (one segment per frame), and
/// the compressed and sealed bytes' SHA-256 (sealed with the secrets of `pack-v2.json`).
fn computed_frame_case(inputs: &Value, case: &Value, secrets: &PackInputs) -> Value {
    let files = frame_case_files(case);
    let file_data: u64 = files.iter().map(|(_, bytes)| bytes.len() as u64).sum();
    let payload = Payload::new(
        files
            .into_iter()
            .map(|(path, bytes)| PayloadFile { path, bytes }),
        &Limits::DEFAULT,
    )
    .unwrap();
    let mtime = inputs["mtime"].as_u64().unwrap();
    let tar = payload.to_tar(mtime).unwrap();
    let version = semver::Version::new(1, 0, 0);
    let input = SealInput {
        format: pack_format::FORMAT_VERSION,
        name: "vector",
        version: &version,
        schema: 1,
        payload: &payload,
        mtime,
        zstd_level: inputs["zstd_level"].as_i64().unwrap() as i32,
    };
    let sealed = pack::seal_with_secrets(&input, &secrets.key_refs(), secrets.secrets()).unwrap();
    let (header, _) = pack::read_header(&sealed, &Limits::DEFAULT).unwrap();
    let ring = ContentKeyRing::new(secrets.keys.clone());
    let (_, compressed) = pack::decrypt(&sealed, &ring, &Limits::DEFAULT).unwrap();

    // Each segment is one frame that decodes to its piece of the tar.
    let (mut at_tar, mut at_frame, mut frames) = (0, 0, Vec::new());
    for segment in &header.segments {
        let piece = &tar[at_tar..at_tar + segment.tar_len as usize];
        let frame = &compressed[at_frame..at_frame + segment.len as usize];
        assert_eq!(
            zstd::bulk::decompress(frame, piece.len()).unwrap(),
            piece,
            "segment {}",
            frames.len()
        );
        frames.push(json!({ "tar_len": piece.len(), "tar_sha256": sha256_hex(piece) }));
        at_tar += piece.len();
        at_frame += frame.len();
    }
    assert_eq!((at_tar, at_frame), (tar.len(), compressed.len()));
    let opened = pack::open(&sealed, &ring, &Limits::DEFAULT).unwrap();
    assert_eq!(opened.payload, payload);
    json!({
        "name": case["name"],
        "files": case["files"],
        "file_data": file_data,
        "tar_len": tar.len(),
        "tar_sha256": sha256_hex(&tar),
        "frames": frames,
        "payload_zstd_sha256": sha256_hex(&compressed),
        "sealed_sha256": sha256_hex(&sealed),
    })
}

fn computed_frames_vector() -> Value {
    let inputs: Value = serde_json::from_str(FRAMES_INPUTS).unwrap();
    let secrets = pack_inputs();
    let cases: Vec<Value> = inputs["cases"]
        .as_array()
        .unwrap()
        .iter()
        .map(|case| computed_frame_case(&inputs, case, &secrets))
        .collect();
    json!({
        "description": "Where a tar over 8 MiB is cut into zstd frames (one segment each); see \
            docs/FORMAT.md, \"Compression: zstd frames\" and \"Test vectors\". The files are \
            given by rule: a spec with a `count` stands for that many files, `{i:04}` in its \
            path replaced by 0, 1, 2, ... as four digits; a file's bytes are the lines \
            `{path} {n}\\n` for n = 0, 1, 2, ... one after the other, cut to `size` bytes. \
            `frames` is the cut: each frame's length of tar and its SHA-256. The compressed \
            and sealed SHA-256s are this implementation's (zstd 1.5.7 at `zstd_level` in \
            blocks of at most 131,071 bytes, the secrets, keys, name \"vector\", version \
            1.0.0 and schema 1 of pack-v2.json).",
        "mtime": inputs["mtime"],
        "zstd_level": inputs["zstd_level"],
        "cases": cases,
    })
}

#[test]
fn payloads_over_8_mib_are_cut_into_the_frames_of_the_vector() {
    let computed = computed_frames_vector();
    let vector = load("frames-v2.json", &computed);
    for (found, expected) in computed["cases"]
        .as_array()
        .unwrap()
        .iter()
        .zip(vector["cases"].as_array().unwrap())
    {
        assert_eq!(
            found["tar_sha256"], expected["tar_sha256"],
            "{}: the tar",
            found["name"]
        );
        assert_eq!(
            found["frames"], expected["frames"],
            "{}: the cut",
            found["name"]
        );
    }
    assert_eq!(computed, vector, "every field of the vector");

    // What the cases show (docs/FORMAT.md): the index alone first; with more than 8 MiB of
    // file data the first file frame is at most 2 MiB, with less it may take up to 8 MiB.
    const MIB: u64 = 1024 * 1024;
    let first_file_frame = |case: &Value| case["frames"][1]["tar_len"].as_u64().unwrap();
    let [over, under] = vector["cases"].as_array().unwrap().as_slice() else {
        panic!("two cases");
    };
    assert!(over["file_data"].as_u64().unwrap() > 8 * MIB);
    assert!(first_file_frame(over) <= 2 * MIB);
    assert!(under["file_data"].as_u64().unwrap() <= 8 * MIB);
    assert!(under["tar_len"].as_u64().unwrap() > 8 * MIB);
    assert!(first_file_frame(under) > 4 * MIB);
}

// ---- the channel document, its signature and rollout buckets ----

fn channel_document() -> ChannelDocument {
    serde_json::from_value(json!({
        "format": 1,
        "channel": "stable",
        "pack": "vector",
        "sequence": 42,
        "issued_at": "2026-11-29T12:00:00Z",
        "expires_at": "2026-12-29T12:00:00Z",
        "entries": [
            {
                "clients": ">=1.5.0",
                "target": { "pack": { "version": "1.0.0", "sha256": "00".repeat(32), "size": 1234, "schema": 1 } },
                "rollout": { "percent": 10, "salt": "vector@1.0.0" }
            },
            { "clients": ">=1.4.0, <1.5.0", "target": "builtin" }
        ]
    }))
    .unwrap()
}

const BUCKET_INPUTS: [(&str, &str); 4] = [
    ("vector@1.0.0", "00000000000000000000000000000000"),
    ("vector@1.0.0", "0123456789abcdef0123456789abcdef"),
    ("vector@1.0.0", "ffffffffffffffffffffffffffffffff"),
    ("another-salt", "0123456789abcdef0123456789abcdef"),
];

/// The fields of the channel vector that follow from its inputs: the canonical document
/// bytes, the trusted comment and the rollout buckets.
fn computed_channel_fields() -> Value {
    let document = channel_document();
    let buckets: Vec<Value> = BUCKET_INPUTS
        .iter()
        .map(|(salt, install_id)| {
            let mut input = salt.as_bytes().to_vec();
            input.push(0);
            input.extend_from_slice(install_id.as_bytes());
            json!({
                "salt": salt,
                "install_id": install_id,
                "sha256": sha256_hex(&input),
                "bucket": rollout_bucket(salt, install_id),
            })
        })
        .collect();
    json!({
        "description": "A channel document in canonical bytes with its minisign signature, and \
            rollout buckets; see docs/FORMAT.md, \"Test vectors\".",
        "trusted_comment": document.trusted_comment(),
        "document": String::from_utf8(document.to_bytes()).unwrap(),
        "rollout_buckets": buckets,
    })
}

/// The channel vector. Its signature cannot be recomputed (minisign signs with random
/// noise mixed into Ed25519's nonce, so every signature differs); when the vectors are
/// written, a fresh key signs the document and only its public half is kept.
fn channel_vector() -> Value {
    let mut computed = computed_channel_fields();
    if std::env::var_os("PROMPTPACK_WRITE_VECTORS").is_some_and(|v| v == "1") {
        let generated = SigningKey::generate(None).unwrap();
        let signed = channel_document().sign(&generated.key).unwrap();
        computed["signing_key_id"] = generated.key.key_id().into();
        computed["public_key_file"] = generated.public_file.into();
        computed["signature"] = signed.signature.into();
    }
    load("channel-v1.json", &computed)
}

#[test]
fn the_channel_vector_document_is_canonical_and_its_signature_verifies() {
    let vector = channel_vector();
    let computed = computed_channel_fields();
    for field in ["document", "trusted_comment", "rollout_buckets"] {
        assert_eq!(computed[field], vector[field], "{field}");
    }

    // The vector verifies with only its public key, at a time inside its validity.
    let mut trusted = TrustedKeys::new();
    let id = trusted
        .add_text(
            Path::new("signing-v1.pub"),
            vector["public_key_file"].as_str().unwrap(),
        )
        .unwrap();
    assert_eq!(id, vector["signing_key_id"]);
    let inside = OffsetDateTime::parse(
        "2026-12-01T00:00:00Z",
        &time::format_description::well_known::Rfc3339,
    )
    .unwrap();
    let document = vector["document"].as_str().unwrap().as_bytes();
    let signature = vector["signature"].as_str().unwrap();
    let verified =
        channel::verify(document, signature, &trusted, inside, &Limits::DEFAULT).unwrap();
    assert_eq!(verified.document, channel_document());
    assert!(
        signature.contains(&format!(
            "\ntrusted comment: {}\n",
            vector["trusted_comment"].as_str().unwrap()
        )),
        "{signature}"
    );
}

#[test]
fn rollout_buckets_match_the_vector() {
    let vector = channel_vector();
    let buckets = vector["rollout_buckets"].as_array().unwrap();
    assert_eq!(buckets.len(), BUCKET_INPUTS.len());
    for bucket in buckets {
        let salt = bucket["salt"].as_str().unwrap();
        let install_id = bucket["install_id"].as_str().unwrap();
        let found = rollout_bucket(salt, install_id);
        assert_eq!(u64::from(found), bucket["bucket"].as_u64().unwrap());
        // The rule in FORMAT.md, from the hash the vector gives: the first 8 bytes of the
        // digest as a big-endian integer, mod 100.
        let digest = hex::decode(bucket["sha256"].as_str().unwrap()).unwrap();
        let first = u64::from_be_bytes(digest[..8].try_into().unwrap());
        assert_eq!(first % 100, u64::from(found), "{salt} {install_id}");
    }
}
