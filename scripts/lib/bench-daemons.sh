# shellcheck shell=bash
# Sourced by the benchmark scripts that run several hypicd on loopback (bench-peers.sh,
# bench-remote-tier.sh): a private work folder, removed with every started process on exit, and
# helpers to start a daemon and wait for its ports. Expects `bin` (hypicd's folder) and `models`
# (where builtin:small is generated) to be set; sets `work` and `pids`.
work=$(mktemp -d /tmp/hypic-bench-XXXXXX)
pids=()
bench_cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap bench_cleanup EXIT

# start_daemon NAME [hypicd flags...]: builtin:small on an ephemeral loopback port, its data in
# $work/NAME, its log in $work/NAME.log. DAEMON_LAUNCH (e.g. "taskset -c 0") goes before it.
# Not in a subshell, so that the cleanup sees its pid.
start_daemon() {
  local name=$1
  shift
  mkdir -p "$work/$name"
  # shellcheck disable=SC2086,SC2154 # DAEMON_LAUNCH is a command line; bin, models: the caller's
  ${DAEMON_LAUNCH:-} "$bin/hypicd" --model builtin:small --model-cache-dir "$models" \
    --data-dir "$work/$name" --listen 127.0.0.1:0 --ready-file "$work/$name.ready" \
    --metrics off --request-timeout-ms 600000 "$@" > "$work/$name.log" 2>&1 &
  pids+=($!)
}

# port_of NAME: the daemon's TCP port, once its ready file is written (120 s at most); exits
# with its log otherwise.
port_of() {
  for _ in $(seq 2400); do [ -s "$work/$1.ready" ] && break; sleep 0.05; done
  local port
  port=$(sed -n 's/^tcp=.*:\([0-9]*\)$/\1/p' "$work/$1.ready" 2> /dev/null)
  if [ -z "$port" ]; then
    echo "hypicd $1 did not start:" >&2
    cat "$work/$1.log" >&2
    exit 1
  fi
  echo "$port"
}

# unix_of NAME: the daemon's unix socket path.
unix_of() { sed -n 's/^unix=//p' "$work/$1.ready"; }
