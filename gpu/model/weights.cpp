#include "gpu/model/weights.h"

namespace hypic::model {
namespace {

size_t Bytes(const std::vector<float>& v) { return v.size() * sizeof(float); }
size_t Bytes(const WeightTensor& t) { return t.bytes(); }
size_t Bytes(const MlpWeights& m) { return Bytes(m.gate_up) + Bytes(m.down); }

}  // namespace

size_t ModelWeights::ResidentBytes() const {
  size_t n = Bytes(embed) + Bytes(final_norm) + Bytes(lm_head);
  for (const LayerWeights& l : layers) {
    n += Bytes(l.input_norm) + Bytes(l.post_norm);
    n += Bytes(l.gdn.in_proj) + Bytes(l.gdn.conv) + Bytes(l.gdn.a_log) + Bytes(l.gdn.dt_bias) +
         Bytes(l.gdn.norm) + Bytes(l.gdn.out_proj);
    n += Bytes(l.attention.in_proj) + Bytes(l.attention.q_norm) + Bytes(l.attention.k_norm) +
         Bytes(l.attention.o_proj);
    n += Bytes(l.dense) + Bytes(l.moe.router) + Bytes(l.moe.shared) + Bytes(l.moe.shared_gate);
    for (const MlpWeights& e : l.moe.experts) n += Bytes(e);
  }
  return n;
}

}  // namespace hypic::model
