// SegmentEntry: the in-memory form of one cached segment, shared by the producer (gpu/model's
// SegmentPrefill), the consumer (Compose) and the store (storage/ serializes and parses it).
// Neither gpu/ nor storage/ depends on the other; both depend on this type.
//
// It holds the metadata (key, model, settings, tokens) and a table of tensors:
//   linear layer l:    kTransition (T_C over [w,n)), kState (S(C|0)), kConvTail (last K-1 inputs)
//   attention layer l: kKey, kValue for tokens [w,n) at segment-relative positions
// Tensor memory is owned by the entry: either per-tensor buffers (AddTensor) or one shared
// serialized buffer that the tensors view into (storage's zero-copy Parse, via AddView).
// Immutable once built and shared as std::shared_ptr<const SegmentEntry>; safe for concurrent
// readers.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/host_buffer.h"
#include "core/segment_key.h"
#include "core/status.h"
#include "core/tensor.h"

namespace hypic {

// Numeric values are part of the entry format: never renumber.
enum class TensorKind : uint8_t {
  kTransition = 0,
  kState = 1,
  kConvTail = 2,
  kKey = 3,
  kValue = 4,
};
inline constexpr uint8_t kMaxTensorKind = 4;
std::string_view TensorKindName(TensorKind kind);
// A composed-state tensor's name in a state file (docs/state-format.md §8):
// "layers.{layer}.{state|conv_tail|key|value}" ("?" for a kind the state never carries).
std::string StateFileTensorName(uint32_t layer, TensorKind kind);

struct EntryTensor {
  uint32_t layer = 0;
  TensorKind kind = TensorKind::kState;
  TensorView view;  // host memory owned by the entry
};

struct EntryMeta {
  SegmentKey key;
  ModelFingerprint model;
  std::string name_space;
  CacheSettings settings;
  uint32_t conv_k = 0;      // short-conv kernel size of the model's linear layers (0: none)
  uint32_t num_layers = 0;  // decoder layers of the model
  std::vector<uint32_t> tokens;
};

class SegmentEntry {
 public:
  SegmentEntry() = default;
  explicit SegmentEntry(EntryMeta meta) : meta_(std::move(meta)) {}

  const EntryMeta& meta() const { return meta_; }
  EntryMeta& mutable_meta() { return meta_; }
  const SegmentKey& key() const { return meta_.key; }
  uint32_t n_tokens() const { return static_cast<uint32_t>(meta_.tokens.size()); }

  // Allocates a tensor owned by the entry, zeroed unless `init` says the producer writes every
  // element (HostBuffer::Init), and returns its view for the producer to fill. Fails with
  // kBadRequest on a duplicate (layer, kind) or a bad shape, kNoSpace on OOM.
  Result<TensorView> AddTensor(uint32_t layer, TensorKind kind, DType dtype, const Shape& shape,
                               HostBuffer::Init init = HostBuffer::Init::kZero);

  // Registers a view into memory kept alive by `owner` (zero-copy parse). Same checks.
  Status AddView(uint32_t layer, TensorKind kind, TensorView view,
                 std::shared_ptr<const void> owner);

  const std::vector<EntryTensor>& tensors() const { return tensors_; }
  // nullptr when absent.
  const EntryTensor* Find(uint32_t layer, TensorKind kind) const;
  // Sum of tensor payload bytes (what the entry costs in a tier, less its header).
  size_t TensorBytes() const;

 private:
  Status CheckNew(uint32_t layer, TensorKind kind, const Shape& shape) const;

  EntryMeta meta_;
  std::vector<EntryTensor> tensors_;
  std::vector<std::shared_ptr<const void>> owners_;
};

}  // namespace hypic
