#!/usr/bin/env bash
# Short fuzzing pass over every pack-format fuzz target (fuzz/), failing on any crash.
#
# Runs on stable Rust: `--sanitizer none` keeps cargo-fuzz from passing `-Zsanitizer`, so no
# nightly (or RUSTC_BOOTSTRAP) is needed. pack-format denies unsafe code, so AddressSanitizer
# would add little; over-allocation is caught by the targets' own allocation guard and by
# libFuzzer's RSS limit instead. Debug assertions are on, and with them overflow checks.
#
#   FUZZ_SECONDS=25      seconds per target
#   FUZZ_TARGETS="..."   which targets (default: all of them)
set -euo pipefail
cd "$(dirname "$0")/.."

seconds="${FUZZ_SECONDS:-25}"
targets="${FUZZ_TARGETS:-header channel payload open}"

if ! cargo fuzz --version >/dev/null 2>&1; then
  echo "installing cargo-fuzz"
  cargo install cargo-fuzz --locked
fi

# Seed corpora: real sealed packs, payloads and signed documents, made fresh by the
# current code (new inputs the fuzzer finds are added next to them, under fuzz/corpus/).
cargo run --quiet --manifest-path fuzz/Cargo.toml --example make_seeds -- fuzz/corpus

cargo fuzz build --sanitizer none --debug-assertions
# Logs go to a directory of their own: fuzz/target need not exist (CARGO_TARGET_DIR may
# point elsewhere). A failing target's log is printed before exiting, so the directory
# goes with the run, however it ends.
logs=$(mktemp -d)
trap 'rm -rf "$logs"' EXIT
for target in $targets; do
  log="$logs/smoke-$target.log"
  # Inputs that once crashed a target stay fixed: replay each once before fuzzing.
  if compgen -G "fuzz/regressions/$target/*" >/dev/null; then
    if ! cargo fuzz run --sanitizer none --debug-assertions "$target" fuzz/regressions/"$target"/* >"$log" 2>&1; then
      tail -n 60 "$log"
      echo "fuzz target $target fails on a saved regression input (fuzz/regressions/$target/)" >&2
      exit 1
    fi
  fi
  echo "fuzzing $target for ${seconds}s"
  if ! cargo fuzz run --sanitizer none --debug-assertions "$target" "fuzz/corpus/$target" -- \
      -max_total_time="$seconds" -rss_limit_mb=2048 -print_final_stats=1 >"$log" 2>&1; then
    tail -n 60 "$log"
    echo "fuzz target $target crashed; the input is under fuzz/artifacts/$target/" >&2
    exit 1
  fi
  grep -E '^stat::number_of_executed_units|DONE' "$log" | tail -n 2
done
