#include "core/host_buffer.h"

#include <cstdlib>
#include <cstring>
#include <new>
#include <utility>

namespace hypic {

HostBuffer::~HostBuffer() { std::free(data_); }

HostBuffer::HostBuffer(HostBuffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)), size_(std::exchange(other.size_, 0)) {}

HostBuffer& HostBuffer::operator=(HostBuffer&& other) noexcept {
  if (this != &other) {
    std::free(data_);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

Result<HostBuffer> HostBuffer::Allocate(size_t size, size_t alignment) {
  HostBuffer b;
  if (size == 0) return b;
  size_t rounded = (size + alignment - 1) / alignment * alignment;
  if (rounded < size) return NoSpace("host buffer size overflows");
  void* p = std::aligned_alloc(alignment, rounded);
  if (p == nullptr)
    return NoSpace("cannot allocate " + std::to_string(size) + " bytes of host memory");
  std::memset(p, 0, rounded);
  b.data_ = static_cast<std::byte*>(p);
  b.size_ = size;
  return b;
}

Result<HostBuffer> HostBuffer::CopyOf(std::span<const std::byte> bytes) {
  HYPIC_ASSIGN_OR_RETURN(HostBuffer b, Allocate(bytes.size()));
  if (!bytes.empty()) std::memcpy(b.data(), bytes.data(), bytes.size());
  return b;
}

}  // namespace hypic
