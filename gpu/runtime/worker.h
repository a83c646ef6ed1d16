// Workers and the WorkerPool: the compute slots that prefill missing segments.
//
// A Worker executes one PrefillJob at a time on its own device context. Local workers wrap a
// backend device and their own stream; a CUDA GPU is one worker, and in CPU mode the pool has
// N CPU workers. Remote workers (server/peer.h: one connection to a peer hypicd, which runs
// the job's segment with PREFILL and streams the entry back) implement the same interface and
// add their own estimate: the scheduler's cost of a job on worker j is Estimate(job), so LPT
// balances local and remote workers of different speeds together, and a job a remote worker
// fails is re-run elsewhere (miss_scheduler.h).

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
  // Runs `job` and returns its entry (or the job's error). `deadline` is the latest deadline of
  // the requests waiting for it: a remote worker gives up then (a local one runs to the end).
  virtual Result<EntryPtr> Execute(const PrefillJob& job, Clock::time_point deadline) = 0;
  // A remote worker: its failures are re-run elsewhere, its times do not calibrate the local
  // CostModel, and it is not an idle local core for the combine (MissRequest::WaitFor).
  virtual bool remote() const { return false; }
  // False once this local worker's device is lost (a sticky CUDA error after a failed job,
  // gpu::Backend::CheckDevice): the scheduler then runs its jobs elsewhere and gives it no
  // more. It never becomes true again; a restart of the daemon brings the device back.
  // Thread-safe.
  virtual bool healthy() const { return true; }
  // Jobs of this local worker that ended in kDeviceError (lost device or not). Thread-safe.
  virtual uint64_t device_errors() const { return 0; }
  // Estimated seconds of `job` here, given `local_seconds`, the CostModel's estimate for a local
  // worker. +infinity: this worker cannot take it now (a peer that is down, a local-only job).
  virtual double Estimate(const PrefillJob& /*job*/, double local_seconds) const {
    return local_seconds;
  }
};

struct PoolOptions {
  // kCuda: one worker per CUDA device of `cuda_devices` (every visible one when empty), each
  // with its own stream (the model's passes keep a cuBLAS handle per device), plus
  // `cpu_workers` CPU workers when that is > 0; fails with kUnsupported when no device is
  // visible and kNotFound for a listed device that is not. kCpu: `cpu_workers` CPU workers.
  gpu::BackendKind kind = gpu::BackendKind::kCpu;
  // kCpu: 0 = one per hardware thread. kCuda: CPU workers beside the GPUs (0 = none).
  int cpu_workers = 0;
  // Total compute threads shared by the CPU workers; 0 = the hardware threads.
  int cpu_threads = 0;
  // kCuda: the devices to use (the ordinals of runtime::ResolveCudaDevices); empty = all.
  std::vector<int> cuda_devices = {};
};

class WorkerPool {
 public:
  // Builds the local workers, followed by `remote` ones (the peers' connections).
  static Result<std::unique_ptr<WorkerPool>> Create(
      const PoolOptions& options, std::vector<std::unique_ptr<Worker>> remote = {});
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

// The calling thread's CPU time in seconds: what a job costs a dedicated core, independent of
// other load on a shared machine.
double ThreadCpuSeconds();

}  // namespace hypic::runtime
