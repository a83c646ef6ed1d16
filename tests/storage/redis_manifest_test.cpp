// The remote tier's pure parts: the manifest format and the key layout.
#include "storage/redis_manifest.h"

#include <doctest/doctest.h>

#include <cstring>
#include <vector>

#include "core/hash.h"
#include "tests/support/check_ok.h"

namespace hypic::storage {
namespace {

std::vector<std::byte> Bytes(size_t n) {
  std::vector<std::byte> b(n);
  uint64_t x = 0x9e3779b97f4a7c15ull;
  for (size_t i = 0; i < n; ++i) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    b[i] = static_cast<std::byte>(x & 0xff);
  }
  return b;
}

SegmentKey Key() { return SegmentKey(Hash128{0x0123456789abcdefull, 0xfedcba9876543210ull}); }

std::span<const std::byte> View(const std::string& s) {
  return {reinterpret_cast<const std::byte*>(s.data()), s.size()};
}

TEST_CASE("redis manifest: round trip, chunk ranges and checksums") {
  const auto entry = Bytes(10000);
  RedisManifest m = MakeRedisManifest(Key(), entry, 4096, 0x42);
  REQUIRE(m.chunk_count() == 3);
  CHECK(m.ChunkLength(0) == 4096);
  CHECK(m.ChunkLength(2) == 10000 - 8192);
  const std::string wire = EncodeRedisManifest(m);
  CHECK(wire.size() == kRedisManifestFixedBytes + 3 * 8 + 8);
  auto back = ParseRedisManifest(View(wire));
  REQUIRE_OK(back);
  CHECK(back->key == Key());
  CHECK(back->entry_bytes == 10000);
  CHECK(back->chunk_bytes == 4096);
  CHECK(back->write_id == 0x42);
  CHECK(back->chunk_checksums == m.chunk_checksums);
  for (size_t i = 0; i < 3; ++i) {
    std::span<const std::byte> chunk(entry.data() + m.ChunkOffset(i), m.ChunkLength(i));
    CHECK_OK(CheckRedisChunk(*back, i, chunk));
  }
  // A chunk with one flipped byte, a short chunk, a chunk in the wrong place: all refused.
  std::vector<std::byte> bad(entry.begin(), entry.begin() + 4096);
  bad[17] ^= std::byte{1};
  CHECK(CheckRedisChunk(*back, 0, bad).code() == StatusCode::kBadChecksum);
  CHECK(CheckRedisChunk(*back, 0, std::span(entry).first(4095)).code() == StatusCode::kBadChecksum);
  CHECK(CheckRedisChunk(*back, 1, std::span(entry).first(4096)).code() == StatusCode::kBadChecksum);
  CHECK(CheckRedisChunk(*back, 3, std::span(entry).first(16)).code() == StatusCode::kBadChecksum);
}

TEST_CASE("redis manifest: every damaged form is refused") {
  const auto entry = Bytes(9000);
  const std::string good = EncodeRedisManifest(MakeRedisManifest(Key(), entry, 4096, 7));
  // Any flipped bit fails the manifest checksum (or the magic, or the version).
  for (size_t i = 0; i < good.size(); ++i) {
    std::string b = good;
    b[i] = static_cast<char>(b[i] ^ 0x10);
    CHECK_FALSE(ParseRedisManifest(View(b)).ok());
  }
  // Truncated or extended.
  for (size_t n : {size_t{0}, size_t{8}, size_t{63}, good.size() - 1}) {
    CHECK(ParseRedisManifest(View(good.substr(0, n))).status().code() == StatusCode::kCorruption);
  }
  CHECK_FALSE(ParseRedisManifest(View(good + "x")).ok());
  // A resealed manifest whose sizes disagree with its chunk count, or whose chunk size is out of
  // bounds, is refused for what it says, not for its checksum.
  auto reseal = [](std::string b) {
    const uint64_t h = Xxh3_64(b.data(), b.size() - 8);
    std::memcpy(b.data() + b.size() - 8, &h, 8);
    return b;
  };
  std::string wrong_size = good;
  const uint64_t huge = 3 * 4096 + 1;
  std::memcpy(wrong_size.data() + 16, &huge, 8);
  CHECK(ParseRedisManifest(View(reseal(wrong_size))).status().code() == StatusCode::kCorruption);
  std::string small_chunk = good;
  const uint64_t tiny = 512;
  std::memcpy(small_chunk.data() + 24, &tiny, 8);
  CHECK(ParseRedisManifest(View(reseal(small_chunk))).status().code() == StatusCode::kCorruption);
  std::string version = good;
  version[8] = 2;
  CHECK(ParseRedisManifest(View(reseal(version))).status().code() == StatusCode::kVersionMismatch);
  CHECK_OK(ParseRedisManifest(View(reseal(good))));
}

TEST_CASE("redis keys: prefix, hash tag around the key, write id per write") {
  CHECK(RedisManifestKey("prod", Key()) == "prod:{fedcba98765432100123456789abcdef}:m");
  CHECK(RedisChunkKey("prod", Key(), 0xabc, 12) ==
        "prod:{fedcba98765432100123456789abcdef}:0000000000000abc:12");
  CHECK(RedisChunkKey("prod", Key(), 1, 0) != RedisChunkKey("prod", Key(), 2, 0));
  CHECK(RedisManifestKey("a", Key()) != RedisManifestKey("b", Key()));
}

}  // namespace
}  // namespace hypic::storage
