#include "core/segment_key.h"

namespace hypic {

SegmentKey SegmentKey::Compute(std::string_view name_space, const ModelFingerprint& model,
                               const CacheSettings& settings, std::span<const uint32_t> tokens) {
  static constexpr char kDomain[] = "hypic-key";  // includes its NUL: 10 bytes
  Xxh3_128Stream s;
  s.Update(kDomain, sizeof(kDomain));
  s.UpdateU32(settings.format_version);
  s.UpdateU32(settings.seam_w);
  s.UpdateU64(model.lo);
  s.UpdateU64(model.hi);
  s.UpdateString(name_space);
  s.UpdateU64(tokens.size());
  s.Update(tokens.data(), tokens.size_bytes());  // little-endian host (static_assert in hash.cpp)
  return SegmentKey(s.Digest());
}

std::optional<SegmentKey> SegmentKey::FromHex(std::string_view hex) {
  auto h = Hash128::FromHex(hex);
  if (!h) return std::nullopt;
  return SegmentKey(*h);
}

}  // namespace hypic
