// ModelWeights: every weight of a hybrid decoder in ONE canonical layout that does not depend
// on the checkpoint's naming scheme. The checkpoint code (checkpoint.h) converts from and to
// the Hugging Face layouts, undoing Qwen3-Next's per-key-head interleaving and Qwen3.5's
// packed experts, so the forward pass sees one layout only.
//
// Projections are row-major [out, in] (as nn.Linear stores them) and fused per layer so that
// one GEMM covers every projection that reads the same input:
//   GDN in_proj       rows [q (H*dk) | k (H*dk) | v (HV*dv) | z (HV*dv) | b (HV) | a (HV)]
//   attention in_proj rows [query (nh*hd) | gate (nh*hd) | k (nkv*hd) | v (nkv*hd)]
//   MLP / expert      gate_up rows [gate (I) | up (I)], down [hidden, I]
//
// Precision: the GEMM weights (WeightTensor: embeddings, projections, experts, lm_head) are
// fp32 or, for a bf16 checkpoint kept in its own precision (weights_dtype), bf16 as stored.
// Everything else (norms, conv, the GDN gates, the MoE router) is fp32 always: it is small,
// and the state algebra and the routing decisions stay in fp32.
//
// On the CPU a Model keeps its bf16 projections packed (PackForCpuGemm): in the blocked
// layout oneDNN's matmul reads directly, as the only copy, so resident bytes stay those of the
// checkpoint plus the layout's padding.
//
// Plain value types, immutable once a Model owns them (shared by concurrent passes).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "core/dtype.h"
#include "gpu/cpu/gemm.h"

namespace hypic::model {

// One GEMM weight, row-major, in its resident precision: kF32 (elements in f32()) or kBF16 (raw
// bits in bf16(), or packed for the CPU's GEMMs, when bf16() is empty too); the other vector
// is empty.
class WeightTensor {
 public:
  WeightTensor() = default;
  // n zero elements of `dtype` (kF32 or kBF16).
  WeightTensor(DType dtype, size_t n) : dtype_(dtype) {
    if (dtype == DType::kBF16) {
      bf16_.assign(n, 0);
    } else {
      f32_.assign(n, 0.0f);
    }
  }

  DType dtype() const { return dtype_; }
  size_t size() const {
    return packed_ != nullptr ? packed_size_ : dtype_ == DType::kBF16 ? bf16_.size() : f32_.size();
  }
  bool empty() const { return size() == 0; }
  // Resident bytes (a packed weight's include its layout's padding).
  size_t bytes() const {
    return packed_ != nullptr ? packed_->bytes() : size() * DTypeSize(dtype_);
  }
  // The elements in their stored layout: the plain row-major ones, or the packed blocks. Also
  // the tensor's identity for a device that uploads it.
  const void* data() const {
    if (packed_ != nullptr) return packed_->data();
    return dtype_ == DType::kBF16 ? static_cast<const void*>(bf16_.data()) : f32_.data();
  }
  // REQUIRES: not packed.
  void* data() { return dtype_ == DType::kBF16 ? static_cast<void*>(bf16_.data()) : f32_.data(); }

  // Replaces a kBF16 weight of `cols` columns (its input width) by its packed form; a no-op
  // for kF32 or an empty tensor. REQUIRES: size() is a multiple of cols.
  void PackForCpuGemm(int64_t cols);
  const cpu::PackedBf16Weight* packed() const { return packed_.get(); }
  // Every element widened to fp32, in the plain row-major order, into dst[0, size()).
  void WidenTo(float* dst) const;

  // REQUIRES: dtype() is kF32 (f32) or kBF16 (bf16), and not packed.
  std::vector<float>& f32() { return f32_; }
  const std::vector<float>& f32() const { return f32_; }
  std::vector<uint16_t>& bf16() { return bf16_; }
  const std::vector<uint16_t>& bf16() const { return bf16_; }

  // Element i widened to fp32. REQUIRES: not packed.
  float At(size_t i) const { return dtype_ == DType::kBF16 ? Bf16ToF32(bf16_[i]) : f32_[i]; }

  bool operator==(const WeightTensor&) const = default;

 private:
  DType dtype_ = DType::kF32;
  std::vector<float> f32_;
  std::vector<uint16_t> bf16_;
  std::shared_ptr<const cpu::PackedBf16Weight> packed_;  // immutable, shared by copies
  size_t packed_size_ = 0;
};

struct GdnWeights {
  WeightTensor in_proj;        // [conv_channels + HV*dv + 2*HV, hidden]
  std::vector<float> conv;     // [conv_channels, K]
  std::vector<float> a_log;    // [HV]
  std::vector<float> dt_bias;  // [HV]
  std::vector<float> norm;     // [dv], the plain gated RMSNorm weight
  WeightTensor out_proj;       // [hidden, HV*dv]
};

struct AttentionWeights {
  WeightTensor in_proj;       // [(2*nh + 2*nkv)*hd, hidden]
  std::vector<float> q_norm;  // [hd], zero-centred
  std::vector<float> k_norm;  // [hd], zero-centred
  WeightTensor o_proj;        // [hidden, nh*hd]
};

struct MlpWeights {
  int64_t intermediate = 0;
  WeightTensor gate_up;  // [2*I, hidden]
  WeightTensor down;     // [hidden, I]
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
  WeightTensor embed;  // [vocab, hidden]
  std::vector<LayerWeights> layers;
  std::vector<float> final_norm;  // [hidden], zero-centred
  WeightTensor lm_head;           // [vocab, hidden]; empty when tied to embed

  // Bytes held by every tensor above, as resident.
  size_t ResidentBytes() const;
  // Packs every bf16 projection, expert and lm_head for the CPU's GEMMs (the embedding table
  // stays plain: rows are looked up in it, and a tied lm_head reads it).
  void PackForCpuGemm(int64_t hidden_size);
};

}  // namespace hypic::model
