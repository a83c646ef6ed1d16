#include "storage/hbm_tier.h"

namespace hypic::storage {

Result<std::unique_ptr<HbmTier>> HbmTier::Create(gpu::Backend& backend, int device,
                                                 uint64_t capacity) {
  HYPIC_ASSIGN_OR_RETURN(std::unique_ptr<gpu::Stream> stream, backend.CreateStream(device));
  return std::unique_ptr<HbmTier>(new HbmTier(backend, device, capacity, std::move(stream)));
}

HbmTier::HbmTier(gpu::Backend& backend, int device, uint64_t capacity,
                 std::unique_ptr<gpu::Stream> stream)
    : MemoryTier(TierKind::kHbm, capacity),
      backend_(backend),
      device_(device),
      stream_(std::move(stream)) {}

namespace {

// What a stored device entry keeps alive: the device copy and the host copy of its prefix.
struct DeviceCopy {
  std::unique_ptr<gpu::Buffer> buffer;
  HostBuffer prefix;
};

}  // namespace

Result<TierEntry> HbmTier::Store(const TierEntry& entry) {
  if (entry.host.size() != entry.info.bytes) {
    return BadRequest("hbm tier: insert needs the entry's host bytes");
  }
  HYPIC_ASSIGN_OR_RETURN(const uint64_t prefix_bytes, EntryDataOffset(entry.host));
  if (prefix_bytes > entry.host.size()) return Corruption("hbm tier: entry shorter than its table");
  auto copy = std::make_shared<DeviceCopy>();
  HYPIC_ASSIGN_OR_RETURN(copy->prefix, HostBuffer::CopyOf(entry.host.first(prefix_bytes)));
  HYPIC_ASSIGN_OR_RETURN(copy->buffer, backend_.Allocate(device_, entry.host.size()));
  {
    MutexLock lock(&stream_mu_);
    HYPIC_RETURN_IF_ERROR(
        backend_.CopyToBuffer(*copy->buffer, 0, entry.host.data(), entry.host.size(), *stream_));
    HYPIC_RETURN_IF_ERROR(stream_->Synchronize());
  }
  TierEntry out;
  out.info = entry.info;
  out.device = copy->buffer.get();
  out.backend = &backend_;
  out.device_prefix = copy->prefix.span();
  out.owner = std::move(copy);
  return out;
}

}  // namespace hypic::storage
