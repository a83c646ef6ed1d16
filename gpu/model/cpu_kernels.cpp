#include "gpu/model/cpu_kernels.h"

#include <cblas.h>

#include <atomic>
#include <cmath>
#include <thread>
#include <vector>

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

void SetComputeThreads(int threads) {
  g_threads.store(std::max(1, threads));
  openblas_set_num_threads(std::max(1, threads));
}

int ComputeThreads() { return g_threads.load(); }

void ParallelFor(int64_t n, int64_t min_per_thread,
                 const std::function<void(int64_t, int64_t)>& fn) {
  const int64_t threads =
      std::min<int64_t>(g_threads.load(), n / std::max<int64_t>(min_per_thread, 1));
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
    for (int64_t r = r0; r < r1; ++r) {
      const float* xr = x + r * ldx;
      float* yr = y + r * ldy;
      double ss = 0.0;
      for (int64_t i = 0; i < dim; ++i) ss += static_cast<double>(xr[i]) * xr[i];
      const float inv = static_cast<float>(1.0 / std::sqrt(ss / static_cast<double>(dim) + eps));
      for (int64_t i = 0; i < dim; ++i) yr[i] = xr[i] * inv * (1.0f + w[i]);
    }
  });
}

void ApplyRope(float* x, int64_t ld, int64_t rows, int64_t heads, int64_t head_dim,
               int64_t rotary_dim, double theta, int64_t pos0) {
  const int64_t half = rotary_dim / 2;
  if (half == 0) return;
  std::vector<double> inv_freq(static_cast<size_t>(half));
  for (int64_t i = 0; i < half; ++i) {
    inv_freq[static_cast<size_t>(i)] =
        std::pow(theta, -static_cast<double>(2 * i) / static_cast<double>(rotary_dim));
  }
  ParallelFor(rows, 256, [&](int64_t r0, int64_t r1) {
    std::vector<float> cs(static_cast<size_t>(2 * half));
    for (int64_t r = r0; r < r1; ++r) {
      const double pos = static_cast<double>(pos0 + r);
      for (int64_t i = 0; i < half; ++i) {
        const double angle = pos * inv_freq[static_cast<size_t>(i)];
        cs[static_cast<size_t>(i)] = static_cast<float>(std::cos(angle));
        cs[static_cast<size_t>(half + i)] = static_cast<float>(std::sin(angle));
      }
      for (int64_t h = 0; h < heads; ++h) {
        float* p = x + r * ld + h * head_dim;
        for (int64_t i = 0; i < half; ++i) {
          const float c = cs[static_cast<size_t>(i)], s = cs[static_cast<size_t>(half + i)];
          const float a = p[i], b = p[i + half];
          p[i] = a * c - b * s;
          p[i + half] = b * c + a * s;
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

}  // namespace hypic::model
