#include "core/host_buffer.h"

#include <sys/mman.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <new>
#include <string>
#include <utility>

namespace hypic {

namespace {

// `size` rounded up to a multiple of `alignment`; 0 when that overflows.
size_t RoundUp(size_t size, size_t alignment) {
  size_t rounded = (size + alignment - 1) / alignment * alignment;
  return rounded < size ? 0 : rounded;
}

Status CannotAllocate(size_t size) {
  return NoSpace("cannot allocate " + std::to_string(size) + " bytes of host memory");
}

}  // namespace

HostBuffer::~HostBuffer() { Free(); }

void HostBuffer::Free() {
  if (mapped_) {
    ::munmap(data_, RoundUp(size_, kDefaultAlignment));
  } else {
    std::free(data_);
  }
  data_ = nullptr;
  size_ = 0;
  mapped_ = false;
}

HostBuffer::HostBuffer(HostBuffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)),
      size_(std::exchange(other.size_, 0)),
      mapped_(std::exchange(other.mapped_, false)) {}

HostBuffer& HostBuffer::operator=(HostBuffer&& other) noexcept {
  if (this != &other) {
    Free();
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
    mapped_ = std::exchange(other.mapped_, false);
  }
  return *this;
}

Result<HostBuffer> HostBuffer::Allocate(size_t size, size_t alignment, Init init) {
  HostBuffer b;
  if (size == 0) return b;
  size_t rounded = RoundUp(size, alignment);
  if (rounded == 0) return NoSpace("host buffer size overflows");
  void* p = std::aligned_alloc(alignment, rounded);
  if (p == nullptr) return CannotAllocate(size);
  const size_t zeroed_from = init == Init::kZero ? 0 : size;
  std::memset(static_cast<std::byte*>(p) + zeroed_from, 0, rounded - zeroed_from);
  b.data_ = static_cast<std::byte*>(p);
  b.size_ = size;
  return b;
}

Result<HostBuffer> HostBuffer::CopyOf(std::span<const std::byte> bytes) {
  HYPIC_ASSIGN_OR_RETURN(HostBuffer b,
                         Allocate(bytes.size(), kDefaultAlignment, Init::kUninitialized));
  if (!bytes.empty()) std::memcpy(b.data(), bytes.data(), bytes.size());
  return b;
}

Status HostBuffer::Resize(size_t size) {
  if (size == size_) return Status::Ok();
  if (size == 0) {
    Free();
    return Status::Ok();
  }
  // Pages: mmap's granularity, and the default alignment (4 KiB) at the same time.
  const size_t rounded = RoundUp(size, kDefaultAlignment);
  if (rounded == 0) return NoSpace("host buffer size overflows");
  if (mapped_) {
    void* p = ::mremap(data_, RoundUp(size_, kDefaultAlignment), rounded, MREMAP_MAYMOVE);
    if (p == MAP_FAILED) return CannotAllocate(size);
    data_ = static_cast<std::byte*>(p);
    size_ = size;
    return Status::Ok();
  }
  const bool map = size >= kMapThreshold;
  void* p = nullptr;
  if (map) {
    p = ::mmap(nullptr, rounded, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) p = nullptr;
  } else {
    p = std::aligned_alloc(kDefaultAlignment, rounded);
  }
  if (p == nullptr) return CannotAllocate(size);
  if (data_ != nullptr) std::memcpy(p, data_, std::min(size_, size));
  Free();
  data_ = static_cast<std::byte*>(p);
  size_ = size;
  mapped_ = map;
  return Status::Ok();
}

}  // namespace hypic
