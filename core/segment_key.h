// SegmentKey: the content address of one cached segment. It is xxh3-128 over a fixed byte
// layout (documented in docs/entry-format.md, "Key derivation"):
//   "hypic-key\0" | u32 format_version | u32 seam_w | Hash128 model_fingerprint (lo, hi)
//   | u64 namespace length | namespace bytes | u64 n_tokens | token ids as u32 LE
//   [ | u8 dtype of T | u8 of S | u8 of the conv tail | u8 of K/V ]
// all little-endian. Tenants are isolated because the namespace is hashed in. The four entry
// dtype bytes are hashed only when some tensor kind is not f32 (docs/entry-precision.md), so
// the key of an all-f32 entry is the one it always was and entries of different precision never
// share a key.
// The key is computed ONCE where tokens enter the system (the request handler or the segment
// prefill) and carried from there; nothing downstream recomputes it except Parse's verification.
// Value type, thread-compatible.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "core/dtype.h"
#include "core/hash.h"
#include "core/status.h"

namespace hypic {

// The storage precision of each tensor kind of an entry: kF32, kBF16 or kF16 each. The producer
// computes in fp32 and rounds (to nearest even) when it writes the entry; Compose widens back.
struct EntryDTypes {
  DType transition = DType::kF32;  // T of a linear layer
  DType state = DType::kF32;       // S(C|0) of a linear layer
  DType conv = DType::kF32;        // the conv tail of a linear layer
  DType kv = DType::kF32;          // K and V of an attention layer

  bool AllF32() const { return *this == EntryDTypes{}; }
  // Every kind is stored at least as precisely as in `want`: the same dtype, or f32 (bf16 and
  // f16 are not ordered: each has bits the other lacks).
  bool AtLeastAsPrecise(const EntryDTypes& want) const;
  // "t=f32,s=bf16,conv=f32,kv=bf16" (every kind, in this order); Parse reads it back.
  std::string ToString() const;
  // A bare dtype sets every kind ("bf16"); `kind=dtype` items set one kind each, after it:
  // "bf16,t=f32" or "t=f32,s=bf16,conv=f32,kv=bf16". Kinds: t (transition), s (state), conv,
  // kv; dtypes f32, bf16, f16 (case-insensitive, fp32/fp16 accepted). Unnamed kinds are f32.
  // kBadRequest naming the item on an unknown kind or dtype, a kind given twice, or nothing.
  static Result<EntryDTypes> Parse(std::string_view text);

  friend bool operator==(const EntryDTypes&, const EntryDTypes&) = default;
};

// True for the dtypes an entry may store its float tensors in (f32, bf16, f16).
bool IsEntryDType(DType t);

// The cache settings that change what an entry holds; part of every key.
struct CacheSettings {
  uint32_t seam_w = 8;
  uint32_t format_version = 1;
  EntryDTypes entry_dtypes = {};
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
