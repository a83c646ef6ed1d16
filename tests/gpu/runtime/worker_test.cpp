// The WorkerPool: CPU workers share the thread budget; a CUDA pool has one worker per visible
// device, each on its own stream, plus the CPU workers asked for (skipped without a device).
#include "gpu/runtime/worker.h"

#include <doctest/doctest.h>

#include <set>

#include "tests/support/check_ok.h"

namespace hypic::runtime {
namespace {

TEST_CASE("CPU workers split the thread budget and are named by their ordinal") {
  auto pool = WorkerPool::Create(
      PoolOptions{.kind = gpu::BackendKind::kCpu, .cpu_workers = 3, .cpu_threads = 7});
  REQUIRE_OK(pool);
  REQUIRE((*pool)->size() == 3);
  for (size_t i = 0; i < 3; ++i) {
    const WorkerContext& ctx = (*pool)->worker(i).context();
    CHECK(ctx.kind == gpu::BackendKind::kCpu);
    CHECK(ctx.index == static_cast<int>(i));
    CHECK(ctx.compute_threads == 2);  // 7 threads over 3 workers, rounded down
    CHECK(ctx.stream != nullptr);
    CHECK((*pool)->worker(i).name() == "cpu:" + std::to_string(i));
  }
  CHECK((*pool)->cpu_budget() == 2);
}

TEST_CASE("a CUDA pool has one worker per device, each on its own stream, plus CPU workers") {
  auto pool = WorkerPool::Create(
      PoolOptions{.kind = gpu::BackendKind::kCuda, .cpu_workers = 1, .cpu_threads = 1});
  if (pool.status().code() == StatusCode::kUnsupported) {
    MESSAGE("skipped: no CUDA device");
    return;
  }
  REQUIRE_OK(pool);
  const int devices = gpu::FindBackend(gpu::BackendKind::kCuda)->DeviceCount();
  REQUIRE((*pool)->size() == static_cast<size_t>(devices) + 1);
  std::set<const gpu::Stream*> streams;
  for (int d = 0; d < devices; ++d) {
    const WorkerContext& ctx = (*pool)->worker(static_cast<size_t>(d)).context();
    CHECK(ctx.kind == gpu::BackendKind::kCuda);
    CHECK(ctx.device == d);
    CHECK((*pool)->worker(static_cast<size_t>(d)).name() == "cuda:" + std::to_string(d));
    streams.insert(ctx.stream);
  }
  CHECK(streams.size() == static_cast<size_t>(devices));
  const Worker& cpu = (*pool)->worker(static_cast<size_t>(devices));
  CHECK(cpu.context().kind == gpu::BackendKind::kCpu);
  CHECK(cpu.name() == "cpu:0");
  CHECK((*pool)->cpu_budget() == 1);
}

}  // namespace
}  // namespace hypic::runtime
