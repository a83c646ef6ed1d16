#include "gpu/model/compute_device.h"

#include <fmt/format.h>

#include <charconv>

#include "gpu/model/cuda_forward.h"

namespace hypic::model {

Result<ComputeDevice> ParseComputeDevice(std::string_view text) {
  if (text == "cpu") return ComputeDevice{};
  constexpr std::string_view kCuda = "cuda";
  if (text.substr(0, kCuda.size()) == kCuda) {
    std::string_view rest = text.substr(kCuda.size());
    if (rest.empty()) return ComputeDevice{gpu::BackendKind::kCuda, 0};
    int index = -1;
    if (rest.front() == ':') {
      rest.remove_prefix(1);
      const auto [end, ec] = std::from_chars(rest.data(), rest.data() + rest.size(), index);
      if (ec == std::errc() && end == rest.data() + rest.size() && !rest.empty() && index >= 0) {
        return ComputeDevice{gpu::BackendKind::kCuda, index};
      }
    }
  }
  return BadRequest(fmt::format("unknown device '{}' (want cpu, cuda or cuda:N)", text));
}

std::string ComputeDeviceName(const ComputeDevice& device) {
  if (device.kind == gpu::BackendKind::kCpu) return "cpu";
  return fmt::format("cuda:{}", device.index);
}

Status CheckComputeDevice(const ComputeDevice& device) {
  if (device.kind == gpu::BackendKind::kCpu) return Status::Ok();
  if (!CudaModelKernelsBuilt()) {
    return Unsupported(fmt::format("device {}: this build has no CUDA kernels for the model",
                                   ComputeDeviceName(device)));
  }
  gpu::Backend* cuda = gpu::FindBackend(gpu::BackendKind::kCuda);
  const int count = cuda == nullptr ? 0 : cuda->DeviceCount();
  if (device.index < 0 || device.index >= count) {
    return NotFound(fmt::format("device {}: no such CUDA device ({} visible)",
                                ComputeDeviceName(device), count));
  }
  return Status::Ok();
}

}  // namespace hypic::model
