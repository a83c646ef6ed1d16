#!/usr/bin/env bash
# The README's serve command: installs dependencies, builds, and starts hypicd on the embedded
# default model (builtin:small) with a local data directory (./hypic-data). Extra arguments go
# to hypicd (see `hypicd --help`).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/install-deps.sh"
build_dir=${BUILD_DIR:-$root/build}
BUILD_DIR=$build_dir "$root/scripts/build.sh"
if [ ! -x "$build_dir/bin/hypicd" ]; then
  echo "serve: $build_dir/bin/hypicd was not built; see the build output above." >&2
  exit 1
fi
exec "$build_dir/bin/hypicd" --model builtin:small --data-dir "${HYPIC_DATA_DIR:-$root/hypic-data}" "$@"
