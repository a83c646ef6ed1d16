// DType: the element types hypic stores and computes with, and the exact scalar conversions
// between them. Conversions round to nearest even, keep NaN a NaN (quiet, sign kept) and Inf an
// Inf, and handle subnormals in both directions. They are HYPIC_HD so CUDA kernels use the same
// code the CPU tests check. Numeric values of DType are part of the entry format and the wire
// protocol: never renumber.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string_view>

#include "core/hd.h"

namespace hypic {

enum class DType : uint8_t {
  kF32 = 0,
  kF16 = 1,
  kBF16 = 2,
  kI32 = 3,
  kI64 = 4,
  kU8 = 5,
};

inline constexpr uint8_t kMaxDType = 5;

constexpr size_t DTypeSize(DType t) {
  switch (t) {
    case DType::kF32: return 4;
    case DType::kF16: return 2;
    case DType::kBF16: return 2;
    case DType::kI32: return 4;
    case DType::kI64: return 8;
    case DType::kU8: return 1;
  }
  return 0;
}

// The safetensors spelling: "F32", "F16", "BF16", "I32", "I64", "U8".
std::string_view DTypeName(DType t);
std::optional<DType> DTypeFromName(std::string_view name);
bool IsFloatDType(DType t);

HYPIC_HD_INLINE uint32_t F32Bits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
#endif
}

HYPIC_HD_INLINE float F32FromBits(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, 4);
  return f;
#endif
}

// bfloat16 is the upper half of an f32: widening is exact.
HYPIC_HD_INLINE float Bf16ToF32(uint16_t h) { return F32FromBits(static_cast<uint32_t>(h) << 16); }

HYPIC_HD_INLINE uint16_t F32ToBf16(float f) {
  uint32_t u = F32Bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) {  // NaN: keep sign and top payload, force quiet
    return static_cast<uint16_t>((u >> 16) | 0x0040u);
  }
  // Round to nearest even; carries into the exponent are correct (they round up to Inf).
  uint32_t lsb = (u >> 16) & 1u;
  u += 0x7fffu + lsb;
  return static_cast<uint16_t>(u >> 16);
}

HYPIC_HD_INLINE float F16ToF32(uint16_t h) {
  uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t man = h & 0x3ffu;
  uint32_t bits;
  if (exp == 0x1fu) {
    bits = sign | 0x7f800000u | (man << 13);  // Inf or NaN (payload kept)
  } else if (exp != 0) {
    bits = sign | ((exp + 112u) << 23) | (man << 13);
  } else if (man == 0) {
    bits = sign;  // signed zero
  } else {
    // Subnormal: normalise. The value is man * 2^-24.
    uint32_t e = 113u;  // exponent of 2^-14 is 127-14 = 113
    while ((man & 0x400u) == 0) {
      man <<= 1;
      --e;
    }
    bits = sign | (e << 23) | ((man & 0x3ffu) << 13);
  }
  return F32FromBits(bits);
}

HYPIC_HD_INLINE uint16_t F32ToF16(float f) {
  uint32_t u = F32Bits(f);
  uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  uint32_t abs = u & 0x7fffffffu;
  if (abs > 0x7f800000u) {  // NaN: keep top payload bits, force quiet
    return static_cast<uint16_t>(sign | 0x7e00u | ((abs >> 13) & 0x3ffu));
  }
  if (abs >= 0x477ff000u) {  // >= 65520 rounds to Inf (also Inf itself)
    return static_cast<uint16_t>(sign | 0x7c00u);
  }
  if (abs >= 0x38800000u) {  // normal in f16 (>= 2^-14)
    uint32_t lsb = (abs >> 13) & 1u;
    uint32_t r = abs + 0xfffu + lsb - (112u << 23);
    return static_cast<uint16_t>(sign | (r >> 13));
  }
  if (abs < 0x33000000u) {  // < 2^-25: rounds to zero (2^-25 exactly ties to even = 0)
    return sign;
  }
  // Subnormal in f16: value = m * 2^-24, m in [1, 1023], rounded to nearest even.
  uint32_t exp = abs >> 23;
  uint32_t man = (abs & 0x7fffffu) | 0x800000u;
  uint32_t shift = 126u - exp;  // 113 - exp + 13
  uint32_t q = man >> shift;
  uint32_t rem = man & ((1u << shift) - 1u);
  uint32_t half = 1u << (shift - 1u);
  if (rem > half || (rem == half && (q & 1u))) ++q;
  return static_cast<uint16_t>(sign | q);
}

// Converts `n` elements between float types. REQUIRES: both IsFloatDType; buffers do not overlap.
void ConvertElements(DType from, const void* src, DType to, void* dst, size_t n);

}  // namespace hypic
