#!/usr/bin/env bash
# Crash tests (RELIABILITY.md row 1).
#   scripts/crash-test.sh N [DIR]           the tiered store in process (hypic-stress)
#   scripts/crash-test.sh --daemon N [DIR]  hypicd itself (docs/operations-server.md)
#
# Store mode (docs/operations-storage.md):
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
#
# Daemon mode: N cycles of: start hypicd on the same data dir (the tiny builtin model, a small
# RAM tier over a 2 GiB SSD tier, a local tenant with `write`), check the restarted daemon
# (hypic-stress daemon-verify), run `hypic-stress daemon-load` against it (PUT of 1-16 MiB
# entries, GET, PREFILL, COMPOSE by key, FLUSH, over the unix socket), and kill -9 hypicd at a
# random moment; after the last kill it is started and checked once more.
# Pass: every restart writes its ready file (it is listening) within 5 s; 0 reads (during the
# load or after a restart) return bytes that differ from what was put or fail their checksum;
# every entry acknowledged before an acknowledged FLUSH survives; no restart quarantined the
# DB (no fault is planted). Prints: cycles, entries written (acknowledged PUTs), distinct keys,
# survived, corrupt reads caught (copies the store dropped: STATS checksum_failures + VERIFY),
# quarantines. Extra environment: HYPIC_CRASH_MODEL_CACHE (where builtin:tiny is generated;
# default DIR/models), HYPIC_CRASH_MAX_MS (default 3000 here).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
field() { sed -n "s/.*\b$1=\([0-9.]*\).*/\1/p" <<<"$2"; }
num() { local v; v=$(field "$1" "$2"); echo "${v:-0}"; }
now_ms() { echo $(($(date +%s%N) / 1000000)); }

# Daemon mode (see the top). Returns the exit status of the whole run.
daemon_mode() {
  local cycles=${1:?usage: crash-test.sh --daemon N [DIR]}
  local bindir=${HYPIC_BIN_DIR:-$root/build/bin} dir cleanup
  for b in hypicd hypic-stress; do
    [[ -x $bindir/$b ]] || { echo "crash-test: $bindir/$b not found (set HYPIC_BIN_DIR)" >&2; return 2; }
  done
  dir=${2:-$(mktemp -d /tmp/hypic-dcrash.XXXXXX)}
  cleanup=$([[ $# -ge 2 ]] && echo no || echo yes)
  mkdir -p "$dir"
  local data=$dir/data
  printf '[[tenant]]\nname = "local"\nops = ["read", "compute", "write"]\n' >"$dir/hypicd.toml"
  local daemon=(--data-dir "$data" --listen 127.0.0.1:0 --metrics off --ready-file "$dir/ready"
                --ram-capacity 96MiB --ssd-capacity 2GiB --model builtin:tiny
                --model-cache-dir "${HYPIC_CRASH_MODEL_CACHE:-$dir/models}" --config "$dir/hypicd.toml")
  local logs=(--address "unix:$data/hypicd.sock" --keys 48 --min-mib "${HYPIC_CRASH_MIN_MIB:-1}"
              --max-mib "${HYPIC_CRASH_MAX_MIB:-16}" --ack-log "$dir/ack.log" --flush-log "$dir/flush.log")
  local max_ms=${HYPIC_CRASH_MAX_MS:-3000}
  local written=0 survived=0 keys=0 caught=0 bad=0 quarantines=0 failed=0 seen=0
  local i dpid lpid t0 ready_ms out n
  for ((i = 0; i <= cycles; i++)); do
    rm -f "$dir/ready"
    t0=$(now_ms)
    "$bindir/hypicd" "${daemon[@]}" >>"$dir/hypicd.log" 2>&1 &
    dpid=$!
    # The first start may generate the model; a restart must be listening within 5 s.
    while [[ ! -e $dir/ready ]] && kill -0 "$dpid" 2>/dev/null && (($(now_ms) - t0 < 60000)); do
      sleep 0.02
    done
    ready_ms=$(($(now_ms) - t0))
    if [[ ! -e $dir/ready ]]; then
      echo "restart $i: hypicd did not start: $(tail -5 "$dir/hypicd.log")"
      failed=1
      kill -9 "$dpid" 2>/dev/null || true
      break
    fi
    n=$(find "$data" -maxdepth 1 -name 'ssd.quarantine-*' | wc -l)
    if ((n > seen)); then
      echo "restart $i: the DB was quarantined: $(grep -m1 -i quarantin "$dir/hypicd.log")"
      quarantines=$((quarantines + n - seen))
      seen=$n
    fi
    if ((i > 0)); then
      ((ready_ms <= 5000)) || { echo "restart $i: ready after ${ready_ms} ms (> 5000)"; failed=1; }
      if ! out=$("$bindir/hypic-stress" daemon-verify "${logs[@]}" 2>"$dir/verify.err"); then
        echo "restart $i: VERIFY FAILED: $out $(tail -3 "$dir/verify.err")"
        failed=1
      fi
      echo "restart $i (ready in ${ready_ms} ms): $out"
      keys=$(field acked "$out")
      survived=$(field surviving "$out")
      bad=$((bad + $(num bad "$out")))
      caught=$(($(num checksum_failures "$out") + $(num verify_bad "$out")))
    fi
    if ((i == cycles)); then
      kill -TERM "$dpid" 2>/dev/null || true
      wait "$dpid" 2>/dev/null || true
      break
    fi
    "$bindir/hypic-stress" daemon-load "${logs[@]}" --seed "$((i + 1))" >"$dir/load.log" 2>&1 &
    lpid=$!
    sleep "$(awk -v r=$RANDOM -v m="$max_ms" 'BEGIN { printf "%.3f", (500 + r % (m - 499)) / 1000 }')"
    kill -9 "$dpid" 2>/dev/null || true
    wait "$dpid" 2>/dev/null || true
    wait "$lpid" 2>/dev/null || true
    out=$(tail -1 "$dir/load.log")
    echo "cycle $((i + 1)): load: $out"
    [[ $out == ops=* ]] || { echo "cycle $((i + 1)): the load failed: $(tail -3 "$dir/load.log")"; failed=1; }
    written=$((written + $(num acked "$out")))
    bad=$((bad + $(num bad "$out")))
  done
  echo "crash-test --daemon: cycles=$cycles entries_written=$written distinct_keys=$keys" \
       "survived=$survived corrupt_reads_caught=$caught bad_reads=$bad quarantines=$quarantines"
  if [[ $failed -ne 0 || $bad -ne 0 || $quarantines -ne 0 ]]; then
    echo "crash-test --daemon: FAIL (data dir and logs kept in $dir)"
    return 1
  fi
  [[ $cleanup == yes ]] && rm -rf "$dir"
  echo "crash-test --daemon: PASS"
}

if [[ ${1:-} == --daemon ]]; then
  shift
  daemon_mode "$@"
  exit
fi
cycles=${1:?usage: crash-test.sh [--daemon] N [DIR]}
bin=${HYPIC_BIN_DIR:-$root/build/bin}/hypic-stress
[[ -x $bin ]] || { echo "crash-test: $bin not found (build hypic-stress or set HYPIC_BIN_DIR)" >&2; exit 2; }
dir=${2:-$(mktemp -d /tmp/hypic-crash.XXXXXX)}
cleanup_dir=$([[ $# -ge 2 ]] && echo no || echo yes)
mkdir -p "$dir"
store=(--dir "$dir" --keys 64 --min-mib "${HYPIC_CRASH_MIN_MIB:-1}" --max-mib "${HYPIC_CRASH_MAX_MIB:-16}"
       --ssd-mib "${HYPIC_CRASH_SSD_MIB:-512}" --host-mib 64 --placement ssd
       --wal "${HYPIC_CRASH_WAL:-async}")
max_ms=${HYPIC_CRASH_MAX_MS:-2500}

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
