#!/usr/bin/env python3
"""A second implementation of the format, written from docs/FORMAT.md alone, checked
against the test vectors in this directory.

It rebuilds the canonical `tar` and index from the vector's files, rebuilds the header and
seals the vector's compressed payload with the vector's fixed secrets (format 1, format 2
as one segment and as three), opens the vector's sealed bytes, cuts the frames
vector's payloads over 8 MiB into frames, verifies the channel vector's minisign signature
and recomputes its rollout buckets, using only Python's standard library, the `cryptography` package (AES-256-GCM,
Ed25519) and the stock `zstd` tool. Any difference is printed and the exit status is 1.

    python3 format/tests/vectors/check_vectors.py [VECTOR_DIR]
"""

import base64
import hashlib
import json
import struct
import subprocess
import sys
from pathlib import Path

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

FAILURES = []


def check(what, found, expected):
    if found != expected:
        FAILURES.append(what)
        print(f"MISMATCH {what}:\n  found    {found!r:.300}\n  expected {expected!r:.300}")


def unhex_lines(lines):
    return bytes.fromhex("".join(lines))


def b64(text, length):
    raw = base64.b64decode(text, validate=True)
    assert base64.b64encode(raw).decode() == text, f"non-canonical base64 {text!r}"
    assert len(raw) == length, f"{text!r}: expected {length} bytes, found {len(raw)}"
    return raw


# ---- tar, as FORMAT.md "The tar (canonical bytes)" describes it ----

def octal(value, size):
    """ASCII octal, zero-padded on the left, ending in one NUL."""
    digits = format(value, "o").rjust(size - 1, "0")
    assert len(digits) == size - 1, f"{value} does not fit {size} bytes"
    return digits.encode() + b"\0"


def tar_header(name, size, mtime, typeflag):
    block = bytearray(512)
    block[0 : len(name)] = name  # NUL-padded; a 100-byte name has no NUL
    block[100:108] = octal(0o644, 8)
    block[108:116] = octal(0, 8)
    block[116:124] = octal(0, 8)
    block[124:136] = octal(size, 12)
    block[136:148] = octal(mtime, 12)
    block[156:157] = typeflag
    block[257:263] = b"ustar "
    block[263:265] = b" \0"
    block[148:156] = b" " * 8
    block[148:156] = octal(sum(block), 8)
    return bytes(block)


def padded(data):
    return data + b"\0" * (-len(data) % 512)


def tar_entry(path, data, mtime):
    name = path.encode()
    out = b""
    if len(name) > 100:
        out += tar_header(b"././@LongLink", len(name) + 1, 0, b"L")
        out += padded(name + b"\0")
        cut = name[:100]
        while True:  # back to a UTF-8 character boundary
            try:
                cut.decode()
                break
            except UnicodeDecodeError:
                cut = cut[:-1]
        name = cut
    return out + tar_header(name, len(data), mtime, b"0") + padded(data)


def index_json(files):
    index = {
        "format": 1,
        "files": [
            {"path": p, "size": len(d), "sha256": hashlib.sha256(d).hexdigest()}
            for p, d in files
        ],
    }
    return json.dumps(index, indent=2, ensure_ascii=False).encode()


def canonical_tar(files, mtime):
    files = sorted(files, key=lambda f: f[0].encode())
    out = [tar_entry("PACK-INDEX.json", index_json(files), mtime)]
    out += [tar_entry(path, data, mtime) for path, data in files]
    return b"".join(out) + b"\0" * 1024


# ---- frames, as FORMAT.md "Compression: zstd frames" describes the cut ----

MIB = 1024 * 1024
FRAME_LEN = 8 * MIB


def entry_len(path, size):
    """An entry's bytes in the tar: a long-name entry if any, the header, the padded data."""
    name = path.encode()
    long_name = 512 + len(padded(name + b"\0")) if len(name) > 100 else 0
    return long_name + 512 + size + (-size % 512)


def frame_limit(k, remaining):
    """The limit of file frame k (from 0) after the first, `remaining` bytes of file data
    not in frames 0..k-1."""
    ramp = 4 * MIB if k == 1 else FRAME_LEN
    return min(ramp, max(remaining // 2, 2 * MIB))


def frame_cuts(files, mtime):
    """The length of tar in each frame of the payload of `files`."""
    files = sorted(files, key=lambda f: f[0].encode())
    index = len(tar_entry("PACK-INDEX.json", index_json(files), mtime))
    entries = [entry_len(path, len(data)) for path, data in files]
    if index + sum(entries) + 1024 <= FRAME_LEN:
        return [index + sum(entries) + 1024]
    data = sum(len(d) for _, d in files)
    limit = FRAME_LEN if data <= FRAME_LEN else 2 * MIB
    frames, length, sent = [], 0, 0
    for (_, d), entry in zip(files, entries):
        if length > 0 and length + entry > limit:
            frames.append(length)
            length = 0
            limit = frame_limit(len(frames), data - sent)
        length += entry
        sent += len(d)
    frames.append(length + 1024)
    return [index] + frames


# ---- the sealed pack ----

SLOT_AAD = b"promptpack key slot v1:"
MAGIC = b"PROMPTPK"


def key_slots(inputs):
    data_key = bytes.fromhex(inputs["data_key"])
    slots = []
    for key, nonce in zip(inputs["content_keys"], inputs["slot_nonces"]):
        aad = SLOT_AAD + key["id"].encode()
        wrapped = AESGCM(bytes.fromhex(key["key"])).encrypt(bytes.fromhex(nonce), data_key, aad)
        slots.append(
            {
                "key_id": key["id"],
                "nonce": base64.b64encode(bytes.fromhex(nonce)).decode(),
                "wrapped_key": base64.b64encode(wrapped).decode(),
            }
        )
    return slots


def header_bytes(inputs, **fields):
    header = {
        "format": fields.pop("format"),
        "name": inputs["name"],
        "version": inputs["version"],
        "schema": inputs["schema"],
        "key_slots": key_slots(inputs),
    }
    header.update(fields)
    text = json.dumps(header, separators=(",", ":"), ensure_ascii=False).encode()
    return MAGIC + struct.pack("<I", len(text)) + text


def seal_v1(inputs, compressed):
    """Format 1: one encryption of the whole payload."""
    nonce = bytes.fromhex(inputs["payload_nonce"])
    prefix = header_bytes(
        inputs,
        format=1,
        nonce=base64.b64encode(nonce).decode(),
        plaintext_len=len(compressed),
    )
    data_key = bytes.fromhex(inputs["data_key"])
    return prefix + AESGCM(data_key).encrypt(nonce, compressed, prefix), prefix[12:]


def segment_nonce(nonce_prefix, number, last):
    return nonce_prefix + struct.pack(">I", number) + (b"\1" if last else b"\0")


def seal_v2(inputs, frames):
    """Format 2: `frames` is a list of (compressed bytes, length of tar they decode to), one
    segment each."""
    nonce_prefix = bytes.fromhex(inputs["nonce_prefix"])
    prefix = header_bytes(
        inputs,
        format=2,
        nonce=base64.b64encode(nonce_prefix).decode(),
        plaintext_len=sum(len(f) for f, _ in frames),
        segments=[{"len": len(f), "tar_len": t} for f, t in frames],
    )
    aead = AESGCM(bytes.fromhex(inputs["data_key"]))
    out = prefix
    for number, (frame, _) in enumerate(frames):
        nonce = segment_nonce(nonce_prefix, number, number == len(frames) - 1)
        out += aead.encrypt(nonce, frame, prefix)  # ciphertext ‖ 16-byte tag
    return out, prefix[12:]


def zstd_decompress(data):
    return subprocess.run(
        ["zstd", "-d", "-c", "-q"], input=data, capture_output=True, check=True
    ).stdout


def open_pack(sealed, key_id, key):
    """The compressed payload, one piece per segment (format 1: one piece), each checked to
    decode to the length the header gives."""
    assert sealed[:8] == MAGIC
    (j,) = struct.unpack("<I", sealed[8:12])
    header = json.loads(sealed[12 : 12 + j])
    aad = sealed[: 12 + j]
    slot = next(s for s in header["key_slots"] if s["key_id"] == key_id)
    data_key = AESGCM(key).decrypt(
        b64(slot["nonce"], 12), b64(slot["wrapped_key"], 48), SLOT_AAD + key_id.encode()
    )
    aead = AESGCM(data_key)
    if header["format"] == 1:
        assert "segments" not in header
        assert len(sealed) == 12 + j + header["plaintext_len"] + 16
        return [aead.decrypt(b64(header["nonce"], 12), sealed[12 + j :], aad)]
    assert header["format"] in (2, 3)
    segments = header["segments"]
    assert 1 <= len(segments) <= 4096
    assert sum(s["len"] for s in segments) == header["plaintext_len"]
    assert len(sealed) == 12 + j + header["plaintext_len"] + 16 * len(segments)
    nonce_prefix = b64(header["nonce"], 7)
    pieces, at = [], 12 + j
    for number, segment in enumerate(segments):
        end = at + segment["len"] + 16
        nonce = segment_nonce(nonce_prefix, number, number == len(segments) - 1)
        piece = aead.decrypt(nonce, sealed[at:end], aad)
        assert len(zstd_decompress(piece)) == segment["tar_len"]
        pieces.append(piece)
        at = end
    return pieces


def check_tar(vector):
    inputs = vector["inputs"]
    files = [(f["path"], f["text"].encode()) for f in inputs["files"]]
    tar = canonical_tar(files, inputs["mtime"])
    check("tar", tar, unhex_lines(vector["tar"]))
    check("index_json", index_json(sorted(files, key=lambda f: f[0].encode())).decode(), vector["index_json"])
    compressed = unhex_lines(vector["payload_zstd"])
    check("zstd -d payload_zstd", zstd_decompress(compressed), tar)
    return tar, compressed


def check_opens(vector, sealed, expected_pieces, what):
    inputs = vector["inputs"]
    for key, text in zip(inputs["content_keys"], vector["content_key_files"]):
        file = json.loads(text)
        check("content key file fields", sorted(file), ["id", "key", "kind"])
        check("content key kind", file["kind"], "promptpack-content-key")
        check("content key id", file["id"], key["id"])
        raw = b64(file["key"], 32)
        check("content key bytes", raw.hex(), key["key"])
        opened = open_pack(sealed, file["id"], raw)
        check(f"{what} opened with {file['id']}", opened, expected_pieces)


def check_pack_v1(vector):
    _, compressed = check_tar(vector)
    sealed, header = seal_v1(vector["inputs"], compressed)
    check("v1 header_json", header.decode(), vector["header_json"])
    check("v1 sealed", sealed, unhex_lines(vector["sealed"]))
    check("v1 sealed_sha256", hashlib.sha256(sealed).hexdigest(), vector["sealed_sha256"])
    check_opens(vector, unhex_lines(vector["sealed"]), [compressed], "v1 payload")


def check_pack_v2(vector):
    tar, compressed = check_tar(vector)
    inputs = vector["inputs"]
    # A tar of at most 8 MiB is one frame, and one segment.
    sealed, header = seal_v2(inputs, [(compressed, len(tar))])
    check("v2 header_json", header.decode(), vector["header_json"])
    check("v2 segments", json.loads(header)["segments"], vector["segments"])
    check("v2 sealed", sealed, unhex_lines(vector["sealed"]))
    check("v2 sealed_sha256", hashlib.sha256(sealed).hexdigest(), vector["sealed_sha256"])
    check_opens(vector, unhex_lines(vector["sealed"]), [compressed], "v2 payload")

    example = vector["three_segments"]
    frames = [unhex_lines(f) for f in example["frames"]]
    pieces = [zstd_decompress(f) for f in frames]
    a, b = example["cuts"]
    check("three segments: the pieces", pieces, [tar[:a], tar[a:b], tar[b:]])
    sealed, header = seal_v2(inputs, [(f, len(p)) for f, p in zip(frames, pieces)])
    check("three segments: header_json", header.decode(), example["header_json"])
    check("three segments: sealed", sealed, unhex_lines(example["sealed"]))
    check("three segments: sealed_sha256", hashlib.sha256(sealed).hexdigest(), example["sealed_sha256"])
    check_opens(vector, unhex_lines(example["sealed"]), frames, "three segments")


def file_text(path, size):
    """A file of the frames vector: the lines `{path} {n}\\n` for n = 0, 1, 2, ... cut to
    `size` bytes."""
    lines, length, n = [], 0, 0
    while length < size:
        line = f"{path} {n}\n".encode()
        lines.append(line)
        length += len(line)
        n += 1
    return b"".join(lines)[:size]


def frame_case_files(case):
    files = []
    for spec in case["files"]:
        for i in range(spec.get("count", 1)):
            path = spec["path"].replace("{i:04}", f"{i:04}")
            files.append((path, file_text(path, spec["size"])))
    return files


def check_frames(vector):
    """The tar and where it is cut; the compressed bytes depend on the encoder, so only the
    frames' tar is checked, not the vector's compressed or sealed SHA-256."""
    for case in vector["cases"]:
        name = case["name"]
        files = frame_case_files(case)
        check(f"{name}: file data", sum(len(d) for _, d in files), case["file_data"])
        tar = canonical_tar(files, vector["mtime"])
        check(f"{name}: tar_len", len(tar), case["tar_len"])
        check(f"{name}: tar_sha256", hashlib.sha256(tar).hexdigest(), case["tar_sha256"])
        cuts = frame_cuts(files, vector["mtime"])
        check(f"{name}: frame lengths", cuts, [f["tar_len"] for f in case["frames"]])
        at, hashes = 0, []
        for length in cuts:
            hashes.append(hashlib.sha256(tar[at : at + length]).hexdigest())
            at += length
        check(f"{name}: frame SHA-256s", hashes, [f["tar_sha256"] for f in case["frames"]])


# ---- the channel document ----

def check_channel(vector):
    document = vector["document"].encode()
    doc = json.loads(document)
    check(
        "canonical document bytes",
        (json.dumps(doc, indent=2, ensure_ascii=False) + "\n").encode(),
        document,
    )
    comment = (
        f"promptpack channel={doc['channel']} pack={doc['pack']} "
        f"sequence={doc['sequence']} expires_at={doc['expires_at']}"
    )
    check("trusted comment", comment, vector["trusted_comment"])
    check("sequence within 2^53 - 1", doc["sequence"] <= 2**53 - 1, True)

    lines = vector["signature"].split("\n")
    check("signature lines", (len(lines), lines[4:]), (5, [""]))
    check("untrusted comment prefix", lines[0].startswith("untrusted comment: "), True)
    check("trusted comment line", lines[2], "trusted comment: " + comment)
    sig = b64(lines[1], 74)
    global_sig = b64(lines[3], 64)
    check("algorithm", sig[:2], b"ED")
    public = vector["public_key_file"].split("\n")[1]
    pk = b64(public, 42)
    check("public key algorithm", pk[:2], b"Ed")
    check("key id in the signature", sig[2:10], pk[2:10])
    check(
        "key id as minisign prints it",
        format(int.from_bytes(sig[2:10], "little"), "016X"),
        vector["signing_key_id"],
    )
    key = Ed25519PublicKey.from_public_bytes(pk[10:])
    key.verify(sig[10:], hashlib.blake2b(document, digest_size=64).digest())
    key.verify(global_sig, sig[10:] + comment.encode())

    for bucket in vector["rollout_buckets"]:
        digest = hashlib.sha256(
            bucket["salt"].encode() + b"\0" + bucket["install_id"].encode()
        ).digest()
        check(f"rollout sha256 {bucket}", digest.hex(), bucket["sha256"])
        check(f"rollout bucket {bucket}", int.from_bytes(digest[:8], "big") % 100, bucket["bucket"])


def main():
    here = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).parent
    check_pack_v1(json.loads((here / "pack-v1.json").read_text()))
    check_pack_v2(json.loads((here / "pack-v2.json").read_text()))
    check_frames(json.loads((here / "frames-v2.json").read_text()))
    check_channel(json.loads((here / "channel-v1.json").read_text()))
    if FAILURES:
        print(f"{len(FAILURES)} mismatch(es): {', '.join(FAILURES)}")
        return 1
    print("ok: the vectors match an implementation written from docs/FORMAT.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
