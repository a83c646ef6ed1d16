// LtGemm: the bf16 projections of the CUDA model backend, y = x w^T as bf16 x bf16 products
// accumulated in fp32 on the tensor cores (cuBLASLt, CUBLAS_COMPUTE_32F; A and B bf16, C and D
// fp32). The caller rounds the activations to bf16 first (F32ToBf16: what the CPU's bf16 path
// rounds, gpu/cpu/gemm.h), so both backends multiply the same bf16 operands and differ only in
// the order of the fp32 sums.
//
// A plan (the matmul descriptor, the three layouts and the algorithm cuBLASLt's heuristic picked)
// is made once per shape and operand alignment and cached; the cache is dropped whole past
// kMaxPlans (the row count varies with the prompt). The workspace (kWorkspaceBytes) is owned and
// used by one matmul at a time, so every call must go on the same stream.
//
// Owned by one device context and used under its lock: not thread-safe. Init and the calls run
// on the caller's current device, the context's.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <map>
#include <tuple>

#include "core/status.h"

namespace hypic::model {

class LtGemm {
 public:
  static constexpr size_t kWorkspaceBytes = size_t{32} << 20;
  static constexpr size_t kMaxPlans = 1024;

  LtGemm() = default;
  LtGemm(const LtGemm&) = delete;
  LtGemm& operator=(const LtGemm&) = delete;
  ~LtGemm();

  Status Init();

  // y[m, n] = x[m, k] w[n, k]^T (+ y when accumulate), row-major with row strides ldx, ldw, ldy;
  // x and w raw bf16 bits, y fp32. Enqueued on `stream`, not synchronised.
  Status Run(cudaStream_t stream, int64_t m, int64_t n, int64_t k, const uint16_t* x, int64_t ldx,
             const uint16_t* w, int64_t ldw, float* y, int64_t ldy, bool accumulate);

 private:
  // (m, n, k, ldx, ldw, ldy, alignment of x, w, y in bytes)
  using Key = std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int, int, int>;
  struct Plan {
    cublasLtMatmulDesc_t desc = nullptr;
    cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
    cublasLtMatmulAlgo_t algo{};
  };
  Status MakePlan(const Key& key, Plan* plan);
  static void Destroy(const Plan& plan);
  void DropPlans();

  cublasLtHandle_t handle_ = nullptr;
  void* workspace_ = nullptr;
  std::map<Key, Plan> plans_;
};

}  // namespace hypic::model
