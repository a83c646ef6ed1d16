#include "core/segment_key.h"

#include <doctest/doctest.h>
#include <xxhash.h>

#include <cstring>
#include <vector>

namespace hypic {
namespace {

const ModelFingerprint kModel{0x0123456789abcdefull, 0xfedcba9876543210ull};
const std::vector<uint32_t> kTokens{1, 2, 3, 4, 5, 100000, 7};

TEST_CASE("golden key: the key format can never change silently") {
  SegmentKey k = SegmentKey::Compute("tenant-a", kModel, CacheSettings{8, 1}, kTokens);
  CHECK(k.ToHex() == "b0a2b7af83834f17c2eb401ca8b9d866");
}

TEST_CASE("the key is xxh3-128 over the documented byte layout") {
  // Rebuild the layout of docs/entry-format.md by hand and hash it with xxhash directly.
  std::vector<unsigned char> bytes;
  auto put = [&](const void* p, size_t n) {
    auto c = static_cast<const unsigned char*>(p);
    bytes.insert(bytes.end(), c, c + n);
  };
  put("hypic-key", 10);
  uint32_t version = 1, seam = 8;
  put(&version, 4);
  put(&seam, 4);
  put(&kModel.lo, 8);
  put(&kModel.hi, 8);
  uint64_t ns_len = 8;
  put(&ns_len, 8);
  put("tenant-a", 8);
  uint64_t n = kTokens.size();
  put(&n, 8);
  put(kTokens.data(), kTokens.size() * 4);
  XXH128_hash_t h = XXH3_128bits(bytes.data(), bytes.size());
  SegmentKey k = SegmentKey::Compute("tenant-a", kModel, CacheSettings{8, 1}, kTokens);
  CHECK(k.hash().lo == h.low64);
  CHECK(k.hash().hi == h.high64);
}

TEST_CASE("the key changes with namespace, model, settings and every token") {
  const CacheSettings s{8, 1};
  SegmentKey base = SegmentKey::Compute("ns", kModel, s, kTokens);
  CHECK(SegmentKey::Compute("ns", kModel, s, kTokens) == base);
  CHECK(SegmentKey::Compute("ns2", kModel, s, kTokens) != base);
  CHECK(SegmentKey::Compute("", kModel, s, kTokens) != base);
  ModelFingerprint other = kModel;
  other.hi ^= 1;
  CHECK(SegmentKey::Compute("ns", other, s, kTokens) != base);
  CHECK(SegmentKey::Compute("ns", kModel, CacheSettings{4, 1}, kTokens) != base);
  CHECK(SegmentKey::Compute("ns", kModel, CacheSettings{8, 2}, kTokens) != base);
  for (size_t i = 0; i < kTokens.size(); ++i) {
    auto t = kTokens;
    t[i] += 1;
    CHECK(SegmentKey::Compute("ns", kModel, s, t) != base);
  }
  auto shorter = kTokens;
  shorter.pop_back();
  CHECK(SegmentKey::Compute("ns", kModel, s, shorter) != base);
  // The namespace is length-prefixed, so moving bytes between it and the tokens cannot collide.
  CHECK(SegmentKey::Compute("a", kModel, s, {}) != SegmentKey::Compute("", kModel, s, {}));
}

TEST_CASE("hex form round-trips and rejects bad input") {
  SegmentKey k = SegmentKey::Compute("ns", kModel, CacheSettings{}, kTokens);
  std::string hex = k.ToHex();
  CHECK(hex.size() == 32);
  auto back = SegmentKey::FromHex(hex);
  REQUIRE(back.has_value());
  CHECK(*back == k);
  CHECK_FALSE(SegmentKey::FromHex("xyz").has_value());
  CHECK_FALSE(SegmentKey::FromHex(std::string(32, 'g')).has_value());
  CHECK_FALSE(SegmentKey::FromHex(hex + "0").has_value());
  CHECK(Hash128{0x1ull, 0x2ull}.ToHex() == "00000000000000020000000000000001");
}

TEST_CASE("wire bytes are lo then hi, little-endian") {
  Hash128 h{0x0807060504030201ull, 0x100f0e0d0c0b0a09ull};
  std::byte b[16];
  h.ToBytes(b);
  for (int i = 0; i < 16; ++i) CHECK(static_cast<int>(b[i]) == i + 1);
  CHECK(Hash128::FromBytes(b) == h);
}

}  // namespace
}  // namespace hypic
