#!/usr/bin/python3
"""Helpers for tools/llama-peer/run.sh (run with /usr/bin/python3; needs numpy for `compare`).

  peer_report.py tokens N SEED                      print N random token ids < 32000... (see --vocab)
  peer_report.py compare OURS.safetensors LLAMA.npy [--tol 1e-3] [--label L]
        compares hypic's logits [T, vocab] (hypic-op prefill output) with llama.cpp's; prints one
        JSON object; exit 1 when max relative error > tol or any top-1 disagrees.
  peer_report.py report RESULTS.jsonl META.json [--json]
        prints the tokens/s table (or one JSON document with --json).
"""
import argparse
import json
import struct
import sys


def cmd_tokens(a):
    import random
    r = random.Random(a.seed)
    print(",".join(str(r.randrange(a.vocab)) for _ in range(a.n)))


def read_safetensors_tensor(path, name):
    import numpy as np
    with open(path, "rb") as f:
        (hlen,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(hlen))
    if name not in header:
        raise SystemExit(f"peer_report: {path} has no tensor '{name}'")
    info = header[name]
    if info["dtype"] != "F32":
        raise SystemExit(f"peer_report: {path}:{name} is {info['dtype']}, expected F32")
    b, e = info["data_offsets"]
    raw = np.memmap(path, dtype=np.uint8, mode="r")
    return np.array(raw[8 + hlen + b: 8 + hlen + e].view("<f4")).reshape(info["shape"])


def cmd_compare(a):
    import numpy as np
    ours = read_safetensors_tensor(a.ours, "logits").astype(np.float64)
    theirs = np.load(a.llama).astype(np.float64)
    if ours.shape != theirs.shape:
        raise SystemExit(f"peer_report: shape mismatch: ours {ours.shape}, llama.cpp {theirs.shape}")
    # Per position: max |ours - llama| / max |ours|, i.e. the error relative to the logit scale.
    rel = np.abs(ours - theirs).max(axis=1) / np.maximum(np.abs(ours).max(axis=1), 1e-30)
    top1 = ours.argmax(axis=1) == theirs.argmax(axis=1)
    T = ours.shape[0]
    out = {
        "label": a.label,
        "positions": T,
        "vocab": ours.shape[1],
        "max_rel_err": float(rel.max()),
        "worst_position": int(rel.argmax()),
        "last_rel_err": float(rel[-1]),
        "rel_err_at": {str(p): float(rel[p]) for p in sorted({0, 1, T // 4, T // 2, 3 * T // 4, T - 1})},
        "top1_agreement": float(top1.mean()),
        "last_top1_agree": bool(top1[-1]),
        "tol": a.tol,
    }
    out["pass"] = bool(out["max_rel_err"] <= a.tol and top1.all())
    print(json.dumps(out))
    return 0 if out["pass"] else 1


def cmd_report(a):
    rows = [json.loads(line) for line in open(a.results) if line.strip()]
    meta = json.load(open(a.meta))
    if a.json:
        doc = dict(meta)
        doc["results"] = [
            {k: r[k] for k in ("dtype", "n_prompt", "n_batch", "n_ubatch", "threads", "reps", "kv_type",
                                "flash_attn", "cpu_variant", "samples_s", "cpu_util", "median_s", "min_s",
                                "tokens_per_s", "best_tokens_per_s", "gguf") if k in r}
            for r in rows
        ]
        print(json.dumps(doc, indent=2))
        return 0
    prompts = sorted({r["n_prompt"] for r in rows})
    dtypes = []
    for r in rows:
        if r["dtype"] not in dtypes:
            dtypes.append(r["dtype"])
    by = {(r["dtype"], r["n_prompt"]): r for r in rows}
    print(f"llama.cpp {meta['llama_cpp_release']} ({meta['npm_package']}) prefill, whole prompt as one batch "
          f"(n_batch = n_ubatch = P), tokens/s, median of {meta['reps']} (best in parentheses)")
    print(f"  CPU: {meta['cpu_model']}; ggml CPU variant: {meta['cpu_variant']}; threads: {meta['threads']}; "
          f"date: {meta['date']}; load avg before/after: {meta['loadavg']} / {meta.get('loadavg_after', '?')}")
    print(f"  model: {meta['model']}; KV cache {meta['kv_type']}, flash-attn {meta['flash_attn']}")
    if meta.get("check"):
        for c in meta["check"]:
            print(f"  check ({c['label']}, T={c['positions']}): max rel err {c['max_rel_err']:.3g}, "
                  f"top-1 {c['top1_agreement']:.3f} -> {'PASS' if c['pass'] else 'FAIL'}")
    head = "| weights | " + " | ".join(str(p) for p in prompts) + " |"
    print(head)
    print("|---" * (len(prompts) + 1) + "|")
    utils = [u for r in rows for u in r.get("cpu_util", [])]
    for d in dtypes:
        cells = []
        for p in prompts:
            r = by.get((d, p))
            cells.append(f"{r['tokens_per_s']:,.0f} ({r['best_tokens_per_s']:,.0f})" if r else "-")
        print(f"| {d} | " + " | ".join(cells) + " |")
    if utils:
        lo = min(utils)
        print(f"  CPU share of {meta['threads']} threads during timed decodes: min {lo:.2f}, "
              f"mean {sum(utils) / len(utils):.2f}" +
              ("  <- WARNING: other processes took CPU time; figures are contended" if lo < 0.9 else ""))
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    t = sub.add_parser("tokens")
    t.add_argument("n", type=int)
    t.add_argument("seed", type=int)
    t.add_argument("--vocab", type=int, default=32000)
    c = sub.add_parser("compare")
    c.add_argument("ours")
    c.add_argument("llama")
    c.add_argument("--tol", type=float, default=1e-3)
    c.add_argument("--label", default="f32")
    r = sub.add_parser("report")
    r.add_argument("results")
    r.add_argument("meta")
    r.add_argument("--json", action="store_true")
    a = ap.parse_args()
    return {"tokens": cmd_tokens, "compare": cmd_compare, "report": cmd_report}[a.cmd](a) or 0


if __name__ == "__main__":
    sys.exit(main())
