#!/usr/bin/env python3
"""What the background-refresh check adds to a short-lived run.

Times `agent prompt` as a whole process, alternating a cache whose last check is fresh
(no refresh starts) with one that is due (the run starts a detached refresh), and prints
the medians and their difference. The update server is an unreachable loopback port, so
the background refresh fails fast and changes nothing the next pair sees.

    python3 scripts/bench-refresh-check.py [path/to/agent] [pairs]
"""
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

agent = sys.argv[1] if len(sys.argv) > 1 else "target/release/agent"
pairs = int(sys.argv[2]) if len(sys.argv) > 2 else 30
home = tempfile.mkdtemp(prefix="refresh-check-")
with open(os.path.join(home, "config.toml"), "w") as f:
    f.write('[updates]\nserver = "http://127.0.0.1:9"\nchannel = "stable"\npack = "builtin"\n')
env = dict(os.environ, AGENT_HOME=home)
env.pop("AGENT_BASE_URL", None)
state = os.path.join(home, "packs", "state.json")


def run():
    started = time.perf_counter()
    subprocess.run([agent, "prompt"], env=env, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL, check=True)
    return time.perf_counter() - started


def checked_at(seconds):
    with open(state) as f:
        s = json.load(f)
    s["last_success"] = seconds
    s["last_check"] = seconds
    with open(state, "w") as f:
        json.dump(s, f)


run()
for _ in range(100):  # the first run's background refresh writes the state
    if os.path.exists(state):
        break
    time.sleep(0.1)
fresh, due = [], []
for _ in range(pairs):
    checked_at(int(time.time()))
    fresh.append(run())
    checked_at(0)
    due.append(run())
    time.sleep(0.05)  # let the detached refresh finish before the next pair
f, d = statistics.median(fresh), statistics.median(due)
print(f"agent prompt, {pairs} alternating pairs: fresh median {f * 1000:.1f} ms, "
      f"due (starts the background refresh) median {d * 1000:.1f} ms, "
      f"difference {(d - f) * 1000:+.1f} ms")
