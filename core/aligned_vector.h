// AlignedVector<T>: a std::vector whose storage starts on a cache-line (64-byte) boundary, for
// the operands that AMX tile loads and stores move in 64-byte rows. malloc aligns to 16 bytes
// (a block large enough to be mmapped starts 16 bytes past its page), and a tile row that
// starts mid-line spans two cache lines: tileloadd then ran 2.7x and tilestored 2.3x slower
// (1 KiB tiles in L1: 16.3 against 6.1 ns a load, 10.6 against 4.6 a store; Xeon with AMX,
// 2026-12-07). Same thread-safety as std::vector.
#pragma once

#include <cstddef>
#include <new>
#include <vector>

namespace hypic {

inline constexpr size_t kCacheLineBytes = 64;

// Hands out blocks aligned to kCacheLineBytes. Stateless: any two compare equal.
template <typename T>
class CacheLineAllocator {
 public:
  using value_type = T;
  CacheLineAllocator() noexcept = default;
  template <typename U>
  CacheLineAllocator(const CacheLineAllocator<U>&) noexcept {}  // NOLINT: as std::allocator

  T* allocate(size_t n) {
    return static_cast<T*>(::operator new (n * sizeof(T), std::align_val_t{kCacheLineBytes}));
  }
  void deallocate(T* p, size_t) noexcept {
    ::operator delete (p, std::align_val_t{kCacheLineBytes});
  }
  template <typename U>
  bool operator==(const CacheLineAllocator<U>&) const noexcept {
    return true;
  }
};

template <typename T>
using AlignedVector = std::vector<T, CacheLineAllocator<T>>;

}  // namespace hypic
