// Synthetic segment entries of a chosen size, with deterministic contents derived from a seed.
// The stress tool, the store benchmark and the storage tests use them so that a reader can
// recompute what an entry must contain from its seed alone (the expected-state oracle needs no
// copy of the data). The shape mimics a small hybrid model: three linear layers (T, S, conv
// tail) and one attention layer (K, V). Pure functions, thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "core/segment_entry.h"
#include "core/status.h"

namespace hypic::storage {

struct SyntheticSpec {
  uint64_t seed = 0;
  std::string name_space = "default";
  uint64_t target_bytes = uint64_t{1} << 20;  // approximate serialized size
  uint32_t n_tokens = 64;
};

// Builds the entry of `spec`: tokens and tensor values come from `seed`, so two calls with the
// same spec give byte-identical serializations and different seeds give different keys.
Result<std::shared_ptr<SegmentEntry>> MakeSyntheticEntry(const SyntheticSpec& spec);

// The key MakeSyntheticEntry(spec) will carry, without building the tensors.
SegmentKey SyntheticKey(const SyntheticSpec& spec);

}  // namespace hypic::storage
