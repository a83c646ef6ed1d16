#include "core/hash.h"

// See hash.h: the inline build of xxh3 runs with this build's -march.
#define XXH_INLINE_ALL
#if defined(__GNUC__) && !defined(__clang__)
// GCC 12 reports its own AVX-512 intrinsics (_mm512_undefined) as (maybe-)uninitialized.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <xxhash.h>
#pragma GCC diagnostic pop
#else
#include <xxhash.h>
#endif

#include <bit>
#include <cstring>

namespace hypic {

static_assert(std::endian::native == std::endian::little, "hypic assumes a little-endian host");

std::string Hash128::ToHex() const {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string s(32, '0');
  for (int i = 0; i < 16; ++i) {
    s[static_cast<size_t>(15 - i)] = kDigits[(hi >> (4 * i)) & 0xf];
    s[static_cast<size_t>(31 - i)] = kDigits[(lo >> (4 * i)) & 0xf];
  }
  return s;
}

std::optional<Hash128> Hash128::FromHex(std::string_view hex) {
  if (hex.size() != 32) return std::nullopt;
  Hash128 h;
  for (size_t i = 0; i < 32; ++i) {
    char c = hex[i];
    uint64_t d;
    if (c >= '0' && c <= '9')
      d = static_cast<uint64_t>(c - '0');
    else if (c >= 'a' && c <= 'f')
      d = static_cast<uint64_t>(c - 'a' + 10);
    else if (c >= 'A' && c <= 'F')
      d = static_cast<uint64_t>(c - 'A' + 10);
    else
      return std::nullopt;
    uint64_t& half = i < 16 ? h.hi : h.lo;
    half = (half << 4) | d;
  }
  return h;
}

void Hash128::ToBytes(std::byte out[16]) const {
  std::memcpy(out, &lo, 8);
  std::memcpy(out + 8, &hi, 8);
}

Hash128 Hash128::FromBytes(const std::byte in[16]) {
  Hash128 h;
  std::memcpy(&h.lo, in, 8);
  std::memcpy(&h.hi, in + 8, 8);
  return h;
}

uint64_t Xxh3_64(std::span<const std::byte> bytes) {
  return XXH3_64bits(bytes.data(), bytes.size());
}
uint64_t Xxh3_64(const void* data, size_t size) { return XXH3_64bits(data, size); }

Hash128 Xxh3_128(const void* data, size_t size) {
  XXH128_hash_t h = XXH3_128bits(data, size);
  return Hash128{h.low64, h.high64};
}

namespace {

static_assert(sizeof(XXH3_state_t) <= sizeof(Xxh3State) && alignof(XXH3_state_t) <= 64);

XXH3_state_t* State(Xxh3State& s) { return reinterpret_cast<XXH3_state_t*>(s.bytes.data()); }
const XXH3_state_t* State(const Xxh3State& s) {
  return reinterpret_cast<const XXH3_state_t*>(s.bytes.data());
}

}  // namespace

Xxh3_64Stream::Xxh3_64Stream() { XXH3_64bits_reset(State(state_)); }
void Xxh3_64Stream::Update(const void* data, size_t size) {
  XXH3_64bits_update(State(state_), data, size);
}
uint64_t Xxh3_64Stream::Digest() const { return XXH3_64bits_digest(State(state_)); }

Xxh3_128Stream::Xxh3_128Stream() { XXH3_128bits_reset(State(state_)); }
void Xxh3_128Stream::Update(const void* data, size_t size) {
  XXH3_128bits_update(State(state_), data, size);
}
void Xxh3_128Stream::UpdateU32(uint32_t v) { Update(&v, 4); }
void Xxh3_128Stream::UpdateU64(uint64_t v) { Update(&v, 8); }
void Xxh3_128Stream::UpdateString(std::string_view s) {
  UpdateU64(s.size());
  Update(s.data(), s.size());
}

Hash128 Xxh3_128Stream::Digest() const {
  XXH128_hash_t h = XXH3_128bits_digest(State(state_));
  return Hash128{h.low64, h.high64};
}

}  // namespace hypic
