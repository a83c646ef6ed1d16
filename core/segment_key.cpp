#include "core/segment_key.h"

#include <fmt/format.h>

#include <array>
#include <cctype>

namespace hypic {
namespace {

std::string_view Trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

std::string Lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::optional<DType> EntryDTypeFromName(std::string_view name) {
  const std::string n = Lower(Trim(name));
  if (n == "f32" || n == "fp32" || n == "float32") return DType::kF32;
  if (n == "bf16" || n == "bfloat16") return DType::kBF16;
  if (n == "f16" || n == "fp16" || n == "float16") return DType::kF16;
  return std::nullopt;
}

std::string EntryDTypeName(DType t) {
  switch (t) {
    case DType::kF32: return "f32";
    case DType::kBF16: return "bf16";
    case DType::kF16: return "f16";
    default: return Lower(DTypeName(t));
  }
}

}  // namespace

bool IsEntryDType(DType t) { return t == DType::kF32 || t == DType::kBF16 || t == DType::kF16; }

bool EntryDTypes::AtLeastAsPrecise(const EntryDTypes& want) const {
  auto covers = [](DType have, DType w) { return have == w || have == DType::kF32; };
  return covers(transition, want.transition) && covers(state, want.state) &&
         covers(conv, want.conv) && covers(kv, want.kv);
}

std::string EntryDTypes::ToString() const {
  return fmt::format("t={},s={},conv={},kv={}", EntryDTypeName(transition), EntryDTypeName(state),
                     EntryDTypeName(conv), EntryDTypeName(kv));
}

Result<EntryDTypes> EntryDTypes::Parse(std::string_view text) {
  EntryDTypes d;
  std::array<bool, 4> named{};  // t, s, conv, kv
  bool bare_allowed = true;
  size_t start = 0;
  while (start <= text.size()) {
    const size_t comma = std::min(text.find(',', start), text.size());
    const std::string_view item = Trim(text.substr(start, comma - start));
    start = comma + 1;
    if (item.empty()) return BadRequest(fmt::format("entry dtypes '{}': an empty item", text));
    const size_t eq = item.find('=');
    if (eq == std::string_view::npos) {
      auto t = EntryDTypeFromName(item);
      if (!t) {
        return BadRequest(fmt::format(
            "entry dtypes '{}': '{}' is not a dtype (want f32, bf16 or f16)", text, item));
      }
      if (!bare_allowed) {
        return BadRequest(
            fmt::format("entry dtypes '{}': a bare dtype ('{}') may only come first", text, item));
      }
      d = {*t, *t, *t, *t};
      bare_allowed = false;
      continue;
    }
    bare_allowed = false;
    const std::string kind = Lower(Trim(item.substr(0, eq)));
    auto t = EntryDTypeFromName(item.substr(eq + 1));
    if (!t) {
      return BadRequest(
          fmt::format("entry dtypes '{}': '{}' in '{}' is not a dtype (want f32, bf16 or f16)",
                      text, Trim(item.substr(eq + 1)), item));
    }
    struct Kind {
      std::string_view short_name, long_name;
      DType EntryDTypes::*field;
    };
    static constexpr std::array<Kind, 4> kKinds{{{"t", "transition", &EntryDTypes::transition},
                                                 {"s", "state", &EntryDTypes::state},
                                                 {"conv", "conv", &EntryDTypes::conv},
                                                 {"kv", "kv", &EntryDTypes::kv}}};
    size_t slot = 0;
    while (slot < kKinds.size() && kind != kKinds[slot].short_name &&
           kind != kKinds[slot].long_name) {
      ++slot;
    }
    if (slot == kKinds.size()) {
      return BadRequest(fmt::format(
          "entry dtypes '{}': unknown tensor kind '{}' (want t, s, conv or kv)", text, kind));
    }
    if (named[slot]) {
      return BadRequest(fmt::format("entry dtypes '{}': '{}' is given twice", text, kind));
    }
    named[slot] = true;
    d.*kKinds[slot].field = *t;
  }
  return d;
}

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
  const EntryDTypes& d = settings.entry_dtypes;
  if (!d.AllF32()) {  // the all-f32 key stays the one it always was
    const std::array<uint8_t, 4> dtypes{static_cast<uint8_t>(d.transition),
                                        static_cast<uint8_t>(d.state), static_cast<uint8_t>(d.conv),
                                        static_cast<uint8_t>(d.kv)};
    s.Update(dtypes.data(), dtypes.size());
  }
  return SegmentKey(s.Digest());
}

std::optional<SegmentKey> SegmentKey::FromHex(std::string_view hex) {
  auto h = Hash128::FromHex(hex);
  if (!h) return std::nullopt;
  return SegmentKey(*h);
}

}  // namespace hypic
