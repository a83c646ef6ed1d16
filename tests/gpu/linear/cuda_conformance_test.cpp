// CUDA against CPU for every variant: the device forward (o, final state, S(C|0), T_C) and the
// device composition must match the CPU chunked forward and ApplySegments. Without a CUDA
// device (or in a build without CUDA) it reports "skipped: no CUDA device" and passes.
#include <doctest/doctest.h>

#include <memory>
#include <string>
#include <vector>

#include "gpu/backend.h"
#include "gpu/linear/linear_attention.h"
#include "gpu/linear/linear_cuda.h"
#include "tests/gpu/linear/linear_reference.h"
#include "tests/support/check_ok.h"

namespace hypic::linear {
namespace {

using testing::RelError;

// Device copies of host vectors, owned by buffers of the CUDA backend.
class DeviceArena {
 public:
  DeviceArena(gpu::Backend& backend, gpu::Stream& stream) : backend_(backend), stream_(stream) {}

  float* Upload(const std::vector<float>& host) {
    if (host.empty()) return nullptr;
    auto buf = backend_.Allocate(stream_.device(), host.size() * sizeof(float));
    REQUIRE_OK(buf);
    REQUIRE_OK(backend_.CopyToBuffer(**buf, 0, host.data(), host.size() * sizeof(float), stream_));
    buffers_.push_back(std::move(*buf));
    return static_cast<float*>(buffers_.back()->data());
  }
  float* Zeros(size_t n) { return Upload(std::vector<float>(n, 0.0f)); }

  std::vector<float> Download(const float* device, size_t n) {
    std::vector<float> host(n);
    for (const auto& b : buffers_) {
      if (b->data() == device) {
        REQUIRE_OK(backend_.CopyFromBuffer(host.data(), *b, 0, n * sizeof(float), stream_));
        REQUIRE_OK(stream_.Synchronize());
        return host;
      }
    }
    FAIL("not an arena buffer");
    return host;
  }

 private:
  gpu::Backend& backend_;
  gpu::Stream& stream_;
  std::vector<std::unique_ptr<gpu::Buffer>> buffers_;
};

TEST_CASE("CUDA forward and composition match the CPU for every variant") {
  gpu::Backend* cuda = gpu::FindBackend(gpu::BackendKind::kCuda);
  if (cuda == nullptr || !CudaKernelsBuilt()) {
    MESSAGE("skipped: no CUDA device");
    return;
  }
  auto stream = cuda->CreateStream(0);
  REQUIRE_OK(stream);
  uint64_t seed = 700;
  for (Variant variant : {Variant::kLinear, Variant::kRetNet, Variant::kMamba2, Variant::kGla,
                          Variant::kDeltaNet, Variant::kGdn, Variant::kKda}) {
    for (int64_t tokens : {0, 1, 65, 300}) {
      const Shape shape{tokens, 2, 4, 32, 48};
      const testing::Problem p = testing::MakeProblem(variant, shape, seed++);
      const TransitionForm form = TransitionFormOf(variant);
      const size_t o_n = tokens * shape.value_heads * shape.dv, s_n = p.state_floats(),
                   t_n = TransitionFloats(form, shape);
      std::vector<float> o(o_n), fin(s_n), zero(s_n), trans(t_n);
      REQUIRE_OK(ChunkedForward(variant, shape, p.inputs(), p.initial.data(),
                                Outputs{o.data(), fin.data(), zero.data(), trans.data()}));

      DeviceArena arena(*cuda, **stream);
      const Inputs din{arena.Upload(p.q), arena.Upload(p.k), arena.Upload(p.v), arena.Upload(p.g),
                       arena.Upload(p.beta)};
      float* d_init = arena.Upload(p.initial);
      float* d_o = arena.Zeros(o_n + 1);
      float* d_fin = arena.Zeros(s_n);
      float* d_zero = arena.Zeros(s_n);
      float* d_t = arena.Zeros(t_n + 1);
      REQUIRE_OK(
          CudaForward(variant, shape, din, d_init, Outputs{d_o, d_fin, d_zero, d_t}, **stream));
      INFO("variant=", std::string(VariantName(variant)), " T=", tokens);
      std::vector<float> got_o = arena.Download(d_o, o_n + 1);
      got_o.pop_back();
      CHECK(RelError(got_o, o) <= 1e-4);
      CHECK(RelError(arena.Download(d_fin, s_n), fin) <= 1e-4);
      CHECK(RelError(arena.Download(d_zero, s_n), zero) <= 1e-4);
      std::vector<float> got_t = arena.Download(d_t, t_n + 1);
      got_t.pop_back();
      CHECK(RelError(got_t, trans) <= 1e-4);

      // Composition of the segment onto a state, twice (batched over segments and heads).
      std::vector<float> cpu_state = p.initial;
      const float* ts[2] = {trans.data(), trans.data()};
      const float* zs[2] = {zero.data(), zero.data()};
      ApplySegments(form, shape, 2, ts, zs, cpu_state.data());
      float* d_state = arena.Upload(p.initial);
      const float* dts[2] = {d_t, d_t};
      const float* dzs[2] = {d_zero, d_zero};
      REQUIRE_OK(CudaApplySegments(form, shape, 2, dts, dzs, d_state, **stream));
      CHECK(RelError(arena.Download(d_state, s_n), cpu_state) <= 1e-4);
    }
  }
}

TEST_CASE("without CUDA kernels the entry points report kUnsupported") {
  if (CudaKernelsBuilt()) return;
  auto stream = gpu::CpuBackend().CreateStream(0);
  REQUIRE_OK(stream);
  const Status st =
      CudaForward(Variant::kGdn, Shape{0, 1, 1, 4, 4}, Inputs{}, nullptr, Outputs{}, **stream);
  CHECK(st.code() == StatusCode::kUnsupported);
}

}  // namespace
}  // namespace hypic::linear
