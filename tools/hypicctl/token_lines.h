// The input of `hypicctl warm`: a JSONL file with one segment per line, each line a JSON array
// of token ids (unsigned 32-bit integers), e.g. `[151644, 872, 198]`. Blank lines are skipped.
// The file comes from the operator, not from the daemon, but it is still untrusted bytes: every
// malformed line is a kBadRequest naming the line, never an exception or a crash (fuzzed:
// tests/fuzz/ctl_token_lines.cmake). Pure functions; thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace hypic::tools {

using TokenLines = std::vector<std::vector<uint32_t>>;

[[nodiscard]] Result<TokenLines> ParseTokenLines(std::string_view text);

// Reads and parses PATH ("-" = stdin). kIoError when it cannot be read.
[[nodiscard]] Result<TokenLines> ReadTokenLines(const std::string& path);

}  // namespace hypic::tools
