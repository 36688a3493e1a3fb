#!/usr/bin/env python3
"""Time per call of rendering a prompt from Python with the promptpack wheel (installed in the
running interpreter): `Client.serve` (capture, render, wholesale fallback on failure) and
`Snapshot.render` on one captured snapshot, for a small template and a large one.

    maturin build --release -m python/Cargo.toml -o target/wheels
    python3 -m venv target/py-venv
    target/py-venv/bin/pip install pytest target/wheels/promptpack-*.whl
    target/py-venv/bin/python scripts/bench-python-render.py            # CALLS=20000 by default

Each call is timed on its own (time.perf_counter_ns) after a warm-up; the script prints the
median and the 99th percentile in microseconds, and the interpreter's CPU time per call.
"""

import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import promptpack

REPO = Path(__file__).resolve().parents[1]
CALLS = int(os.environ.get("CALLS", "20000"))
VARS = {"data_dir": "/home/ada/.local/share/agent"}


def timed(call):
    for _ in range(CALLS // 10):
        call()
    samples = []
    cpu_start = time.process_time()
    for _ in range(CALLS):
        start = time.perf_counter_ns()
        call()
        samples.append(time.perf_counter_ns() - start)
    cpu = (time.process_time() - cpu_start) / CALLS
    samples.sort()
    return (statistics.median(samples) / 1000, samples[int(len(samples) * 0.99)] / 1000,
            cpu * 1e6)


def main():
    work = Path(tempfile.mkdtemp(prefix="bench-python-render-"))
    try:
        small = work / "small"
        shutil.copytree(REPO / "packs" / "builtin", small)
        large = work / "large"
        shutil.copytree(REPO / "packs" / "builtin", large)
        memory = (large / "shared" / "memory.hbs").read_text()
        (large / "shared" / "memory.hbs").write_text(memory * 100)
        print(f"promptpack wheel, {CALLS} calls each, load average "
              f"{os.getloadavg()[0]:.1f}")
        print(f"{'template':<34} {'call':<18} {'median µs':>10} {'p99 µs':>10} {'CPU µs':>8}")
        for label, bundled in [("shared/memory.hbs (157 B)", small),
                               (f"shared/memory.hbs x100 ({len(memory) * 100} B)", large)]:
            client = promptpack.Client(cache_dir=work / f"cache-{bundled.name}",
                                       builtin_dir=bundled)
            snapshot = client.capture()
            for name, call in [
                ("Client.serve", lambda: client.serve("shared/memory.hbs", VARS)),
                ("Snapshot.render", lambda: snapshot.render("shared/memory.hbs", VARS)),
            ]:
                median, p99, cpu = timed(call)
                print(f"{label:<34} {name:<18} {median:>10.2f} {p99:>10.2f} {cpu:>8.2f}")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
