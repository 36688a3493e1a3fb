#!/usr/bin/env bash
# The shipped `packer` against the stock pipeline, as whole processes on the same tree:
#
#   seal:  packer build TREE --zstd-level 3 ...     vs  tar --zstd -cf - | age -e, then minisign -S
#   open:  packer extract PACK ...                   vs  minisign -V, then age -d | tar --zstd -xf -
#
# `packer` does everything it does for a user: build validates every template and checks
# that the sealed pack opens before it writes it (temp file, fsync, rename); extract checks
# every file and syncs them to disk (each file and directory it wrote) before renaming the directory into place.
# The stock tools do not sync anything; to keep their deferred writeback out of the next timing,
# `sync` runs after every timed command (untimed). Every open writes a fresh directory and
# none is deleted before the end: ext4 hunts longer for free inodes right after thousands
# were deleted, which would time the file system's bookkeeping, not the commands.
#
# The tree is the library benchmark's (format/benches/tree/mod.rs: ~100 MB of markdown,
# handlebars and text in thousands of directories), plus packs/builtin for the templates
# clients require. SHAPE picks its layout (the same seed, so the same tree every run):
#   mixed          (default) ~4,800 files 1-3 levels deep, a fifth of them templates of 1-16 KB
#   small-shallow  ~8,900 files of 4-24 KB one level deep, a fifth of them templates
#   few-large      ~16 documents of 2-12 MB, no templates but the built-in ones
#   markdown       ~4,100 Markdown and text files 3-7 levels deep, one in twenty a template
#   templates      ~7,400 files, nine in ten templates of 3-32 KB (82 MB of templates)
#   corpus         ~2,000 files of prose, JSON and code of 0.1-400 KB, 1-4 levels deep, one
#                  in ten a template: the shape to judge machinery by, since nothing was
#                  tuned on it (SEED= draws another tree of it)
# Each pair runs both commands back to back, alternating which goes first; the ratio is per pair (stock wall / packer wall: above 1 means packer is faster).
# Wall time is measured to the microsecond around each command; CPU (user + system) and
# peak RSS come from /usr/bin/time; for the stock pipeline
# CPU is every process's, and peak RSS the largest single process's (getrusage of the
# children), so the pipeline's real peak is somewhat higher.
#
#   bash scripts/bench-seal-open.sh
#   PAIRS=9 MB=100 BENCH_DIR=/dev/shm bash scripts/bench-seal-open.sh
#   SHAPE=templates BENCH_DIR=/dev/shm bash scripts/bench-seal-open.sh
#   PACKER_BIN=/path/to/other/packer bash scripts/bench-seal-open.sh
#   TREE_BIN=target/release/examples/bench_tree ...   # no cargo run (no wait on its lock)
#   BUILD_FLAGS="--no-validate --no-check-open" EXTRACT_FLAGS="--no-fsync" \
#     bash scripts/bench-seal-open.sh     # the same with those steps off
#   SHAPE=corpus SEED=7 bash scripts/bench-seal-open.sh   # another tree of the same shape
#
# Targets: packer build >= 1.2x the stock seal with every step on, >= 1.5x with BUILD_FLAGS
# (validation and the check-open off); packer extract >= 1.5x the stock open (median of the
# pairs' ratios). STRICT=1 exits 1 when one is missed.
set -euo pipefail
cd "$(dirname "$0")/.."
export LC_ALL=C

PAIRS=${PAIRS:-5}
MB=${MB:-100}
SHAPE=${SHAPE:-mixed}
LEVEL=${LEVEL:-3}
SEED=${SEED:-24301}
BUILD_FLAGS=${BUILD_FLAGS:-}
EXTRACT_FLAGS=${EXTRACT_FLAGS:-}
TARGET_SEAL=1.5
[ -z "$BUILD_FLAGS" ] && TARGET_SEAL=1.2
TARGET_OPEN=1.5

say() { printf '== %s\n' "$*" >&2; }
die() {
  printf 'bench-seal-open: %s\n' "$*" >&2
  exit 1
}

# --- tools -------------------------------------------------------------------------------
missing=()
for tool in age:age age-keygen:age minisign:minisign zstd:zstd tar:tar; do
  command -v "${tool%%:*}" >/dev/null 2>&1 || missing+=("${tool#*:}")
done
[ -x /usr/bin/time ] || missing+=(time)
if [ ${#missing[@]} -gt 0 ]; then
  say "installing ${missing[*]}"
  sudo=()
  [ "$(id -u)" -eq 0 ] || sudo=(sudo)
  "${sudo[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq "${missing[@]}" >/dev/null
fi
command -v cargo >/dev/null 2>&1 || die "cargo is required"

target_dir=${CARGO_TARGET_DIR:-target}
if [ -z "${PACKER_BIN:-}" ]; then
  say "building packer (release)"
  cargo build --release -q -p packer
fi
PACKER=$(realpath "${PACKER_BIN:-$target_dir/release/packer}")

# --- work dir and inputs -----------------------------------------------------------------
parent=${BENCH_DIR:-${TMPDIR:-/tmp}}
work=$(mktemp -d "$parent/bench-seal-open.XXXXXX")
cleanup() { rm -rf "$work"; }
trap cleanup EXIT
trap 'exit 130' INT TERM

say "writing a ${MB} MB $SHAPE tree in $work"
if [ -n "${TREE_BIN:-}" ]; then
  "$TREE_BIN" "$work/tree" "$MB" "$SEED" "$SHAPE" >&2
else
  cargo run --release -q -p pack-format --example bench_tree -- "$work/tree" "$MB" "$SEED" "$SHAPE" >&2
fi
cp -R packs/builtin/. "$work/tree/"
files=$(find "$work/tree" -type f | wc -l)
dirs=$(find "$work/tree" -mindepth 1 -type d | wc -l)
bytes=$(find "$work/tree" -type f -printf '%s\n' | awk '{s += $1} END {print s}')

"$PACKER" keygen --dir "$work/keys" >/dev/null
age-keygen -o "$work/age.key" 2>/dev/null
recipient=$(age-keygen -y "$work/age.key")
minisign -G -W -f -s "$work/minisign.key" -p "$work/minisign.pub" >/dev/null

export TREE="$work/tree" KEYS="$work/keys" PACKER LEVEL RECIPIENT="$recipient"
export AGE_KEY="$work/age.key" MS_KEY="$work/minisign.key" MS_PUB="$work/minisign.pub"
export OURS="$work/ours.pack" STOCK="$work/stock.tar.zst.age" BUILD_FLAGS EXTRACT_FLAGS

# The four commands, each one `bash -c` so that /usr/bin/time sees the whole of it.
# shellcheck disable=SC2016
{
  seal_ours='rm -f "$OURS"; "$PACKER" build "$TREE" --name bench --version 1.0.0 --keys "$KEYS" --zstd-level "$LEVEL" -o "$OURS" $BUILD_FLAGS >/dev/null'
  seal_stock='set -o pipefail; tar --zstd -cf - -C "$TREE" . | age -e -r "$RECIPIENT" -o "$STOCK" && minisign -S -s "$MS_KEY" -m "$STOCK" -x "$STOCK.minisig" >/dev/null'
  open_ours='"$PACKER" extract "$OURS" --keys "$KEYS" -o "$OUT" $EXTRACT_FLAGS >/dev/null'
  open_stock='set -o pipefail; minisign -V -q -p "$MS_PUB" -m "$STOCK" -x "$STOCK.minisig" && mkdir "$OUT" && age -d -i "$AGE_KEY" "$STOCK" | tar --zstd -xf - -C "$OUT"'
}

# timed NAME SCRIPT: runs SCRIPT under /usr/bin/time, appends "wall cpu rss_kib" to NAME.
# Wall time is bash's microsecond clock around the whole of it (/usr/bin/time's own %e has
# a resolution of 10 ms, 5% of a 0.2 s open); CPU and peak memory are /usr/bin/time's.
timed() {
  local name=$1 script=$2 start end
  sync
  start=$EPOCHREALTIME
  /usr/bin/time -f '%U %S %M' -o "$work/time.out" bash -c "$script" ||
    die "$name failed: $script"
  end=$EPOCHREALTIME
  awk -v start="$start" -v end="$end" '{printf "%.3f %.2f %s\n", end - start, $1 + $2, $3}' \
    "$work/time.out" >>"$work/$name"
  sync
}

# One untimed round first: both sides' binaries and the tree in the page cache, and the
# outputs the open commands need.
say "warming up"
OUT="$work/warm-ours" timed warm "$seal_ours"
OUT="$work/warm-ours" timed warm "$seal_stock"
OUT="$work/warm-ours" timed warm "$open_ours"
OUT="$work/warm-stock" timed warm "$open_stock"
diff -r "$work/warm-ours" "$work/warm-stock" >/dev/null || die "packer extract and tar -x gave different trees"
sealed_ours=$(stat -c %s "$OURS")
sealed_stock=$(stat -c %s "$STOCK")

say "measuring $PAIRS pairs"
for pair in $(seq 1 "$PAIRS"); do
  if [ $((pair % 2)) -eq 1 ]; then
    timed seal-ours "$seal_ours"
    timed seal-stock "$seal_stock"
    OUT="$work/out-ours-$pair" timed open-ours "$open_ours"
    OUT="$work/out-stock-$pair" timed open-stock "$open_stock"
  else
    timed seal-stock "$seal_stock"
    timed seal-ours "$seal_ours"
    OUT="$work/out-stock-$pair" timed open-stock "$open_stock"
    OUT="$work/out-ours-$pair" timed open-ours "$open_ours"
  fi
done

# --- report ------------------------------------------------------------------------------
templates=$(find "$work/tree" -type f -name '*.hbs' | wc -l)
echo "tree: $SHAPE, $files files ($templates templates), $((bytes / 1000000)) MB in $dirs directories ($(df -PT "$work" | awk 'NR == 2 {print $2}') at $parent); seed $SEED, level $LEVEL"
echo "sealed: packer $((sealed_ours / 1000)) kB, stock $((sealed_stock / 1000)) kB"
echo "packer: $PACKER ${BUILD_FLAGS:+(build $BUILD_FLAGS) }${EXTRACT_FLAGS:+(extract $EXTRACT_FLAGS)}"
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
echo
missed=0
report() {
  local step=$1 target=$2
  echo "| $step pair | packer wall / CPU / peak | stock wall / CPU / peak | stock / packer |"
  echo "|---|---|---|---|"
  paste -d' ' "$work/$step-ours" "$work/$step-stock" | awk -v step="$step" '{
    printf "| %d | %.3f s / %.2f s / %d MiB | %.3f s / %.2f s / %d MiB | %.2fx |\n",
      NR, $1, $2, $3 / 1024, $4, $5, $6 / 1024, $4 / $1
  }'
  local median
  median=$(paste -d' ' "$work/$step-ours" "$work/$step-stock" | awk '{print $4 / $1}' | sort -g |
    awk '{r[NR] = $1} END {print (NR % 2) ? r[(NR + 1) / 2] : (r[NR / 2] + r[NR / 2 + 1]) / 2}')
  # Median wall and CPU of each side, column by column.
  local col side
  for side in ours stock; do
    for col in 1 2; do
      cut -d' ' -f"$col" "$work/$step-$side" | sort -g |
        awk '{r[NR] = $1} END {printf "%.3f ", (NR % 2) ? r[(NR + 1) / 2] : (r[NR / 2] + r[NR / 2 + 1]) / 2}'
    done
  done | awk -v step="$step" '{printf "\n%s medians: packer %.3f s wall, %.2f s CPU; stock %.3f s wall, %.2f s CPU\n", step, $1, $2, $3, $4}'
  local verdict="met"
  awk -v m="$median" -v t="$target" 'BEGIN {exit !(m < t)}' && verdict="MISSED" && missed=1
  printf '\n%s: median ratio %.2fx (target >= %sx: %s)\n\n' "$step" "$median" "$target" "$verdict"
}
report seal "$TARGET_SEAL"
report open "$TARGET_OPEN"
[ "${STRICT:-0}" = 1 ] && [ "$missed" = 1 ] && exit 1
exit 0
