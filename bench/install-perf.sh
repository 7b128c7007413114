#!/usr/bin/env bash
# The `perf` that bench/path_trace.py (make bench-trace) records system calls with: Debian's
# linux-perf, installed with apt-get only when `perf` is not on PATH (needs root).
set -euo pipefail
if command -v perf >/dev/null; then
    echo "perf installed"
    exit 0
fi
if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null; then
    echo "perf: missing; install it as root with: apt-get install -y linux-perf" >&2
    exit 1
fi
echo "perf: installing"
export DEBIAN_FRONTEND=noninteractive
apt-get install -y -q --no-install-recommends linux-perf >/dev/null \
    || { apt-get update -q >/dev/null && apt-get install -y -q --no-install-recommends linux-perf >/dev/null; }
echo "perf installed"
