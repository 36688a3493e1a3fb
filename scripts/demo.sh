#!/usr/bin/env bash
# The main job, on the embedded defaults and nothing external: build the packer, seal
# packs/builtin with the demo keys, verify and inspect the pack, then write and sign a
# channel document that pins it for every client release.
set -euo pipefail
cd "$(dirname "$0")/.."

out=target/demo
mkdir -p "$out"
cargo build --release -q -p packer
packer=target/release/packer

echo "== build packs/builtin"
SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-0} "$packer" build packs/builtin --version 0.1.0 \
  --keys packs/dev-keys -o "$out/builtin-0.1.0.pack"

echo "== verify"
"$packer" verify "$out/builtin-0.1.0.pack" --keys packs/dev-keys

echo "== inspect"
"$packer" inspect "$out/builtin-0.1.0.pack" --keys packs/dev-keys

echo "== channel document"
"$packer" channel --keys packs/dev-keys --channel stable --pack builtin --sequence 1 \
  --expires 30d --entry "*=$out/builtin-0.1.0.pack" -o "$out/channel.json"
cat "$out/channel.json"
if command -v minisign >/dev/null 2>&1; then
  echo "== stock minisign agrees"
  minisign -V -H -p packs/dev-keys/signing.pub -m "$out/channel.json"
fi
