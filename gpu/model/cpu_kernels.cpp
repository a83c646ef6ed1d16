#include "gpu/model/cpu_kernels.h"

#include <cblas.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <thread>
#include <vector>

#include "gpu/linear/linear_attention.h"
#include "gpu/linear/linear_math.h"
#include "gpu/linear/short_conv.h"

namespace hypic::model {
namespace {

// Reductions with 16 independent lanes, so they vectorise without -ffast-math and do not wait
// on one accumulator's latency.
constexpr int kLanes = 16;

float LaneMax(const float* x, int64_t n) {
  float acc[kLanes];
  std::fill(acc, acc + kLanes, x[0]);
  int64_t j = 0;
  for (; j + kLanes <= n; j += kLanes) {
    for (int l = 0; l < kLanes; ++l) acc[l] = acc[l] > x[j + l] ? acc[l] : x[j + l];
  }
  float m = acc[0];
  for (int l = 1; l < kLanes; ++l) m = std::max(m, acc[l]);
  for (; j < n; ++j) m = std::max(m, x[j]);
  return m;
}

float LaneSum(const float* x, int64_t n) {
  float acc[kLanes] = {};
  int64_t j = 0;
  for (; j + kLanes <= n; j += kLanes) {
    for (int l = 0; l < kLanes; ++l) acc[l] += x[j + l];
  }
  float s = 0.0f;
  for (int l = 0; l < kLanes; ++l) s += acc[l];
  for (; j < n; ++j) s += x[j];
  return s;
}

}  // namespace

std::atomic<int> g_threads{static_cast<int>(std::max(1u, std::thread::hardware_concurrency()))};
thread_local int t_threads = 0;  // the calling thread's ScopedComputeThreads; 0: none

void SetComputeThreads(int threads) {
  g_threads.store(std::max(1, threads));
  openblas_set_num_threads(std::max(1, threads));
}

int ComputeThreads() { return t_threads > 0 ? t_threads : g_threads.load(); }

ScopedComputeThreads::ScopedComputeThreads(int threads) : previous_(t_threads) {
  t_threads = std::max(1, threads);
}

ScopedComputeThreads::~ScopedComputeThreads() { t_threads = previous_; }

void ParallelFor(int64_t n, int64_t min_per_thread,
                 const std::function<void(int64_t, int64_t)>& fn) {
  const int64_t threads =
      std::min<int64_t>(ComputeThreads(), n / std::max<int64_t>(min_per_thread, 1));
  if (threads <= 1) {
    if (n > 0) fn(0, n);
    return;
  }
  std::vector<std::thread> pool;
  pool.reserve(static_cast<size_t>(threads - 1));
  const int64_t per = (n + threads - 1) / threads;
  for (int64_t t = 1; t < threads; ++t) {
    const int64_t b = t * per, e = std::min(n, b + per);
    if (b < e) pool.emplace_back([&fn, b, e] { fn(b, e); });
  }
  fn(0, std::min(n, per));
  for (auto& th : pool) th.join();
}

void Gemm(int64_t m, int64_t n, int64_t k, const float* x, int64_t ldx, const float* w, int64_t ldw,
          float* y, int64_t ldy, bool accumulate) {
  if (m <= 0 || n <= 0) return;
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(m), static_cast<int>(n),
              static_cast<int>(k), 1.0f, x, static_cast<int>(ldx), w, static_cast<int>(ldw),
              accumulate ? 1.0f : 0.0f, y, static_cast<int>(ldy));
}

void RmsNormZeroCentred(const float* x, int64_t ldx, const float* w, float* y, int64_t ldy,
                        int64_t rows, int64_t dim, float eps) {
  ParallelFor(rows, 64, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) RmsNormZeroCentredRow(x + r * ldx, w, y + r * ldy, dim, eps);
  });
}

void ApplyRope(float* x, int64_t ld, int64_t rows, int64_t heads, int64_t head_dim,
               int64_t rotary_dim, double theta, int64_t pos0) {
  const int64_t half = rotary_dim / 2;
  if (half == 0) return;
  std::vector<double> inv_freq(static_cast<size_t>(half));
  for (int64_t i = 0; i < half; ++i) {
    inv_freq[static_cast<size_t>(i)] = RopeInvFreq(theta, i, rotary_dim);
  }
  ParallelFor(rows, 256, [&](int64_t r0, int64_t r1) {
    std::vector<float> cs(static_cast<size_t>(2 * half));
    for (int64_t r = r0; r < r1; ++r) {
      for (int64_t i = 0; i < half; ++i) {
        RopeCosSin(pos0 + r, inv_freq[static_cast<size_t>(i)], &cs[static_cast<size_t>(i)],
                   &cs[static_cast<size_t>(half + i)]);
      }
      for (int64_t h = 0; h < heads; ++h) {
        float* p = x + r * ld + h * head_dim;
        for (int64_t i = 0; i < half; ++i) {
          linear::RotatePair(p[i], p[i + half], cs[static_cast<size_t>(i)],
                             cs[static_cast<size_t>(half + i)]);
        }
      }
    }
  });
}

void CausalAttention(const AttentionShape& shape, const float* q, const float* k, const float* v,
                     float* out, int64_t rows, int64_t pos0) {
  constexpr int64_t kTile = 128;
  const int64_t hd = shape.head_dim, group = shape.heads / shape.kv_heads;
  const int64_t ldq = shape.heads * hd, ldk = shape.kv_heads * hd;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  std::vector<float> scores;
  for (int64_t r0 = 0; r0 < rows; r0 += kTile) {
    const int64_t tile = std::min(kTile, rows - r0);
    const int64_t keys = pos0 + r0 + tile;  // keys visible to the tile's last row
    scores.resize(static_cast<size_t>(tile * keys));
    for (int64_t h = 0; h < shape.heads; ++h) {
      const int64_t g = h / group;
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(tile),
                  static_cast<int>(keys), static_cast<int>(hd), scale, q + r0 * ldq + h * hd,
                  static_cast<int>(ldq), k + g * hd, static_cast<int>(ldk), 0.0f, scores.data(),
                  static_cast<int>(keys));
      ParallelFor(tile, std::max<int64_t>(1, 8192 / keys), [&](int64_t i0, int64_t i1) {
        for (int64_t i = i0; i < i1; ++i) {
          float* row = scores.data() + i * keys;
          const int64_t valid = pos0 + r0 + i + 1;
          const float mx = LaneMax(row, valid);
          for (int64_t j = 0; j < valid; ++j) row[j] = FastExp(row[j] - mx);
          const float inv = 1.0f / LaneSum(row, valid);
          for (int64_t j = 0; j < valid; ++j) row[j] *= inv;
          std::fill(row + valid, row + keys, 0.0f);
        }
      });
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<int>(tile),
                  static_cast<int>(hd), static_cast<int>(keys), 1.0f, scores.data(),
                  static_cast<int>(keys), v + g * hd, static_cast<int>(ldk), 0.0f,
                  out + r0 * ldq + h * hd, static_cast<int>(ldq));
    }
  }
}

float* CpuForwardKernels::Scratch(int slot, int64_t n) {
  if (scratch_.size() <= static_cast<size_t>(slot)) scratch_.resize(static_cast<size_t>(slot) + 1);
  std::vector<float>& v = scratch_[static_cast<size_t>(slot)];
  if (v.size() < static_cast<size_t>(n)) v.resize(static_cast<size_t>(n));
  return v.data();
}

void CpuForwardKernels::Embed(const float* table, std::span<const uint32_t> tokens, int64_t dim,
                              float* x) {
  for (size_t r = 0; r < tokens.size(); ++r) {
    std::memcpy(x + static_cast<int64_t>(r) * dim, table + static_cast<int64_t>(tokens[r]) * dim,
                static_cast<size_t>(dim) * sizeof(float));
  }
}

void CpuForwardKernels::Gemm(int64_t m, int64_t n, int64_t k, const float* x, int64_t ldx,
                             const float* w, int64_t ldw, float* y, int64_t ldy, bool accumulate) {
  model::Gemm(m, n, k, x, ldx, w, ldw, y, ldy, accumulate);
}

void CpuForwardKernels::RmsNorm(const float* x, int64_t ldx, const float* w, float* y, int64_t ldy,
                                int64_t rows, int64_t dim, float eps) {
  RmsNormZeroCentred(x, ldx, w, y, ldy, rows, dim, eps);
}

void CpuForwardKernels::GatedRmsNorm(float* o, const float* z, int64_t ldz, const float* w,
                                     int64_t rows, int64_t heads, int64_t dim, float eps) {
  ParallelFor(rows, 64, [&](int64_t t0, int64_t t1) {
    for (int64_t r = t0; r < t1; ++r) {
      for (int64_t hh = 0; hh < heads; ++hh) {
        GatedRmsNormRow(o + (r * heads + hh) * dim, z + r * ldz + hh * dim, w, dim, eps);
      }
    }
  });
}

void CpuForwardKernels::Add(float* x, const float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] += y[i];
}

void CpuForwardKernels::Fill(float* x, int64_t n, float value) { std::fill(x, x + n, value); }

void CpuForwardKernels::Copy2D(float* dst, int64_t ldd, const float* src, int64_t lds, int64_t rows,
                               int64_t cols) {
  for (int64_t r = 0; r < rows; ++r) {
    std::memcpy(dst + r * ldd, src + r * lds, static_cast<size_t>(cols) * sizeof(float));
  }
}

void CpuForwardKernels::Rope(float* x, int64_t ld, int64_t rows, int64_t heads, int64_t head_dim,
                             int64_t rotary_dim, double theta, int64_t pos0) {
  ApplyRope(x, ld, rows, heads, head_dim, rotary_dim, theta, pos0);
}

void CpuForwardKernels::CausalConv(const linear::ConvShape& shape, const float* x,
                                   const float* weight, float* state, float* y) {
  linear::CausalConv(shape, x, weight, nullptr, state, y, /*apply_silu=*/true);
}

void CpuForwardKernels::GdnInputs(const GdnInputArgs& a) {
  const int64_t nk = a.key_heads, nv = a.value_heads, dk = a.dk, vw = nv * a.dv;
  const int64_t ch = 2 * nk * dk + vw;
  ParallelFor(a.rows, 64, [&](int64_t t0, int64_t t1) {
    for (int64_t r = t0; r < t1; ++r) {
      const float* m = a.mixed + r * ch;
      for (int64_t i = 0; i < nk; ++i) {
        L2NormRow(m + i * dk, a.q + (r * nk + i) * dk, dk, a.q_scale);
      }
      for (int64_t i = 0; i < nk; ++i) {
        L2NormRow(m + (nk + i) * dk, a.k + (r * nk + i) * dk, dk, 1.0f);
      }
      std::memcpy(a.v + r * vw, m + 2 * nk * dk, static_cast<size_t>(vw) * sizeof(float));
      const float* ba = a.ba + r * a.ld_ba;
      for (int64_t hh = 0; hh < nv; ++hh) {
        a.beta[r * nv + hh] = Sigmoid(ba[hh]);
        a.gate[r * nv + hh] = GdnLogDecay(a.a_log[hh], ba[nv + hh], a.dt_bias[hh]);
      }
    }
  });
}

void CpuForwardKernels::LinearForward(linear::Variant variant, const linear::Shape& shape,
                                      const linear::Inputs& in, const float* initial,
                                      const linear::Outputs& out) {
  if (!status_.ok()) return;
  status_ = linear::ChunkedForward(variant, shape, in, initial, out);
}

void CpuForwardKernels::JumpState(const linear::Shape& shape, const float* transition,
                                  const float* zero_state, float* state) {
  if (transition == nullptr) {
    linear::NaiveAdd(shape, zero_state, state);
  } else {
    linear::ApplyTransition(linear::TransitionForm::kDense, shape, transition, zero_state, state);
  }
}

void CpuForwardKernels::Attention(const AttentionShape& shape, const float* q, const float* k,
                                  const float* v, float* out, int64_t rows, int64_t pos0) {
  CausalAttention(shape, q, k, v, out, rows, pos0);
}

void CpuForwardKernels::SigmoidGate(float* out, const float* gate, int64_t ldg, int64_t rows,
                                    int64_t cols) {
  ParallelFor(rows, 64, [&](int64_t t0, int64_t t1) {
    for (int64_t r = t0; r < t1; ++r) {
      const float* g = gate + r * ldg;
      float* o = out + r * cols;
      for (int64_t i = 0; i < cols; ++i) o[i] *= Sigmoid(g[i]);
    }
  });
}

void CpuForwardKernels::SwiGlu(float* gu, int64_t rows, int64_t im) {
  ParallelFor(rows, 32, [&](int64_t t0, int64_t t1) {
    for (int64_t r = t0; r < t1; ++r) SwiGluRow(gu + r * 2 * im, im);
  });
}

void CpuForwardKernels::GatherRows(const float* src, std::span<const int64_t> idx, int64_t cols,
                                   float* dst) {
  for (size_t j = 0; j < idx.size(); ++j) {
    std::memcpy(dst + static_cast<int64_t>(j) * cols, src + idx[j] * cols,
                static_cast<size_t>(cols) * sizeof(float));
  }
}

void CpuForwardKernels::ScatterAddRows(float* y, std::span<const int64_t> idx,
                                       std::span<const float> weight, int64_t cols,
                                       const float* src) {
  for (size_t j = 0; j < idx.size(); ++j) {
    float* yr = y + idx[j] * cols;
    const float wgt = weight[j];
    const float* s = src + static_cast<int64_t>(j) * cols;
    for (int64_t i = 0; i < cols; ++i) yr[i] += wgt * s[i];
  }
}

void CpuForwardKernels::SharedExpertAdd(const float* x, const float* gate_w, const float* out,
                                        float* y, int64_t rows, int64_t dim) {
  for (int64_t r = 0; r < rows; ++r) {
    const float sg = SharedExpertGate(x + r * dim, gate_w, dim);
    float* yr = y + r * dim;
    const float* src = out + r * dim;
    for (int64_t i = 0; i < dim; ++i) yr[i] += sg * src[i];
  }
}

}  // namespace hypic::model
