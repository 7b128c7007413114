#!/usr/bin/env bash
# The NATS server that bench/compare_nats.py (make bench-compare) runs beside lograft:
# Debian's nats-server, installed with apt-get only when `nats-server` is not on PATH (needs
# root). The Python client (nats-py) comes from pyproject.toml's `bench` extra.
set -euo pipefail
if command -v nats-server >/dev/null; then
    echo "$(nats-server --version) installed"
    exit 0
fi
if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null; then
    echo "nats-server: missing; install it as root with: apt-get install -y nats-server" >&2
    exit 1
fi
echo "nats-server: installing"
export DEBIAN_FRONTEND=noninteractive
apt-get install -y -q --no-install-recommends nats-server >/dev/null \
    || { apt-get update -q >/dev/null && apt-get install -y -q --no-install-recommends nats-server >/dev/null; }
echo "$(nats-server --version) installed"
