#include "gpu/runtime/worker.h"

#include <fmt/format.h>
#include <time.h>

#include <algorithm>
#include <atomic>

#include "gpu/cpu/compute_threads.h"

namespace hypic::runtime {

namespace {

// A worker on a device of a local backend, with its own stream.
class LocalWorker final : public Worker {
 public:
  // `ordinal`: the device index for a GPU, the worker's number among the CPU workers.
  LocalWorker(WorkerContext context, std::unique_ptr<gpu::Stream> stream, int ordinal)
      : context_(context),
        stream_(std::move(stream)),
        name_(fmt::format("{}:{}", gpu::BackendKindName(context.kind), ordinal)) {
    context_.stream = stream_.get();
  }

  const WorkerContext& context() const override { return context_; }
  const std::string& name() const override { return name_; }

  Result<EntryPtr> Execute(const PrefillJob& job, Clock::time_point /*deadline*/) override {
    if (!job.compute) return Internal("prefill job without a compute function");
    Result<EntryPtr> entry = job.compute(context_);
    // The entry must be complete when it leaves the worker: queued device work included.
    Status done = entry.ok() ? stream_->Synchronize() : entry.status();
    if (!done.ok()) {
      // A device error may be the job's alone (an allocation that did not fit) or the device's
      // (a sticky error): only the second takes the worker out of the pool.
      if (done.code() == StatusCode::kDeviceError) {
        device_errors_.fetch_add(1, std::memory_order_relaxed);
        Status device = context_.backend->CheckDevice(context_.device);
        if (!device.ok()) {
          healthy_.store(false, std::memory_order_relaxed);
          return done.WithContext(fmt::format("{} lost: {}", name_, device.ToString()));
        }
      }
      return done;
    }
    if (*entry == nullptr) return Internal("prefill job returned no entry");
    return entry;
  }

  bool healthy() const override { return healthy_.load(std::memory_order_relaxed); }
  uint64_t device_errors() const override { return device_errors_.load(std::memory_order_relaxed); }

 private:
  WorkerContext context_;
  std::unique_ptr<gpu::Stream> stream_;
  std::string name_;
  std::atomic<bool> healthy_{true};
  std::atomic<uint64_t> device_errors_{0};
};

}  // namespace

double ThreadCpuSeconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

WorkerPool::WorkerPool(std::vector<std::unique_ptr<Worker>> workers)
    : workers_(std::move(workers)) {
  for (const auto& w : workers_) {
    if (w->context().kind == gpu::BackendKind::kCpu) cpu_budget_ = w->context().compute_threads;
  }
}

Result<std::unique_ptr<WorkerPool>> WorkerPool::Create(
    const PoolOptions& options, std::vector<std::unique_ptr<Worker>> remote) {
  std::vector<std::unique_ptr<Worker>> workers;
  int cpu_workers = options.cpu_workers > 0 ? options.cpu_workers : cpu::UsableCores();
  if (options.kind == gpu::BackendKind::kCuda) {
    gpu::Backend* cuda = gpu::FindBackend(gpu::BackendKind::kCuda);
    if (cuda == nullptr || cuda->DeviceCount() == 0) {
      return Unsupported("worker pool: no CUDA device");
    }
    std::vector<int> devices = options.cuda_devices;
    for (int d = 0; devices.empty() && d < cuda->DeviceCount(); ++d) devices.push_back(d);
    for (int d : devices) {
      if (d < 0 || d >= cuda->DeviceCount()) {
        return NotFound(
            fmt::format("worker pool: no CUDA device {} ({} visible)", d, cuda->DeviceCount()));
      }
    }
    for (int d : devices) {
      HYPIC_ASSIGN_OR_RETURN(std::unique_ptr<gpu::Stream> stream, cuda->CreateStream(d));
      WorkerContext ctx{
          static_cast<int>(workers.size()), gpu::BackendKind::kCuda, d, cuda, nullptr, 1};
      workers.push_back(std::make_unique<LocalWorker>(ctx, std::move(stream), d));
    }
    cpu_workers = std::max(0, options.cpu_workers);
  }
  if (cpu_workers > 0) {
    const int threads = options.cpu_threads > 0 ? options.cpu_threads : cpu::UsableCores();
    const int budget = std::max(1, threads / cpu_workers);
    gpu::Backend& cpu = gpu::CpuBackend();
    for (int i = 0; i < cpu_workers; ++i) {
      HYPIC_ASSIGN_OR_RETURN(std::unique_ptr<gpu::Stream> stream, cpu.CreateStream(0));
      WorkerContext ctx{
          static_cast<int>(workers.size()), gpu::BackendKind::kCpu, 0, &cpu, nullptr, budget};
      workers.push_back(std::make_unique<LocalWorker>(ctx, std::move(stream), i));
    }
  }
  for (auto& w : remote) workers.push_back(std::move(w));
  return std::make_unique<WorkerPool>(std::move(workers));
}

}  // namespace hypic::runtime
