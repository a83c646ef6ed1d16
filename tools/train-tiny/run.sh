#!/usr/bin/env bash
# Runs train_tiny.py with Debian's interpreter at the lowest CPU priority, on Debian's
# OpenBLAS when it is installed (scripts/install-deps.sh --train installs it): the reference
# BLAS that Debian may have selected as libblas.so.3 is about 10x slower for these GEMMs.
#   tools/train-tiny/run.sh SUBCOMMAND [ARGS...]     (see train_tiny.py --help)
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
openblas=/usr/lib/x86_64-linux-gnu/openblas-pthread
if [ -e "$openblas/libblas.so.3" ]; then
  export LD_LIBRARY_PATH="$openblas${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi
export OPENBLAS_NUM_THREADS="${OPENBLAS_NUM_THREADS:-1}" OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}"
exec nice -n 19 /usr/bin/python3 "$here/train_tiny.py" "$@"
