#!/usr/bin/env bash
# Type-checks the whole workspace for a Unix that is not Linux (FreeBSD, x86-64), warnings as
# errors: every Linux-only call (Landlock, fstatfs, the sandbox launcher) must be behind
# cfg(target_os = "linux") with a fallback that compiles. It checks, it does not build: there
# is no FreeBSD linker or libc here, and no FreeBSD machine runs the tests. The Python
# package is left out (PyO3 needs the target's Python to configure itself).
#
#   bash scripts/check-other-unix.sh                 # x86_64-unknown-freebsd
#   TARGET=aarch64-unknown-freebsd bash scripts/check-other-unix.sh
#
# The C parts (zstd, aws-lc) are compiled with the host's compiler and headers only so that
# their build scripts finish: their objects are never used. `_GNU_SOURCE` gives glibc's
# headers the POSIX types aws-lc asks for.
set -euo pipefail
cd "$(dirname "$0")/.."
TARGET=${TARGET:-x86_64-unknown-freebsd}
rustup target list --installed | grep -qx "$TARGET" || rustup target add "$TARGET"
target_env=$(echo "$TARGET" | tr '-' '_')
export "CFLAGS_${target_env}=-D_GNU_SOURCE"
export CARGO_INCREMENTAL=0 RUSTFLAGS="-D warnings"
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-target/check-other-unix}
cargo check --workspace --exclude promptpack-python --all-targets --target "$TARGET"
echo "check-other-unix: the workspace type-checks for $TARGET"
