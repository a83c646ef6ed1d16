// SegmentKey: the content address of one cached segment. It is xxh3-128 over a fixed byte
// layout (documented in docs/entry-format.md, "Key derivation"):
//   "hypic-key\0" | u32 format_version | u32 seam_w | Hash128 model_fingerprint (lo, hi)
//   | u64 namespace length | namespace bytes | u64 n_tokens | token ids as u32 LE
// all little-endian. Tenants are isolated because the namespace is hashed in.
// The key is computed ONCE where tokens enter the system (the request handler or the segment
// prefill) and carried from there; nothing downstream recomputes it except Parse's verification.
// Value type, thread-compatible.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "core/hash.h"

namespace hypic {

// The cache settings that change what an entry holds; part of every key.
struct CacheSettings {
  uint32_t seam_w = 8;
  uint32_t format_version = 1;
};

using ModelFingerprint = Hash128;

class SegmentKey {
 public:
  SegmentKey() = default;
  explicit SegmentKey(Hash128 h) : hash_(h) {}

  static SegmentKey Compute(std::string_view name_space, const ModelFingerprint& model,
                            const CacheSettings& settings, std::span<const uint32_t> tokens);

  const Hash128& hash() const { return hash_; }
  std::string ToHex() const { return hash_.ToHex(); }
  static std::optional<SegmentKey> FromHex(std::string_view hex);

  friend auto operator<=>(const SegmentKey&, const SegmentKey&) = default;

 private:
  Hash128 hash_;
};

struct SegmentKeyHasher {
  size_t operator()(const SegmentKey& k) const { return Hash128Hasher()(k.hash()); }
};

}  // namespace hypic
