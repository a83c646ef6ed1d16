#include "storage/redis_manifest.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>

#include "core/hash.h"
#include "storage/entry_format.h"

namespace hypic::storage {

namespace {

constexpr char kMagic[8] = {'H', 'Y', 'P', 'I', 'C', 'R', 'M', '1'};

void PutU32(std::string& out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
void PutU64(std::string& out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
uint64_t LoadLe(std::span<const std::byte> b, size_t at, size_t width) {
  uint64_t v = 0;
  for (size_t i = 0; i < width; ++i) v |= uint64_t{std::to_integer<uint8_t>(b[at + i])} << (8 * i);
  return v;
}

}  // namespace

uint64_t RedisManifest::ChunkLength(size_t i) const {
  const uint64_t offset = ChunkOffset(i);
  return offset >= entry_bytes ? 0 : std::min(chunk_bytes, entry_bytes - offset);
}

RedisManifest MakeRedisManifest(const SegmentKey& key, std::span<const std::byte> entry,
                                uint64_t chunk_bytes, uint64_t write_id) {
  RedisManifest m;
  m.key = key;
  m.entry_bytes = entry.size();
  m.chunk_bytes = chunk_bytes;
  m.write_id = write_id;
  const size_t count = static_cast<size_t>((entry.size() + chunk_bytes - 1) / chunk_bytes);
  m.chunk_checksums.reserve(count);
  for (size_t i = 0; i < count; ++i) {
    m.chunk_checksums.push_back(Xxh3_64(entry.subspan(m.ChunkOffset(i), m.ChunkLength(i))));
  }
  return m;
}

std::string EncodeRedisManifest(const RedisManifest& m) {
  std::string out(kMagic, sizeof kMagic);
  PutU32(out, kRedisManifestVersion);
  PutU32(out, static_cast<uint32_t>(m.chunk_count()));
  PutU64(out, m.entry_bytes);
  PutU64(out, m.chunk_bytes);
  PutU64(out, m.key.hash().lo);
  PutU64(out, m.key.hash().hi);
  PutU64(out, m.write_id);
  for (uint64_t c : m.chunk_checksums) PutU64(out, c);
  PutU64(out, Xxh3_64(out.data(), out.size()));
  return out;
}

Result<RedisManifest> ParseRedisManifest(std::span<const std::byte> b) {
  if (b.size() < kRedisManifestFixedBytes + 8) {
    return Corruption(fmt::format("redis manifest of {} bytes is too short", b.size()));
  }
  if (std::memcmp(b.data(), kMagic, sizeof kMagic) != 0) return Corruption("redis manifest magic");
  const auto version = static_cast<uint32_t>(LoadLe(b, 8, 4));
  if (version != kRedisManifestVersion) {
    return VersionMismatch(fmt::format("redis manifest version {}", version));
  }
  const auto count = static_cast<uint32_t>(LoadLe(b, 12, 4));
  // The size check comes before anything is allocated for `count`.
  if (b.size() != kRedisManifestFixedBytes + uint64_t{count} * 8 + 8) {
    return Corruption(fmt::format("redis manifest of {} bytes for {} chunks", b.size(), count));
  }
  if (LoadLe(b, b.size() - 8, 8) != Xxh3_64(b.first(b.size() - 8))) {
    return Corruption("redis manifest checksum");
  }
  RedisManifest m;
  m.entry_bytes = LoadLe(b, 16, 8);
  m.chunk_bytes = LoadLe(b, 24, 8);
  m.key = SegmentKey(Hash128{LoadLe(b, 32, 8), LoadLe(b, 40, 8)});
  m.write_id = LoadLe(b, 48, 8);
  if (m.entry_bytes == 0 || m.entry_bytes > kMaxEntryBytes) {
    return Corruption(fmt::format("redis manifest entry size {}", m.entry_bytes));
  }
  if (m.chunk_bytes < kMinRedisChunkBytes || m.chunk_bytes > kMaxRedisChunkBytes) {
    return Corruption(fmt::format("redis manifest chunk size {}", m.chunk_bytes));
  }
  if ((m.entry_bytes + m.chunk_bytes - 1) / m.chunk_bytes != count) {
    return Corruption(fmt::format("redis manifest: {} chunks of {} bytes for an entry of {}", count,
                                  m.chunk_bytes, m.entry_bytes));
  }
  m.chunk_checksums.resize(count);
  for (uint32_t i = 0; i < count; ++i) {
    m.chunk_checksums[i] = LoadLe(b, kRedisManifestFixedBytes + size_t{i} * 8, 8);
  }
  return m;
}

Status CheckRedisChunk(const RedisManifest& m, size_t i, std::span<const std::byte> chunk) {
  if (i >= m.chunk_count() || chunk.size() != m.ChunkLength(i)) {
    return BadChecksum(fmt::format("redis chunk {} of {} has {} bytes, want {}", i, m.key.ToHex(),
                                   chunk.size(), m.ChunkLength(i)));
  }
  if (Xxh3_64(chunk) != m.chunk_checksums[i]) {
    return BadChecksum(fmt::format("redis chunk {} of {} fails its checksum", i, m.key.ToHex()));
  }
  return Status::Ok();
}

std::string RedisManifestKey(std::string_view prefix, const SegmentKey& key) {
  return fmt::format("{}:{{{}}}:m", prefix, key.ToHex());
}

std::string RedisChunkKey(std::string_view prefix, const SegmentKey& key, uint64_t write_id,
                          size_t i) {
  return fmt::format("{}:{{{}}}:{:016x}:{}", prefix, key.ToHex(), write_id, i);
}

}  // namespace hypic::storage
