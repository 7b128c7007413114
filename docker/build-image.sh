#!/usr/bin/env bash
# Build the lograft image (`make image`). Tries the registry path first (FROM the official slim
# Python image) and falls back to a local Debian base made with mmdebstrap and `docker import`
# when no registry answers; it says which it used. Python packages are wheels fetched or built
# on the host and installed in the image with --no-index (see docker/Dockerfile).
#
# Environment: LOGRAFT_IMAGE (default lograft:latest), LOGRAFT_REGISTRY_BASE (default
# python:3.11-slim-bookworm), LOGRAFT_LOCAL_BASE (default lograft-base:bookworm),
# PYTHON (default .venv/bin/python: any Python 3.11 with pip).
set -euo pipefail
cd "$(dirname "$0")/.."

image=${LOGRAFT_IMAGE:-lograft:latest}
registry_base=${LOGRAFT_REGISTRY_BASE:-python:3.11-slim-bookworm}
local_base=${LOGRAFT_LOCAL_BASE:-lograft-base:bookworm}
python=${PYTHON:-.venv/bin/python}
context=build/docker

say() { echo "make image: $*" >&2; }

case "$(uname -m)" in
  x86_64) platform=x86_64 ;;
  aarch64 | arm64) platform=aarch64 ;;
  *) say "unsupported machine $(uname -m)"; exit 1 ;;
esac

# 1. Wheels for the image's Python (3.11 on glibc): lograft itself, then its pinned runtime
# dependencies as binary wheels for that platform, whatever Python runs this script.
# lograft's wheel holds the C record codec built here (proto/lograft/protocol/_speedups.c), so it is tagged
# for this machine (linux_x86_64): Debian bookworm, the image's base, has the same glibc
# and Python minor version. A machine without a compiler builds a pure-Python wheel. The
# dependencies are fetched again only when constraints.txt or pyproject.toml changed.
rm -rf "$context/wheels/lograft"
mkdir -p "$context/wheels/lograft" "$context/wheels/dependencies"
"$python" -m pip wheel --quiet --no-deps --wheel-dir "$context/wheels/lograft" .
stamp="$context/wheels/dependencies/.pins"
pins=$(cat constraints.txt pyproject.toml | sha256sum | cut -d' ' -f1)
if [ "$(cat "$stamp" 2>/dev/null)" != "$pins" ]; then
  rm -rf "$context/wheels/dependencies"
  mkdir -p "$context/wheels/dependencies"
  "$python" -m pip download --quiet --dest "$context/wheels/dependencies" \
    --constraint constraints.txt \
    --only-binary=:all: --implementation cp --python-version 3.11 \
    --platform "manylinux_2_17_$platform" --platform "manylinux2014_$platform" \
    --platform "manylinux_2_28_$platform" --platform "linux_$platform" \
    "$context"/wheels/lograft/lograft-*.whl
  rm -f "$context"/wheels/dependencies/lograft-*.whl
  echo "$pins" >"$stamp"
fi
say "$(ls "$context/wheels/dependencies" | wc -l) dependency wheels in $context/wheels/dependencies"

# 2. The base: the registry's image if it can be pulled (or is already here), else ours.
if docker image inspect "$registry_base" >/dev/null 2>&1 \
  || pull_error=$(docker pull --quiet "$registry_base" 2>&1); then
  base=$registry_base
  how="registry base $registry_base"
else
  say "registry unreachable ($(echo "$pull_error" | tail -n 1)); using the local base $local_base"
  if ! docker image inspect "$local_base" >/dev/null 2>&1; then
    if ! command -v mmdebstrap >/dev/null 2>&1; then
      say "installing mmdebstrap (Debian package)"
      apt-get install --yes --quiet mmdebstrap >/dev/null
    fi
    say "building $local_base with mmdebstrap from this machine's apt sources"
    mkdir -p build
    rm -f build/base.tar
    # bookworm's python3 is 3.11, the version the wheels are for.
    # Documentation, man pages, translations and apt's caches are left out (about 60 MB).
    mmdebstrap --quiet --variant=minbase \
      --include=python3,python3-venv,ca-certificates,passwd \
      --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-include=/usr/share/doc/*/copyright' \
      --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/info/*' \
      --dpkgopt='path-exclude=/usr/share/locale/*' \
      --customize-hook='rm -rf "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/* "$1"/var/log/*' \
      bookworm build/base.tar
    docker import --change 'ENV LANG=C.UTF-8' build/base.tar "$local_base" >/dev/null
    rm -f build/base.tar
  fi
  base=$local_base
  how="local base $local_base (mmdebstrap + docker import)"
fi

# 3. The image.
revision=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
docker build --quiet --build-arg "BASE_IMAGE=$base" --build-arg "LOGRAFT_REVISION=$revision" \
  --tag "$image" --file docker/Dockerfile "$context" >/dev/null
# What each build leaves untagged: its install stage and the image it replaced under the tag.
# The dependencies stage stays: it is the cache that spares reinstalling them next time.
docker image prune --force --filter label=lograft.stage=install >/dev/null
docker image prune --force --filter label=lograft.stage=image >/dev/null
size=$(docker image inspect --format '{{.Size}}' "$image")
say "built $image from the $how; $((size / 1024 / 1024)) MiB"
