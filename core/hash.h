// Hash128 and the xxh3 helpers every layer uses: SegmentKey and the model fingerprint are
// Hash128 values; entry and tensor checksums are xxh3-64. Thread-safe (pure functions).
#pragma once

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

// Streaming xxh3-128 (for fingerprints over many tensors). Not thread-safe.
class Xxh3_128Stream {
 public:
  Xxh3_128Stream();
  ~Xxh3_128Stream();
  Xxh3_128Stream(const Xxh3_128Stream&) = delete;
  Xxh3_128Stream& operator=(const Xxh3_128Stream&) = delete;

  void Update(const void* data, size_t size);
  void UpdateU32(uint32_t v);             // little-endian
  void UpdateU64(uint64_t v);             // little-endian
  void UpdateString(std::string_view s);  // length-prefixed, so "ab"+"c" != "a"+"bc"
  Hash128 Digest() const;

 private:
  void* state_;  // XXH3_state_t, kept out of the header
};

}  // namespace hypic
