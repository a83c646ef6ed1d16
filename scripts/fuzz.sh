#!/usr/bin/env bash
# Builds the libFuzzer targets with clang (ASan + UBSan + libFuzzer, CPU only) into
# BUILD_DIR (default ./build-fuzz) and runs each one for FUZZ_SECONDS (default 60) on a copy of
# its seed corpus (tests/fuzz/corpus/NAME stays as committed). A crash stops the script with the
# fuzzer's report; the input is kept in BUILD_DIR/fuzz-artifacts. Once the bug is fixed, add the
# input to the corpus, so every build replays it. Run by .ci/run with HYPIC_LONG=1; by hand: scripts/fuzz.sh [NAME...]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build_dir=${BUILD_DIR:-$root/build-fuzz}
seconds=${FUZZ_SECONDS:-60}
if [ $# -gt 0 ]; then
  targets=("$@")
else
  mapfile -t targets < <(cd "$root/tests/fuzz/corpus" && ls)
fi
BUILD_DIR=$build_dir BUILD_TYPE=RelWithDebInfo TARGETS="${targets[*]/%/_fuzzer}" \
  "$root/scripts/build.sh" -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
  -DHYPIC_CUDA=OFF -DHYPIC_FUZZ=ON "-DHYPIC_SANITIZE=address;undefined"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
artifacts=$build_dir/fuzz-artifacts
mkdir -p "$artifacts"
for name in "${targets[@]}"; do
  echo "== fuzz $name for ${seconds}s"
  mkdir -p "$work/$name"
  cp -r "$root/tests/fuzz/corpus/$name/." "$work/$name/"
  ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
    "$build_dir/bin/${name}_fuzzer" "$work/$name" -max_total_time="$seconds" \
    -print_final_stats=1 -rss_limit_mb=4096 -artifact_prefix="$artifacts/$name-" \
    >"$work/$name.log" 2>&1 || {
    tail -n 60 "$work/$name.log"
    echo "fuzz: $name failed; the input is in $artifacts" >&2
    exit 1
  }
  grep -E "^stat::(number_of_executed_units|new_units_added)" "$work/$name.log" || true
done
echo "fuzz: ${#targets[@]} targets, ${seconds}s each, no crash"
