#!/usr/bin/env bash
# The remote tier's TTFT (docs/benchmarks.md, "Remote tier"): one COMPOSE of 16 x 1024-token
# segments plus a 16-token raw suffix on builtin:small, served five ways side by side in one
# session, RUNS times with a fresh prompt each time:
#   recompute   daemon A, cold: every segment prefilled (and written to Redis)
#   remote      daemon B (its own data dir): every segment read from Redis, verified and put
#               into its RAM tier before the compose
#   remote_ssd  daemon C (RAM tier off): the same, put into its SSD tier
#   ssd         daemon C again: every segment an SSD hit
#   ram         daemon A again: every segment a RAM hit
# Three hypicd share one private redis-server on loopback. Prints one line per run and the
# medians; the times are the client's, request sent to last reply byte (hypicctl --json reply_s).
# Usage: scripts/bench-remote-tier.sh [RUNS]   (HYPIC_BIN_DIR: folder with hypicd, hypicctl)
set -euo pipefail
runs=${1:-5}
bin=${HYPIC_BIN_DIR:-$(cd "$(dirname "$0")/.." && pwd)/build/bin}
models=${HYPIC_MODEL_CACHE:-/tmp/hypic-models}
# shellcheck source-path=SCRIPTDIR source=lib/bench-daemons.sh
. "$(dirname "$0")/lib/bench-daemons.sh"

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
rport=$(free_port)
redis-server --port "$rport" --bind 127.0.0.1 --save "" --appendonly no --maxmemory 4gb \
  --maxmemory-policy allkeys-lru > "$work/redis.log" 2>&1 &
pids+=($!)
until redis-cli -p "$rport" ping > /dev/null 2>&1; do sleep 0.05; done

remote() {  # name, extra flags...: a daemon on the shared Redis
  local name=$1
  shift
  start_daemon "$name" --ssd-capacity 2GiB --remote-store "redis://127.0.0.1:$rport" \
    --remote-min-tokens 0 "$@"
}
remote a --ram-capacity 2GiB
remote b --ram-capacity 2GiB
remote c --ram-capacity 0
port_a=$(port_of a)
port_b=$(port_of b)
port_c=$(port_of c)
compose() {  # port, parts file -> "seconds hits"
  "$bin/hypicctl" compose --host 127.0.0.1 --port "$1" "$2" --json --timeout 600 |
    python3 -c 'import json,sys; j=json.load(sys.stdin); print("%.4f %d %s" % (j["reply_s"], sum(p["outcome"]=="hit" for p in j["parts"]), ",".join(sorted({p["tier"] for p in j["parts"] if p["outcome"]=="hit"})) or "-"))'
}

echo "run recompute_s remote_s remote_ssd_s ssd_s ram_s (hits and tiers of each)"
for run in $(seq 1 "$runs"); do
  parts="$work/parts-$run.jsonl"
  python3 - "$run" > "$parts" <<'PY'
import json, random, sys
rng = random.Random(int(sys.argv[1]))
for _ in range(16):
    print(json.dumps([rng.randrange(256) for _ in range(1024)]))
print(json.dumps([rng.randrange(256) for _ in range(16)]))
PY
  read -r cold cold_hits _ < <(compose "$port_a" "$parts")
  want=$((16 * run))
  until [ "$(redis-cli -p "$rport" --scan --pattern 'hypic:*:m' | wc -l)" -ge "$want" ]; do sleep 0.05; done
  read -r remote remote_hits remote_tiers < <(compose "$port_b" "$parts")
  read -r rssd rssd_hits rssd_tiers < <(compose "$port_c" "$parts")
  read -r ssd ssd_hits ssd_tiers < <(compose "$port_c" "$parts")
  read -r ram ram_hits ram_tiers < <(compose "$port_a" "$parts")
  echo "$run $cold $remote $rssd $ssd $ram ($cold_hits; $remote_hits $remote_tiers;" \
    "$rssd_hits $rssd_tiers; $ssd_hits $ssd_tiers; $ram_hits $ram_tiers)"
done | tee "$work/runs.txt"
python3 - "$work/runs.txt" <<'PY'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1]) if l[0].isdigit()]
cols = ["recompute", "remote", "remote_ssd", "ssd", "ram"]
med = {c: statistics.median(float(r[i + 1]) for r in rows) for i, c in enumerate(cols)}
print("median " + " ".join(f"{c} {med[c]:.4f} s" for c in cols))
print(f"remote hit: {med['recompute'] / med['remote']:.1f}x faster than recompute, "
      f"{med['remote'] / med['ssd']:.2f}x the SSD hit's time, {med['remote'] / med['ram']:.2f}x the RAM hit's")
PY
echo "daemon B's tiers:"
"$bin/hypicctl" stats --unix "$(unix_of b)" | sed -n '/^tiers/,/^$/p'
