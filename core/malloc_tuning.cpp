#include "core/malloc_tuning.h"

#include <cstdlib>  // defines __GLIBC__ under glibc

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace hypic {

bool TuneMallocForLargeBuffers() {
#if defined(__GLIBC__)
  constexpr int kMmapThreshold = 32 << 20;   // glibc's DEFAULT_MMAP_THRESHOLD_MAX on 64-bit
  constexpr int kTrimThreshold = 512 << 20;  // as much as a compute thread keeps of scratch
  return mallopt(M_MMAP_THRESHOLD, kMmapThreshold) == 1 &&
         mallopt(M_TRIM_THRESHOLD, kTrimThreshold) == 1;
#else
  return true;
#endif
}

}  // namespace hypic
