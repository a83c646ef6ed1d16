#!/usr/bin/python3
"""Convert a hypic-mkmodel Qwen3-Next model directory (config.json + model.safetensors) to GGUF v3
for llama.cpp's `qwen3next` architecture, so llama.cpp can run the very same weights.

    /usr/bin/python3 gguf_convert.py --model DIR --out FILE.gguf --dtype f32|f16|bf16

Only numpy is needed (safetensors is parsed by hand). The tensor layout follows what llama.cpp
(release v0.4.0) expects for Qwen3NextForCausalLM:
  * A_log -> ssm_a = -exp(A_log); dt_bias -> ssm_dt.bias; conv1d [C,1,K] -> ssm_conv1d [C,K];
  * +1 on every *norm.weight except linear_attn.norm (Qwen3-Next's zero-centred RMSNorm);
  * in_proj_qkvz, which HF stores interleaved per key-head group g as [q_g | k_g | v_g | z_g],
    is de-interleaved into attn_qkv (all q | all k | all v) and attn_gate (all z);
  * in_proj_ba stays interleaved per group ([b_g | a_g]) as ssm_ba: llama.cpp's graph splits it;
  * per-expert matrices are stacked into ffn_{gate,up,down}_exps [E, out, in];
  * 1-D tensors, norms, ffn_gate_inp, ffn_gate_inp_shexp and ssm_conv1d stay F32; the other
    2-D/3-D matrices are written in the chosen --dtype.
The vocabulary is a dummy ("none" tokenizer with <arch>.vocab_size): token ids are fed directly.
"""
import argparse
import json
import os
import struct
import sys

import numpy as np

ARCH = "qwen3next"
ALIGN = 32

# GGUF metadata value types
T_UINT32, T_INT32, T_FLOAT32, T_BOOL, T_STRING, T_ARRAY = 4, 5, 6, 7, 8, 9
# ggml tensor types
GGML_F32, GGML_F16, GGML_BF16 = 0, 1, 30
# llama_ftype
FTYPE = {"f32": 0, "f16": 1, "bf16": 32}
GGML_OF = {"f32": GGML_F32, "f16": GGML_F16, "bf16": GGML_BF16}


# ---------------------------------------------------------------- safetensors
def read_safetensors(path):
    """Returns {name: np.ndarray(float32)} for every tensor in the file."""
    with open(path, "rb") as f:
        (hlen,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(hlen))
    base = 8 + hlen
    raw = np.memmap(path, dtype=np.uint8, mode="r")
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        b, e = info["data_offsets"]
        buf = raw[base + b: base + e]
        shape = tuple(info["shape"])
        dt = info["dtype"]
        if dt == "F32":
            a = buf.view("<f4").astype(np.float32)
        elif dt == "F16":
            a = buf.view("<f2").astype(np.float32)
        elif dt == "BF16":
            a = (buf.view("<u2").astype(np.uint32) << 16).view(np.float32)
        else:
            raise SystemExit(f"gguf_convert: tensor {name}: unsupported dtype {dt}")
        out[name] = a.reshape(shape)
    return out


def f32_to_bf16_bits(a):
    """Round-to-nearest-even float32 -> bfloat16 bit patterns (uint16)."""
    u = np.ascontiguousarray(a, dtype=np.float32).view(np.uint32)
    rounded = u + (np.uint32(0x7FFF) + ((u >> np.uint32(16)) & np.uint32(1)))
    bits = (rounded >> np.uint32(16)).astype(np.uint16)
    nan = np.isnan(a)
    if nan.any():
        bits[nan] = 0x7FC0
    return bits


# ---------------------------------------------------------------- GGUF writer
class GGUFWriter:
    def __init__(self):
        self.kv = []  # (key, bytes of type+value)
        self.tensors = []  # (name, np array in its storage dtype, ggml type)

    @staticmethod
    def _str(s):
        b = s.encode("utf-8")
        return struct.pack("<Q", len(b)) + b

    def u32(self, key, v):
        self.kv.append((key, struct.pack("<I", T_UINT32) + struct.pack("<I", int(v))))

    def f32(self, key, v):
        self.kv.append((key, struct.pack("<I", T_FLOAT32) + struct.pack("<f", float(v))))

    def string(self, key, v):
        self.kv.append((key, struct.pack("<I", T_STRING) + self._str(v)))

    def bool_array(self, key, vals):
        body = struct.pack("<IIQ", T_ARRAY, T_BOOL, len(vals)) + bytes(int(bool(x)) for x in vals)
        self.kv.append((key, body))

    def tensor(self, name, arr, ggml_type):
        self.tensors.append((name, arr, ggml_type))

    def write(self, path):
        tmp = path + ".tmp"
        with open(tmp, "wb") as f:
            f.write(b"GGUF")
            f.write(struct.pack("<IQQ", 3, len(self.tensors), len(self.kv)))
            for key, body in self.kv:
                f.write(self._str(key))
                f.write(body)
            offset = 0
            offsets = []
            for name, arr, gtype in self.tensors:
                f.write(self._str(name))
                ne = list(reversed(arr.shape))  # ggml ne[0] is the innermost (last numpy) dim
                f.write(struct.pack("<I", len(ne)))
                f.write(struct.pack(f"<{len(ne)}Q", *ne))
                f.write(struct.pack("<IQ", gtype, offset))
                offsets.append(offset)
                offset += (arr.nbytes + ALIGN - 1) // ALIGN * ALIGN
            pad = (-f.tell()) % ALIGN
            f.write(b"\0" * pad)
            data_start = f.tell()
            for (name, arr, gtype), off in zip(self.tensors, offsets):
                assert f.tell() == data_start + off, name
                f.write(np.ascontiguousarray(arr).tobytes())
                f.write(b"\0" * ((-arr.nbytes) % ALIGN))
        os.replace(tmp, path)


# ---------------------------------------------------------------- conversion
def convert(model_dir, out_path, dtype):
    with open(os.path.join(model_dir, "config.json")) as f:
        cfg = json.load(f)
    if cfg.get("model_type") != "qwen3_next" and "Qwen3NextForCausalLM" not in cfg.get("architectures", []):
        raise SystemExit(f"gguf_convert: {model_dir}: not a Qwen3-Next model")
    st = read_safetensors(os.path.join(model_dir, "model.safetensors"))

    n_layer = cfg["num_hidden_layers"]
    hidden = cfg["hidden_size"]
    n_head = cfg["num_attention_heads"]
    head_dim = cfg.get("head_dim", hidden // n_head)
    hk = cfg["linear_key_head_dim"]
    hv = cfg["linear_value_head_dim"]
    nk = cfg["linear_num_key_heads"]
    nv = cfg["linear_num_value_heads"]
    if hk != hv:
        # llama.cpp's qwen3next loader sizes value heads with ssm.state_size (= key head dim)
        raise SystemExit("gguf_convert: llama.cpp's qwen3next needs linear_key_head_dim == linear_value_head_dim")
    if nv % nk:
        raise SystemExit("gguf_convert: linear_num_value_heads must be a multiple of linear_num_key_heads")
    n_expert = cfg["num_experts"]
    if cfg.get("mlp_only_layers") or cfg.get("decoder_sparse_step", 1) != 1:
        raise SystemExit("gguf_convert: dense (mlp-only) layers are not supported by llama.cpp's qwen3next")
    layer_types = cfg.get("layer_types")
    if layer_types is None:
        interval = cfg.get("full_attention_interval", 4)
        layer_types = ["full_attention" if (i + 1) % interval == 0 else "linear_attention" for i in range(n_layer)]
    recurrent = [t == "linear_attention" for t in layer_types]

    wtype = GGML_OF[dtype]
    w = GGUFWriter()
    w.string("general.architecture", ARCH)
    w.string("general.name", cfg.get("_name_or_path", os.path.basename(os.path.normpath(model_dir))))
    w.u32("general.file_type", FTYPE[dtype])
    w.u32("general.alignment", ALIGN)
    w.u32(f"{ARCH}.context_length", cfg.get("max_position_embeddings", 262144))
    w.u32(f"{ARCH}.embedding_length", hidden)
    w.u32(f"{ARCH}.block_count", n_layer)
    w.u32(f"{ARCH}.feed_forward_length", cfg["intermediate_size"])
    w.u32(f"{ARCH}.attention.head_count", n_head)
    w.u32(f"{ARCH}.attention.head_count_kv", cfg["num_key_value_heads"])
    w.u32(f"{ARCH}.attention.key_length", head_dim)
    w.u32(f"{ARCH}.attention.value_length", head_dim)
    w.f32(f"{ARCH}.attention.layer_norm_rms_epsilon", cfg["rms_norm_eps"])
    w.f32(f"{ARCH}.rope.freq_base", cfg.get("rope_theta", 10000.0))
    w.u32(f"{ARCH}.rope.dimension_count", int(head_dim * cfg.get("partial_rotary_factor", 0.25)))
    w.u32(f"{ARCH}.expert_count", n_expert)
    w.u32(f"{ARCH}.expert_used_count", cfg["num_experts_per_tok"])
    w.u32(f"{ARCH}.expert_feed_forward_length", cfg["moe_intermediate_size"])
    w.u32(f"{ARCH}.expert_shared_feed_forward_length", cfg["shared_expert_intermediate_size"])
    w.u32(f"{ARCH}.ssm.conv_kernel", cfg["linear_conv_kernel_dim"])
    w.u32(f"{ARCH}.ssm.state_size", hk)
    w.u32(f"{ARCH}.ssm.group_count", nk)
    w.u32(f"{ARCH}.ssm.time_step_rank", nv)
    w.u32(f"{ARCH}.ssm.inner_size", hv * nv)
    w.bool_array(f"{ARCH}.attention.recurrent_layers", recurrent)
    w.u32(f"{ARCH}.vocab_size", cfg["vocab_size"])
    w.string("tokenizer.ggml.model", "none")

    used = set()

    def take(name):
        if name not in st:
            raise SystemExit(f"gguf_convert: missing tensor {name}")
        used.add(name)
        return st[name]

    def put(name, a, keep_f32=False):
        a = np.ascontiguousarray(a, dtype=np.float32)
        if keep_f32 or a.ndim == 1 or wtype == GGML_F32:
            w.tensor(name, a, GGML_F32)
        elif wtype == GGML_F16:
            w.tensor(name, a.astype("<f2"), GGML_F16)
        else:
            w.tensor(name, f32_to_bf16_bits(a), GGML_BF16)

    put("token_embd.weight", take("model.embed_tokens.weight"))
    put("output_norm.weight", take("model.norm.weight") + 1.0)
    if "lm_head.weight" in st and not cfg.get("tie_word_embeddings", False):
        put("output.weight", take("lm_head.weight"))

    for i in range(n_layer):
        p = f"model.layers.{i}."
        b = f"blk.{i}."
        put(b + "attn_norm.weight", take(p + "input_layernorm.weight") + 1.0)
        put(b + "post_attention_norm.weight", take(p + "post_attention_layernorm.weight") + 1.0)
        if recurrent[i]:
            la = p + "linear_attn."
            qkvz = take(la + "in_proj_qkvz.weight")  # [nk * (2hk + 2*(nv/nk)*hv), hidden]
            r = nv // nk
            per = 2 * hk + 2 * r * hv
            assert qkvz.shape == (nk * per, hidden), qkvz.shape
            g = qkvz.reshape(nk, per, hidden)
            q = g[:, :hk].reshape(-1, hidden)
            k = g[:, hk:2 * hk].reshape(-1, hidden)
            v = g[:, 2 * hk:2 * hk + r * hv].reshape(-1, hidden)
            z = g[:, 2 * hk + r * hv:].reshape(-1, hidden)
            put(b + "attn_qkv.weight", np.concatenate([q, k, v], axis=0))
            put(b + "attn_gate.weight", z)
            ba = take(la + "in_proj_ba.weight")
            assert ba.shape == (2 * nv, hidden), ba.shape
            put(b + "ssm_ba.weight", ba)
            conv = take(la + "conv1d.weight")
            put(b + "ssm_conv1d.weight", conv.reshape(conv.shape[0], conv.shape[-1]), keep_f32=True)
            put(b + "ssm_dt.bias", take(la + "dt_bias"))
            put(b + "ssm_a", -np.exp(take(la + "A_log").astype(np.float64)).astype(np.float32))
            put(b + "ssm_norm.weight", take(la + "norm.weight"))  # gated norm: no +1
            put(b + "ssm_out.weight", take(la + "out_proj.weight"))
        else:
            sa = p + "self_attn."
            put(b + "attn_q.weight", take(sa + "q_proj.weight"))  # [q | gate] per head, as in HF
            put(b + "attn_k.weight", take(sa + "k_proj.weight"))
            put(b + "attn_v.weight", take(sa + "v_proj.weight"))
            put(b + "attn_output.weight", take(sa + "o_proj.weight"))
            put(b + "attn_q_norm.weight", take(sa + "q_norm.weight") + 1.0)
            put(b + "attn_k_norm.weight", take(sa + "k_norm.weight") + 1.0)
        m = p + "mlp."
        put(b + "ffn_gate_inp.weight", take(m + "gate.weight"), keep_f32=True)
        for proj, gname in (("gate_proj", "ffn_gate_exps"), ("up_proj", "ffn_up_exps"), ("down_proj", "ffn_down_exps")):
            stacked = np.stack([take(f"{m}experts.{e}.{proj}.weight") for e in range(n_expert)], axis=0)
            put(b + gname + ".weight", stacked)
        put(b + "ffn_gate_shexp.weight", take(m + "shared_expert.gate_proj.weight"))
        put(b + "ffn_up_shexp.weight", take(m + "shared_expert.up_proj.weight"))
        put(b + "ffn_down_shexp.weight", take(m + "shared_expert.down_proj.weight"))
        put(b + "ffn_gate_inp_shexp.weight", take(m + "shared_expert_gate.weight").reshape(-1), keep_f32=True)

    left = sorted(set(st) - used - ({"lm_head.weight"} if cfg.get("tie_word_embeddings") else set()))
    if left:
        raise SystemExit(f"gguf_convert: unconverted tensors: {left[:8]}{' ...' if len(left) > 8 else ''}")
    w.write(out_path)
    n_params = sum(a.size for _, a, _ in w.tensors)
    print(f"gguf_convert: wrote {out_path} ({len(w.tensors)} tensors, {n_params} params, {dtype})")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True, help="model dir (config.json + model.safetensors)")
    ap.add_argument("--out", required=True, help="output .gguf")
    ap.add_argument("--dtype", default="f32", choices=sorted(FTYPE))
    a = ap.parse_args()
    convert(a.model, a.out, a.dtype)


if __name__ == "__main__":
    sys.exit(main())
