#include "gpu/backend.h"

#include "gpu/cpu/cpu_backend.h"
#if defined(HYPIC_WITH_CUDA)
#include "gpu/cuda/cuda_backend.h"
#endif

namespace hypic::gpu {

std::string_view BackendKindName(BackendKind kind) {
  switch (kind) {
    case BackendKind::kCpu: return "cpu";
    case BackendKind::kCuda: return "cuda";
  }
  return "?";
}

const std::vector<Backend*>& Backends() {
  static const std::vector<Backend*> backends = [] {
    std::vector<Backend*> v{&CpuBackend()};
#if defined(HYPIC_WITH_CUDA)
    if (Backend* cuda = CudaBackendIfAvailable()) v.push_back(cuda);
#endif
    return v;
  }();
  return backends;
}

Backend& CpuBackend() { return GetCpuBackend(); }

Backend* FindBackend(BackendKind kind) {
  for (Backend* b : Backends()) {
    if (b->kind() == kind) return b;
  }
  return nullptr;
}

}  // namespace hypic::gpu
