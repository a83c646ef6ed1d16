// Fuzzes hypic-bench quality's JSONL reader: any bytes give prompts or a kBadRequest, and every
// prompt it accepts keeps the reader's promises (non-empty segments, suffix and answer, token ids
// below the vocabulary, evidence inside its segment, lines in increasing order).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "tools/hypic-bench/quality_data.h"

namespace {

constexpr uint32_t kVocab = 1000;

bool Ids(const std::vector<uint32_t>& ids, bool need) {
  if (need && ids.empty()) return false;
  for (uint32_t id : ids) {
    if (id >= kVocab) return false;
  }
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  auto prompts = hypic::tools::ParseQualityData(text, kVocab);
  if (!prompts.ok()) {
    if (prompts.status().code() != hypic::StatusCode::kBadRequest) std::abort();
    return 0;
  }
  if (prompts->empty()) std::abort();
  size_t line = 0;
  for (const auto& p : *prompts) {
    if (p.line <= line) std::abort();
    line = p.line;
    if (!Ids(p.prefix, false) || !Ids(p.suffix, true) || !Ids(p.answer, true)) std::abort();
    if (p.segments.empty()) std::abort();
    for (const auto& s : p.segments) {
      if (!Ids(s, true)) std::abort();
    }
    if (p.evidence && (p.evidence->segment >= p.segments.size() ||
                       p.evidence->pos >= p.segments[p.evidence->segment].size())) {
      std::abort();
    }
  }
  return 0;
}
