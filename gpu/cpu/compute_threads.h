// The CPU compute-thread budget and the fork-join loop every CPU kernel splits its work with.
//
// A budget is per calling thread: ComputeThreads() is the thread's innermost
// ScopedComputeThreads, else the process-wide SetComputeThreads value (default: the hardware
// threads). Both ParallelFor and the GEMMs (gemm.h, oneDNN on OpenMP, which honours a
// per-thread thread count) read it at each call, so a runtime worker with a 1-thread budget
// runs its whole pass on its own thread while another worker runs beside it with its own.
//
// ParallelFor runs on OpenMP, the same thread teams oneDNN uses, so a pass alternating GEMMs
// and elementwise loops reuses one set of threads instead of starting new ones. Inside a
// ParallelFor range the budget is 1: nested loops and GEMMs run on the range's thread.
//
// Thread-safety: all functions may be called from any thread. SetComputeThreads is meant for
// startup and benchmarks; a ScopedComputeThreads is not movable and must be destroyed on the
// thread that made it.
#pragma once

#include <cstdint>
#include <functional>

namespace hypic::cpu {

// Sets the process-wide budget (at least 1).
void SetComputeThreads(int threads);
// The calling thread's budget: its innermost ScopedComputeThreads, else the process-wide value.
int ComputeThreads();

// Overrides ComputeThreads() on the constructing thread until destroyed (nests; restores the
// previous override).
class ScopedComputeThreads {
 public:
  explicit ScopedComputeThreads(int threads);
  ~ScopedComputeThreads();
  ScopedComputeThreads(const ScopedComputeThreads&) = delete;
  ScopedComputeThreads& operator=(const ScopedComputeThreads&) = delete;

 private:
  int previous_;
};

// Calls fn(begin, end) on disjoint ranges covering [0, n), on up to ComputeThreads() threads
// (the calling thread takes the first range). Runs inline when n < min_per_thread * 2. fn must
// not throw.
void ParallelFor(int64_t n, int64_t min_per_thread,
                 const std::function<void(int64_t, int64_t)>& fn);

}  // namespace hypic::cpu
