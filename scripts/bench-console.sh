#!/usr/bin/env bash
# How fast the console's pages answer on a big deployment: a release packd on local disk
# with CHANNELS channels (default 100) of HISTORY signed documents each (default 1,000),
# 50 pack versions, and a fleet of 20 installs per channel with failure reports on every
# tenth (server/examples/console_seed.rs fills it; the last document of every channel is
# published through the API).
#
# For each page: the first answer of a freshly started packd (cold: nothing cached; the
# median and the maximum of COLD starts, default 5), then RUNS answers in a row over one
# kept-alive connection (curl's time_total: request sent to last byte read), as p50 / p90 /
# p99 / max. Target: every page under 50 ms. For the overview, also how long after its
# first answer every channel's fleet data is on it.
#
#   bash scripts/bench-console.sh
#   CHANNELS=100 HISTORY=1000 RUNS=300 COLD=5 bash scripts/bench-console.sh
#   STRICT=1 bash scripts/bench-console.sh      # exit 1 when a p99 misses the target
set -euo pipefail
cd "$(dirname "$0")/.."

CHANNELS=${CHANNELS:-100}
HISTORY=${HISTORY:-1000}
RUNS=${RUNS:-200}
COLD=${COLD:-5}
TARGET_MS=50

say() { printf '== %s\n' "$*" >&2; }
die() {
  printf 'bench-console: %s\n' "$*" >&2
  exit 1
}
for tool in curl awk sort; do
  command -v "$tool" >/dev/null 2>&1 || die "$tool is required"
done

say "building packd, packer and the seeding program (release)"
cargo build --release -q -p pack-server -p packer --bins --example console_seed
target_dir=${CARGO_TARGET_DIR:-target}
PACKD=$(realpath "$target_dir/release/packd")
PACKER=$(realpath "$target_dir/release/packer")
SEED=$(realpath "$target_dir/release/examples/console_seed")

work=$(mktemp -d "${TMPDIR:-/tmp}/bench-console.XXXXXX")
packd_pid=""
stop_packd() {
  if [ -n "$packd_pid" ]; then
    kill "$packd_pid" 2>/dev/null || true
    wait "$packd_pid" 2>/dev/null || true
    packd_pid=""
  fi
}
cleanup() {
  local status=$?
  stop_packd
  [ "$status" -ne 0 ] && [ -s "$work/packd.err" ] && tail -n 20 "$work/packd.err" >&2
  rm -rf "$work"
  return "$status"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

"$PACKER" keygen --dir "$work/keys" >/dev/null
token="bench-$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')"
cat >"$work/packd.toml" <<TOML
publisher_keys = ["$work/keys/signing.pub"]

[[tokens]]
name = "release-ci"
sha256 = "$(printf '%s' "$token" | "$PACKD" hash-token)"
scopes = ["publish"]
TOML

start_packd() {
  : >"$work/packd.out"
  "$PACKD" serve --listen 127.0.0.1:0 --data-dir "$work/data" --config "$work/packd.toml" \
    >"$work/packd.out" 2>"$work/packd.err" &
  packd_pid=$!
  for _ in $(seq 1 200); do
    grep -q '^listening on ' "$work/packd.out" 2>/dev/null && break
    sleep 0.05
  done
  server=$(sed -n 's/^listening on //p' "$work/packd.out")
  [ -n "$server" ] || die "packd did not start"
}

start_packd
say "seeding $CHANNELS channels × $HISTORY documents at $server"
"$SEED" --server "$server" --data-dir "$work/data" --keys "$work/keys" --token "$token" \
  --channels "$CHANNELS" --history "$HISTORY"
# Let the node write its fleet counts, so a restarted packd reads them from storage.
sleep 11

middle=$(printf 'ch-%03d' $((CHANNELS / 2)))
half=$((HISTORY / 2))
pages=(
  "/console"
  "/console/channels/$middle"
  "/console/channels/$middle/history"
  "/console/channels/$middle/history?before=$half"
  "/console/channels/$middle/history/$half"
  "/console/packs"
)

# p50 p90 p99 max, in milliseconds, of the seconds on stdin (one a line).
percentiles() {
  sort -n | awk '{ v[NR] = $1 * 1000 }
    END { n = NR; if (n == 0) exit 1
      i50 = int(n * 0.50 + 0.5); i90 = int(n * 0.90 + 0.5); i99 = int(n * 0.99 + 0.5)
      if (i50 < 1) i50 = 1; if (i90 < 1) i90 = 1; if (i99 < 1) i99 = 1
      printf "%.1f %.1f %.1f %.1f\n", v[i50], v[i90], v[i99], v[n] }'
}

printf '\n%-52s %8s %9s %9s %8s %8s %8s %8s\n' "page ($CHANNELS channels × $HISTORY documents)" "KiB" "cold p50" "cold max" "p50 ms" "p90 ms" "p99 ms" "max ms"
missed=0
completes=()
for page in "${pages[@]}"; do
  # Cold: the first answer of a fresh process, nothing in its caches; COLD starts each.
  colds=()
  for _ in $(seq 1 "$COLD"); do
    stop_packd
    start_packd
    url="$server$page"
    read -r status first bytes < <(curl -s -o /dev/null -w '%{http_code} %{time_total} %{size_download}\n' "$url")
    [ "$status" = 200 ] || die "$page answered $status"
    colds+=("$first")
    if [ "$page" = /console ]; then
      # A packd that just started answers the overview before it has read every channel's
      # fleet files, saying which are still being read: how long until a reload shows all.
      started=$(date +%s%N)
      while [[ $(curl -s "$url") == *'still being read'* ]]; do sleep 0.01; done
      completes+=("$(awk "BEGIN { print ($(date +%s%N) - $started) / 1e9 }")")
    fi
  done
  read -r cold _ _ cold_max < <(printf '%s\n' "${colds[@]}" | percentiles)
  # Warm: RUNS requests over one connection.
  urls=()
  for _ in $(seq 1 "$RUNS"); do urls+=(-o /dev/null "$url"); done
  read -r p50 p90 p99 max < <(curl -s -w '%{time_total}\n' "${urls[@]}" | percentiles)
  printf '%-52s %8.1f %9s %9s %8s %8s %8s %8s\n' "$page" "$(awk "BEGIN { print $bytes / 1024 }")" \
    "$cold" "$cold_max" "$p50" "$p90" "$p99" "$max"
  if awk "BEGIN { exit !($p99 >= $TARGET_MS || $cold >= $TARGET_MS) }"; then missed=1; fi
done
echo
read -r complete_p50 _ _ complete_max < <(printf '%s\n' "${completes[@]}" | percentiles)
echo "after a start, the overview showed every channel's fleet data $complete_p50 ms after its first answer (p50 of $COLD starts; max $complete_max ms)"
if [ "$missed" -eq 0 ]; then
  echo "every page under $TARGET_MS ms (cold median and p99)"
else
  echo "some page took $TARGET_MS ms or more"
  [ "${STRICT:-0}" = 1 ] && exit 1
fi
exit 0
