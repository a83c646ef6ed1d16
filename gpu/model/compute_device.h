// ComputeDevice: where a model pass runs (the CPU, or CUDA device N), as named on command lines
// ("cpu", "cuda", "cuda:N"). A plain value; the pass checks that the device exists when it
// starts (kUnsupported when the build has no CUDA kernels, kNotFound when no such device).
#pragma once

#include <string>
#include <string_view>

#include "core/status.h"
#include "gpu/backend.h"

namespace hypic::model {

struct ComputeDevice {
  gpu::BackendKind kind = gpu::BackendKind::kCpu;
  int index = 0;

  bool operator==(const ComputeDevice&) const = default;
};

// "cpu", "cuda" (device 0) or "cuda:N"; kBadRequest otherwise.
Result<ComputeDevice> ParseComputeDevice(std::string_view text);
std::string ComputeDeviceName(const ComputeDevice& device);

// Ok when a pass can run on `device`: always for the CPU; for CUDA, kUnsupported when this build
// has no CUDA model kernels and kNotFound when no such device is visible.
Status CheckComputeDevice(const ComputeDevice& device);

}  // namespace hypic::model
