#include "gpu/cpu/amx_gemm.h"

#include <algorithm>
#include <atomic>

#include "gpu/cpu/amx.h"
#include "gpu/cpu/compute_threads.h"

#ifdef HYPIC_AMX
#include <immintrin.h>
#endif

namespace hypic::cpu {

namespace {
std::atomic<uint64_t> amx_calls{0};
}  // namespace

uint64_t AmxGemmCalls() { return amx_calls.load(std::memory_order_relaxed); }

bool AmxGemmTakes(int64_t n, int64_t k) { return n > 0 && k > 0 && k % 32 == 0; }

#ifdef HYPIC_AMX
namespace {

constexpr int64_t kColumnBlock = 64;                     // the layout's block of columns
constexpr int64_t kDepthBlock = 32;                      // ... and of k
constexpr int64_t kPairRowBytes = kColumnBlock * 2 * 2;  // a pair row of a block: 64 columns x 2

// Spreads the prefetch of the next column block into L2 over the steps of the current one.
struct Prefetch {
  const char* next = nullptr;  // the next line to prefetch
  const char* end = nullptr;
  int64_t per_step = 0;

  void Step() {
    for (int64_t i = 0; i < per_step && next < end; ++i, next += 64)
      _mm_prefetch(next, _MM_HINT_T1);
  }
};

// C's Mt x Nt tiles of 16 x 16 (rows of A from a, columns of the block from b) over all of k.
// Tiles: C (mi, ni) in 2 mi + ni, A rows in 4 and 6, B columns in 5 and 7 (immediates).
template <int Mt, int Nt>
[[gnu::target("amx-tile,amx-bf16")]] void TileProduct(const uint16_t* a, int64_t lda,
                                                      const uint16_t* b, int64_t k_stride,
                                                      int64_t k_blocks, float* c, int64_t ldc,
                                                      Prefetch& prefetch) {
  _tile_zero(0);
  if constexpr (Nt > 1) _tile_zero(1);
  if constexpr (Mt > 1) _tile_zero(2);
  if constexpr (Mt > 1 && Nt > 1) _tile_zero(3);
  const int64_t a_stride = lda * 2;
  for (int64_t kb = 0; kb < k_blocks; ++kb) {
    prefetch.Step();
    const uint16_t* bk = b + kb * k_stride;
    const uint16_t* ak = a + kb * kDepthBlock;
    _tile_loadd(5, bk, kPairRowBytes);
    if constexpr (Nt > 1) _tile_loadd(7, bk + 32, kPairRowBytes);
    _tile_loadd(4, ak, a_stride);
    _tile_dpbf16ps(0, 4, 5);
    if constexpr (Nt > 1) _tile_dpbf16ps(1, 4, 7);
    if constexpr (Mt > 1) {
      _tile_loadd(6, ak + 16 * lda, a_stride);
      _tile_dpbf16ps(2, 6, 5);
      if constexpr (Nt > 1) _tile_dpbf16ps(3, 6, 7);
    }
  }
  const int64_t c_stride = ldc * 4;
  _tile_stored(0, c, c_stride);
  if constexpr (Nt > 1) _tile_stored(1, c + 16, c_stride);
  if constexpr (Mt > 1) _tile_stored(2, c + 16 * ldc, c_stride);
  if constexpr (Mt > 1 && Nt > 1) _tile_stored(3, c + 16 * ldc + 16, c_stride);
}

using TileProductFn = void (*)(const uint16_t*, int64_t, const uint16_t*, int64_t, int64_t, float*,
                               int64_t, Prefetch&);
constexpr TileProductFn kTileProducts[2][2] = {{TileProduct<1, 1>, TileProduct<1, 2>},
                                               {TileProduct<2, 1>, TileProduct<2, 2>}};

// Column blocks [nb0, nb1): each block's columns 32 at a time, all rows 32 at a time, so the
// block (64 KiB at k 512) is read from memory once and then from cache.
void BlockRange(int64_t m, const uint16_t* a, int64_t lda, const AmxBlockedWeight& w, float* c,
                int64_t ldc, int64_t nb0, int64_t nb1) {
  const ScopedTiles tiles;
  const int64_t k_blocks = w.k / kDepthBlock;
  const int64_t block_bytes = w.n_block_stride * 2;
  const int64_t row_passes = (m + 31) / 32;
  for (int64_t nb = nb0; nb < nb1; ++nb) {
    const uint16_t* block = w.data + nb * w.n_block_stride;
    const int64_t cols = std::min(kColumnBlock, w.n - nb * kColumnBlock);
    const int64_t subs = (cols + 15) / 16;
    Prefetch prefetch;
    if (nb + 1 < nb1) {
      prefetch.next = reinterpret_cast<const char*>(block) + block_bytes;
      prefetch.end = prefetch.next + block_bytes;
      const int64_t steps = (subs + 1) / 2 * row_passes * k_blocks;
      prefetch.per_step = (block_bytes / 64 + steps - 1) / steps;
    }
    for (int64_t s = 0; s < subs; s += 2) {
      const int nt = std::min<int64_t>(2, subs - s);
      // Columns past n (the layout holds zeros there) land in `partial`, and the valid ones
      // are copied out: C's rows end at n.
      const int64_t valid = std::min<int64_t>(nt * 16, cols - s * 16);
      for (int64_t r = 0; r < m; r += 32) {
        const int mt = std::min<int64_t>(2, (m - r) / 16);
        float* const cr = c + r * ldc + nb * kColumnBlock + s * 16;
        if (valid == nt * 16) {
          kTileProducts[mt - 1][nt - 1](a + r * lda, lda, block + s * 32, w.k_block_stride,
                                        k_blocks, cr, ldc, prefetch);
          continue;
        }
        alignas(64) float partial[32 * 32];
        kTileProducts[mt - 1][nt - 1](a + r * lda, lda, block + s * 32, w.k_block_stride, k_blocks,
                                      partial, 32, prefetch);
        for (int64_t i = 0; i < mt * 16; ++i) std::copy_n(partial + i * 32, valid, cr + i * ldc);
      }
    }
  }
}

}  // namespace

void AmxGemmRows(int64_t m, const uint16_t* a, int64_t lda, const AmxBlockedWeight& w, float* c,
                 int64_t ldc) {
  amx_calls.fetch_add(1, std::memory_order_relaxed);
  const int64_t blocks = (w.n + kColumnBlock - 1) / kColumnBlock;
  if (m <= kAmxPanelRows) {
    // Blocks of a few hundred KiB at least to a thread, each thread prefetching its own.
    ParallelFor(blocks, 4,
                [&](int64_t nb0, int64_t nb1) { BlockRange(m, a, lda, w, c, ldc, nb0, nb1); });
    return;
  }
  // Each thread its share of the rows, in groups of 16, a panel at a time against every column
  // block: the panel's A stays in cache while the weight streams past it (from L2 once the
  // thread's first panel has read it, where it fits).
  ParallelFor(m / 16, kAmxPanelRows / 32, [&](int64_t g0, int64_t g1) {
    const ScopedTiles tiles;  // once for the thread's panels (BlockRange's scopes nest in it)
    for (int64_t r = g0 * 16; r < g1 * 16; r += kAmxPanelRows) {
      const int64_t rows = std::min(kAmxPanelRows, g1 * 16 - r);
      BlockRange(rows, a + r * lda, lda, w, c + r * ldc, ldc, 0, blocks);
    }
  });
}
#else
void AmxGemmRows(int64_t, const uint16_t*, int64_t, const AmxBlockedWeight&, float*, int64_t) {
  __builtin_trap();  // AmxUsable() is false in such a build
}
#endif

}  // namespace hypic::cpu
