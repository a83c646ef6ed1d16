#include "gpu/model/forward_kernels.h"

#include <cassert>
#include <cstdio>
#include <cstdlib>

#include "gpu/model/cpu_kernels.h"
#include "gpu/model/cuda_forward.h"

namespace hypic::model {

const uint16_t* ForwardKernels::Bf16Rows(const float*, int64_t, int64_t, int64_t) {
  return nullptr;
}

void ForwardKernels::AddRmsNorm(float* x, const float* y, const float* w, float* xn, int64_t rows,
                                int64_t dim, float eps) {
  Add(x, y, rows * dim);
  RmsNorm(x, dim, w, xn, dim, rows, dim, eps);
}

const uint16_t* ForwardKernels::AddRmsNormBf16(float* x, const float* y, const float* w, float* xn,
                                               int64_t rows, int64_t dim, float eps) {
  AddRmsNorm(x, y, w, xn, rows, dim, eps);
  return Bf16Rows(xn, dim, rows, dim);
}

void ForwardKernels::AttentionSpans(const AttentionShape&, const KvRope&, const float*,
                                    std::span<const KvSpan>, float*, std::span<const int64_t>) {
  // The pass calls it only where AttendsKvSpans(): reaching this is a bug.
  std::fprintf(stderr, "hypic: AttentionSpans on a backend without it\n");
  std::abort();
}

void ForwardKernels::SwiGluMlp(DeviceWeight gate_up, DeviceWeight down, int64_t im, const float* x,
                               const uint16_t* x16, int64_t rows, int64_t hidden, float* gu,
                               float* out) {
  Gemm(rows, 2 * im, hidden, x, hidden, gate_up, hidden, gu, 2 * im, false, x16);
  // The activation overwrites the gate half in place; down reads it with stride 2 im.
  SwiGlu(gu, rows, im);
  Gemm(rows, hidden, im, gu, 2 * im, down, im, out, hidden);
}

void ForwardKernels::GdnConvInputsBlocks(std::span<const GdnInputBlock> blocks) {
  for (const GdnInputBlock& b : blocks) {
    const GdnInputArgs& a = b.args;
    if (b.start != nullptr) {
      const int64_t tail = int64_t{a.conv_kernel - 1} * a.conv_channels();
      Copy2D(a.conv_state, tail, b.start, tail, 1, tail);
    }
    GdnConvInputs(a);
  }
}

void ForwardKernels::LinearSteps(linear::Variant variant, const linear::Shape& shape,
                                 std::span<const LinearStep> steps, float* state) {
  for (const LinearStep& step : steps) {
    linear::Shape s = shape;
    s.tokens = step.tokens;
    if (step.tokens > 0) {
      LinearForward(variant, s, step.in, state, {.o = step.o, .final_state = state});
    } else {
      assert(step.zero_dtype == DType::kF32);  // narrow only where ReadsNarrowZeroStates()
      JumpState(s, step.transition, static_cast<const float*>(step.zero_state), state);
    }
  }
}

Result<std::unique_ptr<ForwardKernels>> CreateForwardKernels(const ComputeDevice& device,
                                                             const ModelWeights& weights,
                                                             DeviceContextCache& cache) {
  if (device.kind == gpu::BackendKind::kCpu) {
    return std::unique_ptr<ForwardKernels>(std::make_unique<CpuForwardKernels>());
  }
  HYPIC_RETURN_IF_ERROR(CheckComputeDevice(device));
  HYPIC_ASSIGN_OR_RETURN(std::shared_ptr<DeviceContext> context, cache.Get(device.index, [&] {
    return CreateCudaContext(weights, device.index, {.allow_tf32 = cache.cuda_tf32()});
  }));
  return CreateCudaForwardKernels(std::move(context));
}

}  // namespace hypic::model
