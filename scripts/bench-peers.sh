#!/usr/bin/env bash
# Peer daemons as scatter workers (docs/benchmarks.md, "Peer daemons"): one cold COMPOSE of
# SEGMENTS x 1024-token segments plus a 16-token raw suffix on builtin:small, RUNS times with a
# fresh prompt each time, served two ways side by side:
#   one   hypicd S alone, pinned to core 0, one prefill worker of one compute thread
#   two   hypicd R (the router, pinned to core 0, one worker) with hypicd P as its peer (pinned
#         to core 1, one worker): R's scheduler assigns the misses by LPT over both
# Before the runs, one small cold compose on R calibrates the peer's speed (its EMA of tokens/s).
# Per run it prints the client's time (request sent to last reply byte, hypicctl --json
# reply_s), the reply's own timings (prefill: the scatter's wall time; compose: the combine;
# other: probe, transfers, the router's verification and stores, the reply) and how many
# segments the peer computed; then the medians, the speedup and the efficiency
# (one / (2 x two)). Needs 2 cores (taskset).
# Usage: scripts/bench-peers.sh [RUNS] [SEGMENTS]   (HYPIC_BIN_DIR: folder with hypicd, hypicctl;
# HYPIC_MODEL_CACHE: where builtin:small is generated)
set -euo pipefail
runs=${1:-3}
segments=${2:-32}
bin=${HYPIC_BIN_DIR:-$(cd "$(dirname "$0")/.." && pwd)/build/bin}
models=${HYPIC_MODEL_CACHE:-/tmp/hypic-models}
# shellcheck source-path=SCRIPTDIR source=lib/bench-daemons.sh
. "$(dirname "$0")/lib/bench-daemons.sh"
if [ "$(nproc)" -lt 2 ]; then
  echo "bench-peers: needs 2 cores (one per daemon), this machine has $(nproc)" >&2
  exit 2
fi

pinned() {  # name, core, extra flags...
  local name=$1 core=$2
  shift 2
  DAEMON_LAUNCH="taskset -c $core" start_daemon "$name" --ram-capacity 4GiB \
    --ssd-capacity 4GiB --prefill-workers 1 --peer-timeout-ms 600000 "$@"
}
pinned s 0
pinned p 1
port_s=$(port_of s)
port_p=$(port_of p)
pinned r 0 --peers "127.0.0.1:$port_p"
port_r=$(port_of r)

prompt() {  # seed, segments -> a parts file
  python3 - "$1" "$2" > "$work/parts-$1.jsonl" <<'PY'
import json, random, sys
rng = random.Random(int(sys.argv[1]))
for _ in range(int(sys.argv[2])):
    print(json.dumps([rng.randrange(256) for _ in range(1024)]))
print(json.dumps([rng.randrange(256) for _ in range(16)]))
PY
  echo "$work/parts-$1.jsonl"
}
peer_jobs() {
  "$bin/hypicctl" stats --json --unix "$(unix_of r)" |
    python3 -c 'import json,sys; print(sum(p["jobs"] for p in json.load(sys.stdin).get("peers", [])))'
}
compose() {  # port, parts file -> "reply_s prefill_s compose_s other_s misses"
  "$bin/hypicctl" compose --host 127.0.0.1 --port "$1" "$2" --json --timeout 600 |
    python3 -c '
import json, sys
j = json.load(sys.stdin)
prefill, combine = j["prefill_us"] / 1e6, j["compose_us"] / 1e6
misses = sum(p["outcome"] == "miss" for p in j["parts"])
print("%.3f %.3f %.3f %.3f %d" % (j["reply_s"], prefill, combine, j["reply_s"] - prefill - combine, misses))'
}

compose "$port_r" "$(prompt 1000 4)" > /dev/null  # calibrates R's estimate of the peer
echo "cpu: $(sed -n 's/^model name[^:]*: //p' /proc/cpuinfo | head -1), $(date -u '+%Y-%m-%d %H:%M UTC')"
echo "run one_s (prefill compose other) two_s (prefill compose other) peer_segments misses"
for run in $(seq 1 "$runs"); do
  read -r one one_p one_c one_o one_m < <(compose "$port_s" "$(prompt "$run" "$segments")")
  before=$(peer_jobs)
  read -r two two_p two_c two_o two_m < <(compose "$port_r" "$(prompt "$((run + 500))" "$segments")")
  echo "$run $one ($one_p $one_c $one_o) $two ($two_p $two_c $two_o) $(($(peer_jobs) - before))" \
    "$one_m/$two_m"
done | tee "$work/runs.txt"
python3 - "$work/runs.txt" <<'PY'
import statistics, sys
rows = [l.replace("(", " ").replace(")", " ").split() for l in open(sys.argv[1]) if l[0].isdigit()]
med = lambda i: statistics.median(float(r[i]) for r in rows)
one, two = med(1), med(5)
print(f"median one {one:.3f} s (prefill {med(2):.3f}, compose {med(3):.3f}, other {med(4):.3f})")
print(f"median two {two:.3f} s (prefill {med(6):.3f}, compose {med(7):.3f}, other {med(8):.3f});"
      f" peer took {med(9):.0f} segments")
print(f"speedup {one / two:.2f}x, efficiency {one / (2 * two):.3f}")
PY
