#include "storage/synthetic_entry.h"

#include <algorithm>
#include <cstring>
#include <vector>

namespace hypic::storage {
namespace {

constexpr uint32_t kLayers = 4;  // layers 0-2 linear, layer 3 attention
constexpr uint32_t kConvK = 4;
constexpr int64_t kConvDim = 64;
constexpr uint32_t kSeamW = 8;

uint64_t SplitMix(uint64_t& s) {
  uint64_t z = (s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

void Fill(const TensorView& v, uint64_t& state) {
  auto* p = static_cast<std::byte*>(v.data());
  size_t n = v.NumBytes();
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t r = SplitMix(state);
    std::memcpy(p + i, &r, 8);
  }
  if (i < n) {
    uint64_t r = SplitMix(state);
    std::memcpy(p + i, &r, n - i);
  }
}

EntryMeta SyntheticMeta(const SyntheticSpec& spec) {
  EntryMeta meta;
  uint64_t state = spec.seed;
  meta.model = ModelFingerprint{0x5157454e33355f41ull, 0x68797069632d7374ull};  // fixed model
  meta.name_space = spec.name_space;
  meta.settings = CacheSettings{kSeamW, 1};
  meta.conv_k = kConvK;
  meta.num_layers = kLayers;
  meta.tokens.resize(std::max<uint32_t>(spec.n_tokens, kSeamW + 1));
  for (auto& t : meta.tokens) t = static_cast<uint32_t>(SplitMix(state) % 151936);
  meta.key = SegmentKey::Compute(meta.name_space, meta.model, meta.settings, meta.tokens);
  return meta;
}

}  // namespace

SegmentKey SyntheticKey(const SyntheticSpec& spec) { return SyntheticMeta(spec).key; }

Result<std::shared_ptr<SegmentEntry>> MakeSyntheticEntry(const SyntheticSpec& spec) {
  auto entry = std::make_shared<SegmentEntry>(SyntheticMeta(spec));
  // Eight big tensors share the budget: T and S of three linear layers (f32) and K, V of the
  // attention layer (bf16). The conv tails are small and fixed.
  int64_t per_tensor = static_cast<int64_t>(std::max<uint64_t>(spec.target_bytes / 8, 64));
  uint64_t state = spec.seed ^ 0x243f6a8885a308d3ull;
  for (uint32_t layer = 0; layer + 1 < kLayers; ++layer) {
    for (TensorKind kind : {TensorKind::kTransition, TensorKind::kState}) {
      HYPIC_ASSIGN_OR_RETURN(TensorView v,
                             entry->AddTensor(layer, kind, DType::kF32, Shape{per_tensor / 4}));
      Fill(v, state);
    }
    HYPIC_ASSIGN_OR_RETURN(
        TensorView conv,
        entry->AddTensor(layer, TensorKind::kConvTail, DType::kF32, Shape{kConvK - 1, kConvDim}));
    Fill(conv, state);
  }
  int64_t live = static_cast<int64_t>(entry->n_tokens() - kSeamW);
  int64_t width = std::max<int64_t>(per_tensor / 2 / live, 1);
  for (TensorKind kind : {TensorKind::kKey, TensorKind::kValue}) {
    HYPIC_ASSIGN_OR_RETURN(TensorView v,
                           entry->AddTensor(kLayers - 1, kind, DType::kBF16, Shape{live, width}));
    Fill(v, state);
  }
  return entry;
}

}  // namespace hypic::storage
