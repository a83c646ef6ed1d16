#!/usr/bin/env bash
# Issue 14's prefill and compose figures, side by side with llama.cpp in one session, on
# builtin:small (anchor-small, a bf16 checkpoint) at THREADS threads (default 2):
#   1. hypic full prefill at 2,048 tokens and, with warm compose, 16 x 1024 + 32 tokens
#      (hypic-bench compose --json, which also measures the oneDNN fp32/bf16 GEMM peaks): the
#      compose a median of 15 (of 3 it moved by a third with the machine's slow phases), with
#      f32 entries and with hypicd's default ones (bf16, T in f32); and the compose again, each
#      after 200 ms of idle (--pause-ms 200: a request reaching an idle process);
#   2. llama.cpp's prefill of the same weights at 2,048 and 16,416 tokens (tools/llama-peer,
#      after its logits check on f32 weights), f32 and bf16 GGUFs;
#   3. the ratios the issue sets targets for.
# Prints the CPU model, date and the kernels chosen. Needs a build (scripts/build.sh).
#   scripts/bench-peer.sh [--quick]    # --quick: 2,048 tokens only, for a smoke run
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bin=${HYPIC_BIN_DIR:-$root/build/bin}
threads=${THREADS:-2}
models=${HYPIC_MODEL_CACHE:-/tmp/hypic-models}
out=${OUT_DIR:-$(mktemp -d /tmp/hypic-bench-peer.XXXXXX)}
quick=0
[ "${1:-}" = "--quick" ] && quick=1

echo "date: $(date -u +%Y-%m-%dT%H:%MZ)  cpu: $(lscpu | sed -n 's/^Model name: *//p')  threads: $threads"
echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"

"$bin/hypic-bench" compose --model builtin:small --cache-dir "$models" --segments 2 \
  --segment-len 1008 --suffix 32 --modes full --reps 3 --t-segments 0 --threads "$threads" \
  --json > "$out/hypic-2048.json"
if [ $quick = 0 ]; then
  "$bin/hypic-bench" compose --model builtin:small --cache-dir "$models" --segments 16 \
    --segment-len 1024 --suffix 32 --seam 8 --modes full,hypic --reps 15 --full-reps 3 \
    --t-segments 4 --entry-dtype f32 --entry-dtype bf16,t=f32 --threads "$threads" --json \
    > "$out/hypic-16416.json"
  # The same compose reaching an idle process (each after 200 ms without work): what a sidecar
  # with sporadic requests sees (docs/benchmarks.md, "A warm compose is timed back to back").
  "$bin/hypic-bench" compose --model builtin:small --cache-dir "$models" --segments 16 \
    --segment-len 1024 --suffix 32 --seam 8 --modes hypic --reps 9 --full-reps 1 \
    --t-segments 0 --pause-ms 200 --threads "$threads" --json > "$out/hypic-16416-idle.json"
fi
small_dir=$(ls -d "$models"/builtin-small-* | head -1)
peer_tokens=2048
[ $quick = 0 ] && peer_tokens=2048,16416
HYPIC_BIN_DIR=$bin "$root/tools/llama-peer/run.sh" --model "$small_dir" --tokens "$peer_tokens" \
  --threads "$threads" --reps 3 --dtypes f32,bf16 --check --json > "$out/llama.json"
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"

/usr/bin/python3 - "$out" <<'PY'
import json, os, sys
out = sys.argv[1]
def load(name):
    p = os.path.join(out, name)
    return json.load(open(p)) if os.path.exists(p) else None
h2k, h16k, peer = load("hypic-2048.json"), load("hypic-16416.json"), load("llama.json")
idle = load("hypic-16416-idle.json")
print(f"gemm: {h2k['gemm']}")
fp = h2k["full_prefill"]
print(f"GEMM peaks (same run): f32 {fp['f32_gemm_peak_gflops']:.0f} GFLOP/s, bf16 {fp['bf16_gemm_peak_gflops']:.0f}")
def best_peer(tokens):
    rates = {}
    for r in peer.get("results", []):
        if r.get("n_prompt") == tokens:
            rates[r["dtype"]] = r["tokens_per_s"]
    return rates
ours = fp["tokens_per_s"]
peer2k = best_peer(2048)
best = max(peer2k.values()) if peer2k else float("nan")
print(f"pp2048: hypic {ours:.0f} tokens/s ({100*fp['fraction_of_bf16_peak']:.0f}% of the bf16 peak); "
      f"llama.cpp {', '.join(f'{k} {v:.0f}' for k, v in sorted(peer2k.items()))} -> {ours/best:.2f}x its best (target >= 2x)")
if h16k:
    f16 = h16k["full_prefill"]
    hy = h16k["modes"]["hypic"]
    full_ms = 1e3 * h16k["tokens"] / f16["tokens_per_s"]
    peer16 = best_peer(16416)
    print(f"full prefill 16,416 tokens: {f16['tokens_per_s']:.0f} tokens/s, {100*f16['fraction_of_bf16_peak']:.0f}% of the bf16 peak (target >= 60%)")
    print(f"warm compose 16 x 1024 + 32: {hy['ttft_ms']:.1f} ms, {hy['speedup_vs_full']:.1f}x our full prefill (target >= 50x), KL {hy['kl_vs_full']:.2e}")
    for p in h16k.get("entry_precision", [])[1:]:  # the f32 entries are the line above
        print(f"  with {p['entry_dtype']} entries (hypicd's default: bf16,t=f32): {p['hypic_ttft_ms']:.1f} ms, "
              f"{full_ms/p['hypic_ttft_ms']:.1f}x, KL {p['kl_vs_full']:.2e}")
    if peer16:
        lbest = max(peer16.values())
        print(f"  llama.cpp prefill of it: {1e3*16416/lbest:.0f} ms at its best ({', '.join(f'{k} {v:.0f}' for k, v in sorted(peer16.items()))} tokens/s) -> compose {1e3*16416/lbest/hy['ttft_ms']:.0f}x faster (target >= 100x)")
    if idle:
        ms = idle["modes"]["hypic"]["ttft_ms"]
        print(f"  after 200 ms idle (--pause-ms 200, f32 entries): {ms:.1f} ms, {full_ms/ms:.1f}x the full prefill above")
    print(f"T overhead: {h16k['t_overhead_pct']:.1f}% wall (target <= 3%)")
print(f"raw results: {out}")
PY
