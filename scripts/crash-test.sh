#!/usr/bin/env bash
# Crash test of the tiered store (RELIABILITY.md row 1; docs/operations-storage.md).
#   scripts/crash-test.sh N [DIR]
# N cycles of: start a hypic-stress writer (mixed put/get/probe/evict/pin/flush on 1-16 MiB
# entries, placed on the SSD tier), kill -9 it at a random moment, reopen the store and verify
# every stored and every acknowledged entry. The store and the ack log carry over between
# cycles, so damage from one kill meets the next.
# Pass: every reopen succeeds within 5 s and 0 reads return bytes that fail their checksum or
# differ from what was put. Misses are allowed. Prints the counts: entries written (acknowledged
# puts, and the distinct keys they cover), surviving (acknowledged keys still readable; the
# workload also evicts), corrupt reads caught.
# Environment: HYPIC_BIN_DIR (where hypic-stress is; default build/bin), HYPIC_CRASH_MIN_MIB,
# HYPIC_CRASH_MAX_MIB (entry sizes; default 1 and 16), HYPIC_CRASH_SSD_MIB (default 512),
# HYPIC_CRASH_MAX_MS (longest run before the kill; default 2500), HYPIC_CRASH_WAL (async).
set -euo pipefail
cycles=${1:?usage: crash-test.sh N [DIR]}
root=$(cd "$(dirname "$0")/.." && pwd)
bin=${HYPIC_BIN_DIR:-$root/build/bin}/hypic-stress
[[ -x $bin ]] || { echo "crash-test: $bin not found (build hypic-stress or set HYPIC_BIN_DIR)" >&2; exit 2; }
dir=${2:-$(mktemp -d /tmp/hypic-crash.XXXXXX)}
cleanup_dir=$([[ $# -ge 2 ]] && echo no || echo yes)
mkdir -p "$dir"
store=(--dir "$dir" --keys 64 --min-mib "${HYPIC_CRASH_MIN_MIB:-1}" --max-mib "${HYPIC_CRASH_MAX_MIB:-16}"
       --ssd-mib "${HYPIC_CRASH_SSD_MIB:-512}" --host-mib 64 --placement ssd
       --wal "${HYPIC_CRASH_WAL:-async}")
max_ms=${HYPIC_CRASH_MAX_MS:-2500}

field() { sed -n "s/.*\b$1=\([0-9.]*\).*/\1/p" <<<"$2"; }

written=0 keys=0 surviving=0 caught=0 bad=0 failed=0
for ((i = 1; i <= cycles; i++)); do
  "$bin" run "${store[@]}" --threads 2 --ops 0 --seconds 3600 --seed "$i" \
    --ack-log "$dir/ack.log" >"$dir/writer.log" 2>&1 &
  pid=$!
  sleep "$(awk -v r=$RANDOM -v m="$max_ms" 'BEGIN { printf "%.3f", (200 + r % (m - 199)) / 1000 }')"
  kill -9 "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
  if ! out=$("$bin" verify "${store[@]}" --ack-log "$dir/ack.log" 2>"$dir/verify.err"); then
    echo "cycle $i: VERIFY FAILED: $out $(tail -3 "$dir/verify.err")"
    failed=1
  fi
  [[ -n $out ]] || { echo "cycle $i: the store did not reopen: $(tail -3 "$dir/verify.err")"; failed=1; continue; }
  echo "cycle $i: $out"
  written=$(field acked_puts "$out")
  keys=$(field acked "$out")
  surviving=$(field surviving "$out")
  caught=$((caught + $(field checksum_failures "$out")))
  bad=$((bad + $(field bad "$out")))
  open_ms=$(field open_ms "$out")
  if awk -v t="$open_ms" 'BEGIN { exit !(t > 5000) }'; then
    echo "cycle $i: reopen took ${open_ms} ms (> 5000)"
    failed=1
  fi
done
echo "crash-test: cycles=$cycles entries_written=$written distinct_keys=$keys surviving=$surviving" \
     "corrupt_reads_caught=$caught bad_reads=$bad"
if [[ $failed -ne 0 || $bad -ne 0 ]]; then
  echo "crash-test: FAIL (store kept in $dir)"
  exit 1
fi
[[ $cleanup_dir == yes ]] && rm -rf "$dir"
echo "crash-test: PASS"
