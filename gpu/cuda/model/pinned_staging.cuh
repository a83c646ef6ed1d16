// PinnedStaging: page-locked host memory through which a pass's host<->device copies go (the
// Input, Mirror and ToHost of gpu/model/forward_kernels.h), so cudaMemcpyAsync to or from it is
// a DMA queued on the stream rather than the driver's synchronous copy through its own
// pageable-memory staging.
//
// Take() hands out space (256-byte aligned) that stays the caller's until Reset(). A region is
// never handed out twice between resets, so no copy can be overwritten while the stream still
// reads it; the caller resets only after synchronising the stream, once every copy into or out
// of the staging has completed. Chunks are allocated as needed (each at least twice the largest
// so far, so a pass settles on few) and kept for later passes, up to kKeptBytes.
//
// Owned by one device context and used under its lock: not thread-safe. Allocation and freeing
// run on the caller's current device (pinned memory is portable: any device may copy from it).
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <utility>
#include <vector>

#include "core/status.h"
#include "gpu/cuda/cuda_check.cuh"

namespace hypic::gpu {

class PinnedStaging {
 public:
  static constexpr size_t kMinChunkBytes = size_t{4} << 20;
  static constexpr size_t kKeptBytes = size_t{512} << 20;

  PinnedStaging() = default;
  PinnedStaging(const PinnedStaging&) = delete;
  PinnedStaging& operator=(const PinnedStaging&) = delete;
  ~PinnedStaging() {
    for (const Chunk& c : chunks_) cudaFreeHost(c.data);
  }

  // `bytes` of pinned host memory into *out, valid until Reset(). Errors: kDeviceError when the
  // host cannot pin that much (*out null).
  Status Take(size_t bytes, void** out) {
    *out = nullptr;
    bytes = (bytes + kAlign - 1) / kAlign * kAlign;
    for (Chunk& c : chunks_) {
      if (c.bytes - c.used >= bytes) {
        *out = c.data + c.used;
        c.used += bytes;
        return Status::Ok();
      }
    }
    size_t largest = 0;
    for (const Chunk& c : chunks_) largest = std::max(largest, c.bytes);
    Chunk fresh{nullptr, std::max({bytes, 2 * largest, kMinChunkBytes}), bytes};
    void* p = nullptr;
    HYPIC_CUDA_RETURN_IF_ERROR(cudaHostAlloc(&p, fresh.bytes, cudaHostAllocPortable));
    fresh.data = static_cast<char*>(p);
    chunks_.push_back(fresh);
    *out = fresh.data;
    return Status::Ok();
  }

  // Every region is free again. REQUIRES: no copy into or out of the staging is pending.
  // Keeps the largest chunks up to kKeptBytes (a one-off huge pass does not pin its staging).
  void Reset() {
    std::sort(chunks_.begin(), chunks_.end(),
              [](const Chunk& a, const Chunk& b) { return a.bytes > b.bytes; });
    size_t kept_bytes = 0;
    std::vector<Chunk> kept;
    for (Chunk& c : chunks_) {
      if (kept_bytes + c.bytes > kKeptBytes) {
        cudaFreeHost(c.data);
        continue;
      }
      kept_bytes += c.bytes;
      c.used = 0;
      kept.push_back(c);
    }
    chunks_ = std::move(kept);
  }

 private:
  static constexpr size_t kAlign = 256;
  struct Chunk {
    char* data;
    size_t bytes;
    size_t used;
  };
  std::vector<Chunk> chunks_;
};

}  // namespace hypic::gpu
