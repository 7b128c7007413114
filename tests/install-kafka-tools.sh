#!/usr/bin/env bash
# Kafka's own tools that the Kafka-protocol tests run against lograft, installed when missing
# (needs root and apt): Debian's kcat (librdkafka's command line). The Python clients
# (kafka-python) come from pyproject.toml. Without root or apt it only says what is missing
# (those tests then skip), unless LOGRAFT_REQUIRE_KCAT=1 (.ci/run), which makes that a failure.
set -euo pipefail
packages=(kcat)
missing=()
for package in "${packages[@]}"; do
    if ! dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed"; then
        missing+=("$package")
    fi
done
if [ ${#missing[@]} -eq 0 ]; then
    echo "kafka tools: ${packages[*]} installed"
    exit 0
fi
if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null; then
    echo "kafka tools: missing ${missing[*]}; install them as root with apt-get" >&2
    [ "${LOGRAFT_REQUIRE_KCAT:-0}" = 1 ] && exit 1
    exit 0
fi
echo "kafka tools: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null \
    || { apt-get update -q >/dev/null && apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null; }
echo "kafka tools: installed ${missing[*]}"
