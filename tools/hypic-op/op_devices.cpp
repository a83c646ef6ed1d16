// `hypic-op devices`: lists the compute devices of every registered backend.
#include <fmt/format.h>

#include "gpu/backend.h"
#if defined(HYPIC_WITH_CUDA)
#include "gpu/cuda/cuda_backend.h"
#endif
#include "tools/common/subcommand.h"

// A namespace of its own: hypic-* tools compile as unity batches (cmake/HypicTargets.cmake).
namespace hypic::tools::op_devices {
namespace {

int ListDevices() {
  for (gpu::Backend* backend : gpu::Backends()) {
    for (int i = 0; i < backend->DeviceCount(); ++i) {
      auto info = backend->QueryDevice(i);
      if (!info.ok()) {
        fmt::print(stderr, "{}:{}: {}\n", gpu::BackendKindName(backend->kind()), i,
                   info.status().ToString());
        return kExitFailure;
      }
      fmt::print("{}:{}  {}  memory {:.1f}/{:.1f} GiB free", gpu::BackendKindName(info->kind), i,
                 info->name, info->free_memory / 1073741824.0, info->total_memory / 1073741824.0);
      if (info->kind == gpu::BackendKind::kCuda) {
        fmt::print("  sm_{}{}  {} SMs", info->compute_major, info->compute_minor,
                   info->multiprocessors);
      } else {
        fmt::print("  {} cores", info->multiprocessors);
      }
      fmt::print("\n");
    }
  }
  if (gpu::FindBackend(gpu::BackendKind::kCuda) == nullptr) {
#if defined(HYPIC_WITH_CUDA)
    fmt::print("cuda: {}\n", gpu::CudaUnavailableReason());
#else
    fmt::print("cuda: no CUDA device (this build has no CUDA backend)\n");
#endif
  }
  return kExitOk;
}

const bool kRegistered =
    RegisterSubcommand("devices", "List compute devices (CPU, and CUDA GPUs when present)",
                       [](CLI::App&) -> Action { return [] { return ListDevices(); }; });

}  // namespace
}  // namespace hypic::tools::op_devices
