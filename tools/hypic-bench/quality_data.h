// The data set of `hypic-bench quality` (docs/quality.md): a JSONL file, one prompt per line,
//   {"prefix": [ids], "segments": [[ids], ...], "suffix": [ids], "answer": [ids],
//    "evidence_segment": i, "evidence_pos": p}
// `prefix` (raw, may be empty) and the evidence pair are optional; other fields are ignored.
// The segments are the cacheable parts in prompt order, the suffix the raw question and the
// answer the expected greedy continuation. The file is untrusted bytes: every malformed line is a
// kBadRequest naming the line (1-based) and the field, a token id >= the vocabulary names the id
// and the line, and a file without prompts is an error; never an exception or a crash (fuzzed:
// tests/fuzz/quality_data.cmake). Pure functions; thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace hypic::tools {

// Where the answer's evidence lies: token `pos` (0-based) of segment `segment` (0-based).
struct QualityEvidence {
  size_t segment = 0;
  size_t pos = 0;
};

struct QualityPrompt {
  size_t line = 0;  // 1-based line of the file, for messages
  std::vector<uint32_t> prefix;
  std::vector<std::vector<uint32_t>> segments;  // at least one, none empty
  std::vector<uint32_t> suffix;                 // not empty
  std::vector<uint32_t> answer;                 // not empty
  std::optional<QualityEvidence> evidence;      // inside segments[segment]
};

// Parses one line (`line_no` for messages). Token ids must be below `vocab`.
[[nodiscard]] Result<QualityPrompt> ParseQualityLine(std::string_view line, size_t line_no,
                                                     uint32_t vocab);

// Parses a whole file: blank lines are skipped, at most `limit` prompts are read (0: all; the
// lines after the limit are not looked at). kBadRequest for the first bad line, or when no
// prompt is left.
[[nodiscard]] Result<std::vector<QualityPrompt>> ParseQualityData(std::string_view text,
                                                                  uint32_t vocab, size_t limit = 0);

// Reads and parses PATH; kIoError when it cannot be read. Errors are prefixed with PATH.
[[nodiscard]] Result<std::vector<QualityPrompt>> ReadQualityData(const std::string& path,
                                                                 uint32_t vocab, size_t limit = 0);

}  // namespace hypic::tools
