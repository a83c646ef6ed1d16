#!/usr/bin/env bash
# Configures and builds hypic into BUILD_DIR (default ./build). Extra arguments go to cmake's
# configure step, e.g. scripts/build.sh -DHYPIC_CUDA=OFF.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build_dir=${BUILD_DIR:-$root/build}
jobs=${JOBS:-$(nproc)}
cmake -S "$root" -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE="${BUILD_TYPE:-RelWithDebInfo}" \
  -DHYPIC_WERROR="${HYPIC_WERROR:-OFF}" "$@"
cmake --build "$build_dir" -j "$jobs"
