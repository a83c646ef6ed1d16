// UninitializedVector<T>: a std::vector whose resize leaves the new elements of a trivial type
// uninitialised (default-initialised) instead of zeroing them. For buffers whose growth is
// always overwritten right after: a compose's K/V cache grows by 16k positions and zeroing
// them first cost a serial pass of 33 MB (about 2 ms of a 50 ms compose on 2 cores). Reading
// an element before writing it is a bug, as for new[]. Same thread-safety as std::vector.
#pragma once

#include <memory>
#include <new>
#include <utility>
#include <vector>

namespace hypic {

template <typename T>
class DefaultInitAllocator : public std::allocator<T> {
 public:
  template <typename U>
  struct rebind {
    using other = DefaultInitAllocator<U>;
  };
  DefaultInitAllocator() noexcept = default;
  template <typename U>
  DefaultInitAllocator(const DefaultInitAllocator<U>& other) noexcept  // NOLINT: as std::allocator
      : std::allocator<T>(other) {}

  // Value-less construction default-initialises (no zeroing for trivial types).
  template <typename U>
  void construct(U* p) noexcept(std::is_nothrow_default_constructible_v<U>) {
    ::new (static_cast<void*>(p)) U;
  }
  template <typename U, typename... Args>
  void construct(U* p, Args&&... args) {
    ::new (static_cast<void*>(p)) U(std::forward<Args>(args)...);
  }
};

template <typename T>
using UninitializedVector = std::vector<T, DefaultInitAllocator<T>>;

}  // namespace hypic
