"""Fixtures for the Python package's tests: a real packd on loopback, a publisher with real
keys, and packs sealed by the real packer. The binaries come from PROMPTPACK_BIN_DIR (the
test script sets it to the workspace's target/debug); without them every test here is
skipped, saying so, and under CI=true they fail instead."""

import hashlib
import json
import os
import secrets
import shutil
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
BUILTIN = REPO / "packs" / "builtin"


def _bin_dir():
    return Path(os.environ.get("PROMPTPACK_BIN_DIR", REPO / "target" / "debug"))


def binary(name):
    path = _bin_dir() / name
    if not path.is_file():
        why = f"{path} not built (cargo build -p pack-server -p packer -p pack-client)"
        if os.environ.get("CI") == "true":
            pytest.fail(why)
        print(f"SKIPPED: {why}", file=sys.stderr)
        pytest.skip(why)
    return str(path)


def run(*args, **kwargs):
    done = subprocess.run(args, capture_output=True, text=True, **kwargs)
    if done.returncode != 0:
        raise AssertionError(f"{args[:2]} exited {done.returncode}: {done.stderr}")
    return done.stdout


def copy_with_marker(dst, marker, extra=""):
    """packs/builtin copied to `dst` with `marker` (and `extra`) appended to every template."""
    shutil.copytree(BUILTIN, dst)
    for path in Path(dst).rglob("*.hbs"):
        path.write_text(path.read_text() + f"\n{marker}{extra}\n")
    return Path(dst)


class Publisher:
    def __init__(self, root):
        self.root = Path(root)
        self.keys = self.root / "keys"
        run(binary("packer"), "keygen", "--dir", str(self.keys))
        self.token = "test-token-" + secrets.token_hex(8)
        self.sequence = 0

    def server_config(self):
        path = self.root / "packd.toml"
        digest = hashlib.sha256(self.token.encode()).hexdigest()
        path.write_text(
            f'publisher_keys = ["{self.keys / "signing.pub"}"]\n\n'
            f'[[tokens]]\nname = "tests"\nsha256 = "{digest}"\nscopes = ["publish"]\n'
        )
        return path

    def client_config(self, server, extra=""):
        path = self.root / f"client-{secrets.token_hex(4)}.toml"
        path.write_text(
            "[updates]\n"
            f'server = "{server}"\nchannel = "stable"\npack = "builtin"\n'
            f'trusted_keys = ["{self.keys / "signing.pub"}"]\n'
            f'content_keys = ["{self.keys / "content.key"}"]\n'
            f"attempts = 1\n{extra}"
        )
        return path

    def build(self, version, marker, extra=""):
        src = copy_with_marker(self.root / f"src-{version}", marker, extra)
        out = self.root / f"builtin-{version}.pack"
        run(binary("packer"), "build", str(src), "--name", "builtin", "--version", version,
            "--keys", str(self.keys), "-o", str(out))
        return out

    def sign(self, entries, expires="30d"):
        self.sequence += 1
        out = self.root / f"channel-{self.sequence}.json"
        args = [binary("packer"), "channel", "--keys", str(self.keys), "--channel", "stable",
                "--pack", "builtin", "--sequence", str(self.sequence), "--expires", expires]
        for entry in entries:
            args += ["--entry", entry]
        run(*args, "-o", str(out))
        return out.read_text(), Path(str(out) + ".minisig").read_text()


class Packd:
    def __init__(self, data_dir, publisher):
        self.publisher = publisher
        self.process = subprocess.Popen(
            [binary("packd"), "serve", "--listen", "127.0.0.1:0", "--data-dir", str(data_dir),
             "--config", str(publisher.server_config())],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        for line in self.process.stdout:
            if line.startswith("listening on "):
                self.url = line[len("listening on "):].strip()
                break
        else:
            raise AssertionError("packd exited before listening")

    def _request(self, method, path, body, content_type):
        request = urllib.request.Request(
            self.url + path, data=body, method=method,
            headers={"Authorization": f"Bearer {self.publisher.token}",
                     "Content-Type": content_type})
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.read()

    def upload(self, pack):
        data = Path(pack).read_bytes()
        sha = hashlib.sha256(data).hexdigest()
        self._request("PUT", f"/v1/blobs/{sha}", data, "application/octet-stream")
        return sha

    def release(self, entries):
        """Uploads each entry's pack, then signs and publishes the channel document."""
        for entry in entries:
            self.upload(entry.rsplit("=", 1)[1])
        document, signature = self.publisher.sign(entries)
        body = json.dumps({"document": document, "signature": signature}).encode()
        self._request("PUT", "/v1/channels/stable", body, "application/json")

    def get_json(self, path):
        return json.loads(self._request("GET", path, None, "application/json"))

    def stop(self):
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()


@pytest.fixture
def publisher(tmp_path):
    return Publisher(tmp_path / "publisher")


@pytest.fixture
def packd(tmp_path, publisher):
    server = Packd(tmp_path / "packd-data", publisher)
    yield server
    server.stop()


@pytest.fixture
def bundled(tmp_path):
    """The prompts an app bundles: packs/builtin with a marker in every template."""
    return copy_with_marker(tmp_path / "bundled", "BUNDLED-PROMPTS")
