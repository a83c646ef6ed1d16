#include "gpu/model/weights.h"

#include <algorithm>

namespace hypic::model {
namespace {

size_t Bytes(const std::vector<float>& v) { return v.size() * sizeof(float); }
size_t Bytes(const WeightTensor& t) { return t.bytes(); }
size_t Bytes(const MlpWeights& m) { return Bytes(m.gate_up) + Bytes(m.down); }

}  // namespace

void WeightTensor::PackForCpuGemm(int64_t cols) {
  if (dtype_ != DType::kBF16 || packed_ != nullptr || bf16_.empty()) return;
  const auto rows = static_cast<int64_t>(bf16_.size()) / cols;
  packed_ = std::make_shared<const cpu::PackedBf16Weight>(bf16_.data(), rows, cols);
  packed_size_ = bf16_.size();
  std::vector<uint16_t>().swap(bf16_);  // the packed blocks are the only copy
}

void WeightTensor::WidenTo(float* dst) const {
  if (packed_ == nullptr) {
    ConvertElements(dtype_, data(), DType::kF32, dst, size());
    return;
  }
  std::vector<uint16_t> plain(packed_size_);
  packed_->Unpack(plain.data());
  ConvertElements(DType::kBF16, plain.data(), DType::kF32, dst, plain.size());
}

void ModelWeights::PackForCpuGemm(int64_t hidden_size) {
  auto mlp = [&](MlpWeights& m) {
    m.gate_up.PackForCpuGemm(hidden_size);
    m.down.PackForCpuGemm(m.intermediate);
  };
  lm_head.PackForCpuGemm(hidden_size);
  for (LayerWeights& l : layers) {
    l.gdn.in_proj.PackForCpuGemm(hidden_size);
    if (!l.gdn.out_proj.empty()) {
      l.gdn.out_proj.PackForCpuGemm(static_cast<int64_t>(l.gdn.out_proj.size()) / hidden_size);
    }
    l.attention.in_proj.PackForCpuGemm(hidden_size);
    if (!l.attention.o_proj.empty()) {
      l.attention.o_proj.PackForCpuGemm(static_cast<int64_t>(l.attention.o_proj.size()) /
                                        hidden_size);
    }
    mlp(l.dense);
    mlp(l.moe.shared);
    for (MlpWeights& e : l.moe.experts) mlp(e);
  }
}

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
