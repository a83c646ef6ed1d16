// Fuzzes hypicctl warm's JSONL reader: any bytes give token lines or a kBadRequest, and a
// successful parse holds only non-empty segments.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "tools/hypicctl/token_lines.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  auto lines = hypic::tools::ParseTokenLines(text);
  if (lines.ok()) {
    for (const auto& line : *lines) {
      if (line.empty()) std::abort();
    }
  } else if (lines.status().code() != hypic::StatusCode::kBadRequest) {
    std::abort();
  }
  return 0;
}
