"""A small Qwen3-Next-layout hybrid decoder in torch, with the exact arithmetic of hypic's loader.

The model is the one gpu/model/ runs (../shared/design/MATH.md §2, §3, §6):

* Gated DeltaNet layers: one fused input projection in the canonical layout of
  gpu/model/weights.h, rows [q (H*dk) | k (H*dk) | v (HV*dv) | z (HV*dv) | b (HV) | a (HV)];
  a depthwise causal conv (kernel K, no bias) + SiLU over q|k|v; q and k L2-normalised with
  eps 1e-6 inside the root, q scaled by 1/sqrt(dk); beta = sigmoid(b),
  g = -exp(A_log) * softplus(a + dt_bias); the gated delta rule (decay first, then delta);
  the plain gated RMSNorm w * o/rms(o) * silu(z) per value head; out_proj.
* Gated full attention: q_proj rows [query | gate] per head, k_proj, v_proj; zero-centred
  q_norm/k_norm, then partial NeoX RoPE over the first rotary_dim dims, softmax with scale
  hd^-0.5 (GQA), out * sigmoid(gate), o_proj.
* Dense SwiGLU MLPs, zero-centred RMSNorms x/rms(x) * (1 + w), an untied lm_head.

Training runs the chunked (WY) form of the recurrence over whole sequences. Evaluation goes
through `Pass`-like helpers in compose.py, which use `gdn_chunk_forward` with an initial state
and the segment transition it returns.

`export_hf` writes config.json + model.safetensors in the Hugging Face layout the loader reads
(gpu/model/checkpoint.cpp: Qwen3-Next's interleaved in_proj_qkvz / in_proj_ba and per-head
interleaved q_proj), all tensors F32.
"""

import json
import math
import os
import struct
from dataclasses import asdict, dataclass, field

import torch
import torch.nn.functional as F
from torch import nn


@dataclass
class TinyConfig:
    """The shape of the model; `to_hf` gives its config.json."""

    vocab_size: int = 128
    hidden_size: int = 128
    layer_types: list = field(
        default_factory=lambda: ["linear_attention"] * 3 + ["full_attention"])
    linear_num_key_heads: int = 4
    linear_num_value_heads: int = 4
    linear_key_head_dim: int = 32
    linear_value_head_dim: int = 32
    linear_conv_kernel_dim: int = 4
    num_attention_heads: int = 4
    num_key_value_heads: int = 2
    head_dim: int = 32
    partial_rotary_factor: float = 0.25
    rope_theta: float = 10000.0
    intermediate_size: int = 256
    rms_norm_eps: float = 1e-6

    @property
    def rotary_dim(self):
        return int(self.head_dim * self.partial_rotary_factor)

    @property
    def conv_channels(self):
        return (2 * self.linear_num_key_heads * self.linear_key_head_dim +
                self.linear_num_value_heads * self.linear_value_head_dim)

    def to_hf(self):
        d = asdict(self)
        d.update({
            "architectures": ["Qwen3NextForCausalLM"],
            "model_type": "qwen3_next",
            "num_hidden_layers": len(self.layer_types),
            "hidden_act": "silu",
            "attention_bias": False,
            "tie_word_embeddings": False,
            "num_experts": 0,
            "num_experts_per_tok": 0,
            "moe_intermediate_size": 0,
            "shared_expert_intermediate_size": 0,
            "decoder_sparse_step": 1,
            "mlp_only_layers": [],
            "norm_topk_prob": True,
        })
        return d

    @staticmethod
    def from_hf(d):
        keys = TinyConfig.__dataclass_fields__.keys()
        return TinyConfig(**{k: d[k] for k in keys if k in d})


def rms_norm_zero_centred(x, w, eps):
    """Qwen3-Next's RMSNorm: x / rms(x) * (1 + w)."""
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * (1.0 + w)


def l2_norm(x, scale=1.0):
    """fla's l2norm: x / sqrt(sum(x^2) + 1e-6), times scale."""
    return x * torch.rsqrt(x.pow(2).sum(-1, keepdim=True) + 1e-6) * scale


def gdn_chunk_forward(q, k, v, g, beta, state=None, chunk=64, want_transition=False):
    """The gated delta rule over a block of tokens, in the chunked WY form (MATH.md §2).

    q, k: [B, HV, T, dk] (q already scaled); v: [B, HV, T, dv]; g, beta: [B, HV, T].
    state: [B, HV, dk, dv] or None (zero). Returns (o [B, HV, T, dv], final state and,
    with want_transition, T_C [B, HV, dk, dk], the product of the tokens' A_t).
    """
    b, hv, t, dk = k.shape
    dv = v.shape[-1]
    if state is None:
        state = k.new_zeros(b, hv, dk, dv)
    pad = (-t) % chunk
    if pad:
        # Padded tokens have k = 0, beta = 0, g = 0: A_t = I and b_t = 0, so they change nothing.
        q, k, v = (F.pad(x, (0, 0, 0, pad)) for x in (q, k, v))
        g, beta = (F.pad(x, (0, pad)) for x in (g, beta))
    n = (t + pad) // chunk
    q, k, v = (x.reshape(b, hv, n, chunk, x.shape[-1]) for x in (q, k, v))
    g, beta = (x.reshape(b, hv, n, chunk) for x in (g, beta))
    gc = g.cumsum(-1)                                            # [b, hv, n, C]
    diff = gc.unsqueeze(-1) - gc.unsqueeze(-2)                   # g_i - g_j
    strict = torch.tril(torch.ones(chunk, chunk, dtype=torch.bool), -1)
    incl = torch.tril(torch.ones(chunk, chunk, dtype=torch.bool))
    decay_strict = torch.where(strict, diff, diff.new_full((), -math.inf)).exp()
    decay_incl = torch.where(incl, diff, diff.new_full((), -math.inf)).exp()
    kk = k @ k.transpose(-1, -2)
    a_kk = beta.unsqueeze(-1) * kk * decay_strict
    eye = torch.eye(chunk, dtype=k.dtype)
    lhs = eye + a_kk
    w_rhs = (beta * gc.exp()).unsqueeze(-1) * k
    u_rhs = beta.unsqueeze(-1) * v
    w = torch.linalg.solve_triangular(lhs, w_rhs, upper=False, unitriangular=True)
    u = torch.linalg.solve_triangular(lhs, u_rhs, upper=False, unitriangular=True)
    qk = (q @ k.transpose(-1, -2)) * decay_incl
    g_end = gc[..., -1:]                                         # [b, hv, n, 1]
    k_tail = (g_end - gc).exp().unsqueeze(-1) * k                # exp(g_C - g_r) k_r
    outs = []
    trans = None
    if want_transition:
        trans = torch.eye(dk, dtype=k.dtype).expand(b, hv, dk, dk)
    for c in range(n):
        v_new = u[:, :, c] - w[:, :, c] @ state
        o = (q[:, :, c] * gc[:, :, c].exp().unsqueeze(-1)) @ state + qk[:, :, c] @ v_new
        outs.append(o)
        decay = g_end[:, :, c].exp().unsqueeze(-1)               # [b, hv, 1, 1]
        state = decay * state + k_tail[:, :, c].transpose(-1, -2) @ v_new
        if want_transition:
            m = decay * torch.eye(dk, dtype=k.dtype)
            m = m - k_tail[:, :, c].transpose(-1, -2) @ w[:, :, c]
            trans = m @ trans
    o = torch.stack(outs, 2).reshape(b, hv, n * chunk, dv)[:, :, :t]
    return o, state, trans


def gdn_recurrent_reference(q, k, v, g, beta, state=None):
    """The per-token loop of MATH.md §2 (for tests of gdn_chunk_forward)."""
    b, hv, t, dk = k.shape
    s = k.new_zeros(b, hv, dk, v.shape[-1]) if state is None else state.clone()
    trans = torch.eye(dk, dtype=k.dtype).expand(b, hv, dk, dk)
    outs = []
    for i in range(t):
        kt, vt, qt = k[:, :, i], v[:, :, i], q[:, :, i]
        dec = g[:, :, i].exp()[..., None, None]
        bt = beta[:, :, i][..., None]
        s = s * dec
        u = bt * (vt - (s * kt.unsqueeze(-1)).sum(-2))
        s = s + kt.unsqueeze(-1) * u.unsqueeze(-2)
        outs.append((s * qt.unsqueeze(-1)).sum(-2))
        a_t = dec * (torch.eye(dk) - bt.unsqueeze(-1) * kt.unsqueeze(-1) * kt.unsqueeze(-2))
        trans = a_t @ trans
    return torch.stack(outs, 2), s, trans


def rope(x, positions, rot, theta):
    """Partial NeoX RoPE over the first `rot` dims of x [B, T, heads, hd]; positions: [T]."""
    half = rot // 2
    inv = torch.tensor([theta ** (-2.0 * i / rot) for i in range(half)], dtype=torch.float64)
    ang = positions.to(torch.float64).unsqueeze(-1) * inv      # [T, half]
    cos, sin = ang.cos().to(x.dtype).unsqueeze(1), ang.sin().to(x.dtype).unsqueeze(1)
    x1, x2, rest = x[..., :half], x[..., half:rot], x[..., rot:]
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin, rest], -1)


class GdnLayer(nn.Module):
    """One Gated DeltaNet mixer; `prepare` and `finish` bracket the recurrence for compose.py."""

    def __init__(self, c: TinyConfig, n_linear: int, linear_index: int):
        super().__init__()
        self.c = c
        nv, dv, h = c.linear_num_value_heads, c.linear_value_head_dim, c.hidden_size
        rows = c.conv_channels + nv * dv + 2 * nv
        self.in_proj = nn.Parameter(torch.randn(rows, h) / math.sqrt(h))
        self.conv = nn.Parameter(torch.randn(c.conv_channels, c.linear_conv_kernel_dim) * 0.3)
        # A range of decays, some slow: the heads of all linear layers together span half-lives
        # of 2 to 4096 tokens at a = 0 (A = 1, dt_bias = softplus^-1(ln 2 / half-life)).
        total = n_linear * nv
        idx = torch.arange(nv) * n_linear + linear_index
        half_life = 2.0 * (2048.0 ** (idx.to(torch.float64) / max(total - 1, 1)))
        dt = math.log(2.0) / half_life
        self.a_log = nn.Parameter(torch.zeros(nv))
        self.dt_bias = nn.Parameter((dt + torch.log(-torch.expm1(-dt))).to(torch.float32))
        self.norm = nn.Parameter(torch.ones(dv))
        self.out_proj = nn.Parameter(torch.randn(h, nv * dv) / math.sqrt(nv * dv) * 0.5)

    def project(self, xn):
        return xn @ self.in_proj.t()

    def conv_inputs(self, proj):
        return proj[..., :self.c.conv_channels]

    def causal_conv(self, pre, conv_state):
        """pre: [B, T, ch]; conv_state: [B, K-1, ch] (the previous pre-conv inputs)."""
        x = torch.cat([conv_state, pre], 1).transpose(1, 2)     # [B, ch, K-1+T]
        y = F.conv1d(x, self.conv.unsqueeze(1), groups=self.c.conv_channels)
        return F.silu(y.transpose(1, 2))

    def gdn_inputs(self, mixed, proj):
        """q, k (per value head), v, g, beta, each [B, HV, T, .]."""
        c = self.c
        nk, nv = c.linear_num_key_heads, c.linear_num_value_heads
        dk, dv = c.linear_key_head_dim, c.linear_value_head_dim
        b, t, _ = mixed.shape
        q = l2_norm(mixed[..., :nk * dk].reshape(b, t, nk, dk), 1.0 / math.sqrt(dk))
        k = l2_norm(mixed[..., nk * dk:2 * nk * dk].reshape(b, t, nk, dk))
        v = mixed[..., 2 * nk * dk:].reshape(b, t, nv, dv)
        rep = nv // nk
        q = q.repeat_interleave(rep, 2).transpose(1, 2)
        k = k.repeat_interleave(rep, 2).transpose(1, 2)
        v = v.transpose(1, 2)
        ba = proj[..., c.conv_channels + nv * dv:]
        beta = torch.sigmoid(ba[..., :nv]).transpose(1, 2)
        g = (-self.a_log.exp() * F.softplus(ba[..., nv:] + self.dt_bias)).transpose(1, 2)
        return q, k, v, g, beta

    def finish(self, o, proj):
        """o: [B, HV, T, dv] -> the layer's output [B, T, hidden]."""
        c = self.c
        nv, dv = c.linear_num_value_heads, c.linear_value_head_dim
        b, _, t, _ = o.shape
        o = o.transpose(1, 2)
        z = proj[..., c.conv_channels:c.conv_channels + nv * dv].reshape(b, t, nv, dv)
        o = self.norm * (o * torch.rsqrt(o.pow(2).mean(-1, keepdim=True) + c.rms_norm_eps))
        o = (o * F.silu(z)).reshape(b, t, nv * dv)
        return o @ self.out_proj.t()

    def forward(self, xn):
        proj = self.project(xn)
        pre = self.conv_inputs(proj)
        zeros = pre.new_zeros(pre.shape[0], self.c.linear_conv_kernel_dim - 1, pre.shape[2])
        q, k, v, g, beta = self.gdn_inputs(self.causal_conv(pre, zeros), proj)
        o, _, _ = gdn_chunk_forward(q, k, v, g, beta)
        return self.finish(o, proj)


class AttentionLayer(nn.Module):
    """Gated full attention; `qkv` and `attend` split it for compose.py."""

    def __init__(self, c: TinyConfig):
        super().__init__()
        self.c = c
        nh, nkv, hd, h = c.num_attention_heads, c.num_key_value_heads, c.head_dim, c.hidden_size
        self.in_proj = nn.Parameter(torch.randn((2 * nh + 2 * nkv) * hd, h) / math.sqrt(h))
        self.q_norm = nn.Parameter(torch.zeros(hd))
        self.k_norm = nn.Parameter(torch.zeros(hd))
        self.o_proj = nn.Parameter(torch.randn(h, nh * hd) / math.sqrt(nh * hd) * 0.5)

    def qkv(self, xn):
        """Query (normed, pre-RoPE) [B, T, nh, hd], gate [B, T, nh*hd], K (normed, pre-RoPE) and
        V [B, T, nkv, hd]."""
        c = self.c
        nh, nkv, hd = c.num_attention_heads, c.num_key_value_heads, c.head_dim
        b, t, _ = xn.shape
        p = xn @ self.in_proj.t()
        q = p[..., :nh * hd].reshape(b, t, nh, hd)
        gate = p[..., nh * hd:2 * nh * hd]
        k = p[..., 2 * nh * hd:2 * nh * hd + nkv * hd].reshape(b, t, nkv, hd)
        v = p[..., 2 * nh * hd + nkv * hd:].reshape(b, t, nkv, hd)
        q = rms_norm_zero_centred(q, self.q_norm, c.rms_norm_eps)
        k = rms_norm_zero_centred(k, self.k_norm, c.rms_norm_eps)
        return q, gate, k, v

    def attend(self, q, q_pos, gate, k, v, k_pos):
        """q [B, Tq, nh, hd] pre-RoPE at q_pos; k (rotated), v [B, Tk, nkv, hd] at k_pos."""
        c = self.c
        nh, nkv, hd = c.num_attention_heads, c.num_key_value_heads, c.head_dim
        q = rope(q, q_pos, c.rotary_dim, c.rope_theta)
        rep = nh // nkv
        kh = k.repeat_interleave(rep, 2).transpose(1, 2)         # [B, nh, Tk, hd]
        vh = v.repeat_interleave(rep, 2).transpose(1, 2)
        scores = (q.transpose(1, 2) @ kh.transpose(-1, -2)) * hd ** -0.5
        mask = k_pos.unsqueeze(0) > q_pos.unsqueeze(1)           # [Tq, Tk]
        scores = scores.masked_fill(mask, -math.inf)
        out = (scores.softmax(-1) @ vh).transpose(1, 2).reshape(q.shape[0], q.shape[1], nh * hd)
        return (out * torch.sigmoid(gate)) @ self.o_proj.t()

    def forward(self, xn):
        pos = torch.arange(xn.shape[1])
        q, gate, k, v = self.qkv(xn)
        return self.attend(q, pos, gate, rope(k, pos, self.c.rotary_dim, self.c.rope_theta), v, pos)


class Mlp(nn.Module):
    def __init__(self, c: TinyConfig):
        super().__init__()
        i, h = c.intermediate_size, c.hidden_size
        self.gate = nn.Parameter(torch.randn(i, h) / math.sqrt(h))
        self.up = nn.Parameter(torch.randn(i, h) / math.sqrt(h))
        self.down = nn.Parameter(torch.randn(h, i) / math.sqrt(i) * 0.5)

    def forward(self, x):
        return (F.silu(x @ self.gate.t()) * (x @ self.up.t())) @ self.down.t()


class Block(nn.Module):
    def __init__(self, c: TinyConfig, li: int):
        super().__init__()
        self.kind = c.layer_types[li]
        self.input_norm = nn.Parameter(torch.zeros(c.hidden_size))
        self.post_norm = nn.Parameter(torch.zeros(c.hidden_size))
        if self.kind == "linear_attention":
            linear = [i for i, t in enumerate(c.layer_types) if t == "linear_attention"]
            self.mixer = GdnLayer(c, len(linear), linear.index(li))
        else:
            self.mixer = AttentionLayer(c)
        self.mlp = Mlp(c)


class TinyHybrid(nn.Module):
    def __init__(self, c: TinyConfig):
        super().__init__()
        self.c = c
        self.embed = nn.Parameter(torch.randn(c.vocab_size, c.hidden_size))
        self.blocks = nn.ModuleList([Block(c, i) for i in range(len(c.layer_types))])
        self.final_norm = nn.Parameter(torch.zeros(c.hidden_size))
        self.lm_head = nn.Parameter(torch.randn(c.vocab_size, c.hidden_size) /
                                    math.sqrt(c.hidden_size))

    def norm(self, x, w):
        return rms_norm_zero_centred(x, w, self.c.rms_norm_eps)

    def forward(self, tokens):
        """tokens [B, T] -> logits [B, T, vocab] (a full prefill from position 0)."""
        x = self.embed[tokens]
        for blk in self.blocks:
            x = x + blk.mixer(self.norm(x, blk.input_norm))
            x = x + blk.mlp(self.norm(x, blk.post_norm))
        return self.norm(x, self.final_norm) @ self.lm_head.t()


# ---- Export in the Hugging Face Qwen3-Next layout -------------------------------------------

def hf_tensors(model: TinyHybrid):
    """{name: f32 tensor} in the names, shapes and interleavings of gpu/model/checkpoint.cpp."""
    c = model.c
    nk, nv = c.linear_num_key_heads, c.linear_num_value_heads
    dk, dv = c.linear_key_head_dim, c.linear_value_head_dim
    r = nv // nk
    nh, hd = c.num_attention_heads, c.head_dim
    out = {"model.embed_tokens.weight": model.embed, "model.norm.weight": model.final_norm,
           "lm_head.weight": model.lm_head}
    for li, blk in enumerate(model.blocks):
        p = f"model.layers.{li}."
        out[p + "input_layernorm.weight"] = blk.input_norm
        out[p + "post_attention_layernorm.weight"] = blk.post_norm
        m = blk.mixer
        if blk.kind == "linear_attention":
            w = m.in_proj
            q, k = w[:nk * dk], w[nk * dk:2 * nk * dk]
            v = w[2 * nk * dk:2 * nk * dk + nv * dv]
            z = w[c.conv_channels:c.conv_channels + nv * dv]
            bb = w[c.conv_channels + nv * dv:c.conv_channels + nv * dv + nv]
            aa = w[c.conv_channels + nv * dv + nv:]
            qkvz, ba = [], []
            for g in range(nk):
                qkvz += [q[g * dk:(g + 1) * dk], k[g * dk:(g + 1) * dk],
                         v[g * r * dv:(g + 1) * r * dv], z[g * r * dv:(g + 1) * r * dv]]
                ba += [bb[g * r:(g + 1) * r], aa[g * r:(g + 1) * r]]
            la = p + "linear_attn."
            out[la + "in_proj_qkvz.weight"] = torch.cat(qkvz)
            out[la + "in_proj_ba.weight"] = torch.cat(ba)
            out[la + "conv1d.weight"] = m.conv.unsqueeze(1)
            out[la + "A_log"] = m.a_log
            out[la + "dt_bias"] = m.dt_bias
            out[la + "norm.weight"] = m.norm
            out[la + "out_proj.weight"] = m.out_proj
        else:
            w = m.in_proj
            query, gate = w[:nh * hd], w[nh * hd:2 * nh * hd]
            kv = c.num_key_value_heads * hd
            qp = []
            for i in range(nh):
                qp += [query[i * hd:(i + 1) * hd], gate[i * hd:(i + 1) * hd]]
            sa = p + "self_attn."
            out[sa + "q_proj.weight"] = torch.cat(qp)
            out[sa + "k_proj.weight"] = w[2 * nh * hd:2 * nh * hd + kv]
            out[sa + "v_proj.weight"] = w[2 * nh * hd + kv:]
            out[sa + "o_proj.weight"] = m.o_proj
            out[sa + "q_norm.weight"] = m.q_norm
            out[sa + "k_norm.weight"] = m.k_norm
        mp = p + "mlp."
        out[mp + "gate_proj.weight"] = blk.mlp.gate
        out[mp + "up_proj.weight"] = blk.mlp.up
        out[mp + "down_proj.weight"] = blk.mlp.down
    return {k: v.detach().to(torch.float32).contiguous() for k, v in out.items()}


def write_safetensors(path, tensors):
    """A safetensors file of F32 tensors, each aligned to 64 bytes of the data section."""
    header, blobs, offset = {}, [], 0
    for name in sorted(tensors):
        data = tensors[name].numpy().tobytes()
        pad = (-len(data)) % 64
        header[name] = {"dtype": "F32", "shape": list(tensors[name].shape),
                        "data_offsets": [offset, offset + len(data)]}
        blobs.append(data + b"\0" * pad)
        offset += len(data) + pad
    header["__metadata__"] = {"format": "pt"}
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * ((-len(text) - 8) % 64)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for b in blobs:
            f.write(b)


def export_hf(model: TinyHybrid, out_dir):
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(model.c.to_hf(), f, indent=2)
        f.write("\n")
    write_safetensors(os.path.join(out_dir, "model.safetensors"), hf_tensors(model))


def read_safetensors(path):
    """{name: tensor} of a safetensors file of F32 tensors (what write_safetensors writes)."""
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        if info["dtype"] != "F32":
            raise ValueError(f"{path}: tensor {name} is {info['dtype']}, want F32")
        b, e = info["data_offsets"]
        out[name] = torch.frombuffer(bytearray(data[b:e]), dtype=torch.float32).reshape(
            info["shape"])
    return out


def load_hf(model_dir):
    """A TinyHybrid from a directory that export_hf wrote (the inverse of hf_tensors)."""
    with open(os.path.join(model_dir, "config.json")) as f:
        c = TinyConfig.from_hf(json.load(f))
    model = TinyHybrid(c)
    t = read_safetensors(os.path.join(model_dir, "model.safetensors"))
    nk, nv = c.linear_num_key_heads, c.linear_num_value_heads
    dk, dv = c.linear_key_head_dim, c.linear_value_head_dim
    r = nv // nk
    nh, hd = c.num_attention_heads, c.head_dim
    with torch.no_grad():
        model.embed.copy_(t["model.embed_tokens.weight"])
        model.final_norm.copy_(t["model.norm.weight"])
        model.lm_head.copy_(t["lm_head.weight"])
        for li, blk in enumerate(model.blocks):
            p = f"model.layers.{li}."
            blk.input_norm.copy_(t[p + "input_layernorm.weight"])
            blk.post_norm.copy_(t[p + "post_attention_layernorm.weight"])
            m = blk.mixer
            if blk.kind == "linear_attention":
                la = p + "linear_attn."
                groups = t[la + "in_proj_qkvz.weight"].reshape(nk, 2 * dk + 2 * r * dv, -1)
                ba = t[la + "in_proj_ba.weight"].reshape(nk, 2 * r, -1)
                rows = [groups[:, :dk], groups[:, dk:2 * dk], groups[:, 2 * dk:2 * dk + r * dv],
                        groups[:, 2 * dk + r * dv:], ba[:, :r], ba[:, r:]]
                m.in_proj.copy_(torch.cat([x.reshape(-1, c.hidden_size) for x in rows]))
                m.conv.copy_(t[la + "conv1d.weight"].squeeze(1))
                m.a_log.copy_(t[la + "A_log"])
                m.dt_bias.copy_(t[la + "dt_bias"])
                m.norm.copy_(t[la + "norm.weight"])
                m.out_proj.copy_(t[la + "out_proj.weight"])
            else:
                sa = p + "self_attn."
                q = t[sa + "q_proj.weight"].reshape(nh, 2, hd, -1)
                m.in_proj.copy_(torch.cat([q[:, 0].reshape(-1, c.hidden_size),
                                           q[:, 1].reshape(-1, c.hidden_size),
                                           t[sa + "k_proj.weight"], t[sa + "v_proj.weight"]]))
                m.o_proj.copy_(t[sa + "o_proj.weight"])
                m.q_norm.copy_(t[sa + "q_norm.weight"])
                m.k_norm.copy_(t[sa + "k_norm.weight"])
            mp = p + "mlp."
            blk.mlp.gate.copy_(t[mp + "gate_proj.weight"])
            blk.mlp.up.copy_(t[mp + "up_proj.weight"])
            blk.mlp.down.copy_(t[mp + "down_proj.weight"])
    return model
