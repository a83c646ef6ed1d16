// Fuzzes the entry parser. Each input is parsed twice: as given, and "resealed" (header and
// trailer checksums recomputed) so that mutations reach the structural checks behind them.
// Whatever parses must be canonical: serializing it again reproduces the input exactly.
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>

#include "core/hash.h"
#include "storage/entry_format.h"

namespace {

using hypic::HostBuffer;

void Check(std::shared_ptr<const HostBuffer> bytes) {
  bool verified = hypic::storage::Verify(bytes->span()).ok();
  auto parsed = hypic::storage::Parse(bytes);
  if (!parsed.ok()) return;
  if (!verified) std::abort();  // Parse accepted what Verify refused
  auto again = hypic::storage::Serialize(**parsed);
  if (!again.ok() || (*again)->size() != bytes->size() ||
      std::memcmp((*again)->data(), bytes->data(), bytes->size()) != 0) {
    std::abort();
  }
}

void Reseal(HostBuffer& b) {
  if (b.size() < hypic::storage::kEntryHeaderSize + hypic::storage::kEntryTrailerSize) return;
  uint32_t ns_len;
  std::memcpy(&ns_len, b.data() + 64, 4);
  if (ns_len <= hypic::storage::kMaxNamespaceBytes &&
      b.size() >= hypic::storage::kEntryHeaderSize + ns_len) {
    auto prefix = HostBuffer::CopyOf(b.span().first(hypic::storage::kEntryHeaderSize + ns_len));
    if (!prefix.ok()) return;
    std::memset(prefix->data() + 120, 0, 8);
    uint64_t h = hypic::Xxh3_64(prefix->span());
    std::memcpy(b.data() + 120, &h, 8);
  }
  size_t body = b.size() - 8;
  uint64_t t = hypic::Xxh3_64(b.data(), body);
  std::memcpy(b.data() + body, &t, 8);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto raw = HostBuffer::CopyOf({reinterpret_cast<const std::byte*>(data), size});
  if (!raw.ok()) return 0;
  auto resealed = HostBuffer::CopyOf(raw->span());
  if (!resealed.ok()) return 0;
  Reseal(*resealed);
  Check(std::make_shared<const HostBuffer>(std::move(*raw)));
  Check(std::make_shared<const HostBuffer>(std::move(*resealed)));
  return 0;
}
