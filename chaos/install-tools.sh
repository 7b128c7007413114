#!/usr/bin/env bash
# The Debian packages the chaos suite's faults use, installed when missing (needs root and
# apt): iproute2 + nftables (network partitions in namespaces), fuse3 (LazyFS power loss and
# slow disk), faketime (libfaketime: clock jumps). Python packages come from pyproject.toml.
# Without root or apt it only says what is missing (the tests that need it then skip),
# unless LOGRAFT_REQUIRE_CHAOS_TOOLS=1 (.ci/run), which makes that a failure.
set -euo pipefail
packages=(iproute2 nftables fuse3 faketime)
missing=()
for package in "${packages[@]}"; do
    if ! dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed"; then
        missing+=("$package")
    fi
done
if [ ${#missing[@]} -eq 0 ]; then
    echo "chaos tools: ${packages[*]} installed"
    exit 0
fi
if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null; then
    echo "chaos tools: missing ${missing[*]}; install them as root with apt-get" >&2
    [ "${LOGRAFT_REQUIRE_CHAOS_TOOLS:-0}" = 1 ] && exit 1
    exit 0
fi
echo "chaos tools: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null \
    || { apt-get update -q >/dev/null && apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null; }
echo "chaos tools: installed ${missing[*]}"
