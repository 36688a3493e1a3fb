//! Drives the interactive `agent` on a pseudo-terminal (python3's `pty`): each step sends
//! its keys, then waits for its text to appear *after* what the previous step waited for,
//! so the same prompt can be waited for twice.

#![allow(dead_code)]

use std::path::Path;
use std::process::{Command, Output};

const DRIVER: &str = r#"
import json, os, pty, select, sys, time
steps = json.loads(sys.argv[1])
pid, fd = pty.fork()
if pid == 0:
    os.execv(sys.argv[2], sys.argv[2:])
seen = b""
pos = 0
def read_until(needle, timeout=20):
    global seen, pos
    deadline = time.time() + timeout
    while seen.find(needle.encode(), pos) < 0:
        left = deadline - time.time()
        if left <= 0:
            sys.stdout.write(seen.decode(errors="replace"))
            sys.exit("timed out waiting for %r" % needle)
        ready, _, _ = select.select([fd], [], [], left)
        if ready:
            try:
                chunk = os.read(fd, 4096)
            except OSError:
                chunk = b""
            if not chunk:
                sys.stdout.write(seen.decode(errors="replace"))
                sys.exit("the program ended before %r" % needle)
            seen += chunk
    pos = seen.find(needle.encode(), pos) + len(needle)
for send, expect in steps:
    if send:
        os.write(fd, send.encode())
    if expect:
        read_until(expect)
_, status = os.waitpid(pid, 0)
while True:
    try:
        chunk = os.read(fd, 4096)
    except OSError:
        break
    if not chunk:
        break
    seen += chunk
sys.stdout.write(seen.decode(errors="replace"))
sys.exit(os.waitstatus_to_exitcode(status))
"#;

/// Runs `agent ARGS…` in `cwd` on a pty through `steps` (`[send, expect]` pairs).
pub fn drive(steps: &serde_json::Value, cwd: &Path, env: &[(&str, &str)], args: &[&str]) -> Output {
    Command::new("python3")
        .arg("-c")
        .arg(DRIVER)
        .arg(steps.to_string())
        .arg(env!("CARGO_BIN_EXE_agent"))
        .args(args)
        .current_dir(cwd)
        .env("TERM", "xterm")
        .env("NO_COLOR", "1")
        .env_remove("AGENT_API_KEY")
        .envs(env.iter().copied())
        .output()
        .unwrap()
}
