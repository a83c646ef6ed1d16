// The compute-device interface. No CUDA type appears here (ggml's rule): CUDA lives behind
// gpu/cuda/ and is reached only through this interface and the registry below.
//
// A Backend owns its devices; Buffers and Streams it returns are owned by the caller and must
// not outlive the backend (backends are process-lifetime singletons, so in practice they never
// do). Backends are thread-safe; a Stream is used by one thread at a time; a Buffer is
// thread-compatible. Every fallible call returns Status; a CUDA error becomes kDeviceError with
// the failing statement, file and line.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"
#include "core/tensor.h"

namespace hypic::gpu {

enum class BackendKind : uint8_t { kCpu = 0, kCuda = 1 };
std::string_view BackendKindName(BackendKind kind);

struct DeviceInfo {
  BackendKind kind = BackendKind::kCpu;
  int index = 0;
  std::string name;
  size_t total_memory = 0;  // bytes
  size_t free_memory = 0;   // bytes, at query time
  int compute_major = 0;    // CUDA compute capability; 0 for CPU
  int compute_minor = 0;
  int multiprocessors = 0;  // SMs, or CPU cores
};

// A block of memory on one device (or pinned host memory).
class Buffer {
 public:
  virtual ~Buffer() = default;
  virtual void* data() = 0;
  virtual const void* data() const = 0;
  virtual size_t size() const = 0;
  virtual MemoryKind memory() const = 0;
  virtual int device() const = 0;
};

// An ordered queue of work on one device.
class Stream {
 public:
  virtual ~Stream() = default;
  virtual int device() const = 0;
  // Blocks until all work queued so far is done.
  virtual Status Synchronize() = 0;
  // The backend's native queue (a cudaStream_t for CUDA), for code under gpu/ that enqueues its
  // own kernels or cuBLAS calls in this stream's order; nullptr for the CPU backend. The stream
  // keeps ownership.
  virtual void* native_handle() const { return nullptr; }
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual BackendKind kind() const = 0;
  virtual int DeviceCount() const = 0;
  virtual Result<DeviceInfo> QueryDevice(int device) const = 0;

  // Device memory (MemoryKind::kDevice; host memory for the CPU backend).
  virtual Result<std::unique_ptr<Buffer>> Allocate(int device, size_t bytes) = 0;
  // Page-locked host memory where the backend supports it, else pageable (kHost).
  virtual Result<std::unique_ptr<Buffer>> AllocateHost(size_t bytes) = 0;
  virtual Result<std::unique_ptr<Stream>> CreateStream(int device) = 0;

  // Copies between host memory and a buffer of this backend, ordered on `stream`.
  // REQUIRES: offset + bytes <= buffer size. Returns kBadRequest otherwise.
  virtual Status CopyToBuffer(Buffer& dst, size_t dst_offset, const void* src, size_t bytes,
                              Stream& stream) = 0;
  virtual Status CopyFromBuffer(void* dst, const Buffer& src, size_t src_offset, size_t bytes,
                                Stream& stream) = 0;

  // OK while `device` still takes work; kDeviceError once it is lost (CUDA: a sticky error,
  // which every later call on the device's context returns). A worker asks after a failed job
  // and leaves the pool on an error. The CPU is never lost.
  virtual Status CheckDevice(int /*device*/) { return Status::Ok(); }
  // y[i] = alpha * x[i] + y[i] over `n` f32 elements in buffers of this backend: the smallest
  // real kernel, used by the conformance test to prove the device path end to end.
  virtual Status Axpy(float alpha, const Buffer& x, Buffer& y, size_t n, Stream& stream) = 0;
};

// The registry: the CPU backend is always present (index 0); CUDA is added in CUDA builds
// when at least one device is visible. Thread-safe; built on first use.
const std::vector<Backend*>& Backends();
Backend& CpuBackend();
// nullptr when the kind is not built or has no device.
Backend* FindBackend(BackendKind kind);

}  // namespace hypic::gpu
