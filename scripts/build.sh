#!/usr/bin/env bash
# Configures and builds hypic into BUILD_DIR (default ./build). Extra arguments go to cmake's
# configure step, e.g. scripts/build.sh -DHYPIC_CUDA=OFF. TARGETS (space-separated) builds only
# those targets.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build_dir=${BUILD_DIR:-$root/build}
jobs=${JOBS:-$(nproc)}
# ccache (when installed) keys on paths relative to the checkout, so a fresh clone in another
# folder -- as CI makes -- reuses the objects of an earlier build of the same sources.
export CCACHE_DIR=${CCACHE_DIR:-$HOME/.cache/hypic-ccache}
export CCACHE_BASEDIR=$root
export CCACHE_NOHASHDIR=true
export CCACHE_MAXSIZE=${CCACHE_MAXSIZE:-8G}
cmake -S "$root" -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE="${BUILD_TYPE:-RelWithDebInfo}" \
  -DHYPIC_WERROR="${HYPIC_WERROR:-OFF}" "$@"
# shellcheck disable=SC2086 # TARGETS is a list
cmake --build "$build_dir" -j "$jobs" ${TARGETS:+--target $TARGETS}
