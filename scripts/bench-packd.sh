#!/usr/bin/env bash
# packd against nginx, with wrk on loopback:
#   (a) 304 revalidations of a channel document (If-None-Match with the current ETag),
#   (b) full GETs of a ~1 MB sealed pack.
# nginx serves the same bytes from files on the same machine. Prints req/s and server CPU per
# request for both, and packd/nginx against the targets: on 304s >= 0.9x nginx's rate, on
# blobs >= 1.2x, and at most nginx's CPU per request on both. For 304s also each server's
# user and system CPU apart and wrk's own CPU per request, and from them the most CPU per 304
# packd may spend for the rate target (wrk and the server share the cores).
#
# Everything lives in a temp dir: keys, a generated ~1 MB pack, a fresh packd data dir and a
# non-daemon nginx with its own prefix. Both servers are stopped on exit.
#
#   bash scripts/bench-packd.sh
#   DURATION=30s RUNS=5 CONNECTIONS=128 bash scripts/bench-packd.sh
#   PACKD_BIN=/path/to/older/packd bash scripts/bench-packd.sh
#   SKIP_BUILD=1 PACKD_BIN=/tmp/packd-a PACKER_BIN=/tmp/packer bash scripts/bench-packd.sh
#   NGINX_SENDFILE=off bash scripts/bench-packd.sh   # nginx copying from its buffers instead
#   NGINX_PINNED=on bash scripts/bench-packd.sh      # nginx's workers pinned
#                                                    # (worker_cpu_affinity auto, reuseport)
#   FLOOR=1 bash scripts/bench-packd.sh              # also hyper alone (the bare_304 example),
#                                                    # and whether it meets the 304 rate target
#   CLIENT_HEADERS=1 bash scripts/bench-packd.sh     # 304s with the headers a client sends
#   CLIENT_HEADERS=1 FLEET=off bash scripts/bench-packd.sh   # packd without its fleet view
#
# Each of RUNS rounds (default 3) measures packd and nginx back to back, alternating which
# goes first; reported are the medians of req/s and of each round's ratio, and of each
# server's CPU time per request. wrk and the servers share the machine's cores, so the
# numbers are a comparison, not a capacity figure.
# STRICT=1 exits 1 when a target is missed.
set -euo pipefail
cd "$(dirname "$0")/.."

THREADS=${THREADS:-2}
CONNECTIONS=${CONNECTIONS:-64}
DURATION=${DURATION:-10s}
WARMUP=${WARMUP:-2s}
RUNS=${RUNS:-3}
NGINX_SENDFILE=${NGINX_SENDFILE:-on}
NGINX_PINNED=${NGINX_PINNED:-off}
TARGET_304=0.9
TARGET_BLOB=1.2

say() { printf '== %s\n' "$*" >&2; }
die() {
  printf 'bench-packd: %s\n' "$*" >&2
  exit 1
}

# --- tools -------------------------------------------------------------------------------
missing=()
command -v wrk >/dev/null 2>&1 || missing+=(wrk)
command -v nginx >/dev/null 2>&1 || [ -x /usr/sbin/nginx ] || missing+=(nginx-light)
[ -x /usr/bin/time ] || missing+=(time)
if [ ${#missing[@]} -gt 0 ]; then
  say "installing ${missing[*]}"
  sudo=()
  [ "$(id -u)" -eq 0 ] || sudo=(sudo)
  "${sudo[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq "${missing[@]}" >/dev/null
fi
NGINX=$(command -v nginx || echo /usr/sbin/nginx)
for tool in curl jq cargo; do
  command -v "$tool" >/dev/null 2>&1 || die "$tool is required"
done

# SKIP_BUILD=1: take the release binaries already built (while other work changes the tree).
if [ "${SKIP_BUILD:-0}" != 1 ]; then
  say "building packd and packer (release)"
  cargo build --release -q -p pack-server -p packer
  [ "${FLOOR:-0}" != 0 ] && cargo build --release -q -p pack-server --example bare_304
fi
target_dir=${CARGO_TARGET_DIR:-target}
# PACKD_BIN: measure another packd binary (say, one built from an older commit). PACKER_BIN:
# another packer (it only builds and publishes the pack; a debug build does).
PACKD=$(realpath "${PACKD_BIN:-$target_dir/release/packd}")
PACKER=$(realpath "${PACKER_BIN:-$target_dir/release/packer}")

# --- temp dir and cleanup ----------------------------------------------------------------
work=$(mktemp -d "${TMPDIR:-/tmp}/bench-packd.XXXXXX")
packd_pid=""
nginx_pid=""
floor_pid=""
cleanup() {
  local status=$?
  [ -n "$packd_pid" ] && kill "$packd_pid" 2>/dev/null && wait "$packd_pid" 2>/dev/null
  # bare_304 dies of the signal (status 143), which must not end this trap early.
  [ -n "$floor_pid" ] && kill "$floor_pid" 2>/dev/null && { wait "$floor_pid" 2>/dev/null || true; }
  [ -n "$nginx_pid" ] && kill -QUIT "$nginx_pid" 2>/dev/null && wait "$nginx_pid" 2>/dev/null
  if [ "$status" -ne 0 ]; then
    for log in "$work/packd.err" "$work/nginx/error.log"; do
      [ -s "$log" ] && { echo "--- $log" >&2; tail -n 20 "$log" >&2; }
    done
  fi
  rm -rf "$work"
  return "$status"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# A loopback port nobody listens on (for nginx; packd picks its own with port 0).
free_port() {
  local port
  for _ in $(seq 1 100); do
    port=$((20000 + RANDOM % 40000))
    if ! (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
      echo "$port"
      return
    fi
  done
  die "no free loopback port found"
}

# --- keys, a ~1 MB pack, a token -----------------------------------------------------------
say "keys and a ~1 MB sealed pack"
"$PACKER" keygen --dir "$work/keys" </dev/null >/dev/null
mkdir -p "$work/tree"
# The built-in templates (a pack must hold every template clients require) plus base64 of
# random bytes: text, but close to incompressible (zstd gets ~6 bits per char), so the
# sealed pack comes out near 1 MB.
cp -r packs/builtin "$work/tree/bench"
head -c 1000000 /dev/urandom | base64 -w 100 >"$work/tree/bench/notes.md"
"$PACKER" build "$work/tree/bench" --version 1.0.0 --keys "$work/keys" \
  -o "$work/bench.pack" >"$work/build.log" 2>&1 || die "packer build failed: $(cat "$work/build.log")"
blob_size=$(stat -c %s "$work/bench.pack")
blob_sha=$(sha256sum "$work/bench.pack" | cut -d' ' -f1)

token="ppt_bench_$(head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n')"
token_sha=$(printf '%s' "$token" | "$PACKD" hash-token)
cat >"$work/packd.toml" <<EOF
publisher_keys = ["keys/signing.pub"]

[[tokens]]
name = "bench"
sha256 = "$token_sha"
scopes = ["publish"]
EOF
# FLEET=off: packd without its fleet view, which counts every request naming an install.
if [ "${FLEET:-on}" = off ]; then
  printf '\n[fleet]\nenabled = false\n' >>"$work/packd.toml"
fi

# The URL a server started as process $1 (named $2) prints to $3 as "listening on URL",
# waiting up to 10 s; dies with its stderr ($4) if it exits first.
listening_url() {
  local pid=$1 name=$2 out=$3 err=$4
  for _ in $(seq 1 100); do
    grep -q '^listening on ' "$out" 2>/dev/null && break
    kill -0 "$pid" 2>/dev/null || die "$name exited: $(cat "$err")"
    sleep 0.1
  done
  sed -n 's/^listening on //p' "$out" | head -n 1
}

# --- packd -------------------------------------------------------------------------------
say "starting packd"
"$PACKD" serve --listen 127.0.0.1:0 --data-dir "$work/data" --config "$work/packd.toml" \
  >"$work/packd.out" 2>"$work/packd.err" &
packd_pid=$!
packd_url=$(listening_url "$packd_pid" packd "$work/packd.out" "$work/packd.err")
[ -n "$packd_url" ] || die "packd did not print its address"

say "publishing the pack and a channel document to $packd_url"
PROMPTPACK_TOKEN=$token "$PACKER" publish "$work/bench.pack" --server "$packd_url" >/dev/null 2>&1 \
  || die "packer publish failed"
"$PACKER" channel --keys "$work/keys" --channel stable --pack bench --sequence 1 \
  --expires 30d --entry "*=$work/bench.pack" -o "$work/channel.json" >/dev/null 2>&1
jq -n --rawfile document "$work/channel.json" --rawfile signature "$work/channel.json.minisig" \
  '{document: $document, signature: $signature}' |
  curl -sf -X PUT -H "Authorization: Bearer $token" -H 'Content-Type: application/json' \
    --data-binary @- "$packd_url/v1/channels/stable" >/dev/null || die "publishing the channel failed"

# --- nginx, serving the same bytes ---------------------------------------------------------
www="$work/www"
mkdir -p "$www/v1/channels" "$www/v1/blobs" "$work/nginx/tmp"
curl -sf -o "$www/v1/channels/stable" "$packd_url/v1/channels/stable"
cp "$work/bench.pack" "$www/v1/blobs/$blob_sha"
cmp -s "$www/v1/channels/stable" "$work/channel.json" || die "packd does not serve the signed bytes"

cores=$(nproc)
nginx_port=$(free_port)
nginx_url="http://127.0.0.1:$nginx_port"
user_line=""
[ "$(id -u)" -eq 0 ] && user_line="user root root;"
affinity_line="" reuseport=""
if [ "$NGINX_PINNED" = on ]; then
  affinity_line="worker_cpu_affinity auto;"
  reuseport=" reuseport"
fi
cat >"$work/nginx/nginx.conf" <<EOF
$user_line
worker_processes $cores;
$affinity_line
daemon off;
pid $work/nginx/nginx.pid;
error_log $work/nginx/error.log warn;
events { worker_connections 4096; }
http {
  access_log off;
  sendfile $NGINX_SENDFILE;
  tcp_nopush on;
  etag on;
  # hyper keeps a connection open for any number of requests; so does nginx here.
  keepalive_requests 1000000;
  client_body_temp_path $work/nginx/tmp/body;
  proxy_temp_path $work/nginx/tmp/proxy;
  fastcgi_temp_path $work/nginx/tmp/fastcgi;
  uwsgi_temp_path $work/nginx/tmp/uwsgi;
  scgi_temp_path $work/nginx/tmp/scgi;
  server {
    listen 127.0.0.1:$nginx_port$reuseport;
    root $www;
    location /v1/channels/ {
      default_type application/json;
      add_header Cache-Control "no-cache";
    }
    location /v1/blobs/ {
      default_type application/octet-stream;
      add_header Cache-Control "public, max-age=31536000, immutable";
    }
  }
}
EOF
say "starting nginx ($cores workers, sendfile $NGINX_SENDFILE) on $nginx_url"
"$NGINX" -p "$work/nginx" -c "$work/nginx/nginx.conf" -e "$work/nginx/error.log" &
nginx_pid=$!
for _ in $(seq 1 100); do
  curl -s -o /dev/null "$nginx_url/" && break
  kill -0 "$nginx_pid" 2>/dev/null || die "nginx exited: $(cat "$work/nginx/error.log")"
  sleep 0.1
done

# --- check both answer the same requests the same way ------------------------------------
etag_of() {
  curl -sfI "$1" | tr -d '\r' | sed -n 's/^[Ee][Tt][Aa][Gg]: //p'
}
# status code and body size of a GET, with optional extra curl arguments
probe() {
  local url=$1
  shift
  curl -s -o /dev/null -w '%{http_code} %{size_download}' "$@" "$url"
}
packd_doc="$packd_url/v1/channels/stable"
nginx_doc="$nginx_url/v1/channels/stable"
packd_blob="$packd_url/v1/blobs/$blob_sha"
nginx_blob="$nginx_url/v1/blobs/$blob_sha"
packd_etag=$(etag_of "$packd_doc")
nginx_etag=$(etag_of "$nginx_doc")
[ -n "$packd_etag" ] && [ -n "$nginx_etag" ] || die "missing ETag (packd: '$packd_etag', nginx: '$nginx_etag')"

doc_size=$(stat -c %s "$www/v1/channels/stable")
expect() {
  local what=$1 want=$2 got=$3
  [ "$got" = "$want" ] || die "$what: expected '$want', got '$got'"
}
expect "packd channel 200" "200 $doc_size" "$(probe "$packd_doc")"
expect "nginx channel 200" "200 $doc_size" "$(probe "$nginx_doc")"
expect "packd channel 304" "304 0" "$(probe "$packd_doc" -H "If-None-Match: $packd_etag")"
expect "nginx channel 304" "304 0" "$(probe "$nginx_doc" -H "If-None-Match: $nginx_etag")"
expect "packd blob 200" "200 $blob_size" "$(probe "$packd_blob")"
expect "nginx blob 200" "200 $blob_size" "$(probe "$nginx_blob")"
curl -sf "$packd_blob" | cmp -s - "$work/bench.pack" || die "packd blob bytes differ"
curl -sf "$nginx_blob" | cmp -s - "$work/bench.pack" || die "nginx blob bytes differ"

# FLOOR=1: hyper alone on packd's accept model, answering every request 304 with packd's
# ETag and doing nothing else (server/examples/bare_304.rs): the floor under packd's own work
# on a revalidation.
floor_name="hyper alone"
if [ "${FLOOR:-0}" != 0 ]; then
  "$target_dir/release/examples/bare_304" "$packd_etag" >"$work/floor.out" 2>"$work/floor.err" &
  floor_pid=$!
  floor_url=$(listening_url "$floor_pid" bare_304 "$work/floor.out" "$work/floor.err")
  [ -n "$floor_url" ] || die "bare_304 did not start"
  expect "bare_304 304" "304 0" "$(probe "$floor_url/v1/channels/stable" -H "If-None-Match: $packd_etag")"
fi

# CLIENT_HEADERS=1: each 304 request (to every server) also carries what pack-client sends
# on a refresh: its version, the pack it has installed and its install hash, which packd
# counts in its metrics and its fleet view. Without it a 304 request names only the ETag.
# Every request names the same install, which the fleet's count already holds after the
# first: a fleet of distinct installs costs packd at least as much per request.
client_headers=""
if [ "${CLIENT_HEADERS:-0}" = 1 ]; then
  install=$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')
  client_headers="-H 'X-Promptpack-Client-Version: 1.4.0' -H 'X-Promptpack-Installed-Pack: builtin' -H 'X-Promptpack-Install: $install'"
fi

# --- measure -----------------------------------------------------------------------------
# CPU ticks of a server (packd, or nginx's master and its workers), as "user system".
clk_tck=$(getconf CLK_TCK)
server_ticks() {
  local pids=$1
  [ "$1" = "$nginx_pid" ] && pids="$nginx_pid $(cat /proc/"$nginx_pid"/task/*/children)"
  for pid in $pids; do awk '{print $14, $15}' "/proc/$pid/stat"; done |
    awk '{u += $1; s += $2} END {print u, s}'
}
# One wrk run against the server with pid $1: "req/s server-CPU user system wrk-CPU", the CPU
# figures in µs per request (the server's user + system, then each apart, then wrk's own).
# Dies if wrk saw errors or non-2xx/3xx answers. The CPU per request moves far less with the
# machine's other load than req/s does.
run_wrk() {
  local pid=$1 name=$2 duration=$3
  shift 3
  local out="$work/wrk-$name.txt" before after
  before=$(server_ticks "$pid")
  /usr/bin/time -f '%U %S' -o "$work/wrk-time.txt" \
    wrk -t"$THREADS" -c"$CONNECTIONS" -d"$duration" --latency "$@" >"$out" 2>&1 \
    || die "wrk failed: $(cat "$out")"
  after=$(server_ticks "$pid")
  if grep -Eq 'Non-2xx or 3xx|Socket errors' "$out"; then
    cat "$out" >&2
    die "wrk saw errors against $name"
  fi
  local requests
  requests=$(sed -n 's/^ *\([0-9]*\) requests in.*/\1/p' "$out")
  printf '%s %s\n' "$(sed -n 's/^Requests\/sec: *//p' "$out")" \
    "$(awk -v b="$before" -v a="$after" -v n="$requests" -v hz="$clk_tck" \
      -v w="$(cat "$work/wrk-time.txt")" 'BEGIN {
        split(b, x, " "); split(a, y, " "); split(w, z, " ")
        u = (y[1] - x[1]) / hz * 1e6 / n; s = (y[2] - x[2]) / hz * 1e6 / n
        printf "%.2f %.2f %.2f %.2f", u + s, u, s, (z[1] + z[2]) * 1e6 / n
      }')"
}
median() { tr ' ' '\n' | grep . | sort -g | awk '{v[NR]=$1} END {print (NR%2) ? v[(NR+1)/2] : (v[NR/2]+v[NR/2+1])/2}'; }

# Channel fetches packd answered with the whole document (its own metrics).
documents_sent() {
  curl -sf "$packd_url/metrics" |
    awk '/^packd_channel_fetches_total/ && /result="200"/ {s += $NF} END {print s + 0}'
}
sent_before=$(documents_sent)

say "warm-up ($WARMUP each)"
eval run_wrk "$packd_pid" warm "$WARMUP" '-H "If-None-Match: $packd_etag"' "$client_headers" '"$packd_doc"' >/dev/null
eval run_wrk "$nginx_pid" warm "$WARMUP" '-H "If-None-Match: $nginx_etag"' "$client_headers" '"$nginx_doc"' >/dev/null
run_wrk "$packd_pid" warm "$WARMUP" "$packd_blob" >/dev/null
run_wrk "$nginx_pid" warm "$WARMUP" "$nginx_blob" >/dev/null

# One pair: packd and nginx back to back (which goes first alternates by round), so a change
# in the machine's other load hits both sides of a ratio alike.
pair() {
  local round=$1 what=$2 packd_args=$3 nginx_args=$4 p n
  if [ $((round % 2)) -eq 1 ]; then
    p=$(eval run_wrk "$packd_pid" "packd-$what" "$DURATION" "$packd_args")
    n=$(eval run_wrk "$nginx_pid" "nginx-$what" "$DURATION" "$nginx_args")
  else
    n=$(eval run_wrk "$nginx_pid" "nginx-$what" "$DURATION" "$nginx_args")
    p=$(eval run_wrk "$packd_pid" "packd-$what" "$DURATION" "$packd_args")
  fi
  echo "$p $n"
}

p304=() n304=() r304=() pblob=() nblob=() rblob=() pcpu304=() ncpu304=() pcpublob=() ncpublob=()
pwblob=() nwblob=() pu304=() ps304=() pw304=() nu304=() ns304=() nw304=()
f304=() rf304=() fcpu304=() fu304=() fs304=() fw304=()
for round in $(seq 1 "$RUNS"); do
  say "round $round/$RUNS: wrk -t$THREADS -c$CONNECTIONS -d$DURATION"
  read -r p pc pu ps pw n nc nu ns nw < <(pair "$round" 304 \
    "-H \"If-None-Match: \$packd_etag\" $client_headers \"\$packd_doc\"" \
    "-H \"If-None-Match: \$nginx_etag\" $client_headers \"\$nginx_doc\"")
  [ -n "$nw" ] || die "a 304 run failed"
  p304+=("$p") n304+=("$n") r304+=("$(awk -v p="$p" -v n="$n" 'BEGIN {print p / n}')")
  pcpu304+=("$pc") ncpu304+=("$nc")
  pu304+=("$pu") ps304+=("$ps") pw304+=("$pw") nu304+=("$nu") ns304+=("$ns") nw304+=("$nw")
  read -r p pc _ _ pw n nc _ _ nw < <(pair "$round" blob '"$packd_blob"' '"$nginx_blob"')
  [ -n "$nw" ] || die "a blob run failed"
  pwblob+=("$pw") nwblob+=("$nw")
  pblob+=("$p") nblob+=("$n") rblob+=("$(awk -v p="$p" -v n="$n" 'BEGIN {print p / n}')")
  pcpublob+=("$pc") ncpublob+=("$nc")
  if [ -n "$floor_pid" ]; then
    read -r f fc fu fs fw < <(eval run_wrk "$floor_pid" floor "$DURATION" \
      '-H "If-None-Match: $packd_etag"' "$client_headers" '"$floor_url/v1/channels/stable"')
    f304+=("$f") fcpu304+=("$fc") fu304+=("$fu") fs304+=("$fs") fw304+=("$fw")
    rf304+=("$(awk -v f="$f" -v n="${n304[-1]}" 'BEGIN {print f / n}')")
    printf '   304: %s %s req/s, %s µs CPU\n' "$floor_name" "$f" "$fc" >&2
  fi
  printf '   304: packd %s nginx %s req/s (%.2f; %s / %s µs CPU)   blob: packd %s nginx %s req/s (%.2f; %s / %s µs CPU)   load %s\n' \
    "${p304[-1]}" "${n304[-1]}" "${r304[-1]}" "${pcpu304[-1]}" "${ncpu304[-1]}" \
    "${pblob[-1]}" "${nblob[-1]}" "${rblob[-1]}" "${pcpublob[-1]}" "${ncpublob[-1]}" \
    "$(cut -d' ' -f1 /proc/loadavg)" >&2
done

# Every channel fetch wrk made must have been answered 304: packd counts them.
[ "$(documents_sent)" = "$sent_before" ] || die "packd sent the document instead of answering 304"

# --- report ------------------------------------------------------------------------------
med() { printf '%s ' "$@" | median; }
missed=0
# One line: req/s of both, their ratio against its target, and CPU µs per request of both
# (packd's at most nginx's is the other target).
row() {
  local what=$1 p=$2 n=$3 r=$4 t=$5 pc=$6 nc=$7
  awk -v what="$what" -v p="$p" -v n="$n" -v r="$r" -v t="$t" -v pc="$pc" -v nc="$nc" 'BEGIN {
    printf "%-22s %11.0f %11.0f %6.2f %-9s %9.2f %9.2f %6.2f %s\n", what, p, n, r,
      (r >= t ? "ok" : "MISSED"), pc, nc, pc / nc, (pc <= nc ? "ok" : "MISSED")
  }'
  awk -v r="$r" -v t="$t" -v pc="$pc" -v nc="$nc" 'BEGIN {exit !(r < t || pc > nc)}' && missed=1
  return 0
}
echo
echo "packd vs nginx $("$NGINX" -v 2>&1 | sed 's/.*nginx\///') (sendfile $NGINX_SENDFILE, pinned $NGINX_PINNED), wrk -t$THREADS -c$CONNECTIONS -d$DURATION," \
  "$RUNS rounds, $cores cores shared by wrk and both servers, load average $(cut -d' ' -f1-3 /proc/loadavg)"
echo "(medians; the rate ratio is the median of each round's packd/nginx, target >= $TARGET_304 on 304s and"
echo " >= $TARGET_BLOB on blobs; CPU is user + system µs per request, target packd <= nginx)"
printf '%-22s %11s %11s %6s %-9s %9s %9s %6s\n' "" "packd req/s" "nginx req/s" "ratio" "" \
  "packd µs" "nginx µs" "ratio"
row "304 channel document" "$(med "${p304[@]}")" "$(med "${n304[@]}")" "$(med "${r304[@]}")" "$TARGET_304" \
  "$(med "${pcpu304[@]}")" "$(med "${ncpu304[@]}")"
row "GET $((blob_size / 1024)) KiB blob" "$(med "${pblob[@]}")" "$(med "${nblob[@]}")" "$(med "${rblob[@]}")" \
  "$TARGET_BLOB" "$(med "${pcpublob[@]}")" "$(med "${ncpublob[@]}")"
# What a blob GET costs wrk, the reader: how the server sends moves the reader's cost too.
awk -v p="$(med "${pwblob[@]}")" -v n="$(med "${nwblob[@]}")" \
  'BEGIN {printf "wrk'"'"'s own CPU per blob GET: %.2f µs reading from packd, %.2f from nginx\n", p, n}'
# Where a 304's CPU goes, and what the rate target asks of it: wrk and the server share the
# cores, so a server gets at most cores / (wrk's CPU + its own CPU) requests a second, and
# packd reaches the target share of nginx's rate only when wrk's and its CPU per request
# together are at most (wrk's + nginx's) / target.
echo
printf '%-22s %9s %9s %9s\n' "CPU per 304 (µs)" "user" "system" "wrk"
awk -v u="$(med "${pu304[@]}")" -v s="$(med "${ps304[@]}")" -v w="$(med "${pw304[@]}")" \
  'BEGIN {printf "%-22s %9.2f %9.2f %9.2f\n", "packd", u, s, w}'
awk -v u="$(med "${nu304[@]}")" -v s="$(med "${ns304[@]}")" -v w="$(med "${nw304[@]}")" \
  'BEGIN {printf "%-22s %9.2f %9.2f %9.2f\n", "nginx", u, s, w}'
if [ -n "$floor_pid" ]; then
  awk -v u="$(med "${fu304[@]}")" -v s="$(med "${fs304[@]}")" -v w="$(med "${fw304[@]}")" \
    -v r="$(med "${f304[@]}")" -v name="$floor_name" 'BEGIN {printf "%-22s %9.2f %9.2f %9.2f   (%.0f req/s)\n", name, u, s, w, r}'
fi
awk -v pw="$(med "${pw304[@]}")" -v nc="$(med "${ncpu304[@]}")" -v nw="$(med "${nw304[@]}")" \
  -v t="$TARGET_304" 'BEGIN {
    printf "for %sx nginx'"'"'s 304 rate at these wrk costs, packd may spend at most %.2f µs per 304\n",
      t, (nw + nc) / t - pw
  }'
# With the floor: does it, doing nothing else per request, reach the rate target?
# Its rate against nginx's is the median of the rounds; wrk's and its CPU per request
# together, against the most the target allows ((wrk's + nginx's) / target).
if [ -n "$floor_pid" ]; then
  awk -v r="$(med "${rf304[@]}")" -v fc="$(med "${fcpu304[@]}")" -v fw="$(med "${fw304[@]}")" \
    -v nc="$(med "${ncpu304[@]}")" -v nw="$(med "${nw304[@]}")" -v t="$TARGET_304" -v name="$floor_name" 'BEGIN {
      printf "%s: %.2fx nginx'"'"'s 304 rate; wrk'"'"'s and its CPU %.2f µs per 304, the target allows %.2f (%s)\n",
        name, r, fw + fc, (nw + nc) / t, (r >= t ? "it meets it" : "it misses it: no server built on it would meet it in this run")
    }'
fi
# STRICT=1: exit 1 when a target is missed.
[ "${STRICT:-0}" = 1 ] && [ "$missed" = 1 ] && exit 1
exit 0
