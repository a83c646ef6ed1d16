// The CPU backend: host memory, synchronous "streams", and the reference implementation of
// every op for conformance tests. Thread-safe (stateless apart from the device query).
#pragma once

#include "gpu/backend.h"

namespace hypic::gpu {

Backend& GetCpuBackend();

}  // namespace hypic::gpu
