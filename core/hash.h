// Hash128 and the xxh3 helpers every layer uses: SegmentKey and the model fingerprint are
// Hash128 values; entry, tensor and protocol body checksums are xxh3-64. The functions are
// thread-safe (pure); the streaming hashers are values owned by one thread.
//
// xxh3 is compiled into hash.cpp from Debian's xxhash.h (XXH_INLINE_ALL) rather than called in
// libxxhash: the shared library is built for baseline x86-64 (SSE2) and hashes about 4x slower
// than the same code built with this build's -march (AVX2/AVX-512). The values are identical.
#pragma once

#include <array>
#include <compare>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

namespace hypic {

struct Hash128 {
  uint64_t lo = 0;
  uint64_t hi = 0;

  // 32 lowercase hex digits, high half first (the canonical xxh3-128 print order).
  std::string ToHex() const;
  static std::optional<Hash128> FromHex(std::string_view hex);
  bool IsZero() const { return lo == 0 && hi == 0; }

  // The 16-byte little-endian wire form: lo then hi.
  void ToBytes(std::byte out[16]) const;
  static Hash128 FromBytes(const std::byte in[16]);

  friend auto operator<=>(const Hash128&, const Hash128&) = default;
};

struct Hash128Hasher {
  size_t operator()(const Hash128& h) const {
    return static_cast<size_t>(h.lo ^ (h.hi * 0x9e3779b97f4a7c15ull));
  }
};

uint64_t Xxh3_64(std::span<const std::byte> bytes);
uint64_t Xxh3_64(const void* data, size_t size);
Hash128 Xxh3_128(const void* data, size_t size);

// The xxh3 state of the streaming hashers, kept inline (no allocation) and opaque so this
// header does not pull in xxhash.h; hash.cpp checks the size and alignment.
struct alignas(64) Xxh3State {
  std::array<std::byte, 576> bytes;
};

// Streaming xxh3-64: Update with pieces split anywhere; Digest() equals Xxh3_64 of their
// concatenation. For checksums verified as bytes arrive. A value type; not thread-safe.
class Xxh3_64Stream {
 public:
  Xxh3_64Stream();
  void Update(const void* data, size_t size);
  uint64_t Digest() const;

 private:
  Xxh3State state_;
};

// Streaming xxh3-128 (for fingerprints over many tensors). A value type; not thread-safe.
class Xxh3_128Stream {
 public:
  Xxh3_128Stream();

  void Update(const void* data, size_t size);
  void UpdateU32(uint32_t v);             // little-endian
  void UpdateU64(uint64_t v);             // little-endian
  void UpdateString(std::string_view s);  // length-prefixed, so "ab"+"c" != "a"+"bc"
  Hash128 Digest() const;

 private:
  Xxh3State state_;
};

}  // namespace hypic
