// The CPU compute-thread budget and the fork-join loop every CPU kernel splits its work with.
//
// A budget is per calling thread: ComputeThreads() is the thread's innermost
// ScopedComputeThreads, else the process-wide SetComputeThreads value (default: UsableCores()),
// never more than OpenMP's thread limit (OMP_THREAD_LIMIT). Both ParallelFor and the GEMMs
// (gemm.h, oneDNN on OpenMP, which honours a per-thread thread count) read it at each call, so
// a runtime worker with a 1-thread budget runs its whole pass on its own thread while another
// worker runs beside it with its own.
//
// ParallelFor runs on OpenMP, the same thread teams oneDNN uses, so a pass alternating GEMMs
// and elementwise loops reuses one set of threads instead of starting new ones. Inside a
// ParallelFor range the budget is 1: nested loops and GEMMs run on the range's thread.
//
// Inside a ParallelFor range, denormal floats are flushed to zero (x86 MXCSR FTZ and DAZ; the
// caller's mode is restored when the range ends). Decaying chains -- the transition T_C, a
// state under strong decay, their compose products -- walk down through the subnormal range,
// where Intel cores take a microcode assist on every operation: the T chain of a 1,024-token
// GDN segment ran 3x slower than the whole forward on a Xeon (docs/benchmarks-history.md).
// A value below 2^-126 (1.2e-38) has no effect on any figure hypic serves, so the results
// change by less than that absolute amount, identically on every thread.
//
// Thread-safety: all functions may be called from any thread. SetComputeThreads is meant for
// startup and benchmarks; a ScopedComputeThreads is not movable and must be destroyed on the
// thread that made it.
#pragma once

#include <cstdint>
#include <functional>

namespace hypic::cpu {

// The cores this process may run on: its CPU affinity mask (taskset, a container's cpuset),
// else the hardware threads. The default budget, and the default worker and io-thread counts,
// so that a daemon pinned to one core does not run two compute threads on it.
int UsableCores();

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
// (the calling thread takes the first range), with denormals flushed (see above). Runs inline
// when n < min_per_thread * 2. fn must not throw.
void ParallelFor(int64_t n, int64_t min_per_thread,
                 const std::function<void(int64_t, int64_t)>& fn);

// Sets FTZ and DAZ on the constructing thread until destroyed, then restores its previous
// floating-point control word. ParallelFor holds one per range; a kernel that runs outside
// ParallelFor and walks a decaying chain can hold its own. A no-op off x86.
class ScopedFlushDenormals {
 public:
  ScopedFlushDenormals();
  ~ScopedFlushDenormals();
  ScopedFlushDenormals(const ScopedFlushDenormals&) = delete;
  ScopedFlushDenormals& operator=(const ScopedFlushDenormals&) = delete;

 private:
  unsigned previous_;
};

}  // namespace hypic::cpu
