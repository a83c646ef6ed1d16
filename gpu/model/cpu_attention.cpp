#include "gpu/model/cpu_attention.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>
#include <optional>
#include <type_traits>
#include <utility>
#include <vector>

#include "core/aligned_vector.h"
#include "core/dtype.h"
#include "gpu/cpu/amx.h"
#include "gpu/cpu/compute_threads.h"
#include "gpu/cpu/gemm.h"
#include "gpu/cpu/row_stable_gemm.h"
#include "gpu/cpu/vec8.h"
#include "gpu/model/cpu_kernels.h"
#include "gpu/model/forward_math.h"

#if defined(__AVX512BF16__) && defined(__AVX512F__)
#include <immintrin.h>
#define HYPIC_BF16_ATTENTION 1
#ifdef HYPIC_AMX
#define HYPIC_AMX_ATTENTION 1
#endif
#endif

namespace hypic::model {
namespace {

// The max of a row with 16 independent lanes, so it vectorises without -ffast-math and does not
// wait on one accumulator's latency.
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

// One online-softmax step over a row's block of scores row[0, valid) (valid > 0): the running
// max and sum move on, the scores become exp(score - max) in place (vec8::Exp, 8 lanes), and
// the factor by which the row's accumulated output must be rescaled is returned (0 on the
// first block: max was -inf). The sum goes by 16 lanes in a fixed order; the last partial
// vector is computed whole and its lanes past `valid` are neither stored nor summed.
float SoftmaxStep(float* row, int64_t valid, float* max, float* sum) {
  using cpu::vec8::Exp;
  using cpu::vec8::Load;
  using cpu::vec8::Splat;
  using cpu::vec8::Store;
  using cpu::vec8::V8;
  const float m = std::max(*max, LaneMax(row, valid));
  const float rescale = FastExp(*max - m);
  const V8 mv = Splat(m);
  V8 part[2] = {};
  int64_t j = 0;
  for (; j + 16 <= valid; j += 16) {
    for (int h = 0; h < 2; ++h) {
      const V8 e = Exp(Load(row + j + 8 * h) - mv);
      Store(row + j + 8 * h, e);
      part[h] += e;
    }
  }
  if (j < valid) {
    alignas(32) float tail[16];
    const auto left = static_cast<size_t>(valid - j);
    std::copy(row + j, row + valid, tail);
    std::fill(tail + left, tail + 16, 0.0f);
    for (int h = 0; h < 2; ++h) Store(tail + 8 * h, Exp(Load(tail + 8 * h) - mv));
    std::fill(tail + left, tail + 16, 0.0f);
    std::copy(tail, tail + left, row + j);
    for (int h = 0; h < 2; ++h) part[h] += Load(tail + 8 * h);
  }
  alignas(32) float lanes[16];
  Store(lanes, part[0]);
  Store(lanes + 8, part[1]);
  float s = 0.0f;
  for (float lane : lanes) s += lane;
  *sum = *sum * rescale + s;
  *max = m;
  return rescale;
}

// Rows [0, rows) of `heads` heads of head_dim from src (`dtype`, row stride lds elements) into
// dst (fp32, row stride ldd), widened exactly and, with `rope`, rotated to positions pos0 on:
// fp32 rows in one pass (RopeRows), others widened then rotated in place (the same bits).
void WidenRows(DType dtype, const void* src, int64_t lds, float* dst, int64_t ldd, int64_t rows,
               int64_t heads, int64_t head_dim, const KvRope* rope, int64_t pos0) {
  if (rope != nullptr && dtype == DType::kF32) {
    RopeRows(static_cast<const float*>(src), lds, dst, ldd, rows, heads, head_dim, rope->rotary_dim,
             rope->theta, pos0);
    return;
  }
  const auto* bytes = static_cast<const std::byte*>(src);
  const auto row_bytes = lds * static_cast<int64_t>(DTypeSize(dtype));
  for (int64_t r = 0; r < rows; ++r) {
    ConvertElements(dtype, bytes + r * row_bytes, DType::kF32, dst + r * ldd,
                    static_cast<size_t>(heads * head_dim));
  }
  if (rope != nullptr) {
    ApplyRope(dst, ldd, rows, heads, head_dim, rope->rotary_dim, rope->theta, pos0);
  }
}

// Every span's K and V into *out as two caches of `keys` rows (K, then V), widened to fp32,
// rope spans' K rotated: the fp32 products read contiguous K/V.
void GatherKv(const AttentionShape& shape, const KvRope& rope, std::span<const KvSpan> kv,
              int64_t keys, std::vector<float>* out) {
  const int64_t kw = shape.kv_heads * shape.head_dim;
  if (out->size() < static_cast<size_t>(2 * keys * kw))
    out->resize(static_cast<size_t>(2 * keys * kw));
  float* k = out->data();
  float* v = k + keys * kw;
  for (const KvSpan& span : kv) {
    const int64_t n = std::min(span.n, keys - span.pos0);
    if (n <= 0) continue;
    WidenRows(span.dtype, span.v, kw, v + span.pos0 * kw, kw, n, shape.kv_heads, shape.head_dim,
              nullptr, span.pos0);
    WidenRows(span.dtype, span.k, kw, k + span.pos0 * kw, kw, n, shape.kv_heads, shape.head_dim,
              span.rope ? &rope : nullptr, span.pos0);
  }
}

// The query tile of the i-th item of a kv head's `tiles`: first with last (0, T-1, 1, T-2,
// ...), so equal ranges of items cost about the same under the causal mask.
int64_t PairedTile(int64_t i, int64_t tiles) { return i % 2 == 0 ? i / 2 : tiles - 1 - i / 2; }

// The keys of row r's block [b0, b0 + nb) that it may attend.
int64_t ValidKeys(std::span<const int64_t> positions, int64_t r, int64_t b0, int64_t nb) {
  return std::clamp<int64_t>(positions[static_cast<size_t>(r)] + 1 - b0, 0, nb);
}

// fp32 attention on oneDNN (CPUs with AVX-512): per (head, query tile) and key block, the
// scores Q K^T and the accumulation P V as dnnl_sgemm products (GemmAnyShape), the online
// softmax between them.
void AttentionF32(const AttentionShape& shape, const float* q, const float* k, const float* v,
                  float* out, std::span<const int64_t> positions) {
  constexpr int64_t kTile = 128, kKeyBlock = 256;
  const auto rows = static_cast<int64_t>(positions.size());
  const int64_t hd = shape.head_dim, group = shape.heads / shape.kv_heads;
  const int64_t ldq = shape.heads * hd, ldk = shape.kv_heads * hd;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  const int64_t tiles = (rows + kTile - 1) / kTile;
  // Work items (head, tile), numbered head-major so each thread's range holds whole heads
  // (tiles grow with their keys; a head's tiles together cost the same for every head). Each
  // item runs on one thread.
  cpu::ParallelFor(shape.heads * tiles, tiles, [&](int64_t p0, int64_t p1) {
    std::vector<float> scores(static_cast<size_t>(kTile * kKeyBlock));
    std::vector<float> acc(static_cast<size_t>(kTile * hd)), max(kTile), sum(kTile);
    for (int64_t p = p0; p < p1; ++p) {
      const int64_t h = p / tiles, r0 = (p % tiles) * kTile, g = h / group;
      const int64_t tile = std::min(kTile, rows - r0);
      const int64_t keys = positions[static_cast<size_t>(r0 + tile - 1)] + 1;  // the last row's
      std::fill(acc.begin(), acc.end(), 0.0f);
      std::fill(max.begin(), max.end(), -std::numeric_limits<float>::infinity());
      std::fill(sum.begin(), sum.end(), 0.0f);
      int64_t first = 0;  // the tile's first row that attends the block (rows are sorted)
      for (int64_t b0 = 0; b0 < keys; b0 += kKeyBlock) {
        const int64_t nb = std::min(kKeyBlock, keys - b0);
        while (positions[static_cast<size_t>(r0 + first)] < b0) ++first;
        const int64_t m = tile - first;
        float* sc = scores.data() + first * nb;
        cpu::GemmAnyShape(cpu::Trans::kNo, cpu::Trans::kYes, m, nb, hd, scale,
                          q + (r0 + first) * ldq + h * hd, ldq, k + b0 * ldk + g * hd, ldk, 0.0f,
                          sc, nb);
        for (int64_t i = first; i < tile; ++i) {
          float* row = scores.data() + i * nb;
          const int64_t valid = ValidKeys(positions, r0 + i, b0, nb);
          if (valid > 0) {
            const float rescale = SoftmaxStep(row, valid, &max[i], &sum[i]);
            float* a = acc.data() + i * hd;
            for (int64_t d = 0; d < hd; ++d) a[d] *= rescale;
          }
          std::fill(row + valid, row + nb, 0.0f);
        }
        cpu::GemmAnyShape(cpu::Trans::kNo, cpu::Trans::kNo, m, hd, nb, 1.0f, sc, nb,
                          v + b0 * ldk + g * hd, ldk, 1.0f, acc.data() + first * hd, hd);
      }
      for (int64_t i = 0; i < tile; ++i) {
        const float inv = 1.0f / sum[i];
        float* o = out + (r0 + i) * ldq + h * hd;
        for (int64_t d = 0; d < hd; ++d) o[d] = acc[static_cast<size_t>(i * hd + d)] * inv;
      }
    }
  });
}

// The fused fp32 kernel, for CPUs whose fp32 products run on RowStableGemm (no AVX-512): the
// same sums in the same order as RowStableGemm would make them, but with the scores of a group
// of up to 6 query rows kept in L1 from Q K^T through the softmax to P V, and no operand packed
// per product. K and V of every kv head are packed once per call into RowStableGemm's panel
// layout (gpu/cpu/row_stable_gemm.h): K^T as panels of 16 keys [head_dim][16], V as panels of
// 16 dimensions [keys][16]. A work item is one query tile of every head of one kv head, so a
// key block is read for all of them while it is in L2.
namespace fused {

constexpr int64_t kTile = 96;       // query rows per work item
constexpr int64_t kKeyBlock = 256;  // keys per softmax block
constexpr int kGroupRows = 6;       // query rows per micro-tile: 12 accumulators
constexpr int64_t kPanel = cpu::kRowStablePanel;

using cpu::vec8::Load;
using cpu::vec8::Splat;
using cpu::vec8::Store;
using cpu::vec8::V8;

// s[r][0, 16) = scale * sum over d < hd, in order, of q[d][r] * kp[d][0, 16) for R rows of Q
// packed as q[d * kGroupRows + r]: one FMA chain per score.
template <int R>
void ScoreTile(const float* qg, const float* kp, int64_t hd, float scale, float* s, int64_t lds) {
  V8 acc[R][2] = {};
  cpu::vec8::PanelChain<R, 1, kGroupRows>(qg, kp, hd, acc);
#pragma GCC unroll 6
  for (int r = 0; r < R; ++r) {
    Store(s + r * lds, Splat(scale) * acc[r][0]);
    Store(s + r * lds + 8, Splat(scale) * acc[r][1]);
  }
}

// o[r][0, 16) += sum over j < nb, in order, of p[r][j] * vp[j][0, 16) (the sum made first,
// from zero, then added): R rows of the block's probabilities p (row stride kKeyBlock), one V
// panel vp at the block's first key.
template <int R>
void ValueTile(const float* p, const float* vp, int64_t nb, float* o, int64_t ldo) {
  V8 acc[R][2] = {};
  cpu::vec8::PanelChain<R, kKeyBlock, 1>(p, vp, nb, acc);
#pragma GCC unroll 6
  for (int r = 0; r < R; ++r) {
    Store(o + r * ldo, acc[r][0] + Load(o + r * ldo));
    Store(o + r * ldo + 8, acc[r][1] + Load(o + r * ldo + 8));
  }
}

using ScoreFn = void (*)(const float*, const float*, int64_t, float, float*, int64_t);
using ValueFn = void (*)(const float*, const float*, int64_t, float*, int64_t);
constexpr ScoreFn kScoreTiles[kGroupRows] = {ScoreTile<1>, ScoreTile<2>, ScoreTile<3>,
                                             ScoreTile<4>, ScoreTile<5>, ScoreTile<6>};
constexpr ValueFn kValueTiles[kGroupRows] = {ValueTile<1>, ValueTile<2>, ValueTile<3>,
                                             ValueTile<4>, ValueTile<5>, ValueTile<6>};

void Attention(const AttentionShape& shape, const float* q, const float* k, const float* v,
               float* out, std::span<const int64_t> positions) {
  const auto rows = static_cast<int64_t>(positions.size());
  const int64_t hd = shape.head_dim, group = shape.heads / shape.kv_heads;
  const int64_t ldq = shape.heads * hd, ldk = shape.kv_heads * hd;
  const int64_t hd_panels = (hd + kPanel - 1) / kPanel, ldo = hd_panels * kPanel;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  const int64_t keys = positions.back() + 1;

  // K and V packed per kv head into the calling thread's buffer, kept between calls (a fresh
  // one would be mapped and zeroed every time: megabytes at a long prompt).
  const int64_t k_size = cpu::RowStablePanelElements(keys, hd);
  const int64_t v_size = cpu::RowStablePanelElements(hd, keys);
  const int64_t per_head = k_size + v_size;
  thread_local std::vector<float> kept;
  if (kept.size() < static_cast<size_t>(shape.kv_heads * per_head)) {
    kept.resize(static_cast<size_t>(shape.kv_heads * per_head));
  }
  float* const packed = kept.data();  // the lambdas run on other threads too: not `kept`
  cpu::ParallelFor(shape.kv_heads, 1, [&](int64_t g0, int64_t g1) {
    for (int64_t g = g0; g < g1; ++g) {
      float* dst = packed + g * per_head;
      cpu::PackRowStablePanelsF32(cpu::Trans::kYes, keys, hd, k + g * hd, ldk, dst);
      cpu::PackRowStablePanelsF32(cpu::Trans::kNo, hd, keys, v + g * hd, ldk, dst + k_size);
    }
  });

  // Items (kv head, tile), the tiles of a kv head in PairedTile's order, down to one a thread.
  const int64_t tiles = (rows + kTile - 1) / kTile;
  cpu::ParallelFor(shape.kv_heads * tiles, 1, [&](int64_t i0, int64_t i1) {
    const auto per_item = [&](int64_t n) { return static_cast<size_t>(group * n); };
    std::vector<float> o(per_item(kTile * ldo)), max(per_item(kTile)), sum(per_item(kTile));
    std::vector<float> qg(static_cast<size_t>(hd * kGroupRows));
    std::vector<float> s(static_cast<size_t>(kGroupRows * kKeyBlock));
    for (int64_t item = i0; item < i1; ++item) {
      const int64_t g = item / tiles, t = PairedTile(item % tiles, tiles);
      const int64_t r0 = t * kTile, tile = std::min(kTile, rows - r0);
      const int64_t tile_keys = positions[static_cast<size_t>(r0 + tile - 1)] + 1;
      const float* kh = packed + g * per_head;
      const float* vh = kh + k_size;
      std::fill(o.begin(), o.end(), 0.0f);
      std::fill(max.begin(), max.end(), -std::numeric_limits<float>::infinity());
      std::fill(sum.begin(), sum.end(), 0.0f);
      int64_t first = 0;  // the tile's first row that attends the block (rows are sorted)
      for (int64_t b0 = 0; b0 < tile_keys; b0 += kKeyBlock) {
        const int64_t nb = std::min(kKeyBlock, tile_keys - b0);
        while (positions[static_cast<size_t>(r0 + first)] < b0) ++first;
        for (int64_t hi = 0; hi < group; ++hi) {
          const int64_t h = g * group + hi;
          for (int64_t r = first; r < tile; r += kGroupRows) {
            const auto n_rows = static_cast<int>(std::min<int64_t>(kGroupRows, tile - r));
            for (int i = 0; i < n_rows; ++i) {
              const float* src = q + (r0 + r + i) * ldq + h * hd;
              for (int64_t d = 0; d < hd; ++d) qg[static_cast<size_t>(d * kGroupRows + i)] = src[d];
            }
            for (int64_t j = 0; j < nb; j += kPanel) {
              kScoreTiles[n_rows - 1](qg.data(), kh + (b0 + j) * hd, hd, scale, s.data() + j,
                                      kKeyBlock);
            }
            const int64_t row0 = hi * kTile + r;  // the group's first row in o, max and sum
            for (int i = 0; i < n_rows; ++i) {
              float* srow = s.data() + i * kKeyBlock;
              const int64_t valid = ValidKeys(positions, r0 + r + i, b0, nb);
              if (valid > 0) {
                const int64_t ri = row0 + i;
                const float rescale = SoftmaxStep(srow, valid, &max[ri], &sum[ri]);
                if (rescale != 1.0f) {
                  float* oi = o.data() + ri * ldo;
                  for (int64_t d = 0; d < hd; ++d) oi[d] *= rescale;
                }
              }
              std::fill(srow + valid, srow + nb, 0.0f);
            }
            for (int64_t c = 0; c < hd_panels; ++c) {
              kValueTiles[n_rows - 1](s.data(), vh + (c * keys + b0) * kPanel, nb,
                                      o.data() + row0 * ldo + c * kPanel, ldo);
            }
          }
        }
      }
      for (int64_t hi = 0; hi < group; ++hi) {
        for (int64_t i = 0; i < tile; ++i) {
          const int64_t ri = hi * kTile + i;
          const float inv = 1.0f / sum[static_cast<size_t>(ri)];
          float* dst = out + (r0 + i) * ldq + (g * group + hi) * hd;
          for (int64_t d = 0; d < hd; ++d) dst[d] = o[static_cast<size_t>(ri * ldo + d)] * inv;
        }
      }
    }
  });
}

}  // namespace fused

#ifdef HYPIC_BF16_ATTENTION
// GCC 12's AVX-512 headers pass _mm512_undefined_ps() as the unused operand of the unmasked
// forms, which -Wuninitialized or -Wmaybe-uninitialized reports once inlined, depending on the
// inlining (GCC bug 105593, fixed in 13).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

// The span of `kv` (in order, covering every position from 0) that holds position p.
size_t SpanOf(std::span<const KvSpan> kv, int64_t p) {
  size_t s = 0;
  while (p >= kv[s].pos0 + kv[s].n) ++s;
  return s;
}

// Rows [b0, b0 + n) of kv head g's K (key) or V rounded to bf16 into dst ([n, hd]): fp32 rows
// straight from their span, a rope span's K rotated on the way (RopeRowsToBf16: the bits of
// ApplyRope then the rounding), bf16 rows that need no rotation copied as they are (the bits
// their widening and rounding would give back, but for denormals, which the rounding
// instruction flushes to zero), rows of other dtypes widened into `tile` (n x hd floats)
// first.
void Bf16BlockRows(std::span<const KvSpan> kv, const KvRope& rope, bool key, int64_t ldk, int64_t g,
                   int64_t hd, int64_t b0, int64_t n, float* tile, uint16_t* dst) {
  for (int64_t p = b0, s = static_cast<int64_t>(SpanOf(kv, b0)); p < b0 + n; ++s) {
    const KvSpan& span = kv[static_cast<size_t>(s)];
    const int64_t take = std::min(b0 + n, span.pos0 + span.n) - p;
    const auto elem = static_cast<int64_t>(DTypeSize(span.dtype));
    const auto* src = static_cast<const std::byte*>(key ? span.k : span.v) +
                      ((p - span.pos0) * ldk + g * hd) * elem;
    uint16_t* out = dst + (p - b0) * hd;
    const bool rotate = key && span.rope;
    if (span.dtype == DType::kBF16 && !rotate) {
      const auto* rows16 = reinterpret_cast<const uint16_t*>(src);
      for (int64_t r = 0; r < take; ++r) std::copy_n(rows16 + r * ldk, hd, out + r * hd);
    } else {
      const auto* rows32 = reinterpret_cast<const float*>(src);
      int64_t ld = ldk;
      if (span.dtype != DType::kF32) {
        WidenRows(span.dtype, src, ldk, tile, hd, take, 1, hd, /*rope=*/nullptr, p);
        rows32 = tile;
        ld = hd;
      }
      if (rotate) {
        RopeRowsToBf16(rows32, ld, out, hd, take, hd, rope.rotary_dim, rope.theta, p);
      } else {
        cpu::ConvertRowsToBf16(rows32, ld, take, hd, out, hd);
      }
    }
    p += take;
  }
}

// The fused bf16 kernel. Operands are bf16 pairs held as uint32 (low half the even element),
// the unit vdpbf16ps multiplies: lane l of dst += a[2l] * b[2l] + a[2l + 1] * b[2l + 1].
constexpr int64_t kQTile = 64;    // query rows per work item
constexpr int64_t kKBlock = 256;  // keys per softmax block, a multiple of 32
constexpr int64_t kQkRows = 8;    // the QK micro-tile: 8 rows x 32 keys, 16 accumulators
constexpr int64_t kKeyGroup = 16;

inline __m512bh AsBf16(__m512i x) { return reinterpret_cast<const __m512bh&>(x); }

// A bf16 pair read out of uint16_t storage (Q, the probabilities, a K row): may_alias, so the
// 32-bit reads are ordered after the 16-bit writes.
typedef uint32_t Bf16PairAlias __attribute__((may_alias));

// K and V of every kv head in the kernels' layouts, keys padded with zeros to kKBlock, into
// *buffer (k, then v; each `keys_pad * head_dim / 2` pairs per head):
//   k: per head, groups of 16 keys; per group the head's dimension pairs in order; per pair 16
//      lanes, lane l = key l of the group's (k[2p], k[2p + 1]).
//   v: per head, key pairs in order; per pair the head's dimensions, (v[2j][d], v[2j + 1][d]).
struct PackedKv {
  int64_t per_head = 0;
  const uint32_t* k = nullptr;
  const uint32_t* v = nullptr;
};

// The 16 x 16 block of pairs at rows[l * ld + p] (16 keys l, 16 pairs p) transposed into
// out[p * 16 + l]: PackKv's key groups. Three rounds of in-register interleaves (32-bit
// within 128-bit lanes, 64-bit, then whole lanes) where a scalar loop moved one pair at a
// time (three quarters of PackKv's samples in a warm compose on a Xeon).
void TransposePairs16(const Bf16PairAlias* rows, int64_t ld, uint32_t* out) {
  __m512i r[16], t[16];
  for (int l = 0; l < 16; ++l) r[l] = _mm512_loadu_si512(rows + l * ld);
  for (int i = 0; i < 8; ++i) {  // lane L of t[2i]: pairs 4L, 4L + 1 of keys 2i, 2i + 1
    t[2 * i] = _mm512_unpacklo_epi32(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_epi32(r[2 * i], r[2 * i + 1]);
  }
  for (int i = 0; i < 4; ++i) {  // lane L of r[4i + c]: pair 4L + c of keys 4i .. 4i + 3
    r[4 * i] = _mm512_unpacklo_epi64(t[4 * i], t[4 * i + 2]);
    r[4 * i + 1] = _mm512_unpackhi_epi64(t[4 * i], t[4 * i + 2]);
    r[4 * i + 2] = _mm512_unpacklo_epi64(t[4 * i + 1], t[4 * i + 3]);
    r[4 * i + 3] = _mm512_unpackhi_epi64(t[4 * i + 1], t[4 * i + 3]);
  }
  constexpr int kEven = 0x88, kOdd = 0xDD;  // lanes (0, 2) or (1, 3) of each operand
  for (int c = 0; c < 4; ++c) {
    const __m512i even_lo = _mm512_shuffle_i32x4(r[c], r[4 + c], kEven);
    const __m512i odd_lo = _mm512_shuffle_i32x4(r[c], r[4 + c], kOdd);
    const __m512i even_hi = _mm512_shuffle_i32x4(r[8 + c], r[12 + c], kEven);
    const __m512i odd_hi = _mm512_shuffle_i32x4(r[8 + c], r[12 + c], kOdd);
    _mm512_storeu_si512(out + c * 16, _mm512_shuffle_i32x4(even_lo, even_hi, kEven));
    _mm512_storeu_si512(out + (4 + c) * 16, _mm512_shuffle_i32x4(odd_lo, odd_hi, kEven));
    _mm512_storeu_si512(out + (8 + c) * 16, _mm512_shuffle_i32x4(even_lo, even_hi, kOdd));
    _mm512_storeu_si512(out + (12 + c) * 16, _mm512_shuffle_i32x4(odd_lo, odd_hi, kOdd));
  }
}

PackedKv PackKv(const AttentionShape& shape, const KvRope& rope, std::span<const KvSpan> kv,
                int64_t keys, AlignedVector<uint32_t>* buffer) {
  const int64_t hd = shape.head_dim, pairs = hd / 2, ldk = shape.kv_heads * hd;
  const int64_t blocks = (keys + kKBlock - 1) / kKBlock;
  const int64_t per_head = blocks * kKBlock * pairs, per_tensor = shape.kv_heads * per_head;
  // Every element is written below, so growing the buffer is the only fill. It starts on a cache
  // line, and per_head is a multiple of 16 pairs, so every 64-byte row the tiles load is one
  // line (core/aligned_vector.h).
  if (buffer->size() < static_cast<size_t>(2 * per_tensor)) {
    buffer->resize(static_cast<size_t>(2 * per_tensor));
  }
  uint32_t* kp = buffer->data();
  uint32_t* vp = kp + per_tensor;
  cpu::ParallelFor(shape.kv_heads * blocks, 4, [&](int64_t i0, int64_t i1) {
    std::vector<uint16_t> rows16(static_cast<size_t>(kKBlock * hd));
    std::vector<float> widened(static_cast<size_t>(kKBlock * hd));  // Bf16BlockRows' tile
    for (int64_t item = i0; item < i1; ++item) {
      const int64_t g = item / blocks, b0 = (item % blocks) * kKBlock;
      const int64_t n = std::min(kKBlock, keys - b0);
      std::fill(rows16.begin() + n * hd, rows16.end(), uint16_t{0});
      const auto* rows32 = reinterpret_cast<const Bf16PairAlias*>(rows16.data());

      Bf16BlockRows(kv, rope, /*key=*/true, ldk, g, hd, b0, n, widened.data(), rows16.data());
      uint32_t* kd = kp + g * per_head + b0 * pairs;
      for (int64_t kg = 0; kg < kKBlock / kKeyGroup; ++kg) {
        const Bf16PairAlias* group_rows = rows32 + kg * kKeyGroup * pairs;
        uint32_t* group_out = kd + kg * pairs * kKeyGroup;
        int64_t p = 0;
        for (; p + 16 <= pairs; p += 16)
          TransposePairs16(group_rows + p, pairs, group_out + p * 16);
        for (; p < pairs; ++p) {
          for (int64_t l = 0; l < kKeyGroup; ++l) group_out[p * 16 + l] = group_rows[l * pairs + p];
        }
      }

      Bf16BlockRows(kv, rope, /*key=*/false, ldk, g, hd, b0, n, widened.data(), rows16.data());
      uint32_t* vd = vp + g * per_head + b0 * pairs;
      for (int64_t j = 0; j < kKBlock / 2; ++j) {
        const uint16_t* even = rows16.data() + 2 * j * hd;
        const uint16_t* odd = even + hd;
        for (int64_t d = 0; d < hd; ++d) {
          vd[j * hd + d] = uint32_t{even[d]} | uint32_t{odd[d]} << 16;
        }
      }
    }
  });
  return {per_head, kp, vp};
}

// Horizontal max and sum of 16 lanes, by swapping halves (256, 128, 64, 32 bits).
template <class Op>
float Reduce16(__m512 v, Op op) {
  v = op(v, _mm512_shuffle_f32x4(v, v, 0x4E));
  v = op(v, _mm512_shuffle_f32x4(v, v, 0xB1));
  v = op(v, _mm512_permute_ps(v, 0x4E));
  v = op(v, _mm512_permute_ps(v, 0xB1));
  return _mm512_cvtss_f32(v);
}
float ReduceMax(__m512 v) {
  return Reduce16(v, [](__m512 a, __m512 b) { return _mm512_max_ps(a, b); });
}
float ReduceSum(__m512 v) {
  return Reduce16(v, [](__m512 a, __m512 b) { return _mm512_add_ps(a, b); });
}

// e^(s - m) of 16 lanes, for s <= m (scores minus their max), in base 2: x = (s - m) log2(e)
// in one fma, r = x - floor(x) in [0, 1) by vreduceps, 2^r by a degree-4 minimax polynomial
// (2.7e-6 relative in float, as FastExp's 2.4e-6; the result is rounded to bf16, 2^-9, next),
// and 2^floor(x) applied by vscalefps, which floors its exponent operand itself and takes a
// very negative x to 0 (the true value underflows there). `m_log2e` is m log2(e) rounded to
// float, so every value of one block shares a factor within |m| 2^-24 of 1 (4e-6 at |m| = 64),
// of the polynomial's order. 7 operations where a Taylor polynomial in r = x - round(x) took
// 10 (its rounding by adding and subtracting 1.5 * 2^23 and one more degree), and the softmax
// is most of the kernel's vector work. NaN propagates.
__m512 ExpShifted(__m512 s, __m512 m_log2e) {
  const __m512 x = _mm512_fmsub_ps(s, _mm512_set1_ps(1.44269504088896341f), m_log2e);
  const __m512 r = _mm512_reduce_ps(x, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC);
  // Minimax for 2^r on [0, 1) in relative error (float coefficients, Horner with fma).
  __m512 p = _mm512_fmadd_ps(_mm512_set1_ps(1.3534008525e-2f), r, _mm512_set1_ps(5.2011381835e-2f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(2.4144311249e-1f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(6.9300365448e-1f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0000026226e+0f));
  return _mm512_scalef_ps(p, x);
}

// Calls f(std::integral_constant<int, 0>{}) ... f(<N - 1>) in order: the micro-kernels' loops
// over accumulators, unrolled in the source so their arrays live in registers.
template <int N, class F>
[[gnu::always_inline]] inline void Unroll(F&& f) {
  [&]<int... I>(std::integer_sequence<int, I...>) { (f(std::integral_constant<int, I>{}), ...); }
  (std::make_integer_sequence<int, N>{});
}

// SoftmaxStep for the bf16 kernel, in AVX-512, writing the block's probabilities rounded to
// bf16 into p[0, valid) (its lanes up to the next multiple of 16 get zeros).
float SoftmaxStepBf16(const float* row, int64_t valid, float* max, float* sum, uint16_t* p) {
  const int64_t full = valid / 16 * 16;
  const __mmask16 tail = _cvtu32_mask16((1u << (valid - full)) - 1);
  // Four independent max and two sum chains, so the passes run at the load and exp
  // throughput instead of one max or add latency per 16 scores.
  __m512 vmax[4] = {_mm512_set1_ps(*max), _mm512_set1_ps(*max), _mm512_set1_ps(*max),
                    _mm512_set1_ps(*max)};
  int64_t j = 0;
  for (; j + 64 <= full; j += 64) {
    Unroll<4>([&](auto a) { vmax[a] = _mm512_max_ps(vmax[a], _mm512_loadu_ps(row + j + 16 * a)); });
  }
  for (; j < full; j += 16) vmax[0] = _mm512_max_ps(vmax[0], _mm512_loadu_ps(row + j));
  if (full < valid) {
    vmax[1] = _mm512_mask_max_ps(vmax[1], tail, vmax[1], _mm512_maskz_loadu_ps(tail, row + full));
  }
  const float m =
      ReduceMax(_mm512_max_ps(_mm512_max_ps(vmax[0], vmax[1]), _mm512_max_ps(vmax[2], vmax[3])));
  const float rescale = FastExp(*max - m);
  const __m512 m_log2e = _mm512_set1_ps(m * 1.44269504088896341f);
  __m512 vsum[2] = {_mm512_setzero_ps(), _mm512_setzero_ps()};
  auto step = [&](int64_t at, __m512 e, int a) {
    vsum[a] = _mm512_add_ps(vsum[a], e);
    const __m256bh packed = _mm512_cvtneps_pbh(e);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(p + at),
                        reinterpret_cast<const __m256i&>(packed));
  };
  j = 0;
  // 32 scores a step, rounded together by vcvtne2ps2bf16 (one conversion of 32 values where
  // two of 16 took twice the uops; the same rounding to nearest even).
  for (; j + 32 <= full; j += 32) {
    const __m512 lo = ExpShifted(_mm512_loadu_ps(row + j), m_log2e);
    const __m512 hi = ExpShifted(_mm512_loadu_ps(row + j + 16), m_log2e);
    vsum[0] = _mm512_add_ps(vsum[0], lo);
    vsum[1] = _mm512_add_ps(vsum[1], hi);
    const __m512bh packed = _mm512_cvtne2ps_pbh(hi, lo);
    _mm512_storeu_si512(p + j, reinterpret_cast<const __m512i&>(packed));
  }
  for (; j < full; j += 16) step(j, ExpShifted(_mm512_loadu_ps(row + j), m_log2e), 0);
  if (full < valid) {
    step(full,
         _mm512_maskz_mov_ps(tail, ExpShifted(_mm512_maskz_loadu_ps(tail, row + full), m_log2e)),
         1);
  }
  *sum = *sum * rescale + ReduceSum(_mm512_add_ps(vsum[0], vsum[1]));
  *max = m;
  return rescale;
}

// s[r][j] = q_r . k_j for kQkRows rows of qp (pairs per row) and the 32 keys of the two key
// groups at kp (a group is pairs * 16 lanes).
void QkTile(const Bf16PairAlias* qp, int64_t pairs, const uint32_t* kp, float* s, int64_t lds) {
  __m512 acc[kQkRows][2];
  Unroll<kQkRows>([&](auto r) { acc[r][0] = acc[r][1] = _mm512_setzero_ps(); });
  const uint32_t* kp1 = kp + pairs * kKeyGroup;
  for (int64_t p = 0; p < pairs; ++p) {
    const __m512bh k0 = AsBf16(_mm512_loadu_si512(kp + p * kKeyGroup));
    const __m512bh k1 = AsBf16(_mm512_loadu_si512(kp1 + p * kKeyGroup));
    Unroll<kQkRows>([&](auto r) {
      const __m512bh qb = AsBf16(_mm512_set1_epi32(static_cast<int>(qp[r * pairs + p])));
      acc[r][0] = _mm512_dpbf16_ps(acc[r][0], qb, k0);
      acc[r][1] = _mm512_dpbf16_ps(acc[r][1], qb, k1);
    });
  }
  Unroll<kQkRows>([&](auto r) {
    _mm512_storeu_ps(s + r * lds, acc[r][0]);
    _mm512_storeu_ps(s + r * lds + kKeyGroup, acc[r][1]);
  });
}

// o[r][0, 16 kCols) += sum_j p[r][j] v[j][.] over `pairs` key pairs, for kRows rows: pp holds
// each row's probabilities as bf16 pairs (row stride ldp), vp the packed V at the first pair
// and column (pair stride ldv).
template <int kCols, int kRows>
void PvTile(const Bf16PairAlias* pp, int64_t ldp, const uint32_t* vp, int64_t ldv, int64_t pairs,
            float* o, int64_t ldo) {
  __m512 acc[kRows][kCols];
  Unroll<kRows>([&](auto r) {
    Unroll<kCols>([&](auto c) { acc[r][c] = _mm512_loadu_ps(o + r * ldo + 16 * c); });
  });
  for (int64_t j = 0; j < pairs; ++j) {
    __m512bh vv[kCols];
    Unroll<kCols>([&](auto c) { vv[c] = AsBf16(_mm512_loadu_si512(vp + j * ldv + 16 * c)); });
    Unroll<kRows>([&](auto r) {
      const __m512bh pb = AsBf16(_mm512_set1_epi32(static_cast<int>(pp[r * ldp + j])));
      Unroll<kCols>([&](auto c) { acc[r][c] = _mm512_dpbf16_ps(acc[r][c], pb, vv[c]); });
    });
  }
  Unroll<kRows>([&](auto r) {
    Unroll<kCols>([&](auto c) { _mm512_storeu_ps(o + r * ldo + 16 * c, acc[r][c]); });
  });
}

// PV for `rows` rows (a multiple of 8) of o (row stride hd), every column of the head, in
// column chunks of 8, 4, 2 or 1 vectors (16 or 8 accumulators).
void PvRows(const Bf16PairAlias* pp, int64_t ldp, const uint32_t* vp, int64_t hd, int64_t pairs,
            int64_t rows, float* o) {
  for (int64_t c0 = 0; c0 < hd;) {
    const int64_t left = (hd - c0) / 16;
    const int64_t cols = left >= 8 ? 8 : left >= 4 ? 4 : left >= 2 ? 2 : 1;
    for (int64_t r = 0; r < rows;) {
      const Bf16PairAlias* p = pp + r * ldp;
      float* orow = o + r * hd + c0;
      switch (cols) {
        case 8:
          PvTile<8, 2>(p, ldp, vp + c0, hd, pairs, orow, hd);
          r += 2;
          break;
        case 4:
          PvTile<4, 4>(p, ldp, vp + c0, hd, pairs, orow, hd);
          r += 4;
          break;
        case 2:
          PvTile<2, 8>(p, ldp, vp + c0, hd, pairs, orow, hd);
          r += 8;
          break;
        default:
          PvTile<1, 8>(p, ldp, vp + c0, hd, pairs, orow, hd);
          r += 8;
          break;
      }
    }
    c0 += 16 * cols;
  }
}

#ifdef HYPIC_AMX_ATTENTION
// The same products on AMX tiles (Sapphire Rapids and later), where vdpbf16ps runs at a
// fraction of the tile unit's rate. tdpbf16ps is the same operation on a 16 x 32 bf16 A tile
// and a 16-pair x 16-column B tile (lane pairs as vdpbf16ps's), accumulating 16 x 16 fp32; the
// packed K (per 16-key group, pairs then lanes) and V (per key pair, columns) are already B
// tiles. A group is kAmxRows query rows; a row's bits still depend only on its own Q row.
// Tiles as gpu/cpu/amx.h configures them (16 rows x 64 bytes); tile numbers are immediates.
constexpr int64_t kAmxRows = 16;

// s[16 rows][16 * groups keys] = Q K^T for the group's 16 bf16 Q rows (q16, row stride hd) and
// `groups` (even) packed 16-key groups at kp, for hd = 32 kChunks (64 or 128). The Q row
// chunks of 32 dimensions stay in the last kChunks tiles across every key group (loading Q
// again for every pair of key groups cost 8% of the kernel at 16k rows). The tiles left hold
// scores and K chunks: at hd 64 the scores of four key groups (tiles 0-3; K in 4, 5), so four
// accumulations are in flight where two waited on each other's latency; at hd 128, and for a
// last pair of key groups at hd 64, two (0, 1; K in 2, 3). Every score is the same sum in the
// same order either way.
template <int kChunks>
[[gnu::target("amx-tile,amx-bf16")]] void QkAmx(const uint16_t* q16, const uint32_t* kp,
                                                int64_t groups, float* s, int64_t lds) {
  static_assert(kChunks == 2 || kChunks == 4);
  constexpr int64_t hd = 32 * kChunks, group_pairs = hd / 2 * kKeyGroup;
  // The intrinsics paste their tile numbers into the instruction text, so every tile number
  // is a literal and the loops over chunks and key groups are written out. Q chunk c is tile
  // 8 - kChunks + c.
#define HYPIC_QK_STEP(acc, ktile, qtile, group, c)                         \
  _tile_loadd(ktile, kp + ((group)*group_pairs + 16 * (c)*kKeyGroup), 64); \
  _tile_dpbf16ps(acc, qtile, ktile)
#define HYPIC_QK_STORE(acc, group) _tile_stored(acc, s + (group)*kKeyGroup, lds * 4)
  // Chunk c of key groups g, g + 1 into scores 0, 1 (K in tiles 2, 3), Q chunk in qtile.
#define HYPIC_QK_PAIR(qtile, c)     \
  HYPIC_QK_STEP(0, 2, qtile, g, c); \
  HYPIC_QK_STEP(1, 3, qtile, g + 1, c)
  int64_t g = 0;
  if constexpr (kChunks == 2) {
    _tile_loadd(6, q16, hd * 2);
    _tile_loadd(7, q16 + 32, hd * 2);
    for (; g + 4 <= groups; g += 4) {
      _tile_zero(0);
      _tile_zero(1);
      _tile_zero(2);
      _tile_zero(3);
      HYPIC_QK_STEP(0, 4, 6, g, 0);
      HYPIC_QK_STEP(1, 5, 6, g + 1, 0);
      HYPIC_QK_STEP(2, 4, 6, g + 2, 0);
      HYPIC_QK_STEP(3, 5, 6, g + 3, 0);
      HYPIC_QK_STEP(0, 4, 7, g, 1);
      HYPIC_QK_STEP(1, 5, 7, g + 1, 1);
      HYPIC_QK_STEP(2, 4, 7, g + 2, 1);
      HYPIC_QK_STEP(3, 5, 7, g + 3, 1);
      HYPIC_QK_STORE(0, g);
      HYPIC_QK_STORE(1, g + 1);
      HYPIC_QK_STORE(2, g + 2);
      HYPIC_QK_STORE(3, g + 3);
    }
    for (; g < groups; g += 2) {
      _tile_zero(0);
      _tile_zero(1);
      HYPIC_QK_PAIR(6, 0);
      HYPIC_QK_PAIR(7, 1);
      HYPIC_QK_STORE(0, g);
      HYPIC_QK_STORE(1, g + 1);
    }
  } else {
    _tile_loadd(4, q16, hd * 2);
    _tile_loadd(5, q16 + 32, hd * 2);
    _tile_loadd(6, q16 + 64, hd * 2);
    _tile_loadd(7, q16 + 96, hd * 2);
    for (; g < groups; g += 2) {
      _tile_zero(0);
      _tile_zero(1);
      HYPIC_QK_PAIR(4, 0);
      HYPIC_QK_PAIR(5, 1);
      HYPIC_QK_PAIR(6, 2);
      HYPIC_QK_PAIR(7, 3);
      HYPIC_QK_STORE(0, g);
      HYPIC_QK_STORE(1, g + 1);
    }
  }
#undef HYPIC_QK_PAIR
#undef HYPIC_QK_STORE
#undef HYPIC_QK_STEP
}

// QkAmx for a head_dim over 128, whose Q chunks do not fit the tiles beside the scores and K:
// the Q chunk is loaded again for every pair of key groups (tile 4).
[[gnu::target("amx-tile,amx-bf16")]] void QkAmxStreamQ(const uint16_t* q16, int64_t hd,
                                                       const uint32_t* kp, int64_t groups, float* s,
                                                       int64_t lds) {
  const int64_t pairs = hd / 2, group_pairs = pairs * kKeyGroup;
  for (int64_t g = 0; g < groups; g += 2) {
    const uint32_t* k0 = kp + g * group_pairs;
    const uint32_t* k1 = k0 + group_pairs;
    _tile_zero(0);
    _tile_zero(1);
    for (int64_t c = 0; c < hd / 32; ++c) {
      _tile_loadd(4, q16 + 32 * c, hd * 2);
      _tile_loadd(2, k0 + 16 * c * kKeyGroup, 64);
      _tile_loadd(3, k1 + 16 * c * kKeyGroup, 64);
      _tile_dpbf16ps(0, 4, 2);
      _tile_dpbf16ps(1, 4, 3);
    }
    _tile_stored(0, s + g * kKeyGroup, lds * 4);
    _tile_stored(1, s + (g + 1) * kKeyGroup, lds * 4);
  }
}

// o[16 rows][hd] += P V over `pairs` (a multiple of 16) key pairs: p16 the rows'
// probabilities (row stride ldp), vp the packed V at the block's first pair. Tiles: 0-3 a
// 64-column chunk of o, 4 the P step, 5-7 V.
[[gnu::target("amx-tile,amx-bf16")]] void PvAmx(const uint16_t* p16, int64_t ldp,
                                                const uint32_t* vp, int64_t hd, int64_t pairs,
                                                float* o) {
  const int64_t ldo = hd * 4, ldv = hd * 4;
  for (int64_t c0 = 0; c0 < hd; c0 += 64) {
    float* oc = o + c0;
    _tile_loadd(0, oc, ldo);
    _tile_loadd(1, oc + 16, ldo);
    _tile_loadd(2, oc + 32, ldo);
    _tile_loadd(3, oc + 48, ldo);
    for (int64_t j = 0; j < pairs; j += 16) {
      const uint32_t* vj = vp + j * hd + c0;
      _tile_loadd(4, p16 + 2 * j, ldp * 2);
      _tile_loadd(5, vj, ldv);
      _tile_loadd(6, vj + 16, ldv);
      _tile_dpbf16ps(0, 4, 5);
      _tile_loadd(7, vj + 32, ldv);
      _tile_dpbf16ps(1, 4, 6);
      _tile_loadd(5, vj + 48, ldv);
      _tile_dpbf16ps(2, 4, 7);
      _tile_dpbf16ps(3, 4, 5);
    }
    _tile_stored(0, oc, ldo);
    _tile_stored(1, oc + 16, ldo);
    _tile_stored(2, oc + 32, ldo);
    _tile_stored(3, oc + 48, ldo);
  }
}

// AMX takes the products when the machine has it and the head suits the tiles.
bool UseAmx(int64_t head_dim) { return head_dim % 64 == 0 && cpu::AmxUsable(); }
#else
bool UseAmx(int64_t) { return false; }
#endif  // HYPIC_AMX_ATTENTION

void AttentionBf16(const AttentionShape& shape, const KvRope& rope, const float* q,
                   std::span<const KvSpan> kv, float* out, std::span<const int64_t> positions,
                   AlignedVector<uint32_t>* pack_buffer) {
  const auto rows = static_cast<int64_t>(positions.size());
  const int64_t hd = shape.head_dim, pairs = hd / 2, group = shape.heads / shape.kv_heads;
  const int64_t ldq = shape.heads * hd;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  const PackedKv packed = PackKv(shape, rope, kv, positions.back() + 1, pack_buffer);

  const bool amx = UseAmx(hd);
  const int64_t group_rows = amx ? kAmxRows : kQkRows;  // query rows per scores-PV step
  const int64_t tiles = (rows + kQTile - 1) / kQTile;
  // An item is one query tile of every head of one kv head: each key block is read from memory
  // once for all of them and stays in cache while they use it (a (head, tile) item streamed the
  // whole K/V prefix once per query head). Items go kv head by kv head, and within one in
  // PairedTile's order; down to one item a thread (a compose's last layer, 16 rows in one tile:
  // a kv head each, where two items a thread left the second thread idle).
  cpu::ParallelFor(shape.kv_heads * tiles, 1, [&](int64_t i0, int64_t i1) {
#ifdef HYPIC_AMX_ATTENTION
    std::optional<cpu::ScopedTiles> tiles_held;
    if (amx) tiles_held.emplace();
#endif
    const auto per_head = [&](int64_t n) { return static_cast<size_t>(group * n); };
    std::vector<float> qrow(static_cast<size_t>(hd));
    // The tiles' operands (scores, output, Q, probabilities) start on cache lines, as the
    // packed K/V do.
    AlignedVector<float> s(static_cast<size_t>(group_rows * kKBlock));
    AlignedVector<float> o(per_head(kQTile * hd));
    std::vector<float> max(per_head(kQTile)), sum(per_head(kQTile));
    AlignedVector<uint16_t> q16(per_head(kQTile * hd));
    AlignedVector<uint16_t> pblock(per_head(kQTile * kKBlock));  // a block's probabilities
    const auto* qp = reinterpret_cast<const Bf16PairAlias*>(q16.data());
    for (int64_t item = i0; item < i1; ++item) {
      const int64_t g = item / tiles, t = PairedTile(item % tiles, tiles);
      const int64_t r0 = t * kQTile, tile = std::min(kQTile, rows - r0);
      const int64_t rows_pad = (tile + group_rows - 1) / group_rows * group_rows;
      for (int64_t hi = 0; hi < group; ++hi) {
        uint16_t* qh = q16.data() + hi * kQTile * hd;
        for (int64_t i = 0; i < tile; ++i) {
          const float* src = q + (r0 + i) * ldq + (g * group + hi) * hd;
          for (int64_t d = 0; d < hd; ++d) qrow[static_cast<size_t>(d)] = src[d] * scale;
          cpu::ConvertRowsToBf16(qrow.data(), hd, 1, hd, qh + i * hd, hd);
        }
        std::fill(qh + tile * hd, qh + kQTile * hd, uint16_t{0});
      }
      std::fill(o.begin(), o.end(), 0.0f);
      std::fill(max.begin(), max.end(), -std::numeric_limits<float>::infinity());
      std::fill(sum.begin(), sum.end(), 0.0f);
      const uint32_t* kh = packed.k + g * packed.per_head;
      const uint32_t* vh = packed.v + g * packed.per_head;
      const int64_t keys = positions[static_cast<size_t>(r0 + tile - 1)] + 1;  // the last row's
      int64_t first = 0;  // the tile's first row that attends the block (rows are sorted)
      for (int64_t b0 = 0; b0 < keys; b0 += kKBlock) {
        const int64_t nb = std::min(kKBlock, keys - b0);
        while (positions[static_cast<size_t>(r0 + first)] < b0) ++first;
        const int64_t rb = first / group_rows * group_rows;
        // Two sweeps over the block's (head, group of rows) steps. The first takes the scores
        // and the softmax step, while the group's scores are in L1, into the probabilities of
        // every step (pblock, in L2); the second the PV products. So the block's K, then its V,
        // stay in L1 across the steps (one sweep of both thrashed L1, and the tile loads
        // waited on L2: the products ran at a quarter of the tile unit's rate). A row's
        // operations, and so its bits, are those of one sweep.
        for (int64_t hi = 0; hi < group; ++hi) {
          const int64_t row0 = hi * kQTile;  // the head's rows in q16, o, max, sum and pblock
          for (int64_t r = rb; r < rows_pad; r += group_rows) {
#ifdef HYPIC_AMX_ATTENTION
            if (amx) {
              const int64_t groups = (nb + 2 * kKeyGroup - 1) / (2 * kKeyGroup) * 2;
              const uint16_t* qg = q16.data() + (row0 + r) * hd;
              const uint32_t* kb = kh + b0 * pairs;
              if (hd == 64) {
                QkAmx<2>(qg, kb, groups, s.data(), kKBlock);
              } else if (hd == 128) {
                QkAmx<4>(qg, kb, groups, s.data(), kKBlock);
              } else {
                QkAmxStreamQ(qg, hd, kb, groups, s.data(), kKBlock);
              }
            }
#endif
            for (int64_t j = 0; !amx && j < nb; j += 2 * kKeyGroup) {
              QkTile(qp + (row0 + r) * pairs, pairs, kh + (b0 + j) * pairs, s.data() + j, kKBlock);
            }
            for (int64_t i = 0; i < group_rows; ++i) {
              const int64_t ri = row0 + r + i;
              uint16_t* prow = pblock.data() + ri * kKBlock;
              const int64_t valid = r + i < tile ? ValidKeys(positions, r0 + r + i, b0, nb) : 0;
              if (valid > 0) {
                const float rescale =
                    SoftmaxStepBf16(s.data() + i * kKBlock, valid, &max[ri], &sum[ri], prow);
                // Where the max did not move the rescale is exactly 1 (FastExp(0)).
                if (rescale != 1.0f) {
                  float* oi = o.data() + ri * hd;
                  for (int64_t d = 0; d < hd; ++d) oi[d] *= rescale;
                }
              }
              const int64_t written = (valid + 15) / 16 * 16;
              std::fill(prow + written, prow + kKBlock, uint16_t{0});
            }
          }
        }
        for (int64_t hi = 0; hi < group; ++hi) {
          const int64_t row0 = hi * kQTile;
          for (int64_t r = rb; r < rows_pad; r += group_rows) {
            const uint16_t* pg = pblock.data() + (row0 + r) * kKBlock;
            float* og = o.data() + (row0 + r) * hd;
#ifdef HYPIC_AMX_ATTENTION
            if (amx) {
              const int64_t block_pairs = (nb + 31) / 32 * 16;
              PvAmx(pg, kKBlock, vh + b0 / 2 * hd, hd, block_pairs, og);
              continue;
            }
#endif
            PvRows(reinterpret_cast<const Bf16PairAlias*>(pg), kKBlock / 2, vh + b0 / 2 * hd, hd,
                   (nb + 1) / 2, kQkRows, og);
          }
        }
      }
      for (int64_t hi = 0; hi < group; ++hi) {
        for (int64_t i = 0; i < tile; ++i) {
          const int64_t ri = hi * kQTile + i;
          const float inv = 1.0f / sum[static_cast<size_t>(ri)];
          float* dst = out + (r0 + i) * ldq + (g * group + hi) * hd;
          for (int64_t d = 0; d < hd; ++d) dst[d] = o[static_cast<size_t>(ri * hd + d)] * inv;
        }
      }
    }
  });
}

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
#endif  // HYPIC_BF16_ATTENTION

}  // namespace

bool HasBf16Attention(int64_t head_dim) {
#ifdef HYPIC_BF16_ATTENTION
  // bf16_native: oneDNN's ISA cap, where one is set, allows the bf16 instructions.
  return head_dim % 16 == 0 && head_dim <= 512 && cpu::DescribeGemm().bf16_native;
#else
  (void)head_dim;
  return false;
#endif
}

const char* AttentionKernelName(int64_t head_dim, bool bf16_products) {
  if (!bf16_products || !HasBf16Attention(head_dim)) return "fp32";
#ifdef HYPIC_BF16_ATTENTION
  return UseAmx(head_dim) ? "amx-bf16" : "avx512-bf16";
#else
  return "fp32";  // unreachable: HasBf16Attention is false without the kernel
#endif
}

void CausalAttention(const AttentionShape& shape, const KvRope& rope, const float* q,
                     std::span<const KvSpan> kv, float* out, std::span<const int64_t> positions,
                     AlignedVector<uint32_t>* pack_buffer, std::vector<float>* contiguous) {
  if (positions.empty()) return;
#ifdef HYPIC_BF16_ATTENTION
  if (shape.bf16_products && HasBf16Attention(shape.head_dim) &&
      static_cast<int64_t>(positions.size()) >= kBf16AttentionMinRows) {
    AttentionBf16(shape, rope, q, kv, out, positions, pack_buffer);
    return;
  }
#else
  (void)pack_buffer;
#endif
  const auto* k = static_cast<const float*>(kv.front().k);
  const auto* v = static_cast<const float*>(kv.front().v);
  if (kv.size() > 1 || kv.front().rope || kv.front().dtype != DType::kF32) {
    const int64_t kw = shape.kv_heads * shape.head_dim, keys = positions.back() + 1;
    GatherKv(shape, rope, kv, keys, contiguous);
    k = contiguous->data();
    v = k + keys * kw;
  }
  if (cpu::DescribeGemm().f32_onednn) {
    AttentionF32(shape, q, k, v, out, positions);
  } else {
    fused::Attention(shape, q, k, v, out, positions);
  }
}

void CausalAttention(const AttentionShape& shape, const float* q, const float* k, const float* v,
                     float* out, std::span<const int64_t> positions,
                     AlignedVector<uint32_t>* pack_buffer) {
  if (positions.empty()) return;
  const KvSpan all{.pos0 = 0, .n = positions.back() + 1, .k = k, .v = v, .rope = false};
  CausalAttention(shape, {}, q, std::span(&all, 1), out, positions, pack_buffer, nullptr);
}

}  // namespace hypic::model
