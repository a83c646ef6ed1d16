// V8: eight fp32 lanes as a GCC vector, for the CPU kernels that must keep one FMA chain per
// element in a fixed order (RowStableGemm, the fused fp32 attention). AVX2 + FMA instructions
// where the build targets them, plain vector code (SSE pairs, or scalar) elsewhere, the same
// bits either way: every product and sum is written out, none is left to the compiler to
// contract or reassociate. Header-only, internal to gpu/ (no ABI: every function is inline).
#pragma once

#include <cstdint>

#if defined(__AVX__)
#include <immintrin.h>
#endif

// Without AVX, GCC warns that passing 32-byte vectors changes the ABI; every user of these
// helpers inlines them, so no call crosses an ABI boundary.
#pragma GCC diagnostic ignored "-Wpsabi"

namespace hypic::cpu::vec8 {

typedef float V8 __attribute__((vector_size(32)));
typedef uint32_t U8 __attribute__((vector_size(32)));

inline V8 Load(const float* p) {
  V8 v;
  __builtin_memcpy(&v, p, sizeof v);
  return v;
}
inline void Store(float* p, V8 v) { __builtin_memcpy(p, &v, sizeof v); }
inline V8 Splat(float x) { return V8{x, x, x, x, x, x, x, x}; }
inline V8 Broadcast(const float* p) {
#if defined(__AVX__)
  return _mm256_broadcast_ss(p);  // a load, no shuffle
#else
  return Splat(*p);
#endif
}
// a * b + c, rounded once where the CPU has FMA; elsewhere rounded twice (every caller of one
// build gets the same one).
inline V8 Fma(V8 a, V8 b, V8 c) {
#if defined(__FMA__)
  return _mm256_fmadd_ps(a, b, c);
#else
  return a * b + c;
#endif
}
// c - a * b, the same way.
inline V8 Fnma(V8 a, V8 b, V8 c) {
#if defined(__FMA__)
  return _mm256_fnmadd_ps(a, b, c);
#else
  return c - a * b;
#endif
}
// Lane-wise max as the scalar `a > b ? a : b` (b where either is NaN, as maxps).
inline V8 Max(V8 a, V8 b) { return a > b ? a : b; }

// The micro-kernel of the kernels over RowStableGemm's 16-column panels
// (gpu/cpu/row_stable_gemm.h): for R rows, acc[r][h] += a[r * RowStride + kk * DepthStride] *
// panel[kk * 16 + 8 h, + 8) over kk < depth, in order, one FMA chain per element. Inlined, so
// the caller's accumulators stay in registers (R <= 6: 12 of them, beside two panel vectors
// and a broadcast).
template <int R, int64_t RowStride, int64_t DepthStride>
[[gnu::always_inline]] inline void PanelChain(const float* a, const float* panel, int64_t depth,
                                              V8 (&acc)[R][2]) {
#pragma GCC unroll 4
  for (int64_t kk = 0; kk < depth; ++kk) {
    const V8 b0 = Load(panel + kk * 16), b1 = Load(panel + kk * 16 + 8);
#pragma GCC unroll 6
    for (int r = 0; r < R; ++r) {
      const V8 av = Broadcast(a + r * RowStride + kk * DepthStride);
      acc[r][0] = Fma(av, b0, acc[r][0]);
      acc[r][1] = Fma(av, b1, acc[r][1]);
    }
  }
}

// e^x on 8 lanes: linear::FastExp's algorithm (gpu/linear/linear_math.h) with its products and
// sums written as FMAs: inputs clamped to [-87.3, 88.3] (NaN passes), Cody-Waite reduction to
// |r| <= ln2/2, the degree-6 Taylor polynomial, 2^n built in the exponent bits. Relative error
// below 3e-7. 15 vector operations for 8 values, where the scalar loop's clamps became branches.
inline V8 Exp(V8 x) {
  const V8 lo = Splat(-87.3f), hi = Splat(88.3f);
  x = x < lo ? lo : x;
  x = hi < x ? hi : x;
  const V8 round = Splat(12582912.0f);  // 1.5 * 2^23: adding it rounds to an integer
  const V8 t = Fma(x, Splat(1.44269504f), round);
  const V8 n = t - round;
  V8 r = Fnma(n, Splat(0.693145751953125f), x);   // ln 2, high part (exact product)
  r = Fnma(n, Splat(1.428606765330187e-06f), r);  // ln 2, low part
  V8 p = Fma(Splat(1.0f / 720.0f), r, Splat(1.0f / 120.0f));
  p = Fma(p, r, Splat(1.0f / 24.0f));
  p = Fma(p, r, Splat(1.0f / 6.0f));
  p = Fma(p, r, Splat(0.5f));
  p = Fma(p, r, Splat(1.0f));
  p = Fma(p, r, Splat(1.0f));
  U8 bits;
  __builtin_memcpy(&bits, &t, sizeof bits);
  // 2^n, n in [-126, 127]; the shift is unsigned (a NaN gives garbage scale bits, p is NaN).
  bits = (bits - 0x4B400000u + 127u) << 23;
  V8 scale;
  __builtin_memcpy(&scale, &bits, sizeof scale);
  return p * scale;
}

}  // namespace hypic::cpu::vec8
