#!/usr/bin/env bash
# The main job, the whole story on the embedded defaults (local disk, nothing external):
# start packd on a temporary directory, make demo keys, build and publish packs/builtin as
# a new version, release it, refresh the agent's client, print what it serves and the
# system prompt it renders from it, stop.
set -euo pipefail
cd "$(dirname "$0")/.."

cargo build --release -q -p packer -p pack-server -p agent-runtime
bin=target/release
work=$(mktemp -d)
packd_pid=""
cleanup() {
  [ -n "$packd_pid" ] && kill "$packd_pid" 2>/dev/null && wait "$packd_pid" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT

echo "== keys (demo only) and a publisher token"
"$bin/packer" keygen --dir "$work/keys" >/dev/null
token="demo-$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')"
token_hash=$(printf '%s' "$token" | "$bin/packd" hash-token)
cat >"$work/packd.toml" <<TOML
publisher_keys = ["$work/keys/signing.pub"]

[[tokens]]
name = "demo"
sha256 = "$token_hash"
scopes = ["publish"]
TOML

echo "== packd on local disk"
"$bin/packd" serve --listen 127.0.0.1:0 --data-dir "$work/data" --config "$work/packd.toml" \
  >"$work/packd.out" 2>"$work/packd.log" &
packd_pid=$!
for _ in $(seq 1 100); do
  grep -q '^listening on ' "$work/packd.out" 2>/dev/null && break
  sleep 0.05
done
server=$(sed -n 's/^listening on //p' "$work/packd.out")
echo "packd at $server"
export PROMPTPACK_SERVER="$server" PROMPTPACK_TOKEN="$token"

version="1.0.$(date +%s)"
echo "== build packs/builtin as $version"
"$bin/packer" build packs/builtin --version "$version" --keys "$work/keys" -o "$work/builtin-$version.pack"

echo "== publish and release"
"$bin/packer" publish "$work/builtin-$version.pack"
"$bin/packer" release stable --keys "$work/keys" --pack builtin --pin "*=$version" --expires 30d --yes
"$bin/packer" status

echo "== refresh the agent's pack client"
export AGENT_HOME="$work/agent-home"
mkdir -p "$AGENT_HOME"
cat >"$AGENT_HOME/config.toml" <<TOML
[updates]
server = "$server"
channel = "stable"
pack = "builtin"
trusted_keys = ["$work/keys/signing.pub"]
content_keys = ["$work/keys/content.key"]
TOML
"$bin/agent" packs refresh
echo "== what the client serves now"
"$bin/agent" packs status
echo "== the system prompt mavis gets this turn (first lines; metadata on stderr)"
"$bin/agent" prompt --agent mavis --mode tui 2>"$work/prompt-metadata.txt" | head -n 15 || true
echo "--- prompt metadata"
head -n 20 "$work/prompt-metadata.txt"
echo "== done; stopping packd"
