#!/usr/bin/env bash
# The main job, the whole story on the embedded defaults (local disk, nothing external):
# start packd on a temporary directory, make demo keys, edit a template of packs/builtin,
# build, publish and release it as a new version, refresh the agent's client and show the
# edited line in the system prompt it renders; then roll back to the built-in pack, refresh
# again and show the line gone; leave packd up for a minute with the publisher console at
# /console (DEMO_CONSOLE_SECS=0: no wait); stop.
# DEMO_PROFILE=dev uses debug binaries (quicker to build, slower to run).
set -euo pipefail
cd "$(dirname "$0")/.."

profile=${DEMO_PROFILE:-release}
case "$profile" in
  release) bin=target/release ;;
  dev) bin=target/debug ;;
  *) echo "DEMO_PROFILE must be release or dev, found $profile" >&2; exit 2 ;;
esac
# Installed binaries (`cargo install --path packer` and so on) are reused when this checkout
# has not built its own: the demo then starts in seconds. DEMO_BUILD=1 always builds from
# this checkout; DEMO_BIN=DIR uses the binaries in DIR.
installed() {
  for tool in packer packd agent; do command -v "$tool" >/dev/null 2>&1 || return 1; done
}
if [ -n "${DEMO_BIN:-}" ]; then
  bin=$DEMO_BIN
  echo "== using packer, packd and agent from $bin"
elif [ "${DEMO_BUILD:-0}" != 1 ] && [ ! -x "$bin/agent" ] && installed; then
  bin=$(dirname "$(command -v packer)")
  for tool in packd agent; do
    [ "$(dirname "$(command -v "$tool")")" = "$bin" ] || { bin=""; break; }
  done
fi
if [ -z "${DEMO_BIN:-}" ] && [ -n "$bin" ] && [ "$bin" != target/release ] && [ "$bin" != target/debug ]; then
  echo "== using the installed packer, packd and agent in $bin (DEMO_BUILD=1 builds this checkout instead)"
elif [ -z "${DEMO_BIN:-}" ]; then
  [ -n "$bin" ] || bin=target/$([ "$profile" = dev ] && echo debug || echo release)
  echo "== building packer, packd and agent ($profile; several minutes the first time, seconds after)"
  cargo build --profile "$profile" -p packer -p pack-server -p agent
fi
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
line="Published at $version: answer in the voice of a ship's captain."
echo "== edit a template: mavis's tui prompt gets one line"
cp -R packs/builtin "$work/prompts"
printf '\n%s\n' "$line" >>"$work/prompts/agents/mavis/tui.hbs"
echo "+ $line"

# Published as `prompts`: `builtin` is the name of the pack compiled into the agent (version
# 0.0.0, source builtin), where the rollback below sends it.
echo "== build the edited pack as prompts $version"
"$bin/packer" build "$work/prompts" --name prompts --version "$version" --keys "$work/keys" \
  -o "$work/prompts-$version.pack"

echo "== publish and release"
"$bin/packer" publish --keys "$work/keys" "$work/prompts-$version.pack"
"$bin/packer" release stable --keys "$work/keys" --new-channel --pack prompts --pin "*=$version" --expires 30d --yes
"$bin/packer" status

echo "== refresh the agent's pack client: the outcome and what it serves now"
export AGENT_HOME="$work/agent-home"
mkdir -p "$AGENT_HOME"
cat >"$AGENT_HOME/config.toml" <<TOML
[updates]
server = "$server"
channel = "stable"
pack = "prompts"
trusted_keys = ["$work/keys/signing.pub"]
content_keys = ["$work/keys/content.key"]
TOML
"$bin/agent" packs refresh
echo "== the system prompt mavis gets this turn (the edited line; metadata on stderr)"
"$bin/agent" prompt --agent mavis --mode tui 2>"$work/prompt-metadata.txt" >"$work/prompt.txt"
grep -F -- "$line" "$work/prompt.txt"
grep '^pack ' "$work/prompt-metadata.txt"

echo "== roll back to the pack built into the agent"
"$bin/packer" release stable --keys "$work/keys" --rollback "*=builtin" --yes
"$bin/agent" packs refresh
"$bin/agent" prompt --agent mavis --mode tui 2>"$work/prompt-metadata.txt" >"$work/prompt.txt"
if grep -qF -- "$line" "$work/prompt.txt"; then
  echo "the edited line is still in the prompt after the rollback" >&2
  exit 1
fi
echo "the edited line is gone:"
grep '^pack ' "$work/prompt-metadata.txt"
echo "== the publisher console, on what the demo just did"
echo "open $server/console   (the channel: $server/console/channels/stable)"
console_secs=${DEMO_CONSOLE_SECS:-60}
if [ "$console_secs" -gt 0 ]; then
  echo "packd stays up for $console_secs s (Ctrl-C stops it now; DEMO_CONSOLE_SECS=0 skips the wait)"
  sleep "$console_secs"
fi
echo "== done; stopping packd"
