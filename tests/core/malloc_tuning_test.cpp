// TuneMallocForLargeBuffers: after it, a multi-MiB block below 32 MiB comes from the heap (and
// is reused after a free) instead of a fresh mmap, whatever the process allocated before.
#include "core/malloc_tuning.h"

#include <doctest/doctest.h>

#include <cstdlib>
#include <cstring>
#include <initializer_list>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace hypic {
namespace {

TEST_CASE("large blocks below 32 MiB come from the heap after the tuning") {
#if defined(__SANITIZE_ADDRESS__) || !defined(__GLIBC__)
  MESSAGE("skipped: not glibc's allocator (sanitizer or other libc)");
#else
  REQUIRE(TuneMallocForLargeBuffers());
  for (size_t mib : {1, 8, 24}) {
    CAPTURE(mib);
    const size_t mapped_before = mallinfo2().hblkhd;
    void* p = std::malloc(mib << 20);
    REQUIRE(p != nullptr);
    std::memset(p, 1, mib << 20);
    CHECK(mallinfo2().hblkhd == mapped_before);  // not an mmap'd block
    std::free(p);
  }
  // At 32 MiB and above, blocks are still mapped (and returned to the system on free).
  const size_t mapped_before = mallinfo2().hblkhd;
  void* big = std::malloc(size_t{48} << 20);
  REQUIRE(big != nullptr);
  CHECK(mallinfo2().hblkhd >= mapped_before + (size_t{48} << 20));
  std::free(big);
#endif
}

}  // namespace
}  // namespace hypic
