// The device transport: moves finished entries into the memory of the combine's CUDA device,
// with no host staging between devices. Only a factory is public, so no CUDA type leaks out of
// gpu/cuda/.
//
// Where each tensor comes from is read from the entry itself (TensorView::memory/device), not
// from the worker index Deliver is given: a tensor on device d moves with cudaMemcpyPeerAsync
// (NVLink or PCIe peer-to-peer where the pair allows peer access, enabled at construction; the
// driver's own path otherwise), a tensor in host memory (a CPU worker's entry) with an
// asynchronous host-to-device copy, and a tensor already on the combine device with a
// device-to-device copy. The delivered entry's tensors are views (MemoryKind::kDevice) into one
// block on the combine device, taken from a pool of size classes and returned to it when the
// entry's last view is released; the pool outlives the transport while entries hold blocks.
//
// Thread-safety: Deliver may run concurrently. Each source (each device, and the host) has its
// own lane: a copy stream on the combine device and a mutex, so transfers of different pairs
// overlap and one pair's transfers run one at a time.
#pragma once

#include <memory>

#include "core/status.h"
#include "gpu/runtime/transport.h"

namespace hypic::gpu {

// kUnsupported without a CUDA device; kBadRequest for a combine device that is not visible.
Result<std::unique_ptr<runtime::Transport>> MakeDeviceTransport(int combine_device = 0);

// A host copy of an entry whose tensors may live in device memory (any device).
Result<runtime::EntryPtr> DownloadEntry(const SegmentEntry& entry);

}  // namespace hypic::gpu
