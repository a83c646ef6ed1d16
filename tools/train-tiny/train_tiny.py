#!/usr/bin/python3
"""Trains, exports and checks the tiny hybrid model of issue 19 (docs/train-tiny.md).

Run with Debian's interpreter and python3-torch (`scripts/install-deps.sh --train`):

  train_tiny.py train    --work DIR [--seed 1] [--steps 600] [--batch 16] [--threads 1]
  train_tiny.py export   --work DIR --out tools/train-tiny/model
  train_tiny.py data     --out tools/train-tiny/eval.jsonl [--n 500] [--seed 19]
  train_tiny.py eval     (--work DIR | --model DIR) --data FILE [--limit N]
                         [--modes full,naive,hypic,oracle,reset] [--seam 0,2,4,8,16]
  train_tiny.py heads    (--work DIR | --model DIR) --data FILE [--limit 50]
  train_tiny.py check    --model DIR --hypic-op PATH --data FILE [--n 3] [--seam 8]

`train` is reproducible from --seed: the weights are initialised from it and every step's
batch is drawn from a generator seeded by (seed, step) alone, so a run that resumes from its
checkpoint (DIR/ckpt.pt, written atomically every --ckpt-every steps and on SIGTERM/SIGINT)
computes what an uninterrupted run computes; --stop-at splits a run into sessions, and
SIGSTOP/SIGCONT are harmless. The checkpoint carries the CPU seconds spent over every resume.

`eval` is the torch-side composition (compose.py), for steering; `hypic-bench quality` gives
the shipped figures. `check` compares this module's forward with `hypic-op prefill`, and
compose.py's naive, hypic and oracle compositions with `hypic-op compose`, on the first --n
prompts of --data; it fails above a 1e-3 max-abs logit difference.
"""

import argparse
import json
import math
import os
import random
import signal
import subprocess
import sys
import tempfile
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import compose  # noqa: E402
import task  # noqa: E402
import tiny_model as tm  # noqa: E402


def batch(seed, step, size, n_queries):
    """The training batch of `step`: padded tokens [B, T] and (row, pos, answer) targets."""
    rng = random.Random(f"train-{seed}-{step}")
    seqs, targets = [], []
    for b in range(size):
        seq, tg = task.make_training_sequence(rng, n_queries)
        seqs.append(seq)
        targets += [(b, pos, val) for pos, val in tg]
    t = max(len(s) for s in seqs)
    tokens = torch.full((size, t), task.PAD, dtype=torch.long)
    for b, s in enumerate(seqs):
        tokens[b, :len(s)] = torch.tensor(s)
    return tokens, torch.tensor(targets, dtype=torch.long)


def lr_at(step, steps, peak, warmup):
    if step < warmup:
        return peak * (step + 1) / warmup
    frac = (step - warmup) / max(1, steps - warmup)
    return peak * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * frac)))


def make_optimizer(model, lr):
    """AdamW with weight decay on the matrices only."""
    params = list(model.parameters())
    return torch.optim.AdamW([{"params": [p for p in params if p.dim() == 2], "weight_decay": 0.01},
                              {"params": [p for p in params if p.dim() != 2], "weight_decay": 0.0}],
                             lr=lr, betas=(0.9, 0.98))


def save_atomically(obj, path):
    tmp = path + ".tmp"
    torch.save(obj, tmp)
    os.replace(tmp, path)


def load_work(work):
    ck = torch.load(os.path.join(work, "ckpt.pt"))
    model = tm.TinyHybrid(tm.TinyConfig(**ck["config"]))
    model.load_state_dict(ck["model"])
    return model, ck


def accuracy(model, prompts, mode, w):
    hits = 0
    for p in prompts:
        hits += int(compose.compose(model, p, mode, w).argmax().item() == p["answer"][0])
    return hits / len(prompts)


def cmd_train(a):
    torch.set_num_threads(a.threads)
    os.makedirs(a.work, exist_ok=True)
    path = os.path.join(a.work, "ckpt.pt")
    torch.manual_seed(a.seed)
    cfg = tm.TinyConfig(hidden_size=a.hidden, intermediate_size=2 * a.hidden)
    model = tm.TinyHybrid(cfg)
    opt = make_optimizer(model, a.lr)
    step, cpu_before, log = 0, 0.0, []
    if os.path.exists(path):
        model, ck = load_work(a.work)
        opt = make_optimizer(model, a.lr)
        opt.load_state_dict(ck["opt"])
        step, cpu_before, log = ck["step"], ck["cpu_s"], ck["log"]
        if ck["args"]["seed"] != a.seed:
            sys.exit(f"train: {path} was trained with --seed {ck['args']['seed']}")
        print(f"resumed at step {step} ({cpu_before:.0f} CPU s so far)", flush=True)
    cpu0 = time.process_time()
    val = [task.make_prompt(random.Random(f"val-{a.seed}-{i}")) for i in range(a.val_n)]
    stop = {"now": False}

    def on_signal(signum, frame):
        stop["now"] = True
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)

    def checkpoint():
        save_atomically({"config": cfg.__dict__, "model": model.state_dict(),
                         "opt": opt.state_dict(), "step": step,
                         "args": {k: v for k, v in vars(a).items() if k != "fn"},
                         "cpu_s": cpu_before + time.process_time() - cpu0, "log": log}, path)

    end = min(a.steps, a.stop_at or a.steps)
    while step < end and not stop["now"]:
        tokens, tg = batch(a.seed, step, a.batch, a.queries)
        for g in opt.param_groups:
            g["lr"] = lr_at(step, a.steps, a.lr, a.warmup)
        logits = model(tokens)
        sel = logits[tg[:, 0], tg[:, 1]]
        loss = F.cross_entropy(sel, tg[:, 2])
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        step += 1
        acc = (sel.argmax(-1) == tg[:, 2]).float().mean().item()
        if step % 10 == 0:
            cpu = cpu_before + time.process_time() - cpu0
            print(f"step {step} loss {loss.item():.4f} acc {acc:.3f} cpu {cpu:.0f}s", flush=True)
        if step % a.eval_every == 0 or step == a.steps:
            with torch.no_grad():
                row = {"step": step, "loss": loss.item(),
                       "full": accuracy(model, val, "full", 8),
                       "hypic8": accuracy(model, val, "hypic", 8),
                       "naive8": accuracy(model, val, "naive", 8)}
            log.append(row)
            print("val", json.dumps(row), flush=True)
        if step % a.ckpt_every == 0:
            checkpoint()
    checkpoint()
    print(f"saved step {step} to {path}", flush=True)


def cmd_export(a):
    model, ck = load_work(a.work)
    tm.export_hf(model, a.out)
    size = os.path.getsize(os.path.join(a.out, "model.safetensors"))
    print(f"exported step {ck['step']} ({ck['cpu_s']:.0f} CPU s of training) to {a.out}, "
          f"{size} bytes")


def cmd_data(a):
    task.write_eval_set(a.out, a.n, f"eval-{a.seed}")
    print(f"wrote {a.n} prompts to {a.out}")


def cmd_eval(a):
    torch.set_num_threads(a.threads)
    model = tm.load_hf(a.model) if a.model else load_work(a.work)[0]
    prompts = task.read_jsonl(a.data, a.limit)
    rows = []
    for mode in a.modes.split(","):
        seams = [0] if mode in ("full", "oracle", "reset") else [int(s) for s in a.seam.split(",")]
        for w in seams:
            hits = [compose.compose(model, p, mode, w).argmax().item() == p["answer"][0]
                    for p in prompts]
            upd = [h for h, p in zip(hits, prompts) if p.get("updated")]
            rows.append({"mode": mode, "seam": w, "n": len(hits),
                         "accuracy": sum(hits) / len(hits),
                         "accuracy_updated": sum(upd) / max(1, len(upd))})
            print(json.dumps(rows[-1]), flush=True)
    return rows


def gdn_log_decays(model, tokens):
    """Per linear layer, g [HV, T] of a full prefill of `tokens`."""
    out = {}
    x = model.embed[torch.tensor([tokens])]
    for li, blk in enumerate(model.blocks):
        xn = model.norm(x, blk.input_norm)
        if blk.kind == "linear_attention":
            proj = blk.mixer.project(xn)
            pre = blk.mixer.conv_inputs(proj)
            zeros = pre.new_zeros(1, model.c.linear_conv_kernel_dim - 1, pre.shape[2])
            _, _, _, g, _ = blk.mixer.gdn_inputs(blk.mixer.causal_conv(pre, zeros), proj)
            out[li] = g[0]
        x = x + blk.mixer(xn)
        x = x + blk.mlp(model.norm(x, blk.post_norm))
    return out


@torch.no_grad()
def cmd_heads(a):
    """Each GDN head's decay over the prompts: the mean log-decay per token, its half-life in
    tokens, and the fraction of a 56-token document's state that survives it (mean T_C scale)."""
    model = tm.load_hf(a.model) if a.model else load_work(a.work)[0]
    per = {}
    for p in task.read_jsonl(a.data, a.limit):
        toks = p.get("prefix", []) + [t for s in p["segments"] for t in s] + p["suffix"]
        for li, g in gdn_log_decays(model, toks).items():
            per.setdefault(li, []).append(g)
    for li, gs in per.items():
        g = torch.cat(gs, 1)
        for h in range(g.shape[0]):
            mean = g[h].mean().item()
            half = math.log(2) / -mean if mean < 0 else math.inf
            print(json.dumps({"layer": li, "head": h, "mean_log_decay": round(mean, 5),
                              "half_life_tokens": round(half, 1),
                              "doc_survival": round(math.exp(56 * mean), 4)}))


def cmd_check(a):
    model = tm.load_hf(a.model)
    worst = 0.0
    for i, p in enumerate(task.read_jsonl(a.data, a.n)):
        toks = p.get("prefix", []) + [t for s in p["segments"] for t in s] + p["suffix"]
        with torch.no_grad():
            ours = model(torch.tensor([toks]))[0]
        with tempfile.TemporaryDirectory() as d:
            out = os.path.join(d, "logits.safetensors")
            subprocess.run([a.hypic_op, "prefill", "--model", a.model, "--tokens",
                            ",".join(map(str, toks)), "--output", out], check=True)
            theirs = tm.read_safetensors(out)["logits"]
        diff = (ours - theirs).abs().max().item()
        same = (ours.argmax(-1) == theirs.argmax(-1)).float().mean().item()
        worst = max(worst, diff)
        print(f"prompt {i}: {len(toks)} tokens, prefill max |torch - hypic-op| {diff:.2e}, "
              f"argmax agreement {same:.4f}")
        for mode in ("naive", "hypic", "oracle"):
            diff = (compose.compose(model, p, mode, a.seam) - op_compose(a, p, mode)).abs().max()
            worst = max(worst, diff.item())
            print(f"prompt {i}: compose {mode} w={a.seam} max |torch - hypic-op| {diff:.2e}")
    if worst > 1e-3:
        sys.exit(f"check: max logit difference {worst:.2e} > 1e-3")
    print("check: the export and compose.py match hypic-op prefill and compose")


def op_compose(a, prompt, mode):
    """`hypic-op compose` of one prompt: its last-token logits [vocab]."""
    parts = [{"kind": "raw", "tokens": prompt["prefix"]}] if prompt.get("prefix") else []
    parts += [{"kind": "segment", "tokens": s} for s in prompt["segments"]]
    parts.append({"kind": "raw", "tokens": prompt["suffix"]})
    with tempfile.TemporaryDirectory() as d:
        req, out = os.path.join(d, "req.json"), os.path.join(d, "out.safetensors")
        with open(req, "w") as f:
            json.dump({"seam": a.seam, "mode": mode, "parts": parts}, f)
        subprocess.run([a.hypic_op, "compose", "--model", a.model, "--input", req,
                        "--output", out], check=True)
        return tm.read_safetensors(out)["logits"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    t = sub.add_parser("train", help="train (resumes from WORK/ckpt.pt)")
    t.add_argument("--work", required=True)
    t.add_argument("--seed", type=int, default=1)
    t.add_argument("--steps", type=int, default=600)
    t.add_argument("--batch", type=int, default=16)
    t.add_argument("--queries", type=int, default=8, help="answered queries per sequence")
    t.add_argument("--hidden", type=int, default=128)
    t.add_argument("--lr", type=float, default=2e-3)
    t.add_argument("--warmup", type=int, default=100)
    t.add_argument("--threads", type=int, default=1)
    t.add_argument("--stop-at", type=int, help="checkpoint and stop after this step (resume later)")
    t.add_argument("--ckpt-every", type=int, default=25)
    t.add_argument("--eval-every", type=int, default=100)
    t.add_argument("--val-n", type=int, default=64)
    t.set_defaults(fn=cmd_train)
    e = sub.add_parser("export", help="write config.json + model.safetensors")
    e.add_argument("--work", required=True)
    e.add_argument("--out", required=True)
    e.set_defaults(fn=cmd_export)
    d = sub.add_parser("data", help="write a held-out JSONL set")
    d.add_argument("--out", required=True)
    d.add_argument("--n", type=int, default=500)
    d.add_argument("--seed", type=int, default=19)
    d.set_defaults(fn=cmd_data)
    v = sub.add_parser("eval", help="torch-side accuracy per mode and seam")
    v.add_argument("--work")
    v.add_argument("--model")
    v.add_argument("--data", required=True)
    v.add_argument("--limit", type=int)
    v.add_argument("--modes", default="full,naive,hypic,oracle")
    v.add_argument("--seam", default="0,2,4,8,16")
    v.add_argument("--threads", type=int, default=1)
    v.set_defaults(fn=cmd_eval)
    hd = sub.add_parser("heads", help="each GDN head's decay (half-life) on a data set")
    hd.add_argument("--work")
    hd.add_argument("--model")
    hd.add_argument("--data", required=True)
    hd.add_argument("--limit", type=int, default=50)
    hd.set_defaults(fn=cmd_heads)
    c = sub.add_parser("check", help="compare the torch forward with hypic-op prefill")
    c.add_argument("--model", required=True)
    c.add_argument("--hypic-op", required=True)
    c.add_argument("--data", required=True)
    c.add_argument("--n", type=int, default=3)
    c.add_argument("--seam", type=int, default=8)
    c.set_defaults(fn=cmd_check)
    a = ap.parse_args()
    if a.cmd in ("eval", "heads") and not (a.work or a.model):
        ap.error(f"{a.cmd}: give --work or --model")
    a.fn(a)


if __name__ == "__main__":
    main()
