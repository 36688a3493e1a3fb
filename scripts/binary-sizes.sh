#!/usr/bin/env bash
# Builds the shipped binaries with the release profile and checks that each stays under
# the size a download should have (25 MB, decimal: BENCHMARKS.md, "Release binary sizes").
#
#   bash scripts/binary-sizes.sh              # build, list, exit 1 when one is over
#   LIMIT=20000000 bash scripts/binary-sizes.sh
#
# The release profile ships no debug info and no symbol table (Cargo.toml); a binary over
# the limit after that has grown code: see which crates it links with `cargo tree -e normal
# -p PACKAGE`, and whether a feature pulled in more than it needs.
set -euo pipefail
cd "$(dirname "$0")/.."

LIMIT=${LIMIT:-25000000}
target_dir=${CARGO_TARGET_DIR:-target}

echo "== building the release binaries" >&2
cargo build --release -q -p packer -p pack-server -p pack-client -p agent --bins

over=0
printf '%-12s %14s %8s\n' binary bytes MB
for binary in packer packd pack-client agent; do
  path="$target_dir/release/$binary"
  [ -f "$path" ] || {
    echo "binary-sizes: $path was not built" >&2
    exit 1
  }
  bytes=$(stat -c %s "$path")
  mark=""
  if [ "$bytes" -gt "$LIMIT" ]; then
    mark="  over the limit of $LIMIT bytes"
    over=1
  fi
  printf '%-12s %14s %8s%s\n' "$binary" "$bytes" "$(awk -v b="$bytes" 'BEGIN {printf "%.1f", b / 1e6}')" "$mark"
done
if [ "$over" -ne 0 ]; then
  echo "binary-sizes: a shipped binary is over $LIMIT bytes; see the comment at the top of $0" >&2
  exit 1
fi
