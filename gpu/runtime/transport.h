// Transport: moves a finished entry from the worker that computed it to the combine side, one
// entry at a time as soon as it is ready (streamed, so transfer overlaps the other workers'
// compute rather than happening in one burst at the end).
//
// HostTransport copies the entry's tensors into fresh host buffers owned by the combine side:
// the worker's entry goes to the store at the same time, and the combine never shares memory
// with a buffer the store may demote, compress or free. hypicd uses it on the CPU, and on GPUs
// without an HBM tier (a GPU worker's entry is in host memory when its pass finishes; with one,
// server/hbm_transport.h hands over the store's device copy instead). The device
// transport (gpu/cuda/runtime/device_transport.h, CUDA builds) moves tensors into the combine
// device's memory, peer to peer from other devices; the entry says where each tensor lives.
//
// Thread-safety: Deliver may be called concurrently from every worker thread.
#pragma once

#include <cstddef>
#include <memory>

#include "gpu/runtime/prefill_job.h"

namespace hypic::runtime {

class Transport {
 public:
  virtual ~Transport() = default;
  // Moves `entry`, computed on worker `from`, to the combine side. Returns the entry as the
  // combine sees it; kDeviceError (or kNoSpace) when the move fails.
  virtual Result<EntryPtr> Deliver(const EntryPtr& entry, int from) = 0;
};

class HostTransport final : public Transport {
 public:
  Result<EntryPtr> Deliver(const EntryPtr& entry, int from) override;
};

// A deep copy of `entry` with every tensor in a new host buffer (metadata copied as is).
// REQUIRES: every tensor of `entry` is in host memory (kBadRequest otherwise).
Result<EntryPtr> CopyEntryToHost(const SegmentEntry& entry);

}  // namespace hypic::runtime
