#include "core/hash.h"

#include <xxhash.h>

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

Xxh3_128Stream::Xxh3_128Stream() : state_(XXH3_createState()) {
  XXH3_128bits_reset(static_cast<XXH3_state_t*>(state_));
}
Xxh3_128Stream::~Xxh3_128Stream() { XXH3_freeState(static_cast<XXH3_state_t*>(state_)); }

void Xxh3_128Stream::Update(const void* data, size_t size) {
  XXH3_128bits_update(static_cast<XXH3_state_t*>(state_), data, size);
}
void Xxh3_128Stream::UpdateU32(uint32_t v) { Update(&v, 4); }
void Xxh3_128Stream::UpdateU64(uint64_t v) { Update(&v, 8); }
void Xxh3_128Stream::UpdateString(std::string_view s) {
  UpdateU64(s.size());
  Update(s.data(), s.size());
}

Hash128 Xxh3_128Stream::Digest() const {
  XXH128_hash_t h = XXH3_128bits_digest(static_cast<XXH3_state_t*>(state_));
  return Hash128{h.low64, h.high64};
}

}  // namespace hypic
