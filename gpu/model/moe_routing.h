// The MoE router's decision for one token, as HYPIC_HD inline math: CpuForwardKernels routes
// every row with it on the host, and the CUDA routing kernel (gpu/cuda/model/moe_kernels.cu)
// runs it with one thread per row, so the CPU test (moe_routing_test.cpp) checks the code the
// device runs.
//
// Semantics (the routing forward.cpp ran before it moved behind ForwardKernels, bit for bit):
// softmax over the row's logits in fp32 (each exp(l - max) a float, their sum in double, each
// probability rounded once to float), the top_k largest probabilities, ties to the lower expert
// index, and with norm_topk_prob each chosen probability times 1 / (their float sum, added in
// selection order). One pass keeps the top_k in a sorted array, so a row needs no [experts]
// scratch (on the device the row stays in registers); exps are recomputed rather than stored.
// Stateless and thread-compatible.
#pragma once

#include <math.h>

#include <cstdint>

#include "core/hd.h"

namespace hypic::model {

// The most experts a token may be routed to on a device (a CUDA thread keeps its row's choice in
// registers); the CPU takes any top_k.
inline constexpr int kMaxTopK = 16;

// Routes one row of `experts` logits: chosen[j], weight[j] for j < top_k, most probable first.
// REQUIRES: 1 <= top_k <= experts.
HYPIC_HD_INLINE void RouteRow(const float* logits, int64_t experts, int top_k, bool norm_topk_prob,
                              int32_t* chosen, float* weight) {
  float mx = logits[0];
  for (int64_t e = 1; e < experts; ++e) mx = mx < logits[e] ? logits[e] : mx;  // max_element
  double sum = 0.0;
  for (int64_t e = 0; e < experts; ++e) sum += static_cast<double>(expf(logits[e] - mx));
  int n = 0;
  for (int64_t e = 0; e < experts; ++e) {
    const auto p = static_cast<float>(static_cast<double>(expf(logits[e] - mx)) / sum);
    // Experts come in ascending order, so an equal probability loses to the ones already kept.
    if (n == top_k && !(p > weight[top_k - 1])) continue;
    int i = n < top_k ? n++ : top_k - 1;
    for (; i > 0 && p > weight[i - 1]; --i) {
      weight[i] = weight[i - 1];
      chosen[i] = chosen[i - 1];
    }
    weight[i] = p;
    chosen[i] = static_cast<int32_t>(e);
  }
  if (!norm_topk_prob) return;
  float s = 0.0f;
  for (int j = 0; j < top_k; ++j) s += weight[j];
  const float norm = 1.0f / s;
  for (int j = 0; j < top_k; ++j) weight[j] *= norm;
}

}  // namespace hypic::model
