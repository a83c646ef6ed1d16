#include "storage/host_tier.h"

#include <cstring>

namespace hypic::storage {

HostTier::HostTier(uint64_t capacity, gpu::Backend* pinning)
    : MemoryTier(TierKind::kHost, capacity), pinning_(pinning) {}

Result<TierEntry> HostTier::Store(const TierEntry& entry) {
  if (entry.host.size() != entry.info.bytes) {
    return BadRequest("host tier: insert needs the entry's host bytes");
  }
  TierEntry out;
  out.info = entry.info;
  if (pinning_ == nullptr) {
    out.host = entry.host;
    out.owner = entry.owner;
    return out;
  }
  HYPIC_ASSIGN_OR_RETURN(std::unique_ptr<gpu::Buffer> buf,
                         pinning_->AllocateHost(entry.host.size()));
  std::memcpy(buf->data(), entry.host.data(), entry.host.size());
  out.host = {static_cast<const std::byte*>(buf->data()), entry.host.size()};
  out.owner = std::shared_ptr<const gpu::Buffer>(std::move(buf));
  return out;
}

}  // namespace hypic::storage
