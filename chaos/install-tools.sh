#!/usr/bin/env bash
# The Debian packages the chaos suite's faults use, installed when missing (needs root and
# apt): iproute2 + nftables (network partitions in namespaces), fuse3 (LazyFS power loss and
# slow disk), faketime (libfaketime: clock jumps). Python packages come from pyproject.toml.
# Without root or apt it only says what is missing (the tests that need it then skip),
# unless LOGRAFT_REQUIRE_CHAOS_TOOLS=1 (.ci/run), which makes that a failure.
#
# Other Debian tools the tests run are installed the same way, named by the caller:
# INSTALL_LABEL, INSTALL_PACKAGES (space-separated) and INSTALL_REQUIRE_VAR (the variable
# that makes a missing one a failure); make kafka-tools installs kcat so.
set -euo pipefail
label=${INSTALL_LABEL:-chaos tools}
require_var=${INSTALL_REQUIRE_VAR:-LOGRAFT_REQUIRE_CHAOS_TOOLS}
read -r -a packages <<< "${INSTALL_PACKAGES:-iproute2 nftables fuse3 faketime}"
missing=()
for package in "${packages[@]}"; do
    if ! dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed"; then
        missing+=("$package")
    fi
done
if [ ${#missing[@]} -eq 0 ]; then
    echo "$label: ${packages[*]} installed"
    exit 0
fi
if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null; then
    echo "$label: missing ${missing[*]}; install them as root with apt-get" >&2
    [ "${!require_var:-0}" = 1 ] && exit 1
    exit 0
fi
echo "$label: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null \
    || { apt-get update -q >/dev/null && apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null; }
echo "$label: installed ${missing[*]}"
