#include "gpu/model/pass_memory.h"

#include <algorithm>

namespace hypic::model {

uint64_t PassBytes(const ModelConfig& c, const PassSize& s) {
  const auto u = [](int64_t v) { return static_cast<uint64_t>(std::max<int64_t>(v, 0)); };
  const uint64_t h = u(c.hidden_size);
  const uint64_t nk = u(c.linear_key_heads), nv = u(c.linear_value_heads);
  const uint64_t dk = u(c.linear_key_dim), dv = u(c.linear_value_dim);
  const uint64_t vw = u(c.value_width()), ch = u(c.conv_channels());
  const uint64_t qw = u(c.num_heads * c.head_dim), kw = u(c.num_kv_heads * c.head_dim);
  // The widest MLP of the layers there are (a config names a dense width even when every
  // layer is MoE).
  uint64_t im = 0;
  for (const MlpKind kind : c.mlp_kinds) {
    im = std::max(im, kind == MlpKind::kDense ? u(c.intermediate_size)
                                              : std::max(u(c.moe_intermediate_size),
                                                         u(c.shared_expert_intermediate_size)));
  }
  const uint64_t ne = u(c.num_experts), top = u(c.experts_per_token);
  const uint64_t linear = u(c.num_linear_layers()), attention = u(c.num_layers) - linear;
  const uint64_t tail = u(c.conv_kernel - 1) * ch;  // a conv state's floats

  // Per live row. The scratch slots (forward.h's ScratchSlot), each as wide as its widest
  // use: x, xn, y; the projection (GDN's q|k|v|z|b|a or attention's q|gate|k|v); q, k, v;
  // the GDN gates; its output; the attention's output; the router's logits; the shared
  // expert's output and gate-up products (a device's; the CPU's row tiles need neither).
  const uint64_t slot_floats = 3 * h + std::max(ch + vw + 2 * nv, 2 * qw + 2 * kw) +
                               std::max(nk * dk, qw) + std::max(nk * dk, kw) + std::max(vw, kw) +
                               2 * nv + vw + qw + ne + h + 2 * im;
  // bf16 copies: the norms' (Bf16Rows) and a product's own rounding of its input.
  const uint64_t bf16_elems = h + std::max({h, vw, qw, im});
  // Routing: each row's experts and weights, the per-expert lists, the regrouping.
  const uint64_t routing = top * (4 + 4 + 8 + 4 + 8) + 4;
  const uint64_t per_row = 4 * slot_floats + 2 * bf16_elems + routing + 8 + 4;  // + position, token

  // Per position: the bf16 attention's packed K/V (keys padded to blocks of 256) or the fp32
  // attention's gathered K/V, one layer's widened entry K/V, and the state's caches.
  const uint64_t per_position = 4 * kw + 8 * kw + 8 * kw + (s.state_kept ? attention * 8 * kw : 0);
  const uint64_t positions = u(s.positions) + 256;

  // Per cached block: one layer's widened T, S(C|0) and conv tail.
  const uint64_t per_block = linear > 0 ? 4 * (nv * dk * dk + nv * dk * dv + tail) : 0;

  // The capture: the entry's tensors (at most 4 bytes an element) and their fp32 roundings.
  const uint64_t capture = s.captured_rows > 0
                               ? 2 * 4 *
                                     (linear * (nv * dk * dk + nv * dk * dv + tail) +
                                      attention * 2 * kw * u(s.captured_rows))
                               : 0;

  // Fixed: the state of the linear layers, and the grouped experts' outputs (routed rows stay
  // below 128 per expert there: CpuForwardKernels::RoutedExperts).
  const uint64_t fixed = 4 * linear * (nv * dk * dv + tail) + 4 * 128 * ne * h;

  return u(s.live_rows) * per_row + positions * per_position + u(s.cached_blocks) * per_block +
         capture + u(s.logit_rows) * u(c.vocab_size) * 4 + fixed;
}

}  // namespace hypic::model
