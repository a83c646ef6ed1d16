#include <string>
#include <utility>

#include "gpu/cuda/model/gemm_cublaslt.cuh"
#include "gpu/cuda/model/launch.cuh"

namespace hypic::model {
namespace {

#define HYPIC_LT_RETURN_IF_ERROR(stmt) HYPIC_RETURN_IF_ERROR(CublasStatus((stmt), #stmt))

// The largest power of two up to 256 that divides the address (cuBLASLt's alignment classes).
int Alignment(const void* p) {
  const auto a = reinterpret_cast<uintptr_t>(p);
  int align = 256;
  while (align > 1 && a % static_cast<uintptr_t>(align) != 0) align /= 2;
  return align;
}

}  // namespace

LtGemm::~LtGemm() {
  DropPlans();
  if (workspace_ != nullptr) cudaFree(workspace_);
  if (handle_ != nullptr) cublasLtDestroy(handle_);
}

Status LtGemm::Init() {
  HYPIC_LT_RETURN_IF_ERROR(cublasLtCreate(&handle_));
  HYPIC_CUDA_RETURN_IF_ERROR(cudaMalloc(&workspace_, kWorkspaceBytes));
  return Status::Ok();
}

void LtGemm::Destroy(const Plan& p) {
  for (cublasLtMatrixLayout_t layout : {p.a, p.b, p.c}) {
    if (layout != nullptr) cublasLtMatrixLayoutDestroy(layout);
  }
  if (p.desc != nullptr) cublasLtMatmulDescDestroy(p.desc);
}

void LtGemm::DropPlans() {
  for (const auto& [key, p] : plans_) Destroy(p);
  plans_.clear();
}

// Row-major y = x w^T is column-major y^T [n, m] = op(A) B with A = w stored [k, n] (ld ldw) and
// transposed, B = x stored [k, m] (ld ldx).
Status LtGemm::MakePlan(const Key& key, Plan* p) {
  const auto [m, n, k, ldx, ldw, ldy, align_x, align_w, align_y] = key;
  HYPIC_LT_RETURN_IF_ERROR(cublasLtMatmulDescCreate(&p->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
  HYPIC_LT_RETURN_IF_ERROR(
      cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
  HYPIC_LT_RETURN_IF_ERROR(
      cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
  HYPIC_LT_RETURN_IF_ERROR(cublasLtMatrixLayoutCreate(&p->a, CUDA_R_16BF, static_cast<uint64_t>(k),
                                                      static_cast<uint64_t>(n), ldw));
  HYPIC_LT_RETURN_IF_ERROR(cublasLtMatrixLayoutCreate(&p->b, CUDA_R_16BF, static_cast<uint64_t>(k),
                                                      static_cast<uint64_t>(m), ldx));
  HYPIC_LT_RETURN_IF_ERROR(cublasLtMatrixLayoutCreate(&p->c, CUDA_R_32F, static_cast<uint64_t>(n),
                                                      static_cast<uint64_t>(m), ldy));
  cublasLtMatmulPreference_t pref = nullptr;
  HYPIC_LT_RETURN_IF_ERROR(cublasLtMatmulPreferenceCreate(&pref));
  const uint64_t workspace = kWorkspaceBytes;
  const uint32_t aa = static_cast<uint32_t>(align_w), ab = static_cast<uint32_t>(align_x),
                 ac = static_cast<uint32_t>(align_y);
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  cublasStatus_t cs = cublasLtMatmulPreferenceSetAttribute(
      pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace, sizeof workspace);
  for (const auto& [attr, value] : {std::pair{CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &aa},
                                    std::pair{CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &ab},
                                    std::pair{CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &ac},
                                    std::pair{CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &ac}}) {
    if (cs == CUBLAS_STATUS_SUCCESS) {
      cs = cublasLtMatmulPreferenceSetAttribute(pref, attr, value, sizeof(uint32_t));
    }
  }
  if (cs == CUBLAS_STATUS_SUCCESS) {
    cs = cublasLtMatmulAlgoGetHeuristic(handle_, p->desc, p->a, p->b, p->c, p->c, pref, 1, &result,
                                        &found);
  }
  cublasLtMatmulPreferenceDestroy(pref);
  HYPIC_RETURN_IF_ERROR(CublasStatus(cs, "cublasLtMatmulAlgoGetHeuristic"));
  if (found == 0) {
    return Unsupported("cuBLASLt has no bf16 algorithm for a " + std::to_string(m) + "x" +
                       std::to_string(n) + "x" + std::to_string(k) + " product");
  }
  p->algo = result.algo;
  return Status::Ok();
}

Status LtGemm::Run(cudaStream_t stream, int64_t m, int64_t n, int64_t k, const uint16_t* x,
                   int64_t ldx, const uint16_t* w, int64_t ldw, float* y, int64_t ldy,
                   bool accumulate) {
  const Key key{m, n, k, ldx, ldw, ldy, Alignment(x), Alignment(w), Alignment(y)};
  auto it = plans_.find(key);
  if (it == plans_.end()) {
    if (plans_.size() >= kMaxPlans) DropPlans();
    Plan plan;
    const Status made = MakePlan(key, &plan);
    if (!made.ok()) {
      Destroy(plan);
      return made;
    }
    it = plans_.emplace(key, plan).first;
  }
  const Plan& p = it->second;
  const float alpha = 1.0f, beta = accumulate ? 1.0f : 0.0f;
  return CublasStatus(cublasLtMatmul(handle_, p.desc, &alpha, w, p.a, x, p.b, &beta, y, p.c, y, p.c,
                                     &p.algo, workspace_, kWorkspaceBytes, stream),
                      "cublasLtMatmul");
}

}  // namespace hypic::model
