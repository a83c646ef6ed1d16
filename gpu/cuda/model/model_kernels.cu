// The CUDA backend of Model::Pass (gpu/model/cuda_forward.h). Projections are cuBLAS sgemm
// (fp32, pedantic math: no TF32) on the context's stream; the GDN recurrence is
// linear::CudaForward; attention is attention_kernels.cuh's (flash-style fp32 tiles for a
// prefill's rows, split-K over the keys with an exact merge for a few seam or decode rows);
// everything else is a small kernel below whose arithmetic is forward_math.h's /
// linear_math.h's, the code the CPU kernels run. Thread mapping of those: RowsKernel-style
// (one thread per row) for the norms and L2 norms, with their double sums in the same order as
// the CPU; elementwise kernels (one thread per element) elsewhere.
// MoE routing happens on the host (router logits are copied back), as the CPU pass does it.
//
// Memory: the context owns the uploaded weights (one allocation) and the grown scratch; a pass
// allocates its uploads (entries, state) stream-ordered (cudaMallocAsync) and frees them when
// its kernels object dies. Errors are sticky (forward_kernels.h).
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <deque>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/dtype.h"
#include "core/thread_annotations.h"
#include "gpu/cuda/cuda_backend.h"
#include "gpu/cuda/cuda_check.cuh"
#include "gpu/cuda/model/attention_kernels.cuh"
#include "gpu/linear/linear_cuda.h"
#include "gpu/linear/linear_math.h"
#include "gpu/model/cuda_forward.h"
#include "gpu/model/forward_math.h"

namespace hypic::model {
namespace {

constexpr int kThreads = 256;

int Blocks(int64_t n) {
  const int64_t b = (n + kThreads - 1) / kThreads;
  return static_cast<int>(b < 1 ? 1 : (b > 65535 ? 65535 : b));
}

// The Status of one CUDA runtime call, naming the statement (for the sticky error).
#define HYPIC_CUDA_STATUS(stmt) ::hypic::gpu::CudaStatus((stmt), #stmt, __FILE__, __LINE__)

#define HYPIC_GRID_STRIDE(i, n)                                                          \
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < (n); \
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)

__global__ void EmbedKernel(const float* table, const uint32_t* tokens, int64_t rows, int64_t dim,
                            float* x) {
  HYPIC_GRID_STRIDE(i, rows * dim) {
    const int64_t r = i / dim, d = i % dim;
    x[i] = table[static_cast<int64_t>(tokens[r]) * dim + d];
  }
}

__global__ void RmsNormKernel(const float* x, int64_t ldx, const float* w, float* y, int64_t ldy,
                              int64_t rows, int64_t dim, float eps) {
  HYPIC_GRID_STRIDE(r, rows) { RmsNormZeroCentredRow(x + r * ldx, w, y + r * ldy, dim, eps); }
}

__global__ void GatedRmsNormKernel(float* o, const float* z, int64_t ldz, const float* w,
                                   int64_t rows, int64_t heads, int64_t dim, float eps) {
  HYPIC_GRID_STRIDE(i, rows * heads) {
    const int64_t r = i / heads, hh = i % heads;
    GatedRmsNormRow(o + i * dim, z + r * ldz + hh * dim, w, dim, eps);
  }
}

__global__ void AddKernel(float* x, const float* y, int64_t n) {
  HYPIC_GRID_STRIDE(i, n) { x[i] += y[i]; }
}

__global__ void FillKernel(float* x, int64_t n, float value) {
  HYPIC_GRID_STRIDE(i, n) { x[i] = value; }
}

// One thread per (row, pair): the pair's angle once, then every head.
__global__ void RopeKernel(float* x, int64_t ld, int64_t rows, int64_t heads, int64_t head_dim,
                           int64_t half, int64_t rotary_dim, double theta, int64_t pos0) {
  HYPIC_GRID_STRIDE(idx, rows * half) {
    const int64_t r = idx / half, i = idx % half;
    float c, s;
    RopeCosSin(pos0 + r, RopeInvFreq(theta, i, rotary_dim), &c, &s);
    for (int64_t h = 0; h < heads; ++h) {
      float* p = x + r * ld + h * head_dim;
      linear::RotatePair(p[i], p[i + half], c, s);
    }
  }
}

// y[t, c] = silu(sum_j w[c, j] * window[t + j][c]); window = [state (K-1 rows) | x], x row t
// at x + t * ldx.
__global__ void ConvKernel(const float* x, int64_t ldx, const float* w, const float* state,
                           float* y, int64_t tokens, int channels, int kernel) {
  HYPIC_GRID_STRIDE(i, tokens * channels) {
    const int64_t t = i / channels;
    const int c = static_cast<int>(i % channels);
    float acc = 0.0f;
    for (int j = 0; j < kernel; ++j) {
      const int64_t p = t + j;
      const float v = p < kernel - 1 ? state[p * channels + c] : x[(p - (kernel - 1)) * ldx + c];
      acc += w[static_cast<int64_t>(c) * kernel + j] * v;
    }
    y[i] = linear::Silu(acc);
  }
}

// The new conv state: window rows [T, T + K - 1) into `next`.
__global__ void ConvTailKernel(const float* x, int64_t ldx, const float* state, float* next,
                               int64_t tokens, int channels, int kernel) {
  HYPIC_GRID_STRIDE(i, static_cast<int64_t>(kernel - 1) * channels) {
    const int64_t p = tokens + i / channels;
    const int c = static_cast<int>(i % channels);
    next[i] = p < kernel - 1 ? state[p * channels + c] : x[(p - (kernel - 1)) * ldx + c];
  }
}

// One thread per (row, q or k head) for the L2 norms, then per (row, value head) for b and a;
// `mixed` [rows, C] is the conv's output.
__global__ void GdnInputsKernel(GdnInputArgs a, const float* mixed) {
  const int64_t nk = a.key_heads, nv = a.value_heads, dk = a.dk;
  const int64_t ch = 2 * nk * dk + nv * a.dv, per_row = 2 * nk + nv;
  HYPIC_GRID_STRIDE(idx, a.rows * per_row) {
    const int64_t r = idx / per_row, i = idx % per_row;
    const float* m = mixed + r * ch;
    if (i < nk) {
      L2NormRow(m + i * dk, a.q + (r * nk + i) * dk, dk, a.q_scale);
    } else if (i < 2 * nk) {
      L2NormRow(m + i * dk, a.k + (r * nk + i - nk) * dk, dk, 1.0f);
    } else {
      const int64_t hh = i - 2 * nk;
      const float* ba = a.ba + r * a.ld_ba;
      a.beta[r * nv + hh] = Sigmoid(ba[hh]);
      a.gate[r * nv + hh] = GdnLogDecay(a.a_log[hh], ba[nv + hh], a.dt_bias[hh]);
    }
  }
}

__global__ void SigmoidGateKernel(float* out, const float* gate, int64_t ldg, int64_t rows,
                                  int64_t cols) {
  HYPIC_GRID_STRIDE(i, rows * cols) { out[i] *= Sigmoid(gate[(i / cols) * ldg + i % cols]); }
}

__global__ void SwiGluKernel(float* gu, int64_t rows, int64_t im) {
  HYPIC_GRID_STRIDE(i, rows * im) {
    float* row = gu + (i / im) * 2 * im;
    const int64_t c = i % im;
    row[c] = SwiGlu(row[c], row[im + c]);
  }
}

__global__ void GatherKernel(const float* src, const int64_t* idx, int64_t n, int64_t cols,
                             float* dst) {
  HYPIC_GRID_STRIDE(i, n * cols) { dst[i] = src[idx[i / cols] * cols + i % cols]; }
}

__global__ void ScatterAddKernel(float* y, const int64_t* idx, const float* weight, int64_t n,
                                 int64_t cols, const float* src) {
  HYPIC_GRID_STRIDE(i, n * cols) {
    const int64_t j = i / cols;
    y[idx[j] * cols + i % cols] += weight[j] * src[i];
  }
}

__global__ void SharedGateKernel(const float* x, const float* w, int64_t rows, int64_t dim,
                                 float* gate) {
  HYPIC_GRID_STRIDE(r, rows) { gate[r] = SharedExpertGate(x + r * dim, w, dim); }
}

__global__ void RowScaleAddKernel(float* y, const float* scale, const float* src, int64_t rows,
                                  int64_t dim) {
  HYPIC_GRID_STRIDE(i, rows * dim) { y[i] += scale[i / dim] * src[i]; }
}

Status CublasStatus(cublasStatus_t cs, const char* what) {
  if (cs == CUBLAS_STATUS_SUCCESS) return Status::Ok();
  return DeviceError(std::string(what) + " failed with cuBLAS status " + std::to_string(cs));
}

// One model on one device: the weights (uploaded once), a stream with its cuBLAS handle, and the
// scratch slots. A pass locks `mu` for its whole life (CudaForwardKernels).
class CudaContext final : public DeviceContext {
 public:
  explicit CudaContext(int device) : device_(device) {}
  ~CudaContext() override {
    cudaSetDevice(device_);
    if (stream_ != nullptr) cudaStreamSynchronize(native());
    for (auto& [p, n] : scratch_) cudaFree(p);
    if (weights_block_ != nullptr) cudaFree(weights_block_);
    if (blas_ != nullptr) cublasDestroy(blas_);
  }

  Status Init(const ModelWeights& w) {
    gpu::Backend* cuda = gpu::CudaBackendIfAvailable();
    if (cuda == nullptr) return NotFound(gpu::CudaUnavailableReason());
    HYPIC_ASSIGN_OR_RETURN(stream_, cuda->CreateStream(device_));
    HYPIC_CUDA_RETURN_IF_ERROR(cudaSetDevice(device_));
    HYPIC_RETURN_IF_ERROR(CublasStatus(cublasCreate(&blas_), "cublasCreate"));
    HYPIC_RETURN_IF_ERROR(CublasStatus(cublasSetStream(blas_, native()), "cublasSetStream"));
    // fp32 all the way: the conformance bound against the CPU needs no TF32 tensor-op math.
    HYPIC_RETURN_IF_ERROR(
        CublasStatus(cublasSetMathMode(blas_, CUBLAS_PEDANTIC_MATH), "cublasSetMathMode"));
    return UploadWeights(w);
  }

  int device() const { return device_; }
  cudaStream_t native() const { return static_cast<cudaStream_t>(stream_->native_handle()); }
  gpu::Stream& stream() { return *stream_; }
  cublasHandle_t blas() const { return blas_; }
  const float* Find(const void* host) const {
    const auto it = weights_.find(host);
    return it == weights_.end() ? nullptr : it->second;
  }

  Mutex mu;
  // Scratch slots (pointer, capacity in floats), grown under `mu`.
  std::vector<std::pair<float*, int64_t>> scratch_ GUARDED_BY(mu);

 private:
  // One host tensor to upload: its data (the lookup key), element type and count, and the
  // GEMM weight it is (which widens itself, packed or not), if one.
  struct HostTensor {
    const void* data;
    DType dtype;
    size_t n;
    const WeightTensor* matrix = nullptr;
  };

  // Every weight goes up as fp32: bf16 GEMM weights are widened on the way (exact), so the
  // kernels and cuBLAS see one precision (bf16 tensor-core GEMMs are issue 15's).
  Status UploadWeights(const ModelWeights& w) {
    std::vector<HostTensor> all;
    auto vec = [&](const std::vector<float>& v) {
      all.push_back({v.data(), DType::kF32, v.size()});
    };
    auto mat = [&](const WeightTensor& t) { all.push_back({t.data(), t.dtype(), t.size(), &t}); };
    auto mlp = [&](const MlpWeights& m) {
      mat(m.gate_up);
      mat(m.down);
    };
    mat(w.embed);
    vec(w.final_norm);
    mat(w.lm_head);
    for (const LayerWeights& l : w.layers) {
      for (const auto* v :
           {&l.input_norm, &l.post_norm, &l.gdn.conv, &l.gdn.a_log, &l.gdn.dt_bias, &l.gdn.norm,
            &l.attention.q_norm, &l.attention.k_norm, &l.moe.router, &l.moe.shared_gate}) {
        vec(*v);
      }
      for (const auto* t :
           {&l.gdn.in_proj, &l.gdn.out_proj, &l.attention.in_proj, &l.attention.o_proj}) {
        mat(*t);
      }
      mlp(l.dense);
      mlp(l.moe.shared);
      for (const MlpWeights& e : l.moe.experts) mlp(e);
    }
    size_t floats = 0;
    for (const HostTensor& t : all) floats += t.n;
    if (floats == 0) return Status::Ok();
    HYPIC_CUDA_RETURN_IF_ERROR(cudaMalloc(&weights_block_, floats * sizeof(float)));
    float* at = weights_block_;
    std::vector<std::vector<float>> widened;  // alive until the copies finish
    for (const HostTensor& t : all) {
      if (t.n == 0 || weights_.count(t.data) != 0) continue;
      const float* src = static_cast<const float*>(t.data);
      if (t.dtype != DType::kF32) {
        widened.emplace_back(t.n);
        if (t.matrix != nullptr) {
          t.matrix->WidenTo(widened.back().data());
        } else {
          ConvertElements(t.dtype, t.data, DType::kF32, widened.back().data(), t.n);
        }
        src = widened.back().data();
      }
      HYPIC_CUDA_RETURN_IF_ERROR(
          cudaMemcpyAsync(at, src, t.n * sizeof(float), cudaMemcpyHostToDevice, native()));
      weights_.emplace(t.data, at);
      at += t.n;
    }
    HYPIC_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(native()));
    return Status::Ok();
  }

  int device_;
  std::unique_ptr<gpu::Stream> stream_;
  cublasHandle_t blas_ = nullptr;
  float* weights_block_ = nullptr;
  std::unordered_map<const void*, const float*> weights_;  // host data -> device copy (fp32)
};

class CudaForwardKernels final : public ForwardKernels {
 public:
  explicit CudaForwardKernels(std::shared_ptr<CudaContext> ctx)
      : ctx_(std::move(ctx)), lock_(&ctx_->mu), s_(ctx_->native()) {
    Record(HYPIC_CUDA_STATUS(cudaSetDevice(ctx_->device())));
  }
  ~CudaForwardKernels() override {
    for (void* p : allocs_) cudaFreeAsync(p, s_);
    cudaStreamSynchronize(s_);
  }

  float* Scratch(int slot, int64_t n) override {
    auto& slots = ctx_->scratch_;
    if (slots.size() <= static_cast<size_t>(slot)) slots.resize(static_cast<size_t>(slot) + 1);
    auto& [p, cap] = slots[static_cast<size_t>(slot)];
    if (cap < n && ok()) {
      if (p != nullptr) cudaFreeAsync(p, s_);
      p = nullptr;
      cap = 0;
      if (Record(
              HYPIC_CUDA_STATUS(cudaMallocAsync(&p, static_cast<size_t>(n) * sizeof(float), s_)))) {
        cap = n;
      }
    }
    return p;
  }

  const float* Weight(const std::vector<float>& host) override {
    return Uploaded(host.data(), host.empty());
  }
  DeviceWeight Weight(const WeightTensor& host) override {
    return Uploaded(host.data(), host.empty());
  }

  const float* Input(const float* host, int64_t n) override {
    float* d = Alloc<float>(n);
    if (d != nullptr) {
      Record(
          HYPIC_CUDA_STATUS(cudaMemcpyAsync(d, host, Bytes<float>(n), cudaMemcpyHostToDevice, s_)));
    }
    return d;
  }

  float* Mirror(float* host, int64_t n, bool read) override {
    float* d = read ? const_cast<float*>(Input(host, n)) : Alloc<float>(n);
    if (d != nullptr) mirrors_.push_back({host, d, n});
    return d;
  }

  const float* ToHost(const float* data, int64_t n, std::vector<float>* staging) override {
    staging->assign(static_cast<size_t>(n), 0.0f);
    if (ok() && Record(HYPIC_CUDA_STATUS(cudaMemcpyAsync(staging->data(), data, Bytes<float>(n),
                                                         cudaMemcpyDeviceToHost, s_)))) {
      Record(HYPIC_CUDA_STATUS(cudaStreamSynchronize(s_)));
    }
    return staging->data();
  }

  Status Finish() override {
    for (const MirrorEntry& m : mirrors_) {
      if (!ok()) break;
      Record(HYPIC_CUDA_STATUS(
          cudaMemcpyAsync(m.host, m.device, Bytes<float>(m.n), cudaMemcpyDeviceToHost, s_)));
    }
    mirrors_.clear();
    Record(HYPIC_CUDA_STATUS(cudaStreamSynchronize(s_)));
    keep_.clear();
    return status_;
  }

  Status status() const override { return status_; }

  void Embed(DeviceWeight table, std::span<const uint32_t> tokens, int64_t dim, float* x) override {
    const uint32_t* d = Upload(tokens.data(), static_cast<int64_t>(tokens.size()));
    const auto rows = static_cast<int64_t>(tokens.size());
    if (ok() && Fp32(table)) {
      Launch(EmbedKernel, rows * dim, static_cast<const float*>(table.data), d, rows, dim, x);
    }
  }

  void Gemm(int64_t m, int64_t n, int64_t k, const float* x, int64_t ldx, DeviceWeight weight,
            int64_t ldw, float* y, int64_t ldy, bool accumulate) override {
    if (!ok() || m <= 0 || n <= 0 || !Fp32(weight)) return;
    const auto* w = static_cast<const float*>(weight.data);
    // Row-major y = x w^T is column-major y^T = w x^T: A = w (k x n, transposed), B = x.
    const float alpha = 1.0f, beta = accumulate ? 1.0f : 0.0f;
    Record(CublasStatus(cublasSgemm(ctx_->blas(), CUBLAS_OP_T, CUBLAS_OP_N, Int(n), Int(m), Int(k),
                                    &alpha, w, Int(ldw), x, Int(ldx), &beta, y, Int(ldy)),
                        "cublasSgemm"));
  }

  void RmsNorm(const float* x, int64_t ldx, const float* w, float* y, int64_t ldy, int64_t rows,
               int64_t dim, float eps) override {
    if (ok()) Launch(RmsNormKernel, rows, x, ldx, w, y, ldy, rows, dim, eps);
  }

  void GatedRmsNorm(float* o, const float* z, int64_t ldz, const float* w, int64_t rows,
                    int64_t heads, int64_t dim, float eps) override {
    if (ok()) Launch(GatedRmsNormKernel, rows * heads, o, z, ldz, w, rows, heads, dim, eps);
  }

  void Add(float* x, const float* y, int64_t n) override {
    if (ok()) Launch(AddKernel, n, x, y, n);
  }

  void Fill(float* x, int64_t n, float value) override {
    if (ok()) Launch(FillKernel, n, x, n, value);
  }

  void Copy2D(float* dst, int64_t ldd, const float* src, int64_t lds, int64_t rows,
              int64_t cols) override {
    if (!ok() || rows <= 0 || cols <= 0) return;
    Record(HYPIC_CUDA_STATUS(cudaMemcpy2DAsync(dst, Bytes<float>(ldd), src, Bytes<float>(lds),
                                               Bytes<float>(cols), static_cast<size_t>(rows),
                                               cudaMemcpyDeviceToDevice, s_)));
  }

  void Rope(float* x, int64_t ld, int64_t rows, int64_t heads, int64_t head_dim, int64_t rotary_dim,
            double theta, int64_t pos0) override {
    const int64_t half = rotary_dim / 2;
    if (ok() && half > 0) {
      Launch(RopeKernel, rows * half, x, ld, rows, heads, head_dim, half, rotary_dim, theta, pos0);
    }
  }

  void GdnConvInputs(const GdnInputArgs& a) override {
    const int64_t vw = a.value_heads * a.dv, ch = 2 * a.key_heads * a.dk + vw;
    const int C = static_cast<int>(ch), K = a.conv_kernel;
    if (!ok() || a.rows <= 0 || K <= 0) return;
    float* mixed = Alloc<float>(a.rows * ch);
    if (!ok()) return;
    Launch(ConvKernel, a.rows * ch, a.x, a.ldx, a.conv_weight, a.conv_state, mixed, a.rows, C, K);
    if (K > 1) {
      const int64_t tail = int64_t{K - 1} * C;
      float* next = Alloc<float>(tail);
      if (!ok()) return;
      Launch(ConvTailKernel, tail, a.x, a.ldx, a.conv_state, next, a.rows, C, K);
      Copy2D(a.conv_state, tail, next, tail, 1, tail);
    }
    Launch(GdnInputsKernel, a.rows * (2 * a.key_heads + a.value_heads), a,
           static_cast<const float*>(mixed));
    Copy2D(a.v, vw, mixed + 2 * a.key_heads * a.dk, ch, a.rows, vw);
  }

  void LinearForward(linear::Variant variant, const linear::Shape& shape, const linear::Inputs& in,
                     const float* initial, const linear::Outputs& out) override {
    if (ok()) Record(linear::CudaForward(variant, shape, in, initial, out, ctx_->stream()));
  }

  void JumpState(const linear::Shape& shape, const float* transition, const float* zero_state,
                 float* state) override {
    const int64_t dk = shape.dk, dv = shape.dv, floats = shape.value_heads * dk * dv;
    if (!ok()) return;
    if (transition == nullptr) {
      Add(state, zero_state, floats);
      return;
    }
    // next = S0 + T state per head (row-major T S is column-major S^T T^T), then state = next.
    float* next = Alloc<float>(floats);
    Copy2D(next, floats, zero_state, floats, 1, floats);
    if (!ok()) return;
    const float one = 1.0f;
    Record(CublasStatus(
        cublasSgemmStridedBatched(ctx_->blas(), CUBLAS_OP_N, CUBLAS_OP_N, Int(dv), Int(dk), Int(dk),
                                  &one, state, Int(dv), dk * dv, transition, Int(dk), dk * dk, &one,
                                  next, Int(dv), dk * dv, shape.value_heads),
        "cublasSgemmStridedBatched"));
    Copy2D(state, floats, next, floats, 1, floats);
  }

  void Attention(const AttentionShape& shape, const float* q, const float* k, const float* v,
                 float* out, std::span<const int64_t> positions) override {
    const auto rows = static_cast<int64_t>(positions.size());
    if (!ok() || rows <= 0) return;
    if (shape.head_dim > kCudaAttentionMaxHeadDim) {
      Record(Unsupported("CUDA attention supports head_dim up to " +
                         std::to_string(kCudaAttentionMaxHeadDim)));
      return;
    }
    const CudaAttentionPlan plan = PlanCudaAttention(shape, rows, positions.back() + 1);
    const int64_t* d = Upload(positions.data(), rows);
    float* workspace = Alloc<float>(plan.WorkspaceFloats());  // none on the prefill path
    if (ok()) Record(LaunchCudaAttention(plan, q, k, v, out, d, workspace, s_));
  }

  void SigmoidGate(float* out, const float* gate, int64_t ldg, int64_t rows,
                   int64_t cols) override {
    if (ok()) Launch(SigmoidGateKernel, rows * cols, out, gate, ldg, rows, cols);
  }

  void SwiGlu(float* gu, int64_t rows, int64_t im) override {
    if (ok()) Launch(SwiGluKernel, rows * im, gu, rows, im);
  }

  // One expert after another on the stream (grouped GEMMs are issue 15's).
  void RoutedExperts(const float* x, std::span<const ExpertWork> experts, int64_t hidden,
                     float* y) override {
    for (const ExpertWork& w : experts) {
      const auto n = static_cast<int64_t>(w.rows.size());
      const int64_t im = w.intermediate;
      float* gathered = Alloc<float>(n * hidden);
      float* gate_up = Alloc<float>(n * 2 * im);
      float* out = Alloc<float>(n * hidden);
      const int64_t* rows = Upload(w.rows.data(), n);
      const float* weights = Upload(w.weights.data(), n);
      if (!ok()) return;
      Launch(GatherKernel, n * hidden, x, rows, n, hidden, gathered);
      Gemm(n, 2 * im, hidden, gathered, hidden, w.gate_up, hidden, gate_up, 2 * im, false);
      SwiGlu(gate_up, n, im);
      Gemm(n, hidden, im, gate_up, 2 * im, w.down, im, out, hidden, false);
      if (ok()) Launch(ScatterAddKernel, n * hidden, y, rows, weights, n, hidden, out);
    }
  }

  void SharedExpertAdd(const float* x, const float* gate_w, const float* out, float* y,
                       int64_t rows, int64_t dim) override {
    float* gate = Alloc<float>(rows);
    if (!ok()) return;
    Launch(SharedGateKernel, rows, x, gate_w, rows, dim, gate);
    Launch(RowScaleAddKernel, rows * dim, y, gate, out, rows, dim);
  }

 private:
  struct MirrorEntry {
    float* host;
    float* device;
    int64_t n;
  };

  bool ok() const { return status_.ok(); }
  // The device copy of a host weight (uploaded as fp32 by the context).
  const float* Uploaded(const void* host, bool empty) {
    if (empty) return nullptr;
    const float* d = ctx_->Find(host);
    if (d == nullptr) Record(Internal("a weight the device context did not upload"));
    return d;
  }
  bool Fp32(DeviceWeight w) {
    return w.dtype == DType::kF32 || Record(Internal("a non-fp32 weight on the CUDA backend"));
  }
  bool Record(Status s) {
    // (void): nvcc counts the assignment's Status& result as a discarded [[nodiscard]] value.
    if (status_.ok() && !s.ok()) static_cast<void>(status_ = std::move(s));
    return status_.ok();
  }
  template <typename T>
  static size_t Bytes(int64_t n) {
    return static_cast<size_t>(n) * sizeof(T);
  }
  static int Int(int64_t v) { return static_cast<int>(v); }

  template <typename T>
  T* Alloc(int64_t n) {
    if (!ok() || n <= 0) return nullptr;
    void* p = nullptr;
    if (!Record(HYPIC_CUDA_STATUS(cudaMallocAsync(&p, Bytes<T>(n), s_)))) return nullptr;
    allocs_.push_back(p);
    return static_cast<T*>(p);
  }

  // A device copy of small host data; the host bytes are kept until Finish because a copy from
  // pageable memory may still read them after cudaMemcpyAsync returns.
  template <typename T>
  const T* Upload(const T* host, int64_t n) {
    T* d = Alloc<T>(n);
    if (d == nullptr) return nullptr;
    const auto* bytes = reinterpret_cast<const char*>(host);
    keep_.emplace_back(bytes, bytes + Bytes<T>(n));
    Record(HYPIC_CUDA_STATUS(
        cudaMemcpyAsync(d, keep_.back().data(), Bytes<T>(n), cudaMemcpyHostToDevice, s_)));
    return d;
  }

  template <typename... KArgs, typename... Args>
  void Launch(void (*kernel)(KArgs...), int64_t threads, Args&&... args) {
    kernel<<<Blocks(threads), kThreads, 0, s_>>>(std::forward<Args>(args)...);
    Record(HYPIC_CUDA_STATUS(cudaGetLastError()));
  }

  std::shared_ptr<CudaContext> ctx_;
  MutexLock lock_;  // ctx_->mu, for the kernels object's whole life
  cudaStream_t s_;
  Status status_;
  std::vector<void*> allocs_;
  std::vector<MirrorEntry> mirrors_;
  std::deque<std::vector<char>> keep_;
};

}  // namespace

bool CudaModelKernelsBuilt() { return true; }

Result<std::shared_ptr<DeviceContext>> CreateCudaContext(const ModelWeights& weights, int device) {
  auto ctx = std::make_shared<CudaContext>(device);
  HYPIC_RETURN_IF_ERROR(ctx->Init(weights));
  return std::shared_ptr<DeviceContext>(std::move(ctx));
}

Result<std::unique_ptr<ForwardKernels>> CreateCudaForwardKernels(
    std::shared_ptr<DeviceContext> context) {
  auto ctx = std::dynamic_pointer_cast<CudaContext>(std::move(context));
  if (ctx == nullptr) return Internal("not a CUDA device context");
  return std::unique_ptr<ForwardKernels>(std::make_unique<CudaForwardKernels>(std::move(ctx)));
}

}  // namespace hypic::model
