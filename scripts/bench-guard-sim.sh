#!/usr/bin/env bash
# Guarded rollouts: a hundred rollouts per case (a pack with twice the tool-error rate, an
# equal one, a better one) over a simulated fleet of 1,000 installs on a virtual clock,
# decided by packd's own guard code. Prints how often each case is halted and where.
#   bash scripts/bench-guard-sim.sh [ROLLOUTS]   (default 100)
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_INCREMENTAL=0
cargo build --release -q -p promptpack-tests --example guard_sim
start=$(date +%s.%N)
./target/release/examples/guard_sim "${1:-100}"
end=$(date +%s.%N)
echo "wall time: $(echo "$end - $start" | bc) s; load average: $(cut -d' ' -f1-3 /proc/loadavg)"
