#!/usr/bin/env bash
# llama.cpp prefill peer for hypic's benchmarks (issue 14): converts a hypic-mkmodel Qwen3-Next
# model to GGUF, optionally checks llama.cpp's logits against hypic's on the f32 weights, and
# times llama.cpp's CPU prefill of the whole prompt as one batch. See README.md.
#
#   tools/llama-peer/run.sh --model DIR [--tokens 512,2048,8192] [--threads 2] [--reps 5]
#                           [--dtypes f32,bf16] [--check] [--check-tokens 256] [--check-only]
#                           [--kv-type f16|f32] [--flash-attn auto|on|off] [--json]
#
# Environment: HYPIC_PEER_DIR (cache: npm packages, headers, binary, GGUFs; default
# ~/.cache/hypic-llama-peer), HYPIC_BIN_DIR (hypic-op for --check; default <repo>/build/bin).
# With --json the human-readable lines go to stderr and stdout is one JSON document.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$HERE/../.." && pwd)"
PEER_DIR="${HYPIC_PEER_DIR:-$HOME/.cache/hypic-llama-peer}"
BIN_DIR="${HYPIC_BIN_DIR:-$REPO/build/bin}"
PY=/usr/bin/python3
NLC_VERSION=3.21.1
LLAMA_RELEASE=v0.4.0

MODEL="" TOKENS="512,2048" THREADS=2 REPS=5 DTYPES="f32,bf16" CHECK=0 CHECK_ONLY=0 CHECK_TOKENS=256
KV_TYPE=f16 FLASH_ATTN=auto JSON=0 TOL=1e-3

usage() { sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'; exit "${1:-2}"; }
while [[ $# -gt 0 ]]; do
  case "$1" in
    --model) MODEL="$2"; shift 2 ;;
    --tokens) TOKENS="$2"; shift 2 ;;
    --threads) THREADS="$2"; shift 2 ;;
    --reps) REPS="$2"; shift 2 ;;
    --dtypes) DTYPES="$2"; shift 2 ;;
    --check) CHECK=1; shift ;;
    --check-only) CHECK=1; CHECK_ONLY=1; shift ;;
    --check-tokens) CHECK_TOKENS="$2"; shift 2 ;;
    --kv-type) KV_TYPE="$2"; shift 2 ;;
    --flash-attn) FLASH_ATTN="$2"; shift 2 ;;
    --json) JSON=1; shift ;;
    -h|--help) usage 0 ;;
    *) echo "run.sh: unknown argument $1" >&2; usage ;;
  esac
done
[[ -n "$MODEL" ]] || { echo "run.sh: --model DIR is required" >&2; usage; }
[[ -f "$MODEL/config.json" && -f "$MODEL/model.safetensors" ]] ||
  { echo "run.sh: $MODEL has no config.json + model.safetensors" >&2; exit 2; }
MODEL="$(cd "$MODEL" && pwd)"

log() { echo "llama-peer: $*" >&2; }
say() { if [[ $JSON == 1 ]]; then cat >&2; else cat; fi; }

# ---- prerequisites: Debian's numpy for the converter ----------------------------------------
if ! "$PY" -c 'import numpy' 2>/dev/null; then
  log "installing python3-numpy (Debian) for $PY"
  if [[ $(id -u) == 0 ]]; then
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q python3-numpy >&2 ||
      { apt-get update -q >&2 && DEBIAN_FRONTEND=noninteractive apt-get install -y -q python3-numpy >&2; }
  else
    echo "run.sh: $PY lacks numpy: sudo apt-get install python3-numpy" >&2; exit 2
  fi
fi

# ---- llama.cpp: npm's prebuilt libraries + the headers of the same release -------------------
mkdir -p "$PEER_DIR"
NPM_DIR="$PEER_DIR/npm-$NLC_VERSION"
LIB_DIR="$NPM_DIR/linux-x64/bins/linux-x64"
BUNDLE="$NPM_DIR/node-llama-cpp/llama/gitRelease.bundle"
if [[ ! -f "$NPM_DIR/.done" ]]; then
  log "fetching node-llama-cpp@$NLC_VERSION and @node-llama-cpp/linux-x64@$NLC_VERSION (npm pack)"
  rm -rf "$NPM_DIR" && mkdir -p "$NPM_DIR/tgz" "$NPM_DIR/node-llama-cpp" "$NPM_DIR/linux-x64"
  (cd "$NPM_DIR/tgz" && npm pack --silent "node-llama-cpp@$NLC_VERSION" \
     "@node-llama-cpp/linux-x64@$NLC_VERSION" --pack-destination . >&2)
  tar -xzf "$NPM_DIR/tgz/node-llama-cpp-$NLC_VERSION.tgz" -C "$NPM_DIR/node-llama-cpp" --strip-components=1
  tar -xzf "$NPM_DIR/tgz/node-llama-cpp-linux-x64-$NLC_VERSION.tgz" -C "$NPM_DIR/linux-x64" --strip-components=1
  rm -rf "$NPM_DIR/tgz"
  touch "$NPM_DIR/.done"
fi
[[ -f "$LIB_DIR/libllama.$LLAMA_RELEASE.so" ]] || { echo "run.sh: no libllama in $LIB_DIR" >&2; exit 1; }
INC_DIR="$PEER_DIR/llama.cpp-$LLAMA_RELEASE-include"
if [[ ! -f "$INC_DIR/.done" ]]; then
  # node-llama-cpp ships llama.cpp's source of that release as a git bundle; take the headers.
  log "extracting llama.h / ggml headers ($LLAMA_RELEASE) from node-llama-cpp's git bundle"
  rm -rf "$INC_DIR" "$PEER_DIR/llama.cpp.git" && mkdir -p "$INC_DIR"
  git clone -q --bare "$BUNDLE" "$PEER_DIR/llama.cpp.git" >&2
  git --git-dir="$PEER_DIR/llama.cpp.git" archive HEAD include ggml/include | tar -x -C "$INC_DIR"
  rm -rf "$PEER_DIR/llama.cpp.git"
  touch "$INC_DIR/.done"
fi

# ---- the benchmark program ------------------------------------------------------------------
PEER_BIN="$PEER_DIR/bin/llama_bench_peer"
SRC="$HERE/llama_bench_peer.cpp"
if [[ ! -x "$PEER_BIN" || "$SRC" -nt "$PEER_BIN" ]]; then
  log "compiling $PEER_BIN"
  mkdir -p "$PEER_DIR/bin"
  g++ -std=c++17 -O2 -Wall -Wextra -I"$INC_DIR/include" -I"$INC_DIR/ggml/include" "$SRC" \
    -o "$PEER_BIN.tmp" -L"$LIB_DIR" -l:libllama.$LLAMA_RELEASE.so -l:libggml.$LLAMA_RELEASE.so \
    -l:libggml-base.so -ldl -Wl,-rpath,"$LIB_DIR"
  mv "$PEER_BIN.tmp" "$PEER_BIN"
fi

# ---- GGUFs, cached by model (path, size, mtime), converter version and dtype ----------------
gguf_for() {  # dtype -> path (converted if missing)
  local dt="$1" key out
  key=$( { echo "$MODEL"; stat -c '%s %Y' "$MODEL/model.safetensors" "$MODEL/config.json";
           sha256sum "$HERE/gguf_convert.py"; } | sha256sum | cut -c1-16)
  out="$PEER_DIR/gguf/$(basename "$MODEL")-$key-$dt.gguf"
  if [[ ! -f "$out" ]]; then
    mkdir -p "$PEER_DIR/gguf"
    "$PY" "$HERE/gguf_convert.py" --model "$MODEL" --out "$out" --dtype "$dt" >&2
  fi
  echo "$out"
}

WORK="$(mktemp -d "${TMPDIR:-/tmp}/llama-peer.XXXXXX")"
trap 'rm -rf "$WORK"' EXIT
LOADAVG="$(cut -d' ' -f1-3 /proc/loadavg)"
CHECK_JSON="$WORK/check.jsonl"; : > "$CHECK_JSON"

# ---- --check: llama.cpp's logits vs hypic's on the f32 weights -------------------------------
if [[ $CHECK == 1 ]]; then
  HYPIC_OP="$BIN_DIR/hypic-op"
  [[ -x "$HYPIC_OP" ]] || { echo "run.sh: --check needs $HYPIC_OP (set HYPIC_BIN_DIR)" >&2; exit 2; }
  G32="$(gguf_for f32)"
  VOCAB=$("$PY" -c "import json,sys; print(json.load(open(sys.argv[1]))['vocab_size'])" "$MODEL/config.json")
  "$PY" "$HERE/peer_report.py" tokens "$CHECK_TOKENS" 7 --vocab "$VOCAB" > "$WORK/tokens.txt"
  log "check: hypic-op prefill of $CHECK_TOKENS random tokens"
  # f32 weights: the check compares against llama.cpp's f32 GGUF of the same values.
  "$HYPIC_OP" prefill --model "$MODEL" --weights-dtype f32 --tokens "$(cat "$WORK/tokens.txt")" \
    --output "$WORK/ours.safetensors" >&2
  status=0
  # strict: f32 KV cache, no flash attention (pure f32 math); bench: the settings timed below.
  for cfg in "f32-strict f32 off" "f32-bench $KV_TYPE $FLASH_ATTN"; do
    read -r label kv fa <<< "$cfg"
    "$PEER_BIN" --model "$G32" --lib-dir "$LIB_DIR" --threads "$THREADS" --tokens-file "$WORK/tokens.txt" \
      --logits-out "$WORK/llama-$label.npy" --kv-type "$kv" --flash-attn "$fa" > /dev/null
    "$PY" "$HERE/peer_report.py" compare "$WORK/ours.safetensors" "$WORK/llama-$label.npy" \
      --tol "$TOL" --label "$label (kv $kv, flash-attn $fa)" >> "$CHECK_JSON" || status=1
  done
  "$PY" - "$CHECK_JSON" <<'EOF' | say
import json, sys
for line in open(sys.argv[1]):
    c = json.loads(line)
    print(f"check {c['label']}: T={c['positions']}, max rel err {c['max_rel_err']:.3g} "
          f"(last position {c['last_rel_err']:.3g}), top-1 agreement {c['top1_agreement']:.3f} "
          f"-> {'PASS' if c['pass'] else 'FAIL'} (tol {c['tol']:g})")
EOF
  if [[ $status != 0 ]]; then
    log "check FAILED: llama.cpp's logits do not match hypic's (tolerance $TOL, top-1 must agree)"
    exit 1
  fi
  if [[ $CHECK_ONLY == 1 ]]; then
    [[ $JSON == 1 ]] && "$PY" -c "import json,sys; print(json.dumps({'check': [json.loads(l) for l in open(sys.argv[1])]}, indent=2))" "$CHECK_JSON"
    exit 0
  fi
fi

# ---- timing -------------------------------------------------------------------------------
RESULTS="$WORK/results.jsonl"; : > "$RESULTS"
VARIANT=unknown
IFS=',' read -r -a DT_LIST <<< "$DTYPES"
for dt in "${DT_LIST[@]}"; do
  case "$dt" in f32|f16|bf16) ;; *) echo "run.sh: --dtypes: $dt (f32, f16 or bf16)" >&2; exit 2 ;; esac
  G="$(gguf_for "$dt")"
  log "timing $dt: prompts $TOKENS, $THREADS threads, $REPS reps"
  "$PEER_BIN" --model "$G" --lib-dir "$LIB_DIR" --threads "$THREADS" --prompts "$TOKENS" --reps "$REPS" \
    --kv-type "$KV_TYPE" --flash-attn "$FLASH_ATTN" --seed 1 > "$WORK/out.jsonl"
  "$PY" - "$WORK/out.jsonl" "$dt" "$G" >> "$RESULTS" <<'EOF'
import json, sys
for line in open(sys.argv[1]):
    r = json.loads(line)
    r["dtype"], r["gguf"] = sys.argv[2], sys.argv[3]
    print(json.dumps(r))
EOF
  VARIANT=$("$PY" -c "import json,sys; print(json.loads(open(sys.argv[1]).readline())['cpu_variant'])" "$WORK/out.jsonl")
done

CPU_MODEL="$(lscpu | sed -n 's/^Model name:[[:space:]]*//p' | head -1)"
"$PY" - "$WORK/meta.json" "$CHECK_JSON" <<EOF
import json, sys
meta = {
    "peer": "llama.cpp", "llama_cpp_release": "$LLAMA_RELEASE", "npm_package": "node-llama-cpp@$NLC_VERSION",
    "cpu_model": """$CPU_MODEL""", "cpu_variant": "$VARIANT", "nproc": $(nproc), "threads": $THREADS,
    "reps": $REPS, "kv_type": "$KV_TYPE", "flash_attn": "$FLASH_ATTN", "model": "$MODEL",
    "date": "$(date -u +%Y-%m-%dT%H:%M:%SZ)", "loadavg": "$LOADAVG", "loadavg_after": "$(cut -d' ' -f1-3 /proc/loadavg)",
    "check": [json.loads(l) for l in open(sys.argv[2])] or None,
}
json.dump(meta, open(sys.argv[1], "w"))
EOF
if [[ $JSON == 1 ]]; then
  "$PY" "$HERE/peer_report.py" report "$RESULTS" "$WORK/meta.json" >&2
  "$PY" "$HERE/peer_report.py" report "$RESULTS" "$WORK/meta.json" --json
else
  "$PY" "$HERE/peer_report.py" report "$RESULTS" "$WORK/meta.json"
fi
