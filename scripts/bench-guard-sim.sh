#!/usr/bin/env bash
# Guarded rollouts: 200 rollouts per case (a pack with twice the tool-error rate, an
# equal one, a better one) over simulated fleets of 1,000 installs whose own error rates
# differ (Beta around 5 %, concentration 10, 50, infinity), on a virtual clock,
# decided by packd's own guard code. Prints how often each case is halted and where.
#   bash scripts/bench-guard-sim.sh [ROLLOUTS]   (default 200)
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_INCREMENTAL=0
cargo build --release -q -p promptpack-tests --example guard_sim
start=$(date +%s.%N)
./target/release/examples/guard_sim "${1:-200}"
end=$(date +%s.%N)
echo "wall time: $(echo "$end - $start" | bc) s; load average: $(cut -d' ' -f1-3 /proc/loadavg)"
