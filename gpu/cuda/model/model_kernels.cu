// The CUDA backend of Model::Pass (gpu/model/cuda_forward.h). Projections, experts and lm_head
// are bf16 x bf16 -> fp32 tensor-core GEMMs through cuBLASLt (gemm_cublaslt.cuh) for a
// bf16-resident model, the activations rounded to bf16 by a kernel first (F32ToBf16, the CPU's
// rounding), and fp32 cublasGemmEx for an fp32 one (exact fp32 products, or TF32 when the
// context allows it); the GDN recurrence is linear::CudaForward; attention is
// attention_kernels.cuh's; an MoE layer's routing and experts are moe_kernels.cuh's, all on the
// device; everything else is a small kernel below whose arithmetic is forward_math.h's /
// linear_math.h's, the code the CPU kernels run. Thread mapping of those: one thread per row
// for the norms and L2 norms, with their double sums in the same order as the CPU; elementwise
// kernels (one thread per element) elsewhere.
//
// Memory: the context owns the uploaded weights (one allocation), the grown scratch and the
// pinned staging (pinned_staging.cuh) through which every host<->device copy of a pass goes; a
// pass allocates its uploads (entries, state) stream-ordered (cudaMallocAsync) and frees them
// when its kernels object dies. The staging is reset after each stream synchronisation (ToHost,
// Finish), when no copy out of or into it is pending. Errors are sticky (forward_kernels.h).
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstring>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/dtype.h"
#include "core/thread_annotations.h"
#include "gpu/cuda/cuda_backend.h"
#include "gpu/cuda/cuda_check.cuh"
#include "gpu/cuda/model/attention_kernels.cuh"
#include "gpu/cuda/model/gemm_cublaslt.cuh"
#include "gpu/cuda/model/launch.cuh"
#include "gpu/cuda/model/moe_kernels.cuh"
#include "gpu/cuda/model/pinned_staging.cuh"
#include "gpu/linear/linear_cuda.h"
#include "gpu/linear/linear_math.h"
#include "gpu/model/cuda_forward.h"
#include "gpu/model/forward_math.h"

namespace hypic::model {
namespace {

__device__ __forceinline__ float Widen(float v) { return v; }
__device__ __forceinline__ float Widen(uint16_t bf16) { return Bf16ToF32(bf16); }

template <typename T>
__global__ void EmbedKernel(const T* table, const uint32_t* tokens, int64_t rows, int64_t dim,
                            float* x) {
  HYPIC_GRID_STRIDE(i, rows * dim) {
    const int64_t r = i / dim, d = i % dim;
    x[i] = Widen(table[static_cast<int64_t>(tokens[r]) * dim + d]);
  }
}

// dst [rows, cols] = bf16(x), x row r at x + r * ldx: a bf16 GEMM's input.
__global__ void ToBf16Kernel(const float* x, int64_t ldx, int64_t rows, int64_t cols,
                             uint16_t* dst) {
  HYPIC_GRID_STRIDE(i, rows * cols) { dst[i] = F32ToBf16(x[(i / cols) * ldx + i % cols]); }
}

// An entry tensor's bf16 or f16 elements widened to fp32 (core/dtype.h's conversions).
template <bool kBf16>
__global__ void WidenKernel(const uint16_t* x, int64_t n, float* y) {
  HYPIC_GRID_STRIDE(i, n) { y[i] = kBf16 ? Bf16ToF32(x[i]) : F16ToF32(x[i]); }
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

__global__ void SharedGateKernel(const float* x, const float* w, int64_t rows, int64_t dim,
                                 float* gate) {
  HYPIC_GRID_STRIDE(r, rows) { gate[r] = SharedExpertGate(x + r * dim, w, dim); }
}

__global__ void RowScaleAddKernel(float* y, const float* scale, const float* src, int64_t rows,
                                  int64_t dim) {
  HYPIC_GRID_STRIDE(i, rows * dim) { y[i] += scale[i / dim] * src[i]; }
}

// A grown device buffer: (pointer, capacity in bytes).
using DeviceBuffer = std::pair<void*, size_t>;

// One model on one device: the weights (uploaded once), a stream with its cuBLAS and cuBLASLt
// handles, the scratch and the pinned staging. A pass locks `mu` for its whole life
// (CudaForwardKernels), which guards everything a pass touches.
class CudaContext final : public DeviceContext {
 public:
  // The backend's own grown buffers, beside the pass's scratch slots.
  enum Internal { kBf16Input, kMoeWorkspace, kNumInternal };

  CudaContext(int device, const CudaContextOptions& options) : device_(device), options_(options) {}
  ~CudaContext() override {
    gpu::ScopedDevice on(device_);
    if (stream_ != nullptr) cudaStreamSynchronize(native());
    for (auto& [p, n] : scratch_) cudaFree(p);
    for (auto& [p, n] : internal_) cudaFree(p);
    lt_.reset();  // on this device
    staging_.reset();
    if (weights_block_ != nullptr) cudaFree(weights_block_);
    if (blas_ != nullptr) cublasDestroy(blas_);
  }

  Status Init(const ModelWeights& w) {
    gpu::Backend* cuda = gpu::CudaBackendIfAvailable();
    if (cuda == nullptr) return NotFound(gpu::CudaUnavailableReason());
    HYPIC_ASSIGN_OR_RETURN(stream_, cuda->CreateStream(device_));
    gpu::ScopedDevice on(device_);
    HYPIC_RETURN_IF_ERROR(on.status());
    HYPIC_RETURN_IF_ERROR(CublasStatus(cublasCreate(&blas_), "cublasCreate"));
    HYPIC_RETURN_IF_ERROR(CublasStatus(cublasSetStream(blas_, native()), "cublasSetStream"));
    // Every call names its compute type (exact fp32, TF32 or bf16 tensor-core products), so the
    // handle's math mode decides nothing.
    HYPIC_RETURN_IF_ERROR(
        CublasStatus(cublasSetMathMode(blas_, CUBLAS_DEFAULT_MATH), "cublasSetMathMode"));
    HYPIC_RETURN_IF_ERROR(lt_->Init());
    return UploadWeights(w);
  }

  int device() const { return device_; }
  const CudaContextOptions& options() const { return options_; }
  cudaStream_t native() const { return static_cast<cudaStream_t>(stream_->native_handle()); }
  gpu::Stream& stream() { return *stream_; }
  cublasHandle_t blas() const { return blas_; }
  // The device copy of a host weight (keyed by its host data), or a null one.
  DeviceWeight Find(const void* host) const {
    const auto it = weights_.find(host);
    return it == weights_.end() ? DeviceWeight() : it->second;
  }

  Mutex mu;
  std::vector<DeviceBuffer> scratch_ GUARDED_BY(mu);  // the pass's slots
  DeviceBuffer internal_[kNumInternal] GUARDED_BY(mu) = {};
  // Held by pointer so that the destructor frees them on the context's device.
  std::unique_ptr<LtGemm> lt_ GUARDED_BY(mu) = std::make_unique<LtGemm>();
  std::unique_ptr<gpu::PinnedStaging> staging_ GUARDED_BY(mu) =
      std::make_unique<gpu::PinnedStaging>();

 private:
  // One host tensor to upload: its data (the lookup key), element count, and the GEMM weight it
  // is (kept in its resident precision), if one.
  struct HostTensor {
    const void* data;
    size_t n;
    const WeightTensor* matrix = nullptr;
  };
  static size_t DeviceBytes(const HostTensor& t) {
    const DType d = t.matrix != nullptr ? t.matrix->dtype() : DType::kF32;
    return (t.n * DTypeSize(d) + 255) / 256 * 256;  // every tensor 256-byte aligned
  }

  // GEMM weights go up as they are resident: fp32, or bf16 (a packed one unpacked to its plain
  // row-major layout on the way). Everything else is fp32.
  Status UploadWeights(const ModelWeights& w) {
    std::vector<HostTensor> all;
    auto vec = [&](const std::vector<float>& v) { all.push_back({v.data(), v.size()}); };
    auto mat = [&](const WeightTensor& t) { all.push_back({t.data(), t.size(), &t}); };
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
    size_t bytes = 0;
    for (const HostTensor& t : all) bytes += DeviceBytes(t);
    if (bytes == 0) return Status::Ok();
    HYPIC_CUDA_RETURN_IF_ERROR(cudaMalloc(&weights_block_, bytes));
    char* at = static_cast<char*>(weights_block_);
    std::vector<uint16_t> unpacked;  // one packed weight at a time
    for (const HostTensor& t : all) {
      if (t.n == 0 || weights_.count(t.data) != 0) continue;
      const DType dtype = t.matrix != nullptr ? t.matrix->dtype() : DType::kF32;
      const void* src = t.data;
      if (t.matrix != nullptr && t.matrix->packed() != nullptr) {
        // The previous unpacked weight's copy must be done before the buffer is rewritten.
        HYPIC_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(native()));
        unpacked.resize(t.n);
        t.matrix->packed()->Unpack(unpacked.data());
        src = unpacked.data();
      }
      HYPIC_CUDA_RETURN_IF_ERROR(
          cudaMemcpyAsync(at, src, t.n * DTypeSize(dtype), cudaMemcpyHostToDevice, native()));
      weights_.emplace(t.data, DeviceWeight(dtype, at));
      at += DeviceBytes(t);
    }
    HYPIC_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(native()));
    return Status::Ok();
  }

  int device_;
  CudaContextOptions options_;
  std::unique_ptr<gpu::Stream> stream_;
  cublasHandle_t blas_ = nullptr;
  void* weights_block_ = nullptr;
  std::unordered_map<const void*, DeviceWeight> weights_;  // host data -> device copy
};

class CudaForwardKernels final : public ForwardKernels {
 public:
  explicit CudaForwardKernels(std::shared_ptr<CudaContext> ctx)
      : ctx_(std::move(ctx)), lock_(&ctx_->mu), on_(ctx_->device()), s_(ctx_->native()) {
    Record(on_.status());
  }
  ~CudaForwardKernels() override {
    for (void* p : allocs_) cudaFreeAsync(p, s_);
    cudaStreamSynchronize(s_);
    ctx_->staging_->Reset();
  }

  float* Scratch(int slot, int64_t n) override {
    auto& slots = ctx_->scratch_;
    if (slots.size() <= static_cast<size_t>(slot)) slots.resize(static_cast<size_t>(slot) + 1);
    return static_cast<float*>(Grown(slots[static_cast<size_t>(slot)], Bytes<float>(n)));
  }

  const float* Weight(const std::vector<float>& host) override {
    return static_cast<const float*>(Uploaded(host.data(), host.empty()).data);
  }
  DeviceWeight Weight(const WeightTensor& host) override {
    return Uploaded(host.data(), host.empty());
  }

  const float* Input(const float* host, int64_t n) override { return Upload(host, n); }

  const float* WidenInput(DType dtype, const void* data, MemoryKind memory, int64_t n) override {
    if (dtype != DType::kBF16 && dtype != DType::kF16) {
      Record(Internal("WidenInput of " + std::string(DTypeName(dtype)) + " elements"));
      return nullptr;
    }
    const auto* narrow = memory == MemoryKind::kDevice
                             ? static_cast<const uint16_t*>(data)
                             : Upload(static_cast<const uint16_t*>(data), n);
    float* wide = Alloc<float>(n);
    if (narrow == nullptr || wide == nullptr) return nullptr;
    if (dtype == DType::kBF16) {
      Launch(WidenKernel<true>, n, narrow, n, wide);
    } else {
      Launch(WidenKernel<false>, n, narrow, n, wide);
    }
    return wide;
  }

  float* Mirror(float* host, int64_t n, bool read) override {
    float* d = read ? const_cast<float*>(Input(host, n)) : Alloc<float>(n);
    if (d != nullptr) mirrors_.push_back({host, d, n});
    return d;
  }

  const float* ToHost(const float* data, int64_t n, std::vector<float>* staging) override {
    staging->assign(static_cast<size_t>(n), 0.0f);
    auto* pinned = Stage<float>(n);
    if (pinned != nullptr) {
      Record(HYPIC_CUDA_STATUS(
          cudaMemcpyAsync(pinned, data, Bytes<float>(n), cudaMemcpyDeviceToHost, s_)));
    }
    Record(HYPIC_CUDA_STATUS(cudaStreamSynchronize(s_)));  // runs even after an error
    if (ok() && pinned != nullptr) std::memcpy(staging->data(), pinned, Bytes<float>(n));
    ctx_->staging_->Reset();  // nothing is pending on the stream
    return staging->data();
  }

  Status Finish() override {
    std::vector<float*> pinned;
    for (const MirrorEntry& m : mirrors_) {
      float* p = Stage<float>(m.n);
      if (p == nullptr || !Record(HYPIC_CUDA_STATUS(cudaMemcpyAsync(p, m.device, Bytes<float>(m.n),
                                                                    cudaMemcpyDeviceToHost, s_)))) {
        break;
      }
      pinned.push_back(p);
    }
    Record(HYPIC_CUDA_STATUS(cudaStreamSynchronize(s_)));
    for (size_t i = 0; ok() && i < pinned.size(); ++i) {
      std::memcpy(mirrors_[i].host, pinned[i], Bytes<float>(mirrors_[i].n));
    }
    mirrors_.clear();
    ctx_->staging_->Reset();
    return status_;
  }

  Status status() const override { return status_; }

  void Embed(DeviceWeight table, std::span<const uint32_t> tokens, int64_t dim, float* x) override {
    const uint32_t* d = Upload(tokens.data(), static_cast<int64_t>(tokens.size()));
    const auto rows = static_cast<int64_t>(tokens.size());
    if (!ok()) return;
    if (table.dtype == DType::kBF16) {
      Launch(EmbedKernel<uint16_t>, rows * dim, static_cast<const uint16_t*>(table.data), d, rows,
             dim, x);
    } else {
      Launch(EmbedKernel<float>, rows * dim, static_cast<const float*>(table.data), d, rows, dim,
             x);
    }
  }

  void Gemm(int64_t m, int64_t n, int64_t k, const float* x, int64_t ldx, DeviceWeight weight,
            int64_t ldw, float* y, int64_t ldy, bool accumulate,
            const uint16_t* /*x16: Bf16Rows gives none here*/) override {
    if (!ok() || m <= 0 || n <= 0) return;
    if (weight.dtype == DType::kBF16) {
      auto* x16 = static_cast<uint16_t*>(
          Grown(ctx_->internal_[CudaContext::kBf16Input], Bytes<uint16_t>(m * k)));
      if (!ok()) return;
      Launch(ToBf16Kernel, m * k, x, ldx, m, k, x16);
      if (ok()) {
        Record(ctx_->lt_->Run(s_, m, n, k, x16, k, static_cast<const uint16_t*>(weight.data), ldw,
                              y, ldy, accumulate));
      }
      return;
    }
    // Row-major y = x w^T is column-major y^T = w x^T: A = w (k x n, transposed), B = x.
    const float alpha = 1.0f, beta = accumulate ? 1.0f : 0.0f;
    Record(CublasStatus(
        cublasGemmEx(ctx_->blas(), CUBLAS_OP_T, CUBLAS_OP_N, Int(n), Int(m), Int(k), &alpha,
                     weight.data, CUDA_R_32F, Int(ldw), x, CUDA_R_32F, Int(ldx), &beta, y,
                     CUDA_R_32F, Int(ldy), F32Compute(), CUBLAS_GEMM_DEFAULT),
        "cublasGemmEx"));
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
    // The state algebra stays exact fp32, whatever allow_tf32 says.
    const float one = 1.0f;
    Record(CublasStatus(
        cublasGemmStridedBatchedEx(ctx_->blas(), CUBLAS_OP_N, CUBLAS_OP_N, Int(dv), Int(dk),
                                   Int(dk), &one, state, CUDA_R_32F, Int(dv), dk * dv, transition,
                                   CUDA_R_32F, Int(dk), dk * dk, &one, next, CUDA_R_32F, Int(dv),
                                   dk * dv, Int(shape.value_heads), CUBLAS_COMPUTE_32F_PEDANTIC,
                                   CUBLAS_GEMM_DEFAULT),
        "cublasGemmStridedBatchedEx"));
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

  void MoeExperts(const MoeArgs& m) override {
    const auto ne = static_cast<int64_t>(m.experts.size());
    if (!ok() || m.rows <= 0) return;
    if (m.top_k < 1 || m.top_k > kMaxTopK || m.top_k > ne) {
      Record(Unsupported("CUDA MoE routing takes top_k up to " + std::to_string(kMaxTopK)));
      return;
    }
    const DType dtype = m.experts.front().gate_up.dtype;
    std::vector<const void*> weights(static_cast<size_t>(2 * ne));  // gate_up [E] | down [E]
    for (int64_t e = 0; e < ne; ++e) {
      const ExpertWeights& w = m.experts[static_cast<size_t>(e)];
      if (w.gate_up.dtype != dtype || w.down.dtype != dtype) {
        Record(Internal("MoE experts of mixed precision"));
        return;
      }
      weights[static_cast<size_t>(e)] = w.gate_up.data;
      weights[static_cast<size_t>(ne + e)] = w.down.data;
    }
    const void* const* d = Upload(weights.data(), 2 * ne);
    const CudaMoeArgs a{.x = m.x,
                        .logits = m.logits,
                        .y = m.y,
                        .rows = m.rows,
                        .hidden = m.hidden,
                        .experts = ne,
                        .intermediate = m.intermediate,
                        .top_k = static_cast<int>(m.top_k),
                        .norm_topk_prob = m.norm_topk_prob,
                        .bf16 = dtype == DType::kBF16,
                        .allow_tf32 = ctx_->options().allow_tf32,
                        .gate_up = d,
                        .down = d + ne};
    void* workspace = Grown(ctx_->internal_[CudaContext::kMoeWorkspace], CudaMoeWorkspaceBytes(a));
    if (ok()) Record(RunCudaMoe(a, workspace, ctx_->blas(), s_));
  }

  void SharedExpert(DeviceWeight gate_up, DeviceWeight down, int64_t im, const float* gate_w,
                    const float* x, const uint16_t* x16, int64_t rows, int64_t hidden, float* gu,
                    float* out, float* y) override {
    SwiGluMlp(gate_up, down, im, x, x16, rows, hidden, gu, out);
    float* gate = Alloc<float>(rows);
    if (!ok()) return;
    Launch(SharedGateKernel, rows, x, gate_w, rows, hidden, gate);
    Launch(RowScaleAddKernel, rows * hidden, y, gate, out, rows, hidden);
  }

 private:
  struct MirrorEntry {
    float* host;
    float* device;
    int64_t n;
  };

  bool ok() const { return status_.ok(); }
  // The device copy of a host weight (uploaded by the context).
  DeviceWeight Uploaded(const void* host, bool empty) {
    if (empty) return {};
    const DeviceWeight d = ctx_->Find(host);
    if (d.data == nullptr) Record(Internal("a weight the device context did not upload"));
    return d;
  }
  // The compute type of an fp32-weight GEMM.
  cublasComputeType_t F32Compute() const {
    return ctx_->options().allow_tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F_PEDANTIC;
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

  // A context buffer of at least `bytes` (grown stream-ordered, never shrunk; garbage
  // contents). The stream orders every earlier use of the old buffer before its free.
  void* Grown(DeviceBuffer& buf, size_t bytes) {
    auto& [p, cap] = buf;
    if (cap < bytes && ok()) {
      if (p != nullptr) cudaFreeAsync(p, s_);
      p = nullptr;
      cap = 0;
      if (Record(HYPIC_CUDA_STATUS(cudaMallocAsync(&p, bytes, s_)))) cap = bytes;
    }
    return p;
  }

  // n elements of pinned staging, valid until the staging's next reset.
  template <typename T>
  T* Stage(int64_t n) {
    if (!ok() || n <= 0) return nullptr;
    void* p = nullptr;
    Record(ctx_->staging_->Take(Bytes<T>(n), &p));
    return static_cast<T*>(p);
  }

  // A device copy of host data, through the pinned staging: the host bytes are copied out
  // before this returns, and the stream copies the staging (never rewritten before the next
  // synchronisation) to the device.
  template <typename T>
  const T* Upload(const T* host, int64_t n) {
    T* d = Alloc<T>(n);
    T* pinned = Stage<T>(n);
    if (d == nullptr || pinned == nullptr) return nullptr;
    std::memcpy(static_cast<void*>(pinned), host, Bytes<T>(n));
    Record(HYPIC_CUDA_STATUS(cudaMemcpyAsync(d, pinned, Bytes<T>(n), cudaMemcpyHostToDevice, s_)));
    return d;
  }

  template <typename... KArgs, typename... Args>
  void Launch(void (*kernel)(KArgs...), int64_t threads, Args&&... args) {
    kernel<<<Blocks(threads), kThreads, 0, s_>>>(std::forward<Args>(args)...);
    Record(HYPIC_CUDA_STATUS(cudaGetLastError()));
  }

  std::shared_ptr<CudaContext> ctx_;
  MutexLock lock_;        // ctx_->mu, for the kernels object's whole life
  gpu::ScopedDevice on_;  // the context's device, for the kernels object's whole life
  cudaStream_t s_;
  Status status_;
  std::vector<void*> allocs_;
  std::vector<MirrorEntry> mirrors_;
};

}  // namespace

bool CudaModelKernelsBuilt() { return true; }

Result<std::shared_ptr<DeviceContext>> CreateCudaContext(const ModelWeights& weights, int device,
                                                         const CudaContextOptions& options) {
  auto ctx = std::make_shared<CudaContext>(device, options);
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
