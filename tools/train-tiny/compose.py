"""Torch-side PIC composition (MATH.md §5), the same algorithm as gpu/model/forward.cpp.

Used to steer training and to cross-check `hypic-op compose` and `hypic-bench quality`; the
shipped figures come from the C++ tools.

* `segment_entry(model, tokens, w, context=None)`: the segment-alone prefill from position 0
  (or, with `context`, in its true context: an oracle entry). The whole segment runs as an
  ordinary prompt, so [w, n) sees the seam as context; what is kept is, per linear layer,
  T_C and S(C|0) of [w, n) from a zero state, and the conv tail (last K-1 pre-conv inputs);
  per attention layer, K (after k_norm, before RoPE) and V of [w, n).
* `compose(model, prompt, mode, w)`: prefix, segments, suffix. `full` runs every token live;
  `naive`, `hypic` and `oracle` run the seam tokens [0, w) of each segment live from the
  running state and jump over [w, n): S <- T S + S0 (hypic, oracle) or S <- S + S0 (naive),
  conv state <- tail; the attention layers see the cached K rotated to absolute positions.
  The suffix is live; its last token's logits are the result.
* `compose(model, prompt, "reset")`, a diagnostic: every token live, but each linear layer's
  recurrent state is zeroed before the suffix, so what is left is what the attention layers
  (and the conv window) carry. It shows how much of the answer lives in the linear state.
"""

from dataclasses import dataclass, field

import torch

from tiny_model import TinyHybrid, gdn_chunk_forward, rope


@dataclass
class State:
    """Running state after n_positions tokens: per layer (S, conv) or (K rotated, V)."""
    n_positions: int = 0
    layers: list = field(default_factory=list)


def empty_state(model: TinyHybrid):
    c = model.c
    layers = []
    for blk in model.blocks:
        if blk.kind == "linear_attention":
            layers.append({
                "S": torch.zeros(1, c.linear_num_value_heads, c.linear_key_head_dim,
                                 c.linear_value_head_dim),
                "conv": torch.zeros(1, c.linear_conv_kernel_dim - 1, c.conv_channels)})
        else:
            layers.append({"K": torch.zeros(1, 0, c.num_key_value_heads, c.head_dim),
                           "V": torch.zeros(1, 0, c.num_key_value_heads, c.head_dim)})
    return State(0, layers)


@dataclass
class LiveBlock:
    tokens: list
    capture_seam: int = -1  # >= 0: capture an entry of [seam, n) (segment prefill)


@dataclass
class CachedBlock:
    entry: dict
    n: int


def run_pass(model: TinyHybrid, state: State, blocks, naive=False):
    """Runs `blocks` after `state` (advanced in place). Returns (last row's logits, the
    captured entry or None)."""
    c = model.c
    pos0, live_pos, live_tok, spans = state.n_positions, [], [], []
    for b in blocks:
        if isinstance(b, LiveBlock):
            spans.append((len(live_tok), len(b.tokens), pos0))
            live_pos += range(pos0, pos0 + len(b.tokens))
            live_tok += b.tokens
            pos0 += len(b.tokens)
        else:
            spans.append((None, b.n, pos0))
            pos0 += b.n
    live_pos = torch.tensor(live_pos)
    entry = {}
    x = model.embed[torch.tensor(live_tok)].unsqueeze(0)
    for li, blk in enumerate(model.blocks):
        ls = state.layers[li]
        xn = model.norm(x, blk.input_norm)
        m = blk.mixer
        if blk.kind == "linear_attention":
            proj = m.project(xn)
            pre = m.conv_inputs(proj)
            outs = []
            for b, (r0, n, _) in zip(blocks, spans):
                if isinstance(b, CachedBlock):
                    t, s0 = b.entry[li]["T"], b.entry[li]["S"]
                    ls["S"] = ls["S"] + s0 if naive else t @ ls["S"] + s0
                    ls["conv"] = b.entry[li]["conv"]
                    continue
                p = pre[:, r0:r0 + n]
                mixed = m.causal_conv(p, ls["conv"])
                ls["conv"] = torch.cat([ls["conv"], p], 1)[:, -(c.linear_conv_kernel_dim - 1):]
                q, k, v, g, beta = m.gdn_inputs(mixed, proj[:, r0:r0 + n])
                o, ls["S"], _ = gdn_chunk_forward(q, k, v, g, beta, ls["S"])
                outs.append(o)
                w = b.capture_seam
                if w >= 0:
                    _, s0, t = gdn_chunk_forward(q[:, :, w:], k[:, :, w:], v[:, :, w:],
                                                 g[:, :, w:], beta[:, :, w:],
                                                 want_transition=True)
                    entry[li] = {"T": t, "S": s0, "conv": ls["conv"]}
            y = m.finish(torch.cat(outs, 2), proj)
        else:
            q, gate, k, v = m.qkv(xn)
            ks, vs = [ls["K"]], [ls["V"]]
            for b, (r0, n, p0) in zip(blocks, spans):
                pos = torch.arange(p0, p0 + n)
                if isinstance(b, CachedBlock):
                    kb, vb = b.entry[li]["K"], b.entry[li]["V"]
                else:
                    kb, vb = k[:, r0:r0 + n], v[:, r0:r0 + n]
                    if b.capture_seam >= 0:
                        entry[li] = {"K": kb[:, b.capture_seam:], "V": vb[:, b.capture_seam:]}
                ks.append(rope(kb, pos, c.rotary_dim, c.rope_theta))
                vs.append(vb)
            ls["K"], ls["V"] = torch.cat(ks, 1), torch.cat(vs, 1)
            y = m.attend(q, live_pos, gate, ls["K"], ls["V"], torch.arange(pos0))
        x = x + y
        x = x + blk.mlp(model.norm(x, blk.post_norm))
    state.n_positions = pos0
    logits = model.norm(x[:, -1], model.final_norm) @ model.lm_head.t()
    return logits[0], (entry or None)


def segment_entry(model, tokens, w, context: State = None):
    """The entry of one segment: alone from position 0, or (oracle) after `context`, which it
    advances."""
    st = context if context is not None else empty_state(model)
    _, entry = run_pass(model, st, [LiveBlock(list(tokens), w)])
    return entry


@torch.no_grad()
def compose(model, prompt, mode, w=8):
    """Last-token logits of `prompt` (the JSONL schema) composed in `mode`."""
    prefix, segments, suffix = prompt.get("prefix", []), prompt["segments"], prompt["suffix"]
    if mode in ("full", "reset"):
        toks = list(prefix) + [t for s in segments for t in s]
        if mode == "full":
            return run_pass(model, empty_state(model), [LiveBlock(toks + list(suffix))])[0]
        st = empty_state(model)
        run_pass(model, st, [LiveBlock(toks)])
        for ls in st.layers:
            if "S" in ls:
                ls["S"] = torch.zeros_like(ls["S"])
        return run_pass(model, st, [LiveBlock(list(suffix))])[0]
    if mode == "oracle":
        ctx = empty_state(model)
        if prefix:
            run_pass(model, ctx, [LiveBlock(list(prefix))])
        entries = []
        for s in segments:
            entries.append(segment_entry(model, s, w, ctx) if len(s) > w else None)
            if len(s) <= w:
                run_pass(model, ctx, [LiveBlock(list(s))])
    else:
        entries = [segment_entry(model, s, w) if len(s) > w else None for s in segments]
    blocks = [LiveBlock(list(prefix))] if prefix else []
    for s, e in zip(segments, entries):
        if e is None:
            blocks.append(LiveBlock(list(s)))
            continue
        if w > 0:
            blocks.append(LiveBlock(list(s[:w])))
        blocks.append(CachedBlock(e, len(s) - w))
    blocks.append(LiveBlock(list(suffix)))
    return run_pass(model, empty_state(model), blocks, naive=(mode == "naive"))[0]

