#include "gpu/cpu/compute_threads.h"

#include <omp.h>
#include <sched.h>
#if defined(__x86_64__) || defined(__i386__)
#include <xmmintrin.h>
#define HYPIC_HAS_MXCSR 1
#endif

#include <algorithm>
#include <atomic>
#include <thread>

namespace hypic::cpu {

int UsableCores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) {
    const int n = CPU_COUNT(&set);
    if (n > 0) return n;
  }
  return static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

namespace {

std::atomic<int> g_threads{UsableCores()};
thread_local int t_threads = 0;  // the calling thread's ScopedComputeThreads; 0: none

}  // namespace

void SetComputeThreads(int threads) { g_threads.store(std::max(1, threads)); }

int ComputeThreads() {
  const int budget = t_threads > 0 ? t_threads : g_threads.load();
  // OMP_THREAD_LIMIT caps every OpenMP team: oneDNN would partition a GEMM for threads it
  // never gets and leave part of the output unwritten, so no budget exceeds the limit.
  return std::min(budget, omp_get_thread_limit());
}

ScopedComputeThreads::ScopedComputeThreads(int threads) : previous_(t_threads) {
  t_threads = std::max(1, threads);
}

ScopedComputeThreads::~ScopedComputeThreads() { t_threads = previous_; }

#ifdef HYPIC_HAS_MXCSR
// MXCSR bits: FTZ (flush results to zero) and DAZ (read subnormal inputs as zero).
constexpr unsigned kFlushToZero = 1u << 15, kDenormalsAreZero = 1u << 6;
ScopedFlushDenormals::ScopedFlushDenormals() : previous_(_mm_getcsr()) {
  _mm_setcsr(previous_ | kFlushToZero | kDenormalsAreZero);
}
ScopedFlushDenormals::~ScopedFlushDenormals() { _mm_setcsr(previous_); }
#else
ScopedFlushDenormals::ScopedFlushDenormals() : previous_(0) {}
ScopedFlushDenormals::~ScopedFlushDenormals() = default;
#endif

void ParallelFor(int64_t n, int64_t min_per_thread,
                 const std::function<void(int64_t, int64_t)>& fn) {
  const int64_t threads =
      std::min<int64_t>(ComputeThreads(), n / std::max<int64_t>(min_per_thread, 1));
  if (threads <= 1) {
    ScopedComputeThreads one(1);
    ScopedFlushDenormals flush;
    if (n > 0) fn(0, n);
    return;
  }
#pragma omp parallel num_threads(static_cast <int>(threads))
  {
    // The team may be smaller than asked for (nested regions run on one thread).
    const int64_t team = omp_get_num_threads(), me = omp_get_thread_num();
    const int64_t per = (n + team - 1) / team;
    const int64_t b = me * per, e = std::min(n, b + per);
    ScopedComputeThreads one(1);
    ScopedFlushDenormals flush;
    if (b < e) fn(b, e);
  }
}

}  // namespace hypic::cpu
