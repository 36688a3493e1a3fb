#!/usr/bin/env bash
# What the sandbox costs each `bash` call: the agent's own launcher (`agent sandbox-exec`:
# the release binary re-executes itself, restricts itself with Landlock, then execs the
# shell) against bubblewrap (namespaces, the sandbox other coding agents use on Linux) and
# against no sandbox at all. Same command (`/bin/bash -c true`), same writable directories,
# network off in both sandboxes; paired and alternating, medians and ratio printed.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v bwrap >/dev/null 2>&1; then
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq bubblewrap
fi

CARGO_INCREMENTAL=0 cargo build --release -q -p agent --bin agent
agent="$PWD/target/release/agent"
ws=$(mktemp -d)
trap 'rm -rf "$ws"' EXIT

# Each iteration runs the three commands once, in a rotating order, so load from other
# work on the machine hits all three alike; the medians and the per-iteration differences
# are printed. posix_spawn + waitpid keeps the measuring process's own cost small and equal.
python3 - "$agent" "$ws" "${RUNS:-400}" <<'PY'
import os, statistics, sys, time
agent, ws, runs = sys.argv[1], sys.argv[2], int(sys.argv[3])
commands = {
    "plain": ["/bin/bash", "-c", "true"],
    "landlock": [agent, "sandbox-exec", "--write", ws, "--write", "/tmp", "--", "/bin/bash", "-c", "true"],
    "bwrap": ["bwrap", "--ro-bind", "/", "/", "--dev", "/dev", "--bind", ws, ws, "--bind", "/tmp", "/tmp",
              "--unshare-net", "/bin/bash", "-c", "true"],
}
names = list(commands)
def once(argv):
    start = time.perf_counter()
    pid = os.posix_spawnp(argv[0], argv, os.environ)
    _, status = os.waitpid(pid, 0)
    took = time.perf_counter() - start
    if os.waitstatus_to_exitcode(status) != 0:
        sys.exit(f"{argv} failed")
    return took * 1000
for _ in range(20):
    for name in names:
        once(commands[name])
times = {name: [] for name in names}
for i in range(runs):
    order = names[i % 3:] + names[:i % 3]
    for name in order:
        times[name].append(once(commands[name]))
med = {n: statistics.median(t) for n, t in times.items()}
for n in names:
    print(f"{n:9} median {med[n]:.2f} ms over {runs} runs")
over = lambda a, b: statistics.median(x - y for x, y in zip(times[a], times[b]))
print(f"launcher overhead per command (median of paired differences): landlock {over('landlock', 'plain'):.2f} ms, bwrap {over('bwrap', 'plain'):.2f} ms")
print(f"landlock / bwrap (medians): {med['landlock'] / med['bwrap']:.2f}x")
PY
