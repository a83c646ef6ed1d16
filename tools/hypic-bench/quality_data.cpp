#include "tools/hypic-bench/quality_data.h"

#include <fmt/format.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>

namespace hypic::tools {
namespace {

using Json = nlohmann::json;

// One line's context for messages: "line 3: 'segments'[1][4]: ...".
struct LineContext {
  size_t line_no;
  uint32_t vocab;

  Status Bad(std::string_view field, std::string_view what) const {
    return BadRequest(fmt::format("line {}: {}: {}", line_no, field, what));
  }
};

// A JSON array of token ids below the vocabulary; `field` names it in messages.
Result<std::vector<uint32_t>> TokenIds(const Json& value, const std::string& field,
                                       const LineContext& ctx) {
  if (!value.is_array()) return ctx.Bad(field, "expected an array of token ids");
  std::vector<uint32_t> ids;
  ids.reserve(value.size());
  for (size_t i = 0; i < value.size(); ++i) {
    const Json& v = value[i];
    const std::string at = fmt::format("{}[{}]", field, i);
    if (!v.is_number_unsigned()) return ctx.Bad(at, "not a token id (a non-negative integer)");
    const uint64_t id = v.get<uint64_t>();
    if (id >= ctx.vocab) {
      return ctx.Bad(at,
                     fmt::format("token id {} is not below the vocabulary size {}", id, ctx.vocab));
    }
    ids.push_back(static_cast<uint32_t>(id));
  }
  return ids;
}

// A required, non-empty array of token ids.
Result<std::vector<uint32_t>> RequiredIds(const Json& obj, const char* name,
                                          const LineContext& ctx) {
  const std::string field = fmt::format("'{}'", name);
  auto it = obj.find(name);
  if (it == obj.end()) return ctx.Bad(field, "missing");
  HYPIC_ASSIGN_OR_RETURN(auto ids, TokenIds(*it, field, ctx));
  if (ids.empty()) return ctx.Bad(field, "empty");
  return ids;
}

// An optional non-negative integer field.
Result<std::optional<size_t>> OptionalIndex(const Json& obj, const char* name,
                                            const LineContext& ctx) {
  auto it = obj.find(name);
  if (it == obj.end()) return std::optional<size_t>();
  if (!it->is_number_unsigned() || it->get<uint64_t>() > SIZE_MAX) {
    return ctx.Bad(fmt::format("'{}'", name), "not a non-negative integer");
  }
  return std::optional<size_t>(static_cast<size_t>(it->get<uint64_t>()));
}

}  // namespace

Result<QualityPrompt> ParseQualityLine(std::string_view line, size_t line_no, uint32_t vocab) {
  const LineContext ctx{line_no, vocab};
  // The non-throwing overload returns `discarded` for malformed JSON.
  const Json obj = Json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (obj.is_discarded()) return BadRequest(fmt::format("line {}: not valid JSON", line_no));
  if (!obj.is_object()) return BadRequest(fmt::format("line {}: expected a JSON object", line_no));
  QualityPrompt p;
  p.line = line_no;
  if (auto it = obj.find("prefix"); it != obj.end()) {
    HYPIC_ASSIGN_OR_RETURN(p.prefix, TokenIds(*it, "'prefix'", ctx));
  }
  auto segs = obj.find("segments");
  if (segs == obj.end()) return ctx.Bad("'segments'", "missing");
  if (!segs->is_array()) return ctx.Bad("'segments'", "expected an array of token-id arrays");
  if (segs->empty()) return ctx.Bad("'segments'", "no segments");
  for (size_t i = 0; i < segs->size(); ++i) {
    const std::string field = fmt::format("'segments'[{}]", i);
    HYPIC_ASSIGN_OR_RETURN(auto ids, TokenIds((*segs)[i], field, ctx));
    if (ids.empty()) return ctx.Bad(field, "empty segment");
    p.segments.push_back(std::move(ids));
  }
  HYPIC_ASSIGN_OR_RETURN(p.suffix, RequiredIds(obj, "suffix", ctx));
  HYPIC_ASSIGN_OR_RETURN(p.answer, RequiredIds(obj, "answer", ctx));
  HYPIC_ASSIGN_OR_RETURN(auto seg, OptionalIndex(obj, "evidence_segment", ctx));
  HYPIC_ASSIGN_OR_RETURN(auto pos, OptionalIndex(obj, "evidence_pos", ctx));
  if (seg.has_value() != pos.has_value()) {
    return ctx.Bad(seg ? "'evidence_pos'" : "'evidence_segment'",
                   "missing (evidence_segment and evidence_pos come together)");
  }
  if (seg) {
    if (*seg >= p.segments.size()) {
      return ctx.Bad("'evidence_segment'",
                     fmt::format("{} is not below the {} segments", *seg, p.segments.size()));
    }
    if (*pos >= p.segments[*seg].size()) {
      return ctx.Bad("'evidence_pos'", fmt::format("{} is not below segment {}'s {} tokens", *pos,
                                                   *seg, p.segments[*seg].size()));
    }
    p.evidence = QualityEvidence{*seg, *pos};
  }
  return p;
}

Result<std::vector<QualityPrompt>> ParseQualityData(std::string_view text, uint32_t vocab,
                                                    size_t limit) {
  std::vector<QualityPrompt> prompts;
  size_t line_no = 0;
  while (!text.empty() && (limit == 0 || prompts.size() < limit)) {
    const size_t eol = text.find('\n');
    const std::string_view line = text.substr(0, eol);
    text = eol == std::string_view::npos ? std::string_view() : text.substr(eol + 1);
    ++line_no;
    if (line.find_first_not_of(" \t\r") == std::string_view::npos) continue;
    HYPIC_ASSIGN_OR_RETURN(auto prompt, ParseQualityLine(line, line_no, vocab));
    prompts.push_back(std::move(prompt));
  }
  if (prompts.empty()) return BadRequest("no prompts (the data set is empty)");
  return prompts;
}

Result<std::vector<QualityPrompt>> ReadQualityData(const std::string& path, uint32_t vocab,
                                                   size_t limit) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return IoError(fmt::format("{}: {}", path, std::strerror(errno)));
  const std::string text(std::istreambuf_iterator<char>(in), {});
  if (in.bad()) return IoError(fmt::format("{}: read failed", path));
  auto prompts = ParseQualityData(text, vocab, limit);
  if (!prompts.ok()) return prompts.status().WithContext(path);
  return prompts;
}

}  // namespace hypic::tools
