#include "gpu/cpu/cpu_backend.h"

#include <unistd.h>

#include <cstring>
#include <fstream>
#include <string>

#include "core/host_buffer.h"
#include "gpu/cpu/compute_threads.h"

namespace hypic::gpu {

namespace {

class CpuBuffer final : public Buffer {
 public:
  explicit CpuBuffer(HostBuffer buf) : buf_(std::move(buf)) {}
  void* data() override { return buf_.data(); }
  size_t size() const override { return buf_.size(); }
  MemoryKind memory() const override { return MemoryKind::kHost; }
  int device() const override { return 0; }
  const void* data() const override { return buf_.data(); }

 private:
  HostBuffer buf_;
};

class CpuStream final : public Stream {
 public:
  int device() const override { return 0; }
  Status Synchronize() override { return Status::Ok(); }
};

std::string CpuModelName() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) == 0) {
      auto colon = line.find(':');
      if (colon != std::string::npos) return line.substr(colon + 2);
    }
  }
  return "cpu";
}

Status CheckRange(size_t offset, size_t bytes, size_t size) {
  if (offset > size || bytes > size - offset) {
    return BadRequest("copy range [" + std::to_string(offset) + ", +" + std::to_string(bytes) +
                      ") exceeds buffer of " + std::to_string(size) + " bytes");
  }
  return Status::Ok();
}

class CpuBackendImpl final : public Backend {
 public:
  BackendKind kind() const override { return BackendKind::kCpu; }
  int DeviceCount() const override { return 1; }

  Result<DeviceInfo> QueryDevice(int device) const override {
    if (device != 0) return NotFound("cpu backend has only device 0");
    DeviceInfo info;
    info.kind = BackendKind::kCpu;
    info.name = CpuModelName();
    long pages = sysconf(_SC_PHYS_PAGES);
    long avail = sysconf(_SC_AVPHYS_PAGES);
    long page = sysconf(_SC_PAGE_SIZE);
    info.total_memory = static_cast<size_t>(pages) * static_cast<size_t>(page);
    info.free_memory = static_cast<size_t>(avail) * static_cast<size_t>(page);
    info.multiprocessors = cpu::UsableCores();
    return info;
  }

  Result<std::unique_ptr<Buffer>> Allocate(int device, size_t bytes) override {
    if (device != 0) return NotFound("cpu backend has only device 0");
    return AllocateHost(bytes);
  }

  Result<std::unique_ptr<Buffer>> AllocateHost(size_t bytes) override {
    HYPIC_ASSIGN_OR_RETURN(HostBuffer buf, HostBuffer::Allocate(bytes));
    return std::unique_ptr<Buffer>(std::make_unique<CpuBuffer>(std::move(buf)));
  }

  Result<std::unique_ptr<Stream>> CreateStream(int device) override {
    if (device != 0) return NotFound("cpu backend has only device 0");
    return std::unique_ptr<Stream>(std::make_unique<CpuStream>());
  }

  Status CopyToBuffer(Buffer& dst, size_t dst_offset, const void* src, size_t bytes,
                      Stream&) override {
    HYPIC_RETURN_IF_ERROR(CheckRange(dst_offset, bytes, dst.size()));
    if (bytes) std::memcpy(static_cast<std::byte*>(dst.data()) + dst_offset, src, bytes);
    return Status::Ok();
  }

  Status CopyFromBuffer(void* dst, const Buffer& src, size_t src_offset, size_t bytes,
                        Stream&) override {
    HYPIC_RETURN_IF_ERROR(CheckRange(src_offset, bytes, src.size()));
    const auto& cpu = static_cast<const CpuBuffer&>(src);
    if (bytes) std::memcpy(dst, static_cast<const std::byte*>(cpu.data()) + src_offset, bytes);
    return Status::Ok();
  }

  Status Axpy(float alpha, const Buffer& x, Buffer& y, size_t n, Stream&) override {
    HYPIC_RETURN_IF_ERROR(CheckRange(0, n * sizeof(float), x.size()));
    HYPIC_RETURN_IF_ERROR(CheckRange(0, n * sizeof(float), y.size()));
    const float* xs = static_cast<const float*>(static_cast<const CpuBuffer&>(x).data());
    float* ys = static_cast<float*>(y.data());
    for (size_t i = 0; i < n; ++i) ys[i] = alpha * xs[i] + ys[i];
    return Status::Ok();
  }
};

}  // namespace

Backend& GetCpuBackend() {
  static CpuBackendImpl backend;
  return backend;
}

}  // namespace hypic::gpu
