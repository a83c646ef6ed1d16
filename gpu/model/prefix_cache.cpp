#include "gpu/model/prefix_cache.h"

#include <fmt/format.h>

#include <limits>
#include <utility>

namespace hypic::model {

struct PrefixCache::Node {
  Hash128 key;
  Hash128 parent;
  int64_t pos0 = 0;  // the part's positions [pos0, pos1)
  int64_t pos1 = 0;
  // Linear layers: the (S, conv) snapshot at pos1. Attention layers: K/V rows [pos0, pos1).
  std::vector<LayerState> layers;
  uint64_t bytes = 0;
};

namespace {

Hash128 RootHash(std::string_view name_space, const ModelFingerprint& model) {
  Xxh3_128Stream h;
  h.UpdateString("hypic-prefix-root");
  h.UpdateString(name_space);
  h.UpdateU64(model.lo);
  h.UpdateU64(model.hi);
  return h.Digest();
}

Hash128 ChainHash(const Hash128& parent, std::span<const uint32_t> tokens) {
  Xxh3_128Stream h;
  h.UpdateU64(parent.lo);
  h.UpdateU64(parent.hi);
  h.UpdateU64(tokens.size());
  for (uint32_t t : tokens) h.UpdateU32(t);
  return h.Digest();
}

template <typename T>
uint64_t VecBytes(const T& v) {
  return v.size() * sizeof(T);
}

}  // namespace

PrefixCache::PrefixCache(std::shared_ptr<const Model> model, PrefixCacheOptions options)
    : model_(std::move(model)), options_(options) {
  for (LayerKind kind : model_->config().layer_kinds) {
    is_attention_.push_back(kind == LayerKind::kFullAttention);
  }
  MutexLock lock(&mu_);
  stats_.capacity_bytes = options_.capacity_bytes;
}

PrefixCache::~PrefixCache() = default;

ModelState PrefixCache::Restore(std::span<const NodePtr> path) const {
  ModelState state = model_->EmptyState();
  if (path.empty()) return state;
  const Node& last = *path.back();
  state.n_positions = last.pos1;
  for (size_t l = 0; l < state.layers.size(); ++l) {
    LayerState& out = state.layers[l];
    if (!is_attention_[l]) {
      out.state = last.layers[l].state;
      out.conv = last.layers[l].conv;
      continue;
    }
    size_t k_total = 0, v_total = 0;
    for (const NodePtr& n : path) {
      k_total += n->layers[l].k.size();
      v_total += n->layers[l].v.size();
    }
    out.k.clear();
    out.v.clear();
    out.k.reserve(k_total);
    out.v.reserve(v_total);
    for (const NodePtr& n : path) {
      out.k.insert(out.k.end(), n->layers[l].k.begin(), n->layers[l].k.end());
      out.v.insert(out.v.end(), n->layers[l].v.begin(), n->layers[l].v.end());
    }
  }
  return state;
}

PrefixCache::NodePtr PrefixCache::Snapshot(const Hash128& key, const Hash128& parent,
                                           const ModelState& state, int64_t pos0) const {
  auto node = std::make_shared<Node>();
  node->key = key;
  node->parent = parent;
  node->pos0 = pos0;
  node->pos1 = state.n_positions;
  node->layers.resize(state.layers.size());
  for (size_t l = 0; l < state.layers.size(); ++l) {
    const LayerState& in = state.layers[l];
    LayerState& out = node->layers[l];
    if (!is_attention_[l]) {
      out.state = in.state;
      out.conv = in.conv;
    } else {
      // Rows are positions: [n_positions, nkv, head_dim].
      const size_t row = in.k.size() / static_cast<size_t>(state.n_positions);
      const auto first = static_cast<std::ptrdiff_t>(static_cast<size_t>(pos0) * row);
      out.k.assign(in.k.begin() + first, in.k.end());
      out.v.assign(in.v.begin() + first, in.v.end());
    }
    node->bytes += VecBytes(out.state) + VecBytes(out.conv) + VecBytes(out.k) + VecBytes(out.v);
  }
  return node;
}

bool PrefixCache::Insert(NodePtr node) {
  if (nodes_.contains(node->key)) return false;
  // A parent evicted by a concurrent run would leave this node unreachable: skip it.
  auto parent = nodes_.find(node->parent);
  if (node->pos0 > 0 && parent == nodes_.end()) return false;
  if (parent != nodes_.end()) ++parent->second.children;
  stats_.bytes += node->bytes;
  ++stats_.nodes;
  const Hash128 key = node->key;
  nodes_.emplace(key, Slot{std::move(node), ++clock_, 0});
  return true;
}

void PrefixCache::EvictToCapacity() {
  while (stats_.bytes > options_.capacity_bytes && !nodes_.empty()) {
    // Linear scan: the tree holds thousands of nodes at most, and inserts are per part.
    auto victim = nodes_.end();
    uint64_t oldest = std::numeric_limits<uint64_t>::max();
    for (auto it = nodes_.begin(); it != nodes_.end(); ++it) {
      if (it->second.children == 0 && it->second.last_use < oldest) {
        oldest = it->second.last_use;
        victim = it;
      }
    }
    if (victim == nodes_.end()) return;  // unreachable: a non-empty tree has a leaf
    auto parent = nodes_.find(victim->second.node->parent);
    if (parent != nodes_.end()) --parent->second.children;
    stats_.bytes -= victim->second.node->bytes;
    --stats_.nodes;
    ++stats_.evictions;
    nodes_.erase(victim);
  }
}

Result<PrefixRunResult> PrefixCache::Run(std::string_view name_space,
                                         std::span<const ComposePart> parts,
                                         std::chrono::steady_clock::time_point deadline) {
  if (parts.empty()) return BadRequest("prefix cache: empty prompt");
  const int64_t vocab = model_->config().vocab_size;
  for (size_t i = 0; i < parts.size(); ++i) {
    if (parts[i].tokens.empty())
      return BadRequest(fmt::format("prefix cache: part {} is empty", i));
    for (uint32_t t : parts[i].tokens) {
      if (static_cast<int64_t>(t) >= vocab) {
        return BadRequest(fmt::format("prefix cache: part {}: token {} >= vocab {}", i, t, vocab));
      }
    }
  }
  // chain[i] is the key of the boundary after parts [0, i): chain[0] is the root.
  const size_t n = parts.size();
  std::vector<Hash128> chain(n);
  chain[0] = RootHash(name_space, model_->fingerprint());
  for (size_t i = 1; i < n; ++i) chain[i] = ChainHash(chain[i - 1], parts[i - 1].tokens);

  std::vector<NodePtr> path;
  {
    MutexLock lock(&mu_);
    ++stats_.runs;
    for (size_t i = 1; i < n; ++i) {
      auto it = nodes_.find(chain[i]);
      if (it == nodes_.end()) break;
      it->second.last_use = ++clock_;
      path.push_back(it->second.node);
    }
  }

  PrefixRunResult result;
  result.reused_parts = path.size();
  ModelState state = Restore(path);
  result.reused_tokens = state.n_positions;
  std::vector<NodePtr> fresh;
  for (size_t i = path.size(); i < n; ++i) {
    const bool last = i + 1 == n;
    const int64_t pos0 = state.n_positions;
    PrefillOptions opts;
    opts.want_state = !last;
    opts.deadline = deadline;
    HYPIC_ASSIGN_OR_RETURN(PrefillResult r, model_->Extend(state, parts[i].tokens, opts));
    result.computed_tokens += static_cast<int64_t>(parts[i].tokens.size());
    if (last) {
      result.logits = std::move(r.logits);
    } else {
      fresh.push_back(Snapshot(chain[i + 1], chain[i], state, pos0));
    }
  }

  MutexLock lock(&mu_);
  for (NodePtr& node : fresh) {
    if (Insert(std::move(node))) ++result.checkpoints_added;
  }
  EvictToCapacity();
  stats_.reused_parts += result.reused_parts;
  stats_.reused_tokens += static_cast<uint64_t>(result.reused_tokens);
  stats_.computed_tokens += static_cast<uint64_t>(result.computed_tokens);
  return result;
}

PrefixCacheStats PrefixCache::Stats() const {
  MutexLock lock(&mu_);
  return stats_;
}

void PrefixCache::Clear() {
  MutexLock lock(&mu_);
  nodes_.clear();
  stats_.nodes = 0;
  stats_.bytes = 0;
}

}  // namespace hypic::model
