// The NCCL transport: moves finished entries GPU to GPU, from the worker's device to the
// combine's device, over NCCL send/recv (NVLink or PCIe peer-to-peer, whatever NCCL picks).
// Only a factory is public, so no CUDA or NCCL type leaks out of gpu/cuda/ (as in ggml).
//
// One process drives every local GPU: the transport holds one communicator per visible device
// (ncclCommInitAll) and one stream per device for communication, so transfers do not queue
// behind the worker's compute stream. Transfers are serialized by a mutex (NCCL requires one
// thread per communicator at a time), which is the combine's ingress link in the scatter
// simulator's model. The delivered entry's tensors live in one device block on the combine
// device (MemoryKind::kDevice) owned by the entry. Thread-safe.
#pragma once

#include <memory>

#include "core/status.h"
#include "gpu/runtime/transport.h"

namespace hypic::gpu {

// kUnsupported when fewer than two CUDA devices are visible; kDeviceError when NCCL fails.
Result<std::unique_ptr<runtime::Transport>> MakeNcclTransport(int combine_device = 0);

// A host copy of an entry whose tensors may live in device memory (any device).
Result<runtime::EntryPtr> DownloadEntry(const SegmentEntry& entry);

}  // namespace hypic::gpu
