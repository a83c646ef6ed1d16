// HostBuffer: an owning, aligned, move-only block of host memory. The default alignment (4 KiB)
// suits direct device copies and O_DIRECT-style I/O. A buffer can be resized in place of a
// copy (Resize): blocks of kMapThreshold and more are mapped pages that grow with mremap, so a
// body received piece by piece never copies its large part. Not thread-safe; share it through
// std::shared_ptr<const HostBuffer> when several readers need it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "core/status.h"

namespace hypic {

class HostBuffer {
 public:
  static constexpr size_t kDefaultAlignment = 4096;
  // Resize maps blocks this large or larger (glibc's mmap threshold as core/malloc_tuning sets
  // it, so smaller ones come from the reused heap, larger ones were fresh pages anyway).
  static constexpr size_t kMapThreshold = 32 << 20;

  HostBuffer() = default;
  ~HostBuffer();
  HostBuffer(HostBuffer&& other) noexcept;
  HostBuffer& operator=(HostBuffer&& other) noexcept;
  HostBuffer(const HostBuffer&) = delete;
  HostBuffer& operator=(const HostBuffer&) = delete;

  // What Allocate writes into a new block: zeros, or nothing for a producer that writes every
  // byte of `size` before anything reads it (a pass's capture, a copy). Skipping the zeros
  // saves a write of the whole block (and, for fresh pages, the faults come at the producer's
  // first write instead). The padding up to the alignment is zeroed either way.
  enum class Init { kZero, kUninitialized };

  // Allocates `size` bytes. Returns kNoSpace when the allocation fails.
  // REQUIRES: `alignment` is a power of two, at least alignof(std::max_align_t).
  static Result<HostBuffer> Allocate(size_t size, size_t alignment = kDefaultAlignment,
                                     Init init = Init::kZero);

  // Allocates and copies `bytes`.
  static Result<HostBuffer> CopyOf(std::span<const std::byte> bytes);

  // Resizes to `size` bytes with the default alignment, keeping the first min(size(), size)
  // bytes; the bytes past the old size are not initialized (unlike Allocate's). A mapped block
  // (size >= kMapThreshold) is remapped without copying; a smaller one is reallocated and
  // copied. Returns kNoSpace when the memory cannot be had; the buffer is then unchanged.
  [[nodiscard]] Status Resize(size_t size);

  std::byte* data() { return data_; }
  const std::byte* data() const { return data_; }
  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  std::span<std::byte> span() { return {data_, size_}; }
  std::span<const std::byte> span() const { return {data_, size_}; }

  template <typename T>
  T* as() {
    return reinterpret_cast<T*>(data_);
  }
  template <typename T>
  const T* as() const {
    return reinterpret_cast<const T*>(data_);
  }

 private:
  void Free();

  std::byte* data_ = nullptr;
  size_t size_ = 0;
  bool mapped_ = false;  // data_ is an mmap of size_ rounded up to pages (else aligned_alloc)
};

}  // namespace hypic
