// Fuzzes the entry parser. Each input is parsed twice: as given, and "resealed" (header and
// trailer checksums recomputed) so that mutations reach the structural checks behind them.
// Whatever parses must be canonical: serializing it again reproduces the input exactly. The
// device-copy parser (ParseDeviceView) runs over each input's prefix beside it.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>

#include "core/hash.h"
#include "storage/entry_format.h"

namespace {

using hypic::HostBuffer;

// The device-copy parser over the input's prefix, with the input itself as "device" memory
// (never read by the parser): whatever it accepts places every tensor inside the declared
// entry, and wherever the host parser accepts, it accepts too.
void CheckDeviceView(const std::shared_ptr<const HostBuffer>& bytes, bool host_parsed) {
  auto offset = hypic::storage::EntryDataOffset(bytes->span());
  if (!offset.ok() || *offset > bytes->size()) {
    if (host_parsed) std::abort();
    return;
  }
  auto prefix = HostBuffer::CopyOf(bytes->span().first(*offset));
  if (!prefix.ok()) return;
  auto viewed = hypic::storage::ParseDeviceView(prefix->span(), bytes->data(),
                                                hypic::MemoryKind::kDevice, 0, nullptr);
  if (!viewed.ok()) {
    if (host_parsed) std::abort();
    return;
  }
  auto info = hypic::storage::ReadEntryInfo(prefix->span());
  if (!info.ok()) std::abort();
  for (const auto& t : (*viewed)->tensors()) {
    const auto at = static_cast<const std::byte*>(t.view.data()) - bytes->data();
    if (at < static_cast<std::ptrdiff_t>(*offset) ||
        static_cast<uint64_t>(at) + t.view.NumBytes() > info->bytes) {
      std::abort();
    }
  }
}

void Check(std::shared_ptr<const HostBuffer> bytes) {
  bool verified = hypic::storage::Verify(bytes->span()).ok();
  auto parsed = hypic::storage::Parse(bytes);
  CheckDeviceView(bytes, parsed.ok());
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
