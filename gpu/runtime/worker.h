// Workers and the WorkerPool: the compute slots that prefill missing segments.
//
// A Worker executes one PrefillJob at a time on its own device context. Local workers wrap a
// backend device and their own stream; a CUDA GPU is one worker, and in CPU mode the pool has
// N CPU workers. The interface is the seam for remote workers (a peer hypicd reached with
// PREFILL over our protocol): such a worker implements Execute by sending the job's segment to
// its peer and parsing the returned entry; nothing above this interface changes.
//
// Compute-thread budget (CPU mode): with N CPU workers on C cores each worker gets
// max(1, C / N) threads, so N concurrent workers use about C cores in total; parallelism comes
// from the number of workers. Each WorkerContext carries its budget, and a job runs under it
// (cpu::ScopedComputeThreads), which bounds the job's GEMMs and row loops alike: the budget is
// per thread (gpu/cpu/compute_threads.h), so nothing process-wide is set.
//
// Thread-safety: a Worker is driven by one thread at a time (the scheduler gives each worker
// its own thread). The pool is immutable after Create and may be read from any thread.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "gpu/backend.h"
#include "gpu/runtime/prefill_job.h"

namespace hypic::runtime {

class Worker {
 public:
  virtual ~Worker() = default;
  virtual const WorkerContext& context() const = 0;
  // A short name for logs and metrics, e.g. "cpu:1" or "cuda:0".
  virtual const std::string& name() const = 0;
  // Runs `job` and returns its entry (or the job's error).
  virtual Result<EntryPtr> Execute(const PrefillJob& job) = 0;
};

struct PoolOptions {
  // kCuda: one worker per visible CUDA device, each with its own stream (the model's passes
  // keep a cuBLAS handle per device), plus `cpu_workers` CPU workers when that is > 0; fails
  // with kUnsupported when no device is visible. kCpu: `cpu_workers` CPU workers.
  gpu::BackendKind kind = gpu::BackendKind::kCpu;
  // kCpu: 0 = one per hardware thread. kCuda: CPU workers beside the GPUs (0 = none).
  int cpu_workers = 0;
  // Total compute threads shared by the CPU workers; 0 = the hardware threads.
  int cpu_threads = 0;
};

class WorkerPool {
 public:
  // Builds the workers.
  static Result<std::unique_ptr<WorkerPool>> Create(const PoolOptions& options);
  // A pool over workers made elsewhere (remote workers, test doubles).
  explicit WorkerPool(std::vector<std::unique_ptr<Worker>> workers);

  size_t size() const { return workers_.size(); }
  // The compute threads of one CPU worker; 0 when the pool has no CPU worker.
  int cpu_budget() const { return cpu_budget_; }
  Worker& worker(size_t i) { return *workers_[i]; }
  const Worker& worker(size_t i) const { return *workers_[i]; }

 private:
  std::vector<std::unique_ptr<Worker>> workers_;
  int cpu_budget_ = 0;
};

// The number of hardware threads (at least 1).
int HardwareThreads();

// The calling thread's CPU time in seconds: what a job costs a dedicated core, independent of
// other load on a shared machine.
double ThreadCpuSeconds();

}  // namespace hypic::runtime
