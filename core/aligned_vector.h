// Vectors whose storage starts on a cache-line (64-byte) boundary:
//   - AlignedVector<T>: a std::vector otherwise;
//   - UninitializedVector<T>: whose resize leaves the new elements of a trivial type
//     unwritten (default-initialised) instead of zeroing them, for buffers always written
//     right after they grow: a compose's K/V cache grows by 16k positions and zeroing them
//     first cost a serial pass of 33 MB (about 2 ms of a 50 ms compose on 2 cores). Reading an
//     element before writing it is a bug, as for new[].
// Cache lines, because AMX tile loads and stores move 64-byte rows and AVX-512 64-byte
// vectors: malloc aligns to 16 bytes (a block large enough to be mmapped starts 16 bytes past
// its page), and a row that starts mid-line spans two lines. tileloadd then ran 2.7x and
// tilestored 2.3x slower (1 KiB tiles in L1: 16.3 against 6.1 ns a load, 10.6 against 4.6 a
// store; Xeon with AMX, 2026-12-07). Same thread-safety as std::vector.
#pragma once

#include <cstddef>
#include <new>
#include <utility>
#include <vector>

namespace hypic {

inline constexpr size_t kCacheLineBytes = 64;

// Hands out blocks aligned to kCacheLineBytes. Stateless: any two compare equal. With
// kValueInit false, value-less construction default-initialises (UninitializedVector).
template <typename T, bool kValueInit = true>
class CacheLineAllocator {
 public:
  using value_type = T;
  template <typename U>
  struct rebind {
    using other = CacheLineAllocator<U, kValueInit>;
  };
  CacheLineAllocator() noexcept = default;
  template <typename U>
  CacheLineAllocator(const CacheLineAllocator<U, kValueInit>&) noexcept {}  // NOLINT: as std

  T* allocate(size_t n) {
    return static_cast<T*>(::operator new (n * sizeof(T), std::align_val_t{kCacheLineBytes}));
  }
  void deallocate(T* p, size_t) noexcept {
    ::operator delete (p, std::align_val_t{kCacheLineBytes});
  }
  template <typename U, typename... Args>
  void construct(U* p, Args&&... args) {
    if constexpr (sizeof...(Args) == 0 && !kValueInit) {
      ::new (static_cast<void*>(p)) U;
    } else {
      ::new (static_cast<void*>(p)) U(std::forward<Args>(args)...);
    }
  }
  template <typename U>
  bool operator==(const CacheLineAllocator<U, kValueInit>&) const noexcept {
    return true;
  }
};

template <typename T>
using AlignedVector = std::vector<T, CacheLineAllocator<T>>;
template <typename T>
using UninitializedVector = std::vector<T, CacheLineAllocator<T, false>>;

}  // namespace hypic
