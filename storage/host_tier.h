// HostTier: entries in host RAM, capacity-bounded with exact usage accounting (MemoryTier).
// With a pinning backend (the CUDA backend's AllocateHost), each entry is copied into
// page-locked memory so that device copies run at full bandwidth; without one, the tier keeps a
// reference to the caller's (immutable) buffer and copies nothing. Thread-safe.
#pragma once

#include "storage/memory_tier.h"

namespace hypic::storage {

class HostTier : public MemoryTier {
 public:
  // `pinning` may be null (pageable memory, zero-copy inserts); it must outlive the tier.
  HostTier(uint64_t capacity, gpu::Backend* pinning = nullptr);

 protected:
  Result<TierEntry> Store(const TierEntry& entry) override;

 private:
  gpu::Backend* const pinning_;
};

}  // namespace hypic::storage
