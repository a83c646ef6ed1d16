#include "core/dtype.h"

namespace hypic {

std::string_view DTypeName(DType t) {
  switch (t) {
    case DType::kF32: return "F32";
    case DType::kF16: return "F16";
    case DType::kBF16: return "BF16";
    case DType::kI32: return "I32";
    case DType::kI64: return "I64";
    case DType::kU8: return "U8";
  }
  return "?";
}

std::optional<DType> DTypeFromName(std::string_view name) {
  for (uint8_t i = 0; i <= kMaxDType; ++i) {
    auto t = static_cast<DType>(i);
    if (DTypeName(t) == name) return t;
  }
  return std::nullopt;
}

bool IsFloatDType(DType t) { return t == DType::kF32 || t == DType::kF16 || t == DType::kBF16; }

namespace {

float LoadAsF32(DType t, const void* p, size_t i) {
  switch (t) {
    case DType::kF32: return static_cast<const float*>(p)[i];
    case DType::kF16: return F16ToF32(static_cast<const uint16_t*>(p)[i]);
    case DType::kBF16: return Bf16ToF32(static_cast<const uint16_t*>(p)[i]);
    default: return 0.0f;
  }
}

void StoreFromF32(DType t, void* p, size_t i, float v) {
  switch (t) {
    case DType::kF32: static_cast<float*>(p)[i] = v; break;
    case DType::kF16: static_cast<uint16_t*>(p)[i] = F32ToF16(v); break;
    case DType::kBF16: static_cast<uint16_t*>(p)[i] = F32ToBf16(v); break;
    default: break;
  }
}

}  // namespace

// One loop per pair with f32 on one side, so each vectorises; the generic loop (a switch per
// element) is left for F16 <-> BF16.
void ConvertElements(DType from, const void* src, DType to, void* dst, size_t n) {
  if (from == to) {
    std::memcpy(dst, src, n * DTypeSize(from));
    return;
  }
  const auto* f = static_cast<const float*>(src);
  const auto* h = static_cast<const uint16_t*>(src);
  auto* fo = static_cast<float*>(dst);
  auto* ho = static_cast<uint16_t*>(dst);
  if (from == DType::kBF16 && to == DType::kF32) {
    for (size_t i = 0; i < n; ++i) fo[i] = Bf16ToF32(h[i]);
  } else if (from == DType::kF16 && to == DType::kF32) {
    for (size_t i = 0; i < n; ++i) fo[i] = F16ToF32(h[i]);
  } else if (from == DType::kF32 && to == DType::kBF16) {
    for (size_t i = 0; i < n; ++i) ho[i] = F32ToBf16(f[i]);
  } else if (from == DType::kF32 && to == DType::kF16) {
    for (size_t i = 0; i < n; ++i) ho[i] = F32ToF16(f[i]);
  } else {
    for (size_t i = 0; i < n; ++i) StoreFromF32(to, dst, i, LoadAsF32(from, src, i));
  }
}

}  // namespace hypic
