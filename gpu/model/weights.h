// ModelWeights: every weight of a hybrid decoder in fp32, in ONE canonical layout that does not
// depend on the checkpoint's naming scheme. The checkpoint code (checkpoint.h) converts from and
// to the Hugging Face layouts, undoing Qwen3-Next's per-key-head interleaving and Qwen3.5's
// packed experts, so the forward pass sees one layout only.
//
// Projections are row-major [out, in] (as nn.Linear stores them) and fused per layer so that
// one sgemm covers every projection that reads the same input:
//   GDN in_proj       rows [q (H*dk) | k (H*dk) | v (HV*dv) | z (HV*dv) | b (HV) | a (HV)]
//   attention in_proj rows [query (nh*hd) | gate (nh*hd) | k (nkv*hd) | v (nkv*hd)]
//   MLP / expert      gate_up rows [gate (I) | up (I)], down [hidden, I]
// Plain value types, immutable once a Model owns them (shared by concurrent passes).
#pragma once

#include <cstdint>
#include <vector>

namespace hypic::model {

struct GdnWeights {
  std::vector<float> in_proj;   // [conv_channels + HV*dv + 2*HV, hidden]
  std::vector<float> conv;      // [conv_channels, K]
  std::vector<float> a_log;     // [HV]
  std::vector<float> dt_bias;   // [HV]
  std::vector<float> norm;      // [dv], the plain gated RMSNorm weight
  std::vector<float> out_proj;  // [hidden, HV*dv]
};

struct AttentionWeights {
  std::vector<float> in_proj;  // [(2*nh + 2*nkv)*hd, hidden]
  std::vector<float> q_norm;   // [hd], zero-centred
  std::vector<float> k_norm;   // [hd], zero-centred
  std::vector<float> o_proj;   // [hidden, nh*hd]
};

struct MlpWeights {
  int64_t intermediate = 0;
  std::vector<float> gate_up;  // [2*I, hidden]
  std::vector<float> down;     // [hidden, I]
};

struct MoeWeights {
  std::vector<float> router;  // [E, hidden]
  std::vector<MlpWeights> experts;
  MlpWeights shared;               // intermediate 0: no shared expert
  std::vector<float> shared_gate;  // [hidden]
};

struct LayerWeights {
  std::vector<float> input_norm;  // [hidden], zero-centred
  std::vector<float> post_norm;   // [hidden], zero-centred
  GdnWeights gdn;                 // linear layers only
  AttentionWeights attention;     // full-attention layers only
  MlpWeights dense;               // dense-MLP layers only
  MoeWeights moe;                 // MoE layers only
};

struct ModelWeights {
  std::vector<float> embed;  // [vocab, hidden]
  std::vector<LayerWeights> layers;
  std::vector<float> final_norm;  // [hidden], zero-centred
  std::vector<float> lm_head;     // [vocab, hidden]; empty when tied to embed
};

}  // namespace hypic::model
