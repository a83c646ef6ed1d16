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

Result<TierEntry> HbmTier::Store(const TierEntry& entry) {
  if (entry.host.size() != entry.info.bytes) {
    return BadRequest("hbm tier: insert needs the entry's host bytes");
  }
  HYPIC_ASSIGN_OR_RETURN(std::unique_ptr<gpu::Buffer> buf,
                         backend_.Allocate(device_, entry.host.size()));
  {
    MutexLock lock(&stream_mu_);
    HYPIC_RETURN_IF_ERROR(
        backend_.CopyToBuffer(*buf, 0, entry.host.data(), entry.host.size(), *stream_));
    HYPIC_RETURN_IF_ERROR(stream_->Synchronize());
  }
  TierEntry out;
  out.info = entry.info;
  out.device = buf.get();
  out.backend = &backend_;
  out.owner = std::shared_ptr<const gpu::Buffer>(std::move(buf));
  return out;
}

}  // namespace hypic::storage
