#!/usr/bin/env bash
# The device check (issue 15 §8, docs/gpu.md), in two halves:
#
#   scripts/gpu-check.sh stage   on the development machine: a CUDA build (sm_90 + PTX, generic
#                                x86-64-v3 host code so it runs on any recent host CPU), the
#                                device test binaries, hypicd and hypic-bench stripped, and the
#                                non-system, non-CUDA shared libraries they load, packed into
#                                gpu-check/pack.tar.xz (git-ignored; refused above 60 MiB).
#   scripts/gpu-check.sh run     on the GPU machine (no package manager there; it has the CUDA
#                                13 toolkit and driver): nvidia-smi, ldd of every binary, the
#                                conformance tests, compute-sanitizer memcheck on the linear and
#                                model tests, hypic-bench compose --device cuda on builtin:small
#                                (16 x 1024 + 32, w = 8), the full prefill's TFLOP/s beside a
#                                PyTorch bf16 GEMM peak. Everything goes under $OUT (default
#                                ./gpu-check-out); each step has a time cap, 8 minutes in all.
#
# With the device tool: stage here, then run `scripts/gpu-check.sh run` with carry ["gpu-check"].
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
staged=$root/gpu-check          # what travels: pack.tar.xz
pack=${GPU_CHECK_DIR:-/tmp/hypic-gpu-check}   # where it is unpacked (stage builds it here too)
tests=(backend_test linear_cuda_conformance_test linear_chunk_math_test model_cuda_forward_test
       model_attention_tile_math_test runtime_worker_test runtime_transport_test
       runtime_miss_scheduler_test runtime_cold_compose_test device_e2e_test
       model_entry_precision_test tier_test)
tools=(hypicd hypic-bench)
max_mib=60

stage() {
  local build=${BUILD_DIR:-$root/build-gpu}
  BUILD_DIR=$build BUILD_TYPE=Release TARGETS="${tests[*]} ${tools[*]}" scripts/build.sh \
    -DHYPIC_CUDA=ON -DHYPIC_CUDA_ARCHS=90 -DHYPIC_NATIVE=OFF -DCMAKE_CXX_FLAGS=-march=x86-64-v3
  rm -rf "$pack"
  mkdir -p "$pack/bin" "$pack/lib"
  for t in "${tests[@]}" "${tools[@]}"; do
    local f
    f=$(find "$build/bin" "$build/tests" -maxdepth 1 -name "$t" -type f | head -1)
    [ -n "$f" ] || { echo "gpu-check: $t was not built" >&2; exit 1; }
    cp "$f" "$pack/bin/"
  done
  strip --strip-unneeded "$pack"/bin/*
  # Shared libraries: everything ldd resolves except glibc, the CUDA driver and the CUDA
  # toolkit's own libraries (the GPU machine has those, in versions matching its driver).
  ldd "$pack"/bin/* | awk '/=> \//{print $3}' | sort -u | while read -r lib; do
    case "$(basename "$lib")" in
      libc.so.*|libm.so.*|libdl.so.*|librt.so.*|libpthread.so.*|ld-linux*|libcuda.so.*) ;;
      libcudart.so.*|libcublas.so.*|libcublasLt.so.*|libnvrtc*) ;;
      *) cp -L "$lib" "$pack/lib/" ;;
    esac
  done
  strip --strip-unneeded "$pack"/lib/*
  # Our libraries first on the GPU machine; libstdc++ and libgcc_s only where the machine's
  # own are older (run() checks), so they sit apart.
  mkdir -p "$pack/lib-fallback"
  mv "$pack"/lib/libstdc++.so.* "$pack"/lib/libgcc_s.so.* "$pack/lib-fallback/" 2>/dev/null || true
  git rev-parse HEAD > "$pack/COMMIT"
  rm -rf "$staged"
  mkdir -p "$staged"
  XZ_OPT=-T0 tar -C "$pack" -cJf "$staged/pack.tar.xz" .
  local mib
  mib=$(du -sm "$staged" | cut -f1)
  echo "gpu-check: staged $(ls "$pack/bin" | wc -l) binaries, $(ls "$pack/lib" | wc -l) libraries: $staged/pack.tar.xz, ${mib} MiB ($(du -sm "$pack" | cut -f1) MiB unpacked)"
  if [ "$mib" -ge "$max_mib" ]; then
    echo "gpu-check: $staged is ${mib} MiB, over the ${max_mib} MiB the device tool carries" >&2
    exit 1
  fi
}

# Runs "$@" with a time cap (cut to what is left of the run's budget), its output to
# $out/$name.log and the console; never fails the run.
budget_s=${GPU_CHECK_BUDGET_S:-470}
step() {
  local name=$1 cap=$2
  shift 2
  local left=$((budget_s - SECONDS))
  if [ "$left" -lt 10 ]; then
    echo "== $name: skipped, the run's ${budget_s} s are spent" | tee -a "$out/summary.txt"
    return
  fi
  [ "$cap" -gt "$left" ] && cap=$left
  echo "== $name (cap ${cap}s)"
  local t0=$SECONDS rc=0
  timeout --kill-after=5 "$cap" "$@" > "$out/$name.log" 2>&1 || rc=$?
  tail -n 25 "$out/$name.log"
  echo "== $name: rc $rc in $((SECONDS - t0)) s" | tee -a "$out/summary.txt"
}

run() {
  [ -f "$staged/pack.tar.xz" ] || { echo "gpu-check: no $staged/pack.tar.xz (run 'stage' first and carry gpu-check)" >&2; exit 1; }
  rm -rf "$pack"
  mkdir -p "$pack"
  tar -C "$pack" -xJf "$staged/pack.tar.xz"
  out=${OUT:-$root/gpu-check-out}
  mkdir -p "$out"
  : > "$out/summary.txt"
  echo "gpu-check of commit $(cat "$pack/COMMIT"), $(date -u +%Y-%m-%dT%H:%MZ)" | tee -a "$out/summary.txt"
  local cuda_libs=""
  for d in /usr/local/cuda/lib64 /usr/local/cuda/lib /usr/local/cuda/targets/x86_64-linux/lib \
           /usr/local/nvidia/lib64; do
    [ -d "$d" ] && cuda_libs+="$d:"
  done
  # pip's nvidia-* wheels (cuBLAS) where the toolkit folder lacks them.
  for d in $(python3 -c 'import nvidia, os; p = nvidia.__path__[0]; print(" ".join(os.path.join(p, x, "lib") for x in os.listdir(p)))' 2>/dev/null); do
    [ -d "$d" ] && cuda_libs+="$d:"
  done
  export LD_LIBRARY_PATH="$pack/lib:${cuda_libs}${LD_LIBRARY_PATH:-}"
  if ldd "$pack"/bin/* 2>&1 | grep -q -E 'not found|GLIBCXX|CXXABI'; then
    export LD_LIBRARY_PATH="$LD_LIBRARY_PATH:$pack/lib-fallback"
  fi
  export HYPIC_BIN_DIR=$pack/bin OMP_WAIT_POLICY=PASSIVE
  nvidia-smi > "$out/nvidia-smi.txt" 2>&1 || true
  head -n 15 "$out/nvidia-smi.txt"
  ldd "$pack"/bin/* > "$out/ldd.txt" 2>&1 || true
  if grep -q 'not found' "$out/ldd.txt"; then
    echo "gpu-check: missing libraries:" | tee -a "$out/summary.txt"
    grep 'not found' "$out/ldd.txt" | sort -u | tee -a "$out/summary.txt"
  fi
  local models=/tmp/hypic-gpu-check-models
  for t in "${tests[@]}"; do
    step "$t" 90 "$pack/bin/$t" --duration=true
  done
  if command -v compute-sanitizer > /dev/null; then
    for t in linear_cuda_conformance_test model_cuda_forward_test; do
      step "memcheck-$t" 120 compute-sanitizer --tool memcheck --error-exitcode 1 "$pack/bin/$t"
    done
  else
    echo "== memcheck: no compute-sanitizer on PATH" | tee -a "$out/summary.txt"
  fi
  step bench-compose 180 "$pack/bin/hypic-bench" compose --model builtin:small --cache-dir "$models" \
    --device cuda --segments 16 --segment-len 1024 --suffix 32 --seam 8 --modes full,hypic \
    --reps 3 --t-segments 2 --json
  # The peak the prefill is compared with: the best bf16 GEMM on this GPU (PyTorch's cuBLAS).
  step gemm-peak 60 python3 -c '
import torch, time
a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16); b = torch.randn_like(a)
for _ in range(3): a @ b
torch.cuda.synchronize(); t = time.perf_counter(); n = 10
for _ in range(n): a @ b
torch.cuda.synchronize(); s = (time.perf_counter() - t) / n
print(f"bf16 GEMM 8192^3 (torch {torch.__version__}, {torch.cuda.get_device_name()}): {2 * 8192**3 / s / 1e12:.0f} TFLOP/s")'
  if grep -q '"full_prefill"' "$out/bench-compose.log"; then
    python3 - "$out" <<'PY' 2>&1 | tee -a "$out/summary.txt" || true
import json, re, sys, pathlib
out = pathlib.Path(sys.argv[1])
text = (out / "bench-compose.log").read_text()
j = json.loads(text[text.index("{"):text.rindex("}") + 1])
full = j["full_prefill"]
peak = re.search(r"(\d+) TFLOP/s", (out / "gemm-peak.log").read_text(errors="replace"))
tflops = full["gflops"] / 1e3
print(f"full prefill {j.get('tokens', '?')} tokens: {full['tokens_per_s']:.0f} tokens/s, "
      f"{tflops:.1f} TFLOP/s" + (f" = {100 * tflops / float(peak.group(1)):.1f}% of the bf16 GEMM peak" if peak else ""))
for mode, r in j.get("modes", {}).items():
    print(f"{mode}: TTFT {r.get('ttft_ms', float('nan')):.2f} ms")
PY
  fi
  echo "gpu-check: done in ${SECONDS} s; logs in $out"
}

case "${1:-}" in
  stage) stage ;;
  run) run ;;
  *) echo "usage: scripts/gpu-check.sh stage|run" >&2; exit 2 ;;
esac
