// CUDA kernels of the linear-attention operators (gpu/linear/linear_cuda.h) and the dispatch of
// CudaForward:
//   - scalar and absent decays (linear, retnet, mamba2, deltanet, gdn) run the chunked WY/UT
//     forward of chunked_forward.cu whenever CudaChunkSize allows (dk, dv up to 128 and more,
//     as shared memory permits);
//   - diagonal decays (gla, kda), delta-family dk below 16 and oversized tiles run the per-token
//     recurrence here, with linear_math.h's ColumnStep:
//       ForwardColumnsKernel  block (head, column tile); thread = one column of the running
//                             state, of S(C|0) or of the dense T_C; k, q and the diagonal decay
//                             of each token are staged in shared memory.
//   - both take the log-form T_C from LogSumKernel (thread = one (head, row): sum of g).
// Composition: LogApplyKernel (thread = one state element: S <- e^{t} S + S_zero) for the log
// forms, cuBLAS for the dense one (S <- T S + S_zero as a strided-batched SGEMM over heads).
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <string>
#include <utility>

#include "gpu/cuda/cuda_check.cuh"
#include "gpu/cuda/linear/chunked_forward.cuh"
#include "gpu/cuda/linear/device_array.cuh"
#include "gpu/linear/linear_cuda.h"
#include "gpu/linear/linear_internal.h"
#include "gpu/linear/linear_math.h"

namespace hypic::linear {

namespace {

constexpr int kThreads = 128;

struct ForwardParams {
  Inputs in;
  int64_t tokens;
  int H, HV, dk, dv;
  DecayKind kind;
  bool delta;
  const float* initial;  // [HV, dk, dv] or nullptr
  float* o;              // [T, HV, dv] or nullptr
  float* state;          // [HV, dk, dv] running state (always present)
  float* zero;           // [HV, dk, dv] or nullptr: a separate zero-init chain
  float* dense_t;        // [HV, dk, dk] or nullptr
};

// Columns of head h: [0, dv) running state, then [dv, 2dv) the zero chain when present, then dk
// columns of T when present.
__global__ void ForwardColumnsKernel(ForwardParams p) {
  extern __shared__ float smem[];
  float* sk = smem;
  float* sq = smem + p.dk;
  float* sdecay = smem + 2 * p.dk;
  const int h = blockIdx.x;
  const int kh = h / (p.HV / p.H);
  const int zero_cols = p.zero != nullptr ? p.dv : 0;
  const int t_cols = p.dense_t != nullptr ? p.dk : 0;
  const int col = blockIdx.y * blockDim.x + threadIdx.x;
  const int ncols = p.dv + zero_cols + t_cols;

  float* column = nullptr;
  int64_t stride = p.dv;
  int role = -1;  // 0 running state, 1 zero chain, 2 transition
  int j = 0;
  if (col < p.dv) {
    role = 0;
    j = col;
    column = p.state + static_cast<int64_t>(h) * p.dk * p.dv + j;
  } else if (col < p.dv + zero_cols) {
    role = 1;
    j = col - p.dv;
    column = p.zero + static_cast<int64_t>(h) * p.dk * p.dv + j;
  } else if (col < ncols) {
    role = 2;
    j = col - p.dv - zero_cols;
    column = p.dense_t + static_cast<int64_t>(h) * p.dk * p.dk + j;
    stride = p.dk;
  }
  if (column != nullptr) {
    for (int d = 0; d < p.dk; ++d) {
      float x = 0.0f;
      if (role == 0 && p.initial != nullptr) {
        x = p.initial[(static_cast<int64_t>(h) * p.dk + d) * p.dv + j];
      } else if (role == 2) {
        x = d == j ? 1.0f : 0.0f;
      }
      column[d * stride] = x;
    }
  }
  for (int64_t t = 0; t < p.tokens; ++t) {
    const int64_t krow = (t * p.H + kh) * p.dk;
    for (int d = threadIdx.x; d < p.dk; d += blockDim.x) {
      sk[d] = p.in.k[krow + d];
      sq[d] = p.in.q[krow + d];
      if (p.kind == DecayKind::kDiag) sdecay[d] = expf(p.in.g[(t * p.HV + h) * p.dk + d]);
    }
    __syncthreads();
    if (column != nullptr) {
      const float scalar_decay = p.kind == DecayKind::kScalar ? expf(p.in.g[t * p.HV + h]) : 1.0f;
      const float beta = p.delta ? p.in.beta[t * p.HV + h] : 0.0f;
      const float v = role == 2 ? 0.0f : p.in.v[(t * p.HV + h) * p.dv + j];
      const float out = ColumnStep<float>(p.kind, p.delta, p.dk, column, stride, sk,
                                          role == 0 ? sq : nullptr, v, beta, sdecay, scalar_decay);
      if (role == 0 && p.o != nullptr) p.o[(t * p.HV + h) * p.dv + j] = out;
    }
    __syncthreads();
  }
}

// transition[h] (scalar) or transition[h, d] (diagonal) = sum over tokens of g.
__global__ void LogSumKernel(const float* g, int64_t tokens, int HV, int per, float* transition) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= HV * per) return;
  double acc = 0.0;
  for (int64_t t = 0; t < tokens; ++t) acc += g[t * HV * per + i];
  transition[i] = static_cast<float>(acc);
}

__global__ void LogApplyKernel(TransitionForm form, const float* transition, const float* zero,
                               float* state, int HV, int dk, int dv) {
  const int64_t n = static_cast<int64_t>(HV) * dk * dv;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int head = static_cast<int>(i / (static_cast<int64_t>(dk) * dv));
    const int row = static_cast<int>((i / dv) % dk);
    state[i] = LogTransitionFactor(form, transition, head, row, dk) * state[i] + zero[i];
  }
}

class CublasHandle {
 public:
  CublasHandle() = default;
  CublasHandle(const CublasHandle&) = delete;
  CublasHandle& operator=(const CublasHandle&) = delete;
  ~CublasHandle() {
    if (h_ != nullptr) cublasDestroy(h_);
  }
  Status Create() {
    const cublasStatus_t cs = cublasCreate(&h_);
    if (cs != CUBLAS_STATUS_SUCCESS) {
      h_ = nullptr;
      return DeviceError("cublasCreate failed with status " + std::to_string(cs));
    }
    return Status::Ok();
  }
  cublasHandle_t get() const { return h_; }

 private:
  cublasHandle_t h_ = nullptr;
};

int Blocks(int64_t n) {
  const int64_t b = (n + 255) / 256;
  return static_cast<int>(b < 4096 ? (b < 1 ? 1 : b) : 4096);
}

// The per-token recurrence: o, the final state, S(C|0) (its own chain from zero when there is an
// initial state) and the dense T_C in one ForwardColumnsKernel launch. Enqueued on `s`.
Status PerTokenForward(Variant variant, const Shape& shape, const Inputs& in,
                       const float* initial_state, const Outputs& out, cudaStream_t s) {
  const TransitionForm form = TransitionFormOf(variant);
  const int64_t state_floats = static_cast<int64_t>(shape.value_heads) * shape.dk * shape.dv;
  const bool zero_chain = out.zero_state != nullptr && initial_state != nullptr;
  const bool dense_t = out.transition != nullptr && form == TransitionForm::kDense;

  DeviceArray<float> running;
  float* state = out.final_state;
  if (state == nullptr) {
    HYPIC_RETURN_IF_ERROR(running.Allocate(state_floats, s));
    state = running.get();
  }
  ForwardParams p{in,
                  shape.tokens,
                  shape.key_heads,
                  shape.value_heads,
                  shape.dk,
                  shape.dv,
                  DecayKindOf(variant),
                  HasBeta(variant),
                  initial_state,
                  out.o,
                  state,
                  zero_chain ? out.zero_state : nullptr,
                  dense_t ? out.transition : nullptr};
  const int ncols = shape.dv + (zero_chain ? shape.dv : 0) + (dense_t ? shape.dk : 0);
  const dim3 grid(shape.value_heads, (ncols + kThreads - 1) / kThreads);
  const size_t smem = 3 * static_cast<size_t>(shape.dk) * sizeof(float);
  ForwardColumnsKernel<<<grid, kThreads, smem, s>>>(p);
  HYPIC_CUDA_RETURN_IF_ERROR(cudaGetLastError());
  if (out.zero_state != nullptr && !zero_chain) {
    HYPIC_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(out.zero_state, state, state_floats * sizeof(float),
                                               cudaMemcpyDeviceToDevice, s));
  }
  return Status::Ok();
}

}  // namespace

bool CudaKernelsBuilt() { return true; }

Status CudaForward(Variant variant, const Shape& shape, const Inputs& in,
                   const float* initial_state, const Outputs& out, gpu::Stream& stream) {
  HYPIC_RETURN_IF_ERROR(Validate(variant, shape, in));
  gpu::ScopedDevice on(stream.device());  // work is enqueued on `stream`, on its device
  HYPIC_RETURN_IF_ERROR(on.status());
  auto s = static_cast<cudaStream_t>(stream.native_handle());
  HYPIC_ASSIGN_OR_RETURN(const int chunk, CudaChunkSize(variant, shape, stream.device()));
  const TransitionForm form = TransitionFormOf(variant);
  // The log forms of T_C are sums of g, whichever kernel runs the chains; the chunked forward
  // also reads them for S(C|0) = S_out - e^{sum g} S_init.
  DeviceArray<float> log_scratch;
  float* log_t = nullptr;
  if ((form == TransitionForm::kScalarLog || form == TransitionForm::kDiagLog) &&
      (out.transition != nullptr || (chunk > 0 && out.zero_state != nullptr))) {
    const int per = form == TransitionForm::kDiagLog ? shape.dk : 1;
    log_t = out.transition;
    if (log_t == nullptr) {
      HYPIC_RETURN_IF_ERROR(log_scratch.Allocate(static_cast<size_t>(shape.value_heads) * per, s));
      log_t = log_scratch.get();
    }
    LogSumKernel<<<Blocks(int64_t{shape.value_heads} * per), 256, 0, s>>>(
        in.g, shape.tokens, shape.value_heads, per, log_t);
    HYPIC_CUDA_RETURN_IF_ERROR(cudaGetLastError());
  }
  if (chunk > 0) {
    HYPIC_RETURN_IF_ERROR(
        CudaChunkedForward(variant, shape, in, initial_state, out, log_t, chunk, s));
  } else {
    HYPIC_RETURN_IF_ERROR(PerTokenForward(variant, shape, in, initial_state, out, s));
  }
  HYPIC_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(s));
  return Status::Ok();
}

Status CudaApplySegments(TransitionForm form, const Shape& shape, int count,
                         const float* const* transitions, const float* const* zero_states,
                         float* state, gpu::Stream& stream) {
  HYPIC_RETURN_IF_ERROR(ValidateShape(shape));
  gpu::ScopedDevice on(stream.device());  // work is enqueued on `stream`, on its device
  HYPIC_RETURN_IF_ERROR(on.status());
  auto s = static_cast<cudaStream_t>(stream.native_handle());
  const int HV = shape.value_heads, dk = shape.dk, dv = shape.dv;
  const int64_t state_floats = static_cast<int64_t>(HV) * dk * dv;
  if (form != TransitionForm::kDense) {
    for (int i = 0; i < count; ++i) {
      LogApplyKernel<<<Blocks(state_floats), 256, 0, s>>>(form, transitions[i], zero_states[i],
                                                          state, HV, dk, dv);
      HYPIC_CUDA_RETURN_IF_ERROR(cudaGetLastError());
    }
    HYPIC_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(s));
    return Status::Ok();
  }
  DeviceArray<float> scratch;
  HYPIC_RETURN_IF_ERROR(scratch.Allocate(state_floats, s));
  CublasHandle handle;
  HYPIC_RETURN_IF_ERROR(handle.Create());
  if (const cublasStatus_t cs = cublasSetStream(handle.get(), s); cs != CUBLAS_STATUS_SUCCESS) {
    return DeviceError("cublasSetStream failed with status " + std::to_string(cs));
  }
  float* cur = state;
  float* next = scratch.get();
  const float one = 1.0f;
  for (int i = 0; i < count; ++i) {
    // next = S_zero_i, then next += T_i cur: row-major T S is column-major S^T T^T.
    HYPIC_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(next, zero_states[i], state_floats * sizeof(float),
                                               cudaMemcpyDeviceToDevice, s));
    const cublasStatus_t cs = cublasSgemmStridedBatched(
        handle.get(), CUBLAS_OP_N, CUBLAS_OP_N, dv, dk, dk, &one, cur, dv,
        static_cast<long long>(dk) * dv, transitions[i], dk, static_cast<long long>(dk) * dk, &one,
        next, dv, static_cast<long long>(dk) * dv, HV);
    if (cs != CUBLAS_STATUS_SUCCESS) {
      return DeviceError("cublasSgemmStridedBatched failed with status " + std::to_string(cs));
    }
    std::swap(cur, next);
  }
  if (cur != state) {
    HYPIC_CUDA_RETURN_IF_ERROR(
        cudaMemcpyAsync(state, cur, state_floats * sizeof(float), cudaMemcpyDeviceToDevice, s));
  }
  HYPIC_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(s));
  return Status::Ok();
}

}  // namespace hypic::linear
