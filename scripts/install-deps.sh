#!/usr/bin/env bash
# Installs every Debian package that hypic's build, tests and tools need. Idempotent: when
# everything is present it only runs dpkg-query and returns in about a second.
#
#   scripts/install-deps.sh [--train]
#
# --train (or HYPIC_TRAIN_DEPS=1) also installs Debian's python3-torch and OpenBLAS (torch's
# GEMMs on the reference BLAS are ~10x slower; tools/train-tiny/run.sh loads OpenBLAS for its
# own process), which only tools/train-tiny needs; the daemon, the build and the tests never do.
set -euo pipefail

TRAIN="${HYPIC_TRAIN_DEPS:-0}"
for arg in "$@"; do
  case "$arg" in
    --train) TRAIN=1 ;;
    *) echo "install-deps: unknown argument '$arg' (want --train)" >&2; exit 2 ;;
  esac
done

PACKAGES=(
  build-essential cmake ninja-build pkg-config ccache git
  clang clang-format libclang-rt-14-dev
  librocksdb-dev libboost-dev libxxhash-dev libfmt-dev doctest-dev nlohmann-json3-dev
  libspdlog-dev libcli11-dev libtomlplusplus-dev libdnnl-dev prometheus-cpp-dev
  gnuplot-nox python3 python3-numpy python3-yaml redis-server redis-tools libhiredis-dev
)
if [ "$TRAIN" = "1" ]; then PACKAGES+=(python3-torch libopenblas0-pthread); fi

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#PACKAGES[@]} packages present"
  exit 0
fi

echo "install-deps: installing ${missing[*]}"
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
