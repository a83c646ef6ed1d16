// PrefixCache: the `prefix` baseline of MATH.md §5 (compose mode kPrefix on the wire), a
// hybrid-aware prefix cache in the style of SGLang's Mamba radix cache and Marconi. It reuses
// state only behind an IDENTICAL prefix of whole parts, which is what serving systems run today
// and what HYPIC is measured against; it is exact by construction (no approximation at all).
//
// A prompt is an ordered list of parts (segments and raw parts alike). At every part boundary
// except after the last part, the running state is checkpointed under the CHAIN HASH of
// everything before the boundary: h_0 = xxh3-128(namespace, model fingerprint),
// h_i = xxh3-128(h_{i-1}, tokens of part i). A request walks h_1, h_2, ... while checkpoints
// exist, restores the deepest one, and extends from there with Model::Extend, checkpointing the
// boundaries it computes. The last part always runs live (it produces the logits).
//
// Storage is a radix tree over parts, so a long shared prefix is stored once: a node keeps
//   * per linear layer: the full (S, conv) snapshot at its boundary (fixed size), and
//   * per attention layer: K/V of ITS OWN part's positions only; a restore concatenates the
//     K/V along the path from the root.
// Capacity is a byte bound over all nodes; eviction removes the least recently used LEAF (an
// inner node is needed by its children's K/V), so usage never exceeds capacity after Run.
//
// Thread-safety: Run may be called concurrently. The tree is guarded by a mutex held only for
// lookups and inserts; the model passes run outside it. Nodes are immutable once inserted.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <span>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/hash.h"
#include "core/status.h"
#include "core/thread_annotations.h"
#include "gpu/model/model.h"

namespace hypic::model {

struct PrefixCacheOptions {
  uint64_t capacity_bytes = uint64_t{1} << 30;
};

struct PrefixRunResult {
  std::vector<float> logits;    // [vocab], the last token
  size_t reused_parts = 0;      // parts restored from a checkpoint
  int64_t reused_tokens = 0;    // their tokens
  int64_t computed_tokens = 0;  // tokens that ran through the model
  size_t checkpoints_added = 0;
};

struct PrefixCacheStats {
  uint64_t nodes = 0;
  uint64_t bytes = 0;
  uint64_t capacity_bytes = 0;
  uint64_t runs = 0;
  uint64_t reused_parts = 0;
  uint64_t reused_tokens = 0;
  uint64_t computed_tokens = 0;
  uint64_t evictions = 0;
};

class PrefixCache {
 public:
  PrefixCache(std::shared_ptr<const Model> model, PrefixCacheOptions options);
  ~PrefixCache();
  PrefixCache(const PrefixCache&) = delete;
  PrefixCache& operator=(const PrefixCache&) = delete;

  // Runs the prompt `parts` (their entries are ignored) and returns the last token's logits.
  // kBadRequest for an empty prompt, an empty part or a token outside the vocabulary;
  // kDeadlineExceeded when a part's pass runs past `deadline` (PrefillOptions::deadline), and
  // then no checkpoint of this run is kept.
  Result<PrefixRunResult> Run(std::string_view name_space, std::span<const ComposePart> parts,
                              std::chrono::steady_clock::time_point deadline =
                                  std::chrono::steady_clock::time_point::max());

  PrefixCacheStats Stats() const;
  // Drops every checkpoint.
  void Clear();

 private:
  struct Node;
  using NodePtr = std::shared_ptr<const Node>;

  // Restores the state after `path` (root to deepest), or an empty state.
  ModelState Restore(std::span<const NodePtr> path) const;
  // Builds the node of the part that ended at `state` and started at position `pos0`.
  NodePtr Snapshot(const Hash128& key, const Hash128& parent, const ModelState& state,
                   int64_t pos0) const;
  // Inserts `node` (unless present) and evicts LRU leaves down to capacity.
  bool Insert(NodePtr node) REQUIRES(mu_);
  void EvictToCapacity() REQUIRES(mu_);

  const std::shared_ptr<const Model> model_;
  const PrefixCacheOptions options_;
  std::vector<bool> is_attention_;  // per layer

  mutable Mutex mu_;
  struct Slot {
    NodePtr node;
    uint64_t last_use = 0;
    uint32_t children = 0;
  };
  std::unordered_map<Hash128, Slot, Hash128Hasher> nodes_ GUARDED_BY(mu_);
  uint64_t clock_ GUARDED_BY(mu_) = 0;
  PrefixCacheStats stats_ GUARDED_BY(mu_);
};

}  // namespace hypic::model
