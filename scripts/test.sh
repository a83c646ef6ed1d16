#!/usr/bin/env bash
# The README's test command: installs dependencies, configures, builds, and runs every test
# through ctest. Set BUILD_DIR to reuse a build; extra arguments go to ctest (e.g. -R key).
# Tests labelled `long` (many crash cycles, long fuzzing) run only with HYPIC_LONG=1.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/install-deps.sh"
build_dir=${BUILD_DIR:-$root/build}
BUILD_DIR=$build_dir "$root/scripts/build.sh"
cd "$build_dir"
label_filter=(-LE long)
if [ "${HYPIC_LONG:-0}" = "1" ]; then label_filter=(); fi
ctest --output-on-failure -j "${JOBS:-$(nproc)}" --timeout 900 "${label_filter[@]}" "$@"
