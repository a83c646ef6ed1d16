#include "storage/tier.h"

#include <cstring>

namespace hypic::storage {

std::string_view TierKindName(TierKind kind) {
  switch (kind) {
    case TierKind::kHbm: return "hbm";
    case TierKind::kHost: return "host";
    case TierKind::kSsd: return "ssd";
    case TierKind::kRemote: return "remote";
  }
  return "?";
}

Result<EntryHandle> MakeHostHandle(std::shared_ptr<const HostBuffer> bytes) {
  if (bytes == nullptr) return BadRequest("null entry buffer");
  HYPIC_ASSIGN_OR_RETURN(EntryInfo info, ReadEntryInfo(bytes->span()));
  if (info.bytes != bytes->size()) {
    return Corruption("entry buffer size differs from the size in its header");
  }
  auto e = std::make_shared<TierEntry>();
  e->info = std::move(info);
  e->host = bytes->span();
  e->owner = std::move(bytes);
  return EntryHandle(std::move(e));
}

Result<std::shared_ptr<const SegmentEntry>> ParseHandle(const EntryHandle& handle) {
  if (handle == nullptr) return BadRequest("null entry handle");
  if (handle->device == nullptr) return ParseView(handle->host, handle);
  const gpu::Buffer& device = *handle->device;
  return ParseDeviceView(handle->device_prefix, static_cast<const std::byte*>(device.data()),
                         device.memory(), device.device(), handle);
}

Result<std::shared_ptr<const HostBuffer>> CopyToHost(const TierEntry& entry) {
  const uint64_t n = entry.info.bytes;
  HYPIC_ASSIGN_OR_RETURN(HostBuffer out, HostBuffer::Allocate(n));
  if (entry.device != nullptr) {
    if (entry.backend == nullptr) return Internal("device entry without a backend");
    HYPIC_ASSIGN_OR_RETURN(auto stream, entry.backend->CreateStream(entry.device->device()));
    HYPIC_RETURN_IF_ERROR(entry.backend->CopyFromBuffer(out.data(), *entry.device, 0, n, *stream));
    HYPIC_RETURN_IF_ERROR(stream->Synchronize());
  } else {
    if (entry.host.size() != n) return Internal("host entry with a wrong byte count");
    if (n != 0) std::memcpy(out.data(), entry.host.data(), n);
  }
  HYPIC_RETURN_IF_ERROR(Verify(out.span()));
  return std::shared_ptr<const HostBuffer>(std::make_shared<HostBuffer>(std::move(out)));
}

}  // namespace hypic::storage
