// HbmTier: entries in device memory of one device, reached only through gpu/backend.h (no CUDA
// header here). Inserts copy the serialized bytes host-to-device on the tier's own stream (a
// copy stream, apart from every compute stream) and keep a host copy of the entry's prefix
// (header through tensor table: a few KiB); handles expose the device buffer, ParseHandle
// (tier.h) views the tensors where they are in device memory, so a pass on that device reads
// them without a copy, and CopyToHost brings the bytes back verified. Usage counts the device
// bytes, exact and bounded like every MemoryTier. With the CPU backend it runs on host memory,
// which is how its logic is tested without a GPU. Thread-safe: copies are serialized on one
// stream.
#pragma once

#include <memory>

#include "core/thread_annotations.h"
#include "storage/memory_tier.h"

namespace hypic::storage {

class HbmTier : public MemoryTier {
 public:
  // REQUIRES: `backend` outlives the tier; `device` < backend.DeviceCount().
  static Result<std::unique_ptr<HbmTier>> Create(gpu::Backend& backend, int device,
                                                 uint64_t capacity);

 protected:
  Result<TierEntry> Store(const TierEntry& entry) override;

 private:
  HbmTier(gpu::Backend& backend, int device, uint64_t capacity,
          std::unique_ptr<gpu::Stream> stream);

  gpu::Backend& backend_;
  const int device_;
  Mutex stream_mu_;
  std::unique_ptr<gpu::Stream> stream_ PT_GUARDED_BY(stream_mu_);
};

}  // namespace hypic::storage
