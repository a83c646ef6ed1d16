// Fuzzes the remote tier's manifest parser. Each input is parsed as given and "resealed" (its
// trailing checksum recomputed) so that mutations reach the checks behind the checksum.
// Whatever parses must be canonical (encoding it again gives the input back), and its chunk
// ranges must tile the entry exactly.
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <span>
#include <string>

#include "core/hash.h"
#include "storage/redis_manifest.h"

namespace {

void Check(const std::string& bytes) {
  std::span<const std::byte> view(reinterpret_cast<const std::byte*>(bytes.data()), bytes.size());
  auto m = hypic::storage::ParseRedisManifest(view);
  if (!m.ok()) return;
  if (hypic::storage::EncodeRedisManifest(*m) != bytes) std::abort();
  uint64_t covered = 0;
  for (size_t i = 0; i < m->chunk_count(); ++i) {
    const uint64_t n = m->ChunkLength(i);
    if (n == 0 || n > m->chunk_bytes || m->ChunkOffset(i) != covered) std::abort();
    covered += n;
  }
  if (covered != m->entry_bytes) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string raw(reinterpret_cast<const char*>(data), size);
  Check(raw);
  if (raw.size() >= 8) {
    const uint64_t h = hypic::Xxh3_64(raw.data(), raw.size() - 8);
    std::memcpy(raw.data() + raw.size() - 8, &h, 8);
    Check(raw);
  }
  return 0;
}
