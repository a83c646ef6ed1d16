// CUDA against CPU for every variant: the device forward (o, final state, S(C|0), T_C) and the
// device composition must match the CPU chunked forward and ApplySegments within 1e-4. Covers
// the chunked device path (linear, retnet, mamba2, deltanet, gdn) and the per-token one (gla,
// kda) at dk/dv 64 and 128 with prompts up to 4096 tokens, null initial states and outputs, the
// in-place update, the S(C|0) fallback and a prompt spanning several scratch windows. Without a
// CUDA device (or in a build without CUDA) each case reports "skipped: no CUDA device" and
// passes.
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

using testing::MakeProblem;
using testing::Problem;
using testing::RelError;

constexpr double kTol = 1e-4;
constexpr Variant kAllVariants[] = {Variant::kLinear, Variant::kRetNet,   Variant::kMamba2,
                                    Variant::kGla,    Variant::kDeltaNet, Variant::kGdn,
                                    Variant::kKda};

// The CUDA backend, or nullptr (with the skip message) when there is no device or no kernels.
gpu::Backend* CudaOrSkip() {
  gpu::Backend* cuda = gpu::FindBackend(gpu::BackendKind::kCuda);
  if (cuda == nullptr || !CudaKernelsBuilt()) {
    MESSAGE("skipped: no CUDA device");
    return nullptr;
  }
  return cuda;
}

// Device copies of host vectors, owned by buffers of the CUDA backend.
class DeviceArena {
 public:
  DeviceArena(gpu::Backend& backend, gpu::Stream& stream) : backend_(backend), stream_(stream) {}

  // nullptr for an empty vector.
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
    if (n == 0) return host;
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

  Inputs UploadInputs(const Problem& p) {
    return Inputs{Upload(p.q), Upload(p.k), Upload(p.v), Upload(p.g), Upload(p.beta)};
  }

 private:
  gpu::Backend& backend_;
  gpu::Stream& stream_;
  std::vector<std::unique_ptr<gpu::Buffer>> buffers_;
};

// Which outputs a forward is asked for; the others are nullptr.
struct Wanted {
  bool o = true, final_state = true, zero_state = true, transition = true;
};

struct HostOutputs {
  std::vector<float> o, final_state, zero_state, transition;
};

HostOutputs Allocated(const Problem& p, const Wanted& want) {
  const Shape& s = p.shape;
  HostOutputs h;
  if (want.o) h.o.assign(s.tokens * s.value_heads * s.dv, 0.0f);
  if (want.final_state) h.final_state.assign(p.state_floats(), 0.0f);
  if (want.zero_state) h.zero_state.assign(p.state_floats(), 0.0f);
  if (want.transition) h.transition.assign(TransitionFloats(TransitionFormOf(p.variant), s), 0.0f);
  return h;
}

float* DataOrNull(std::vector<float>& v) { return v.empty() ? nullptr : v.data(); }

// Runs the CPU ChunkedForward and CudaForward with the outputs `want` selects and checks each
// against the other. Returns the CPU outputs.
HostOutputs CheckForward(gpu::Backend& cuda, gpu::Stream& stream, const Problem& p,
                         const Wanted& want) {
  HostOutputs cpu = Allocated(p, want);
  const float* init = p.initial.empty() ? nullptr : p.initial.data();
  REQUIRE_OK(ChunkedForward(p.variant, p.shape, p.inputs(), init,
                            Outputs{DataOrNull(cpu.o), DataOrNull(cpu.final_state),
                                    DataOrNull(cpu.zero_state), DataOrNull(cpu.transition)}));
  DeviceArena arena(cuda, stream);
  float* d_o = arena.Zeros(cpu.o.size());
  float* d_fin = arena.Zeros(cpu.final_state.size());
  float* d_zero = arena.Zeros(cpu.zero_state.size());
  float* d_t = arena.Zeros(cpu.transition.size());
  REQUIRE_OK(CudaForward(p.variant, p.shape, arena.UploadInputs(p), arena.Upload(p.initial),
                         Outputs{d_o, d_fin, d_zero, d_t}, stream));
  INFO("variant=", std::string(VariantName(p.variant)), " T=", p.shape.tokens, " dk=", p.shape.dk,
       " dv=", p.shape.dv, " initial=", !p.initial.empty());
  CHECK(RelError(arena.Download(d_o, cpu.o.size()), cpu.o) <= kTol);
  CHECK(RelError(arena.Download(d_fin, cpu.final_state.size()), cpu.final_state) <= kTol);
  CHECK(RelError(arena.Download(d_zero, cpu.zero_state.size()), cpu.zero_state) <= kTol);
  CHECK(RelError(arena.Download(d_t, cpu.transition.size()), cpu.transition) <= kTol);
  return cpu;
}

TEST_CASE("CUDA forward and composition match the CPU for every variant") {
  gpu::Backend* cuda = CudaOrSkip();
  if (cuda == nullptr) return;
  auto stream = cuda->CreateStream(0);
  REQUIRE_OK(stream);
  uint64_t seed = 700;
  for (Variant variant : kAllVariants) {
    for (int64_t tokens : {0, 1, 65, 300}) {
      const Shape shape{tokens, 2, 4, 32, 48};
      const Problem p = MakeProblem(variant, shape, seed++);
      const HostOutputs cpu = CheckForward(*cuda, **stream, p, Wanted{});

      // Composition of the segment onto a state, twice (batched over segments and heads).
      const TransitionForm form = TransitionFormOf(variant);
      DeviceArena arena(*cuda, **stream);
      std::vector<float> cpu_state = p.initial;
      const float* ts[2] = {cpu.transition.data(), cpu.transition.data()};
      const float* zs[2] = {cpu.zero_state.data(), cpu.zero_state.data()};
      ApplySegments(form, shape, 2, ts, zs, cpu_state.data());
      float* d_state = arena.Upload(p.initial);
      float* d_t = arena.Upload(cpu.transition);
      float* d_zero = arena.Upload(cpu.zero_state);
      const float* dts[2] = {d_t, d_t};
      const float* dzs[2] = {d_zero, d_zero};
      REQUIRE_OK(CudaApplySegments(form, shape, 2, dts, dzs, d_state, **stream));
      INFO("variant=", std::string(VariantName(variant)), " T=", tokens);
      CHECK(RelError(arena.Download(d_state, cpu_state.size()), cpu_state) <= kTol);
    }
  }
}

TEST_CASE("CUDA forward matches the CPU on long prompts at dk/dv 64 and 128") {
  gpu::Backend* cuda = CudaOrSkip();
  if (cuda == nullptr) return;
  auto stream = cuda->CreateStream(0);
  REQUIRE_OK(stream);
  uint64_t seed = 800;
  // Log-decays down to -0.01 keep T_C above fp32's underflow over 4096 tokens.
  for (Variant variant : kAllVariants) {
    for (const Shape& dims : {Shape{0, 4, 8, 64, 64}, Shape{0, 2, 4, 128, 128}}) {
      for (int64_t tokens : {1000, 4096}) {
        for (bool with_initial : {true, false}) {
          Shape shape = dims;
          shape.tokens = tokens;
          CheckForward(*cuda, **stream, MakeProblem(variant, shape, seed++, 0.01f, with_initial),
                       Wanted{});
        }
      }
    }
  }
}

TEST_CASE("CUDA forward with null outputs and a null initial state") {
  gpu::Backend* cuda = CudaOrSkip();
  if (cuda == nullptr) return;
  auto stream = cuda->CreateStream(0);
  REQUIRE_OK(stream);
  uint64_t seed = 900;
  const Wanted selections[] = {{true, false, false, false}, {false, true, false, false},
                               {false, false, true, false}, {false, false, false, true},
                               {true, false, true, false},  {false, true, false, true}};
  for (Variant variant :
       {Variant::kLinear, Variant::kRetNet, Variant::kDeltaNet, Variant::kGdn, Variant::kKda}) {
    for (bool with_initial : {true, false}) {
      const Problem p = MakeProblem(variant, Shape{333, 4, 8, 64, 64}, seed++, 0.05f, with_initial);
      for (const Wanted& want : selections) {
        INFO("o=", want.o, " final=", want.final_state, " zero=", want.zero_state,
             " transition=", want.transition);
        CheckForward(*cuda, **stream, p, want);
      }
    }
  }
}

TEST_CASE("CUDA S(C|0) stays exact when the initial state outweighs the segment") {
  // Heads whose S_out - T_C S_init cancels more than it keeps rerun the chain from zero.
  gpu::Backend* cuda = CudaOrSkip();
  if (cuda == nullptr) return;
  auto stream = cuda->CreateStream(0);
  REQUIRE_OK(stream);
  uint64_t seed = 1000;
  for (Variant variant : {Variant::kLinear, Variant::kMamba2, Variant::kDeltaNet, Variant::kGdn}) {
    for (float scale : {1.0f, 100.0f}) {
      for (int64_t tokens : {1, 64, 300}) {
        Problem p = MakeProblem(variant, Shape{tokens, 2, 4, 64, 64}, seed++);
        for (float& x : p.initial) x *= scale;
        INFO("scale=", scale);
        CheckForward(*cuda, **stream, p, Wanted{});
      }
    }
  }
}

TEST_CASE("CUDA forward may update the state in place") {
  gpu::Backend* cuda = CudaOrSkip();
  if (cuda == nullptr) return;
  auto stream = cuda->CreateStream(0);
  REQUIRE_OK(stream);
  for (Variant variant : kAllVariants) {
    const Problem p = MakeProblem(variant, Shape{300, 2, 4, 64, 64}, 1100);
    HostOutputs cpu = Allocated(p, Wanted{false, true, true, false});
    REQUIRE_OK(ChunkedForward(variant, p.shape, p.inputs(), p.initial.data(),
                              Outputs{nullptr, cpu.final_state.data(), cpu.zero_state.data()}));
    DeviceArena arena(*cuda, **stream);
    float* d_state = arena.Upload(p.initial);
    float* d_zero = arena.Zeros(cpu.zero_state.size());
    REQUIRE_OK(CudaForward(variant, p.shape, arena.UploadInputs(p), d_state,
                           Outputs{nullptr, d_state, d_zero, nullptr}, **stream));
    INFO("variant=", std::string(VariantName(variant)));
    CHECK(RelError(arena.Download(d_state, cpu.final_state.size()), cpu.final_state) <= kTol);
    CHECK(RelError(arena.Download(d_zero, cpu.zero_state.size()), cpu.zero_state) <= kTol);
  }
}

TEST_CASE("CUDA forward over more chunks than one scratch window holds") {
  // 64 value heads x 64 chunks of dk = dv = 128 need about 320 MiB of per-chunk scratch, more
  // than the chunked forward's 256 MiB window: the chains carry over between two windows.
  gpu::Backend* cuda = CudaOrSkip();
  if (cuda == nullptr) return;
  auto stream = cuda->CreateStream(0);
  REQUIRE_OK(stream);
  CheckForward(*cuda, **stream,
               MakeProblem(Variant::kGdn, Shape{4096, 16, 64, 128, 128}, 1200, 0.01f), Wanted{});
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
