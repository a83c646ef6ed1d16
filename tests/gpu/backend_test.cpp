// Backend conformance: every registered backend must agree with the CPU backend. Where only
// the CPU is present the CUDA half reports "skipped: no CUDA device" and passes.
#include "gpu/backend.h"

#include <doctest/doctest.h>

#include <cmath>
#include <vector>

#include "tests/support/check_ok.h"
#include "tests/support/seeded_rng.h"

namespace hypic::gpu {
namespace {

std::vector<float> RunAxpy(Backend& b, float alpha, const std::vector<float>& x,
                           const std::vector<float>& y) {
  auto stream = b.CreateStream(0);
  REQUIRE_OK(stream);
  size_t bytes = x.size() * sizeof(float);
  auto xb = b.Allocate(0, bytes);
  auto yb = b.Allocate(0, bytes);
  REQUIRE_OK(xb);
  REQUIRE_OK(yb);
  REQUIRE_OK(b.CopyToBuffer(**xb, 0, x.data(), bytes, **stream));
  REQUIRE_OK(b.CopyToBuffer(**yb, 0, y.data(), bytes, **stream));
  REQUIRE_OK(b.Axpy(alpha, **xb, **yb, x.size(), **stream));
  std::vector<float> out(x.size());
  REQUIRE_OK(b.CopyFromBuffer(out.data(), **yb, 0, bytes, **stream));
  REQUIRE_OK((*stream)->Synchronize());
  return out;
}

TEST_CASE("the CPU backend is always registered first") {
  REQUIRE(!Backends().empty());
  CHECK(Backends().front()->kind() == BackendKind::kCpu);
  auto info = CpuBackend().QueryDevice(0);
  REQUIRE_OK(info);
  CHECK(info->total_memory > 0);
  CHECK(info->multiprocessors > 0);
  CHECK(CpuBackend().QueryDevice(1).status().code() == StatusCode::kNotFound);
}

TEST_CASE("CPU Axpy computes y = a*x + y") {
  std::vector<float> x{1, 2, 3, 4}, y{10, 20, 30, 40};
  auto out = RunAxpy(CpuBackend(), 0.5f, x, y);
  CHECK(out == std::vector<float>{10.5f, 21.0f, 31.5f, 42.0f});
}

TEST_CASE("copies out of range are rejected, not performed") {
  auto& b = CpuBackend();
  auto stream = b.CreateStream(0);
  auto buf = b.Allocate(0, 16);
  REQUIRE_OK(buf);
  char src[32] = {};
  CHECK(b.CopyToBuffer(**buf, 8, src, 16, **stream).code() == StatusCode::kBadRequest);
  CHECK(b.CopyToBuffer(**buf, 17, src, 0, **stream).code() == StatusCode::kBadRequest);
  CHECK(b.Axpy(1.0f, **buf, **buf, 5, **stream).code() == StatusCode::kBadRequest);
}

TEST_CASE("conformance: every backend's Axpy matches the CPU backend") {
  testing::SeededRng rng(7);
  auto x = rng.NormalVector(100003);
  auto y = rng.NormalVector(100003);
  auto ref = RunAxpy(CpuBackend(), -1.25f, x, y);
  if (FindBackend(BackendKind::kCuda) == nullptr) {
    MESSAGE("skipped: no CUDA device");
    return;
  }
  for (Backend* b : Backends()) {
    if (b->kind() == BackendKind::kCpu) continue;
    auto got = RunAxpy(*b, -1.25f, x, y);
    for (size_t i = 0; i < ref.size(); ++i) {
      REQUIRE(std::fabs(got[i] - ref[i]) <= 1e-6f * (1.0f + std::fabs(ref[i])));
    }
  }
}

}  // namespace
}  // namespace hypic::gpu
