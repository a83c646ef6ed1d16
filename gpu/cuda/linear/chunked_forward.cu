// The device chunked forward (chunked_forward.cuh): the algorithm of gpu/linear/chunked_forward.cpp
// for scalar and absent decays, in fp32 throughout (T_C and S included), with every entry
// computed by gpu/linear/chunk_math.h. Two kernels per window of chunks:
//   PrepareChunksKernel  block = one (chunk, value head); the state-independent part. k (and q
//                        when o is wanted) staged in shared memory, rows padded to dk + 1 so a
//                        warp reading 32 different rows hits 32 banks; one thread per entry of
//                        A_qk (to global) and A_kk (shared); then one thread per column of
//                        [U | W] solves (I + A_kk) [U | W] = [diag(beta) V | diag(beta) e^b K] by
//                        forward substitution, the columns being independent.
//   AdvanceChainsKernel  block = one (value head, tile of 32 columns), sequential over the
//                        window's chunks. A tile is 32 columns of the running state (lane = one
//                        column, warp w = rows w, w + 8, ...) or, with U = 0, of the dense T_C; it
//                        stays in shared memory across chunks. Per chunk: V_new = U - W S, then
//                        O = Q_hat S + A_qk V_new, then S <- e^{b_L} S + K_hat^T V_new, with W,
//                        Q_hat and K_hat staged in turn in one [C, dk] buffer.
// Windows bound the per-chunk scratch (A_qk, U, W, the decay factors) to kScratchBytes; the
// chains carry over between windows in their global outputs. S(C|0) = S_out - T_C S_init when
// both chains start from a non-zero state, as on the CPU, and heads where that difference
// cancels more than it keeps rerun the state chain from zero.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "gpu/cuda/cuda_check.cuh"
#include "gpu/cuda/linear/chunked_forward.cuh"
#include "gpu/cuda/linear/device_array.cuh"
#include "gpu/linear/chunk_math.h"
#include "gpu/linear/linear_internal.h"

namespace hypic::linear {

namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kTile = 32;  // columns per chain block: one per lane
constexpr int64_t kScratchBytes = int64_t{256} << 20;

// What every kernel of one forward reads.
struct ChunkProblem {
  Inputs in;
  int64_t tokens;
  int H, HV, dk, dv, chunk;
  bool delta;
};

// The state-independent quantities of the window's chunks [c0, c0 + count), in device scratch;
// `slot` h * count + c indexes (head, chunk) pairs.
struct ChunkScratch {
  float* a_qk;     // [slot, C, C], or nullptr when no output is wanted
  float* u;        // [slot, C, dv], delta family
  float* w;        // [slot, C, dk], delta family
  float* factors;  // [slot, 2, C]: e^{b_r}, then e^{b_{L-1} - b_r}
  int64_t c0;
  int count;
};

// The chains one AdvanceChainsKernel launch advances. Blocks [0, state_tiles) of grid.y run the
// state chain, the rest the transition chain.
struct ChainTargets {
  const float* init;  // [HV, dk, dv] state before token 0, or nullptr (zero); read on window 0
  float* state;       // [HV, dk, dv] the running state, or nullptr without a state chain
  float* o;           // [T, HV, dv], or nullptr
  float* t;           // [HV, dk, dk] the transition chain (from I), or nullptr
  const int* heads;   // nullptr, or per head: 0 skips that head's state chain
  int state_tiles;
};

__device__ __forceinline__ int ChunkLength(const ChunkProblem& p, int64_t t0) {
  const int64_t left = p.tokens - t0;
  return left < p.chunk ? static_cast<int>(left) : p.chunk;
}

size_t PrepareSmemBytes(int chunk, int dk, int dv, bool delta, bool with_qk) {
  const size_t c = chunk, padded = static_cast<size_t>(dk) + 1;
  size_t floats = c + c * padded * (with_qk ? 2 : 1);
  if (delta) floats += c * (c + 1) + c * (dv + dk);
  return c * sizeof(double) + floats * sizeof(float);
}

size_t ChainSmemBytes(int chunk, int dk) {
  return (static_cast<size_t>(dk) * kTile + static_cast<size_t>(chunk) * (dk + kTile)) *
         sizeof(float);
}

__global__ void __launch_bounds__(kThreads) PrepareChunksKernel(ChunkProblem p, ChunkScratch x) {
  extern __shared__ double smem[];
  const int C = p.chunk, dk = p.dk, dv = p.dv, ldk = dk + 1, cols = dv + dk;
  const int c = blockIdx.x, h = blockIdx.y, kh = h / (p.HV / p.H);
  const int64_t t0 = (x.c0 + c) * C;
  const int L = ChunkLength(p, t0);
  const int64_t slot = static_cast<int64_t>(h) * x.count + c;
  const bool with_qk = x.a_qk != nullptr;
  double* b = smem;                               // [C] cumulative log-decay
  float* beta = reinterpret_cast<float*>(b + C);  // [C]
  float* sk = beta + C;                           // [C, ldk]
  float* sq = sk + C * ldk;                       // [C, ldk] when with_qk
  float* sa = sq + (with_qk ? C * ldk : 0);       // [C, C + 1] A_kk
  float* sx = sa + (p.delta ? C * (C + 1) : 0);   // [C, cols] [U | W]
  for (int i = threadIdx.x; i < L * dk; i += kThreads) {
    const int r = i / dk, d = i % dk;
    const int64_t src = ((t0 + r) * p.H + kh) * dk + d;
    sk[r * ldk + d] = p.in.k[src];
    if (with_qk) sq[r * ldk + d] = p.in.q[src];
  }
  for (int r = threadIdx.x; r < L; r += kThreads) {
    beta[r] = p.delta ? p.in.beta[(t0 + r) * p.HV + h] : 0.0f;
  }
  if (threadIdx.x == 0 && p.in.g != nullptr) {
    ChunkLogDecayPrefix(p.in.g + t0 * p.HV + h, p.HV, L, b);
  }
  const double* bp = p.in.g != nullptr ? b : nullptr;
  __syncthreads();

  float* f = x.factors + slot * 2 * C;
  for (int r = threadIdx.x; r < L; r += kThreads) {
    f[r] = ChunkDecay(bp, r, -1);
    f[C + r] = ChunkDecay(bp, L - 1, r);
  }
  for (int i = threadIdx.x; i < C * C; i += kThreads) {
    const int r = i / C, s = i % C;
    const bool inside = r < L && s < L;
    if (with_qk) {
      x.a_qk[slot * C * C + i] = inside ? QkScore(sq + r * ldk, sk + s * ldk, dk, bp, r, s) : 0.0f;
    }
    if (p.delta) {
      sa[r * (C + 1) + s] =
          inside ? KkScore(sk + r * ldk, sk + s * ldk, dk, bp, beta[r], r, s) : 0.0f;
    }
  }
  if (!p.delta) return;
  for (int i = threadIdx.x; i < L * cols; i += kThreads) {
    const int r = i / cols, col = i % cols;
    sx[i] = col < dv ? beta[r] * p.in.v[((t0 + r) * p.HV + h) * dv + col]
                     : beta[r] * ChunkDecay(bp, r, -1) * sk[r * ldk + col - dv];
  }
  __syncthreads();
  for (int col = threadIdx.x; col < cols; col += kThreads) {
    ForwardSubstituteColumn(sa, C + 1, L, sx + col, cols);
    for (int r = 0; r < L; ++r) {
      const float e = sx[r * cols + col];
      if (col < dv) {
        x.u[(slot * C + r) * dv + col] = e;
      } else {
        x.w[(slot * C + r) * dk + col - dv] = e;
      }
    }
  }
}

__global__ void __launch_bounds__(kThreads)
    AdvanceChainsKernel(ChunkProblem p, ChunkScratch x, ChainTargets c, bool first) {
  extern __shared__ float smem_f[];
  const int C = p.chunk, dk = p.dk, dv = p.dv;
  const int h = blockIdx.x, kh = h / (p.HV / p.H);
  const bool is_t = static_cast<int>(blockIdx.y) >= c.state_tiles;
  if (!is_t && c.heads != nullptr && c.heads[h] == 0) return;  // uniform over the block
  const int cols = is_t ? dk : dv;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int j = (is_t ? blockIdx.y - c.state_tiles : blockIdx.y) * kTile + lane;
  const bool valid = j < cols;
  const bool with_o = !is_t && c.o != nullptr;
  float* xg =
      is_t ? c.t + static_cast<int64_t>(h) * dk * dk : c.state + static_cast<int64_t>(h) * dk * dv;
  float* ss = smem_f;            // [dk, kTile] the tile of S (or T)
  float* buf = ss + dk * kTile;  // [C, dk] W, then Q_hat, then K_hat
  float* sv = buf + C * dk;      // [C, kTile] U, then V_new
  for (int d = warp; d < dk; d += kWarps) {
    float e = 0.0f;
    if (valid && !first) {
      e = xg[static_cast<int64_t>(d) * cols + j];
    } else if (valid && is_t) {
      e = d == j ? 1.0f : 0.0f;
    } else if (valid && c.init != nullptr) {
      e = c.init[(static_cast<int64_t>(h) * dk + d) * dv + j];
    }
    ss[d * kTile + lane] = e;
  }
  for (int ci = 0; ci < x.count; ++ci) {
    const int64_t t0 = (x.c0 + ci) * C;
    const int L = ChunkLength(p, t0);
    const int64_t slot = static_cast<int64_t>(h) * x.count + ci;
    const float* f = x.factors + slot * 2 * C;
    if (p.delta) {
      for (int i = threadIdx.x; i < L * dk; i += kThreads) buf[i] = x.w[slot * C * dk + i];
    }
    for (int r = warp; r < L; r += kWarps) {
      float e = 0.0f;
      if (valid && !is_t) {
        e = p.delta ? x.u[(slot * C + r) * dv + j] : p.in.v[((t0 + r) * p.HV + h) * dv + j];
      }
      sv[r * kTile + lane] = e;
    }
    __syncthreads();
    if (p.delta) {
      for (int r = warp; r < L; r += kWarps) {
        float& e = sv[r * kTile + lane];
        e = NewValue(e, buf + r * dk, ss + lane, kTile, dk);
      }
      __syncthreads();
    }
    if (with_o) {
      for (int i = threadIdx.x; i < L * dk; i += kThreads) {
        const int r = i / dk;
        buf[i] = f[r] * p.in.q[((t0 + r) * p.H + kh) * dk + i % dk];
      }
      __syncthreads();
      for (int r = warp; valid && r < L; r += kWarps) {
        c.o[((t0 + r) * p.HV + h) * dv + j] = ChunkOutput(
            buf + r * dk, ss + lane, kTile, dk, x.a_qk + (slot * C + r) * C, sv + lane, kTile, r);
      }
      __syncthreads();
    }
    for (int i = threadIdx.x; i < L * dk; i += kThreads) {
      const int r = i / dk;
      buf[i] = f[C + r] * p.in.k[((t0 + r) * p.H + kh) * dk + i % dk];
    }
    __syncthreads();
    const float decay_end = f[L - 1];
    for (int d = warp; d < dk; d += kWarps) {
      float& e = ss[d * kTile + lane];
      e = UpdatedState(e, decay_end, buf + d, dk, sv + lane, kTile, L);
    }
    __syncthreads();
  }
  for (int d = warp; valid && d < dk; d += kWarps) {
    xg[static_cast<int64_t>(d) * cols + j] = ss[d * kTile + lane];
  }
}

// Block = one head: zero = S_out - T S_init (dense T, or e^{log_t} I, or I), and fallback[h] = 1
// where the difference cancels more than it keeps (sum (S_out - zero)^2 > sum zero^2).
__global__ void __launch_bounds__(kThreads)
    ZeroStateKernel(int dk, int dv, const float* s_out, const float* dense_t, const float* log_t,
                    const float* init, float* zero, int* fallback) {
  __shared__ double cancelled[kThreads], kept[kThreads];
  const int h = blockIdx.x;
  const int64_t base = static_cast<int64_t>(h) * dk * dv;
  const float factor = log_t != nullptr ? expf(log_t[h]) : 1.0f;
  const float* t = dense_t != nullptr ? dense_t + static_cast<int64_t>(h) * dk * dk : nullptr;
  double c_sum = 0.0, k_sum = 0.0;
  for (int i = threadIdx.x; i < dk * dv; i += kThreads) {
    const int d = i / dv, j = i % dv;
    const float s = s_out[base + i];
    const float z =
        ZeroStateByDifference(s, t != nullptr ? t + static_cast<int64_t>(d) * dk : nullptr, factor,
                              init + base + j, dv, d, dk);
    zero[base + i] = z;
    const double diff = static_cast<double>(s) - z;
    c_sum += diff * diff;
    k_sum += static_cast<double>(z) * z;
  }
  cancelled[threadIdx.x] = c_sum;
  kept[threadIdx.x] = k_sum;
  __syncthreads();
  for (int n = kThreads / 2; n > 0; n /= 2) {
    if (static_cast<int>(threadIdx.x) < n) {
      cancelled[threadIdx.x] += cancelled[threadIdx.x + n];
      kept[threadIdx.x] += kept[threadIdx.x + n];
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) fallback[h] = cancelled[0] > kept[0] ? 1 : 0;
}

int Tiles(int cols) { return (cols + kTile - 1) / kTile; }

// Advances `targets` over every chunk, window by window.
Status RunChains(const ChunkProblem& p, const ChainTargets& targets, cudaStream_t stream) {
  const int C = p.chunk, HV = p.HV;
  const int64_t nchunks = (p.tokens + C - 1) / C;
  const bool with_qk = targets.o != nullptr;
  const int64_t per_chunk =
      (with_qk ? int64_t{C} * C : 0) + (p.delta ? int64_t{C} * (p.dv + p.dk) : 0) + 2 * C;
  const int64_t fit = kScratchBytes / (static_cast<int64_t>(sizeof(float)) * HV * per_chunk);
  const auto window = static_cast<int>(std::clamp<int64_t>(fit, 1, std::max<int64_t>(nchunks, 1)));
  DeviceArray<float> scratch;
  HYPIC_RETURN_IF_ERROR(scratch.Allocate(static_cast<size_t>(HV) * window * per_chunk, stream));
  ChunkScratch x{};
  float* next = scratch.get();
  auto carve = [&](int64_t per) {
    float* at = per > 0 ? next : nullptr;
    next += static_cast<int64_t>(HV) * window * per;
    return at;
  };
  x.a_qk = carve(with_qk ? int64_t{C} * C : 0);
  x.u = carve(p.delta ? int64_t{C} * p.dv : 0);
  x.w = carve(p.delta ? int64_t{C} * p.dk : 0);
  x.factors = carve(2 * C);

  const size_t prepare_smem = PrepareSmemBytes(C, p.dk, p.dv, p.delta, with_qk);
  const size_t chain_smem = ChainSmemBytes(C, p.dk);
  HYPIC_CUDA_RETURN_IF_ERROR(cudaFuncSetAttribute(PrepareChunksKernel,
                                                  cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                  static_cast<int>(prepare_smem)));
  HYPIC_CUDA_RETURN_IF_ERROR(cudaFuncSetAttribute(AdvanceChainsKernel,
                                                  cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                  static_cast<int>(chain_smem)));
  const dim3 chain_grid(HV, targets.state_tiles + (targets.t != nullptr ? Tiles(p.dk) : 0));
  int64_t c0 = 0;
  do {
    // The layout of the scratch follows x.count, so a short last window packs its slots.
    x.c0 = c0;
    x.count = static_cast<int>(std::min<int64_t>(window, nchunks - c0));
    if (x.count > 0) {
      PrepareChunksKernel<<<dim3(x.count, HV), kThreads, prepare_smem, stream>>>(p, x);
      HYPIC_CUDA_RETURN_IF_ERROR(cudaGetLastError());
    }
    AdvanceChainsKernel<<<chain_grid, kThreads, chain_smem, stream>>>(p, x, targets, c0 == 0);
    HYPIC_CUDA_RETURN_IF_ERROR(cudaGetLastError());
    c0 += x.count;
  } while (c0 < nchunks);
  return Status::Ok();
}

}  // namespace

Result<int> CudaChunkSize(Variant variant, const Shape& shape, int device) {
  if (DecayKindOf(variant) == DecayKind::kDiag) return 0;
  const bool delta = HasBeta(variant);
  int chunk = 64;
  if (delta) {
    if (shape.dk < 16) return 0;
    chunk = shape.dk >= 64 ? 64 : shape.dk >= 32 ? 32 : 16;
  }
  int optin = 0;
  HYPIC_CUDA_RETURN_IF_ERROR(
      cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  const size_t limit = static_cast<size_t>(optin);
  if (PrepareSmemBytes(chunk, shape.dk, shape.dv, delta, true) > limit ||
      ChainSmemBytes(chunk, shape.dk) > limit) {
    return 0;
  }
  return chunk;
}

Status CudaChunkedForward(Variant variant, const Shape& shape, const Inputs& in,
                          const float* initial_state, const Outputs& out,
                          const float* log_transition, int chunk, cudaStream_t stream) {
  const int HV = shape.value_heads, dk = shape.dk, dv = shape.dv;
  const bool delta = HasBeta(variant);
  const size_t state_floats = static_cast<size_t>(HV) * dk * dv;
  const ChunkProblem p{in, shape.tokens, shape.key_heads, HV, dk, dv, chunk, delta};
  // As ChunkedForward: the state chain starts from the initial state only when o or the final
  // state needs it; S(C|0) alone is then the chain from zero.
  const float* init = out.o != nullptr || out.final_state != nullptr ? initial_state : nullptr;
  const bool zero_by_difference = out.zero_state != nullptr && init != nullptr;
  const bool dense_t = delta && (out.transition != nullptr || zero_by_difference);
  const bool main_chain =
      out.o != nullptr || out.final_state != nullptr || out.zero_state != nullptr;
  if (!main_chain && !dense_t) return Status::Ok();

  // The running state lands in final_state, unless the difference still needs an initial state
  // that final_state aliases.
  DeviceArray<float> running_scratch, t_scratch;
  float* running = nullptr;
  if (main_chain) {
    running = out.final_state;
    if (running == nullptr || (zero_by_difference && running == initial_state)) {
      HYPIC_RETURN_IF_ERROR(running_scratch.Allocate(state_floats, stream));
      running = running_scratch.get();
    }
  }
  float* t = nullptr;
  if (dense_t) {
    t = out.transition;
    if (t == nullptr) {
      HYPIC_RETURN_IF_ERROR(t_scratch.Allocate(static_cast<size_t>(HV) * dk * dk, stream));
      t = t_scratch.get();
    }
  }
  HYPIC_RETURN_IF_ERROR(RunChains(
      p, ChainTargets{init, running, out.o, t, nullptr, main_chain ? Tiles(dv) : 0}, stream));

  if (out.zero_state != nullptr && !zero_by_difference) {
    HYPIC_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(
        out.zero_state, running, state_floats * sizeof(float), cudaMemcpyDeviceToDevice, stream));
  } else if (zero_by_difference) {
    DeviceArray<int> fallback;
    HYPIC_RETURN_IF_ERROR(fallback.Allocate(HV, stream));
    ZeroStateKernel<<<HV, kThreads, 0, stream>>>(dk, dv, running, t, log_transition, init,
                                                 out.zero_state, fallback.get());
    HYPIC_CUDA_RETURN_IF_ERROR(cudaGetLastError());
    std::vector<int> host(HV);
    HYPIC_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(host.data(), fallback.get(), HV * sizeof(int),
                                               cudaMemcpyDeviceToHost, stream));
    HYPIC_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream));
    if (std::find(host.begin(), host.end(), 1) != host.end()) {
      HYPIC_RETURN_IF_ERROR(RunChains(
          p, ChainTargets{nullptr, out.zero_state, nullptr, nullptr, fallback.get(), Tiles(dv)},
          stream));
    }
  }
  if (out.final_state != nullptr && running != out.final_state) {
    HYPIC_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(
        out.final_state, running, state_floats * sizeof(float), cudaMemcpyDeviceToDevice, stream));
  }
  return Status::Ok();
}

}  // namespace hypic::linear
