// The layout of one entry in Redis: the key names, and the manifest that lists an entry's
// chunks. An entry of N bytes is stored as ceil(N / chunk_bytes) chunk values plus one manifest
// value; the manifest carries the xxh3-64 of every chunk and a checksum of its own, so a reader
// that finds a manifest can tell a whole entry from a half-written, evicted or corrupted one.
//
//   <prefix>:{<key hex>}:m                  the manifest
//   <prefix>:{<key hex>}:<write id>:<i>     chunk i of the write that the manifest names
//
// The SegmentKey already hashes the namespace, model and settings in (core/segment_key.h), so
// the key hex is the namespace's place in the name, as in every tier. The braces are a Redis
// Cluster hash tag: every key of one entry lands in one slot. Each write picks a fresh random
// write id, so two daemons writing the same entry at once never mix their chunks; the manifest,
// written last, names the write whose chunks are complete.
//
// Manifest bytes (all little-endian; docs/operations-storage.md, "The remote tier"):
//   0  "HYPICRM1"   8  u32 version (1)   12 u32 chunk_count   16 u64 entry_bytes
//   24 u64 chunk_bytes   32 u64 key lo   40 u64 key hi   48 u64 write_id
//   56 u64 xxh3-64 of each chunk, chunk_count times   then u64 xxh3-64 of everything before it
// Pure functions, thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/segment_key.h"
#include "core/status.h"

namespace hypic::storage {

inline constexpr uint32_t kRedisManifestVersion = 1;
inline constexpr size_t kRedisManifestFixedBytes = 56;
// Bounds on a chunk: small enough that one Redis value never blocks the server for long, big
// enough that a large entry does not become thousands of keys.
inline constexpr uint64_t kMinRedisChunkBytes = 4096;
inline constexpr uint64_t kMaxRedisChunkBytes = uint64_t{64} << 20;

struct RedisManifest {
  SegmentKey key;
  uint64_t entry_bytes = 0;
  uint64_t chunk_bytes = 0;
  uint64_t write_id = 0;
  std::vector<uint64_t> chunk_checksums;  // xxh3-64 per chunk, in order

  size_t chunk_count() const { return chunk_checksums.size(); }
  // Byte range [offset, offset + length) of chunk i inside the entry.
  uint64_t ChunkOffset(size_t i) const { return i * chunk_bytes; }
  uint64_t ChunkLength(size_t i) const;
};

// The manifest of `entry` cut into chunks of `chunk_bytes`.
// REQUIRES: chunk_bytes within [kMinRedisChunkBytes, kMaxRedisChunkBytes]; entry not empty.
RedisManifest MakeRedisManifest(const SegmentKey& key, std::span<const std::byte> entry,
                                uint64_t chunk_bytes, uint64_t write_id);

std::string EncodeRedisManifest(const RedisManifest& manifest);

// Parses and checks a manifest: magic, version, its checksum, the caps (entry bytes up to
// kMaxEntryBytes, chunk bytes within the bounds), and chunk_count against the sizes.
// kCorruption for a malformed one, kVersionMismatch for another version.
Result<RedisManifest> ParseRedisManifest(std::span<const std::byte> bytes);

// kBadChecksum when chunk i is not the one the manifest lists (wrong length or checksum).
Status CheckRedisChunk(const RedisManifest& manifest, size_t i, std::span<const std::byte> chunk);

std::string RedisManifestKey(std::string_view prefix, const SegmentKey& key);
std::string RedisChunkKey(std::string_view prefix, const SegmentKey& key, uint64_t write_id,
                          size_t i);

}  // namespace hypic::storage
