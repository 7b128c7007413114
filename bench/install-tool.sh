#!/usr/bin/env bash
# A Debian package a benchmark runs beside lograft, installed with apt-get only when its
# command is not on PATH (needs root): `bench/install-tool.sh COMMAND PACKAGE`.
#   nats-server nats-server: the NATS server of bench/compare_nats.py (make bench-compare);
#     its Python client (nats-py) comes from pyproject.toml's `bench` extra.
#   perf linux-perf: the system-call tracer of bench/path_trace.py (make bench-trace).
set -euo pipefail
command_name=$1
package=$2
if command -v "$command_name" >/dev/null; then
    echo "$command_name installed"
    exit 0
fi
if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null; then
    echo "$command_name: missing; install it as root with: apt-get install -y $package" >&2
    exit 1
fi
echo "$command_name: installing $package"
export DEBIAN_FRONTEND=noninteractive
apt-get install -y -q --no-install-recommends "$package" >/dev/null \
    || { apt-get update -q >/dev/null && apt-get install -y -q --no-install-recommends "$package" >/dev/null; }
echo "$command_name installed"
