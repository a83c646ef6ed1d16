#include "core/dtype.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "tests/support/seeded_rng.h"

#if !defined(__FLT16_MAX__) && defined(__F16C__)
#include <immintrin.h>
#endif

namespace hypic {
namespace {

bool IsNanF16(uint16_t h) { return (h & 0x7c00u) == 0x7c00u && (h & 0x3ffu) != 0; }
bool IsNanBf16(uint16_t h) { return (h & 0x7f80u) == 0x7f80u && (h & 0x7fu) != 0; }

// Independent references: round |f| to `precision` significant bits in double arithmetic
// (exact: an f32 has 24 bits), with the smallest step 2^min_ulp_exp (the subnormal step), then
// encode the exactly representable result by hand. nearbyint rounds half to even in the default
// rounding mode.
struct Format {
  int precision;    // significant bits including the implicit one
  int min_ulp_exp;  // exponent of the smallest subnormal
  int min_normal_exp;
  int bias;
  int mant_bits;
  double overflow;  // smallest magnitude that becomes Inf after rounding
};
constexpr Format kF16Format{11, -24, -14, 15, 10, 65536.0};
constexpr Format kBf16Format{8, -133, -126, 127, 7, 0x1p128};

uint16_t ReferenceNarrow(float f, const Format& fmt) {
  const uint16_t sign = std::signbit(f) ? static_cast<uint16_t>(1u << 15) : 0;
  const uint16_t inf = static_cast<uint16_t>(((2 * fmt.bias + 1) << fmt.mant_bits));
  double a = std::fabs(static_cast<double>(f));
  if (std::isinf(a)) return sign | inf;
  if (a == 0.0) return sign;
  int e = 0;
  std::frexp(a, &e);  // a = m * 2^e, m in [0.5, 1)
  int ulp_exp = std::max(e - fmt.precision, fmt.min_ulp_exp);
  double v = std::ldexp(std::nearbyint(std::ldexp(a, -ulp_exp)), ulp_exp);
  if (v >= fmt.overflow) return sign | inf;
  if (v == 0.0) return sign;
  if (v < std::ldexp(1.0, fmt.min_normal_exp)) {
    return sign | static_cast<uint16_t>(std::ldexp(v, -fmt.min_ulp_exp));
  }
  std::frexp(v, &e);
  int exponent = e - 1;
  auto mant = static_cast<uint32_t>((std::ldexp(v, -exponent) - 1.0) * (1 << fmt.mant_bits));
  return sign | static_cast<uint16_t>(((exponent + fmt.bias) << fmt.mant_bits) | mant);
}

// The compiler's or the CPU's own f32 -> f16 conversion, when this build has one.
#if defined(__FLT16_MAX__)
constexpr bool kHaveHardwareF16 = true;
uint16_t HardwareF32ToF16(float f) {
  auto h = static_cast<_Float16>(f);
  uint16_t u;
  std::memcpy(&u, &h, 2);
  return u;
}
float HardwareF16ToF32(uint16_t u) {
  _Float16 h;
  std::memcpy(&h, &u, 2);
  return static_cast<float>(h);
}
#elif defined(__F16C__)
constexpr bool kHaveHardwareF16 = true;
// The vector forms: clang's scalar _cvtss_sh macro uses a C99 compound literal (-Wpedantic).
uint16_t HardwareF32ToF16(float f) {
  __m128i h = _mm_cvtps_ph(_mm_set_ss(f), _MM_FROUND_TO_NEAREST_INT);
  return static_cast<uint16_t>(_mm_cvtsi128_si32(h) & 0xffff);
}
float HardwareF16ToF32(uint16_t u) { return _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(u))); }
#else
constexpr bool kHaveHardwareF16 = false;
uint16_t HardwareF32ToF16(float) { return 0; }
float HardwareF16ToF32(uint16_t) { return 0.0f; }
#endif

// Values around every boundary of both formats: each half value, the ties between
// neighbours, and one f32 ulp either side of each tie.
std::vector<float> EdgeFloats() {
  std::vector<float> out;
  auto add_around = [&out](float f) {
    out.push_back(f);
    out.push_back(std::nextafter(f, std::numeric_limits<float>::infinity()));
    out.push_back(std::nextafter(f, -std::numeric_limits<float>::infinity()));
  };
  for (uint32_t h = 0; h < 0x7c00u; ++h) {
    float lo = F16ToF32(static_cast<uint16_t>(h));
    float hi = h + 1 == 0x7c00u ? 65536.0f : F16ToF32(static_cast<uint16_t>(h + 1));
    out.push_back(lo);
    add_around(static_cast<float>((static_cast<double>(lo) + hi) / 2));
  }
  for (uint32_t h = 0; h < 0x7f80u; ++h) {
    float lo = Bf16ToF32(static_cast<uint16_t>(h));
    double hi =
        h + 1 == 0x7f80u ? 0x1p128 : static_cast<double>(Bf16ToF32(static_cast<uint16_t>(h + 1)));
    out.push_back(lo);
    add_around(static_cast<float>((static_cast<double>(lo) + hi) / 2));
  }
  for (float f : {0.0f, FLT_MIN, FLT_MAX, FLT_TRUE_MIN, 1.0f, 65504.0f, 65519.0f, 65520.0f,
                  0x1p-24f, 0x1p-25f, 0x1.8p-24f, 0x1p-14f, 0x1p-126f, 0x1p-133f, 0x1p-134f}) {
    add_around(f);
  }
  const size_t n = out.size();
  for (size_t i = 0; i < n; ++i) out.push_back(-out[i]);
  out.push_back(std::numeric_limits<float>::infinity());
  out.push_back(-std::numeric_limits<float>::infinity());
  return out;
}

TEST_CASE("dtype names, sizes and float kinds") {
  for (uint8_t i = 0; i <= kMaxDType; ++i) {
    auto t = static_cast<DType>(i);
    CHECK(DTypeFromName(DTypeName(t)) == t);
  }
  CHECK(DTypeSize(DType::kF32) == 4);
  CHECK(DTypeSize(DType::kF16) == 2);
  CHECK(DTypeSize(DType::kBF16) == 2);
  CHECK(DTypeSize(DType::kI32) == 4);
  CHECK(DTypeSize(DType::kI64) == 8);
  CHECK(DTypeSize(DType::kU8) == 1);
  CHECK_FALSE(DTypeFromName("F64").has_value());
  CHECK_FALSE(DTypeFromName("f32").has_value());
  CHECK_FALSE(DTypeFromName("").has_value());
  CHECK(IsFloatDType(DType::kBF16));
  CHECK_FALSE(IsFloatDType(DType::kI32));
}

TEST_CASE("bf16 rounds ties to even, both ways") {
  // 1 + 2^-8 lies halfway between 0x3f80 (even) and 0x3f81: down to even.
  CHECK(F32ToBf16(F32FromBits(0x3f808000u)) == 0x3f80u);
  // Halfway between 0x3f81 (odd) and 0x3f82: up to even.
  CHECK(F32ToBf16(F32FromBits(0x3f818000u)) == 0x3f82u);
  // Just above and below a tie.
  CHECK(F32ToBf16(F32FromBits(0x3f808001u)) == 0x3f81u);
  CHECK(F32ToBf16(F32FromBits(0x3f817fffu)) == 0x3f81u);
  // Negative values round the magnitude the same way.
  CHECK(F32ToBf16(F32FromBits(0xbf808000u)) == 0xbf80u);
  CHECK(F32ToBf16(F32FromBits(0xbf818000u)) == 0xbf82u);
  // A carry into the exponent: 1.99999 rounds to 2.
  CHECK(F32ToBf16(F32FromBits(0x3fffffffu)) == 0x4000u);
}

TEST_CASE("f16 rounds ties to even, both ways") {
  CHECK(F32ToF16(1.0f + 0x1p-11f) == 0x3c00u);      // tie, down to even
  CHECK(F32ToF16(1.0f + 3 * 0x1p-11f) == 0x3c02u);  // tie, up to even
  CHECK(F32ToF16(1.0f + 0x1p-11f + 0x1p-20f) == 0x3c01u);
  CHECK(F32ToF16(-(1.0f + 3 * 0x1p-11f)) == 0xbc02u);
  CHECK(F32ToF16(2047.5f) == F32ToF16(2048.0f));  // carry into the next binade
}

TEST_CASE("NaN stays NaN with its sign; Inf stays Inf") {
  const float inf = std::numeric_limits<float>::infinity();
  for (uint32_t bits : {0x7fc00000u, 0x7f800001u, 0x7fffffffu, 0x7fa00000u, 0x7f801000u}) {
    float pos = F32FromBits(bits);
    float neg = F32FromBits(bits | 0x80000000u);
    CAPTURE(bits);
    uint16_t b = F32ToBf16(pos);
    CHECK(IsNanBf16(b));
    CHECK((b & 0x8000u) == 0);
    CHECK(IsNanBf16(F32ToBf16(neg)));
    CHECK((F32ToBf16(neg) & 0x8000u) != 0);
    uint16_t h = F32ToF16(pos);
    CHECK(IsNanF16(h));
    CHECK((h & 0x8000u) == 0);
    CHECK(IsNanF16(F32ToF16(neg)));
    CHECK((F32ToF16(neg) & 0x8000u) != 0);
  }
  CHECK(std::isnan(F16ToF32(0x7e00u)));
  CHECK(std::isnan(F16ToF32(0x7c01u)));  // signalling NaN widens to a NaN, not Inf
  CHECK(std::signbit(F16ToF32(0xfe00u)));
  CHECK(std::isnan(Bf16ToF32(0x7f81u)));
  CHECK(std::signbit(Bf16ToF32(0xffc0u)));

  CHECK(F32ToBf16(inf) == 0x7f80u);
  CHECK(F32ToBf16(-inf) == 0xff80u);
  CHECK(F32ToF16(inf) == 0x7c00u);
  CHECK(F32ToF16(-inf) == 0xfc00u);
  CHECK(F16ToF32(0x7c00u) == inf);
  CHECK(F16ToF32(0xfc00u) == -inf);
  CHECK(Bf16ToF32(0x7f80u) == inf);
}

TEST_CASE("overflow rounds to Inf, just below stays finite") {
  CHECK(F32ToF16(65504.0f) == 0x7bffu);                        // the largest f16
  CHECK(F32ToF16(std::nextafter(65520.0f, 0.0f)) == 0x7bffu);  // below the tie
  CHECK(F32ToF16(65520.0f) == 0x7c00u);                        // the tie rounds to Inf
  CHECK(F32ToF16(1e10f) == 0x7c00u);
  CHECK(F32ToF16(-1e10f) == 0xfc00u);
  CHECK(F32ToF16(FLT_MAX) == 0x7c00u);
  CHECK(F32ToBf16(FLT_MAX) == 0x7f80u);                   // above the last tie
  CHECK(F32ToBf16(F32FromBits(0x7f7f7fffu)) == 0x7f7fu);  // the largest bf16
  CHECK(F32ToBf16(F32FromBits(0x7f7f8000u)) == 0x7f80u);  // tie, odd: up to Inf
  CHECK(F32ToBf16(-FLT_MAX) == 0xff80u);
}

TEST_CASE("subnormals in both directions") {
  // f16 subnormals widen exactly: m * 2^-24.
  CHECK(F16ToF32(0x0001u) == 0x1p-24f);
  CHECK(F16ToF32(0x03ffu) == 1023 * 0x1p-24f);
  CHECK(F16ToF32(0x8001u) == -0x1p-24f);
  CHECK(F16ToF32(0x0400u) == 0x1p-14f);  // the smallest normal
  // f32 -> f16 subnormal, with ties to even.
  CHECK(F32ToF16(0x1p-24f) == 0x0001u);
  CHECK(F32ToF16(0x1p-25f) == 0x0000u);            // tie between 0 and 1: to 0
  CHECK(F32ToF16(0x1.000002p-25f) == 0x0001u);     // just above the tie
  CHECK(F32ToF16(0x1.8p-24f) == 0x0002u);          // 1.5 ulp: tie, up to 2
  CHECK(F32ToF16(0x1.4p-23f) == 0x0002u);          // 2.5 ulp: tie, down to 2
  CHECK(F32ToF16(1023.5f * 0x1p-24f) == 0x0400u);  // rounds up into the normal range
  CHECK(F32ToF16(FLT_TRUE_MIN) == 0x0000u);
  CHECK(F32ToF16(-FLT_TRUE_MIN) == 0x8000u);  // sign of zero kept
  // bf16 shares f32's exponent range, so f32 subnormals become bf16 subnormals.
  CHECK(Bf16ToF32(0x0001u) == 0x1p-133f);
  CHECK(F32ToBf16(0x1p-133f) == 0x0001u);
  CHECK(F32ToBf16(F32FromBits(0x00008000u)) == 0x0000u);  // tie to even: 0
  CHECK(F32ToBf16(F32FromBits(0x00018000u)) == 0x0002u);  // tie to even: 2
  CHECK(F32ToBf16(F32FromBits(0x007fffffu)) == 0x0080u);  // up into the normal range
  CHECK(F32ToBf16(-FLT_TRUE_MIN) == 0x8000u);
}

TEST_CASE("exhaustive: every f16 and bf16 survives widen then narrow") {
  for (uint32_t i = 0; i <= 0xffffu; ++i) {
    const auto h = static_cast<uint16_t>(i);
    const uint16_t f16 = F32ToF16(F16ToF32(h));
    const uint16_t bf16 = F32ToBf16(Bf16ToF32(h));
    if (IsNanF16(h)) {
      if (!IsNanF16(f16) || (f16 & 0x8000u) != (h & 0x8000u)) FAIL_CHECK("f16 NaN lost: " << i);
      if ((h & 0x0200u) != 0 && f16 != h) FAIL_CHECK("f16 quiet NaN payload changed: " << i);
    } else if (f16 != h) {
      FAIL_CHECK("f16 round trip " << i << " -> " << f16);
    }
    if (IsNanBf16(h)) {
      if (!IsNanBf16(bf16) || (bf16 & 0x8000u) != (h & 0x8000u)) {
        FAIL_CHECK("bf16 NaN lost: " << i);
      }
      if ((h & 0x0040u) != 0 && bf16 != h) FAIL_CHECK("bf16 quiet NaN payload changed: " << i);
    } else if (bf16 != h) {
      FAIL_CHECK("bf16 round trip " << i << " -> " << bf16);
    }
  }
}

void CheckAgainstReferences(float f) {
  if (std::isnan(f)) return;  // covered by the NaN case; references disagree on payloads
  const uint16_t ref16 = ReferenceNarrow(f, kF16Format);
  const uint16_t refbf = ReferenceNarrow(f, kBf16Format);
  if (F32ToF16(f) != ref16) {
    FAIL_CHECK("F32ToF16(bits " << F32Bits(f) << ") = " << F32ToF16(f) << ", reference " << ref16);
  }
  if (F32ToBf16(f) != refbf) {
    FAIL_CHECK("F32ToBf16(bits " << F32Bits(f) << ") = " << F32ToBf16(f) << ", reference "
                                 << refbf);
  }
  if (kHaveHardwareF16 && F32ToF16(f) != HardwareF32ToF16(f)) {
    FAIL_CHECK("F32ToF16(bits " << F32Bits(f) << ") = " << F32ToF16(f) << ", hardware "
                                << HardwareF32ToF16(f));
  }
}

TEST_CASE("narrowing matches the double reference and the hardware on edges") {
  if (!kHaveHardwareF16) MESSAGE("no _Float16 or F16C in this build: reference checks only");
  for (float f : EdgeFloats()) CheckAgainstReferences(f);
}

TEST_CASE("narrowing matches the double reference and the hardware on random floats") {
  testing::SeededRng rng(20261129);
  for (int i = 0; i < 300000; ++i) {
    // Uniform bit patterns cover every exponent; the normal draws concentrate on the f16 range.
    CheckAgainstReferences(F32FromBits(static_cast<uint32_t>(rng.engine()())));
    CheckAgainstReferences(rng.Normal(0.0f, 1000.0f));
  }
}

TEST_CASE("f16 widening matches the hardware for every bit pattern") {
  if (!kHaveHardwareF16) {
    MESSAGE("no _Float16 or F16C in this build: skipped");
    return;
  }
  for (uint32_t i = 0; i <= 0xffffu; ++i) {
    const auto h = static_cast<uint16_t>(i);
    const float ours = F16ToF32(h);
    const float hw = HardwareF16ToF32(h);
    if (IsNanF16(h)) {
      if (!std::isnan(ours) || std::signbit(ours) != std::signbit(hw)) {
        FAIL_CHECK("NaN " << i);
      }
    } else if (F32Bits(ours) != F32Bits(hw)) {
      FAIL_CHECK("F16ToF32(" << i << ") = " << ours << ", hardware " << hw);
    }
  }
}

TEST_CASE("ConvertElements agrees with the scalar conversions for every pair") {
  testing::SeededRng rng(7);
  std::vector<float> values = {0.0f,
                               -0.0f,
                               1.0f,
                               -2.5f,
                               65504.0f,
                               1e6f,
                               0x1p-24f,
                               0x1p-130f,
                               std::numeric_limits<float>::infinity(),
                               std::numeric_limits<float>::quiet_NaN()};
  for (int i = 0; i < 1000; ++i) values.push_back(rng.Normal(0.0f, 100.0f));
  const size_t n = values.size();

  // The same values in each float dtype.
  std::vector<float> f32 = values;
  std::vector<uint16_t> f16(n), bf16(n);
  for (size_t i = 0; i < n; ++i) {
    f16[i] = F32ToF16(values[i]);
    bf16[i] = F32ToBf16(values[i]);
  }
  auto source = [&](DType t) -> const void* {
    return t == DType::kF32   ? static_cast<const void*>(f32.data())
           : t == DType::kF16 ? static_cast<const void*>(f16.data())
                              : static_cast<const void*>(bf16.data());
  };
  auto widen = [&](DType t, size_t i) {
    return t == DType::kF32 ? f32[i] : t == DType::kF16 ? F16ToF32(f16[i]) : Bf16ToF32(bf16[i]);
  };
  auto expected_bits = [](DType to, float v) -> uint32_t {
    return to == DType::kF32 ? F32Bits(v) : to == DType::kF16 ? F32ToF16(v) : F32ToBf16(v);
  };
  for (DType from : {DType::kF32, DType::kF16, DType::kBF16}) {
    for (DType to : {DType::kF32, DType::kF16, DType::kBF16}) {
      CAPTURE(DTypeName(from));
      CAPTURE(DTypeName(to));
      std::vector<std::byte> out(n * DTypeSize(to), std::byte{0xab});
      ConvertElements(from, source(from), to, out.data(), n);
      for (size_t i = 0; i < n; ++i) {
        uint32_t got = 0;
        std::memcpy(&got, out.data() + i * DTypeSize(to), DTypeSize(to));
        const uint32_t want = expected_bits(to, widen(from, i));
        if (got != want) FAIL_CHECK("element " << i << ": " << got << " != " << want);
      }
    }
  }
}

}  // namespace
}  // namespace hypic
