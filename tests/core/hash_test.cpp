#include "core/hash.h"

#include <doctest/doctest.h>
#include <xxhash.h>  // Debian's libxxhash, the independent reference for our inline build

#include <algorithm>
#include <cstring>
#include <string>
#include <unordered_set>
#include <vector>

namespace hypic {
namespace {

TEST_CASE("xxh3 matches the upstream xxHash test vectors") {
  // From xxHash's own sanity checks (cli/xsum_sanity_check.c), independent of our wrapper.
  CHECK(Xxh3_64(nullptr, 0) == 0x2D06800538D394C2ull);
  CHECK(Xxh3_64("a", 1) == 0xE6C632B61E964E1Full);
  CHECK(Xxh3_64("abc", 3) == 0x78AF5F94892F3950ull);
  const Hash128 empty = Xxh3_128(nullptr, 0);
  CHECK(empty.hi == 0x99AA06D3014798D8ull);
  CHECK(empty.lo == 0x6001C324468D497Full);
  CHECK(empty.ToHex() == "99aa06d3014798d86001c324468d497f");
  const std::string abc = "abc";
  CHECK(Xxh3_64(std::as_bytes(std::span<const char>(abc))) == Xxh3_64(abc.data(), abc.size()));
}

// The wire form (ToBytes/FromBytes) is covered in segment_key_test.cpp.
TEST_CASE("Hash128 hex form: high half first, round trip, both cases, bad input") {
  const Hash128 h{0x0123456789abcdefull, 0xfedcba9876543210ull};
  CHECK(h.ToHex() == "fedcba98765432100123456789abcdef");
  CHECK(Hash128::FromHex(h.ToHex()) == h);
  CHECK(Hash128::FromHex("FEDCBA98765432100123456789ABCDEF") == h);
  CHECK_FALSE(Hash128::FromHex("").has_value());
  CHECK_FALSE(Hash128::FromHex("fedcba98765432100123456789abcde").has_value());    // 31 digits
  CHECK_FALSE(Hash128::FromHex("fedcba98765432100123456789abcdef0").has_value());  // 33 digits
  CHECK_FALSE(Hash128::FromHex("gedcba98765432100123456789abcdef").has_value());
  CHECK_FALSE(Hash128::FromHex("fedcba9876543210 123456789abcdef").has_value());
  CHECK(Hash128{}.IsZero());
  CHECK_FALSE(h.IsZero());
  CHECK(Hash128{}.ToHex() == std::string(32, '0'));
}

TEST_CASE("Hash128 orders and hashes") {
  const Hash128 a{1, 0}, b{0, 1}, c{2, 0};
  CHECK(a < c);
  CHECK(a != b);
  std::unordered_set<Hash128, Hash128Hasher> set{a, b, c, a};
  CHECK(set.size() == 3);
}

TEST_CASE("the streaming hash equals the one-shot hash however the input is split") {
  std::vector<unsigned char> data(1000);
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<unsigned char>(i * 31 + 7);
  const Hash128 whole = Xxh3_128(data.data(), data.size());
  for (size_t split : {size_t{0}, size_t{1}, size_t{63}, size_t{64}, size_t{500}, size_t{1000}}) {
    Xxh3_128Stream s;
    s.Update(data.data(), split);
    s.Update(data.data() + split, data.size() - split);
    CHECK(s.Digest() == whole);
  }
}

TEST_CASE("streaming helpers: u32/u64 little-endian, strings length-prefixed") {
  Xxh3_128Stream ints;
  ints.UpdateU32(0x04030201u);
  ints.UpdateU64(0x0c0b0a0908070605ull);
  const unsigned char bytes[12] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
  CHECK(ints.Digest() == Xxh3_128(bytes, sizeof(bytes)));

  Xxh3_128Stream ab_c, a_bc;
  ab_c.UpdateString("ab");
  ab_c.UpdateString("c");
  a_bc.UpdateString("a");
  a_bc.UpdateString("bc");
  CHECK(ab_c.Digest() != a_bc.Digest());

  Xxh3_128Stream manual, helper;
  const uint64_t len = 3;
  manual.Update(&len, 8);
  manual.Update("xyz", 3);
  helper.UpdateString("xyz");
  CHECK(manual.Digest() == helper.Digest());
  // Digest does not consume the state.
  CHECK(helper.Digest() == helper.Digest());
}

TEST_CASE("the inline xxh3 build equals Debian's libxxhash, one-shot and streamed") {
  std::vector<unsigned char> data((1 << 20) + 129);
  uint64_t x = 0x9e3779b97f4a7c15ull;
  for (auto& b : data) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    b = static_cast<unsigned char>(x);
  }
  // Every length up to 2 KiB crosses xxh3's short-input, mid-size and striped code paths.
  for (size_t n = 0; n <= 2048; ++n) {
    CAPTURE(n);
    REQUIRE(Xxh3_64(data.data(), n) == XXH3_64bits(data.data(), n));
    const XXH128_hash_t ref = XXH3_128bits(data.data(), n);
    const Hash128 got = Xxh3_128(data.data(), n);
    REQUIRE(got.lo == ref.low64);
    REQUIRE(got.hi == ref.high64);
  }
  CHECK(Xxh3_64(data.data(), data.size()) == XXH3_64bits(data.data(), data.size()));
  for (size_t piece : {size_t{1}, size_t{63}, size_t{4096}, size_t{256 << 10}}) {
    CAPTURE(piece);
    Xxh3_64Stream s;
    for (size_t at = 0; at < data.size(); at += piece) {
      s.Update(data.data() + at, std::min(piece, data.size() - at));
    }
    CHECK(s.Digest() == XXH3_64bits(data.data(), data.size()));
  }
}

}  // namespace
}  // namespace hypic
