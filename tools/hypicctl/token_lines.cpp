#include "tools/hypicctl/token_lines.h"

#include <fmt/format.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <iostream>
#include <iterator>
#include <nlohmann/json.hpp>

namespace hypic::tools {

namespace {

Result<std::vector<uint32_t>> ParseLine(std::string_view line, size_t line_no) {
  // nlohmann::json throws on malformed input; the non-throwing overload returns `discarded`.
  const auto json = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (json.is_discarded()) return BadRequest(fmt::format("line {}: not valid JSON", line_no));
  if (!json.is_array()) {
    return BadRequest(fmt::format("line {}: expected a JSON array of token ids", line_no));
  }
  if (json.empty()) return BadRequest(fmt::format("line {}: empty segment", line_no));
  std::vector<uint32_t> tokens;
  tokens.reserve(json.size());
  for (size_t i = 0; i < json.size(); ++i) {
    const auto& v = json[i];
    if (!v.is_number_unsigned() || v.get<uint64_t>() > UINT32_MAX) {
      return BadRequest(
          fmt::format("line {}: element {} is not a token id (an integer in "
                      "[0, 2^32))",
                      line_no, i));
    }
    tokens.push_back(static_cast<uint32_t>(v.get<uint64_t>()));
  }
  return tokens;
}

}  // namespace

Result<TokenLines> ParseTokenLines(std::string_view text) {
  TokenLines lines;
  size_t line_no = 0;
  while (!text.empty()) {
    const size_t eol = text.find('\n');
    std::string_view line = text.substr(0, eol);
    text = eol == std::string_view::npos ? std::string_view() : text.substr(eol + 1);
    ++line_no;
    if (line.find_first_not_of(" \t\r") == std::string_view::npos) continue;
    HYPIC_ASSIGN_OR_RETURN(auto tokens, ParseLine(line, line_no));
    lines.push_back(std::move(tokens));
  }
  return lines;
}

Result<TokenLines> ReadTokenLines(const std::string& path) {
  std::string text;
  if (path == "-") {
    text.assign(std::istreambuf_iterator<char>(std::cin), {});
  } else {
    std::ifstream in(path, std::ios::binary);
    if (!in) return IoError(fmt::format("{}: {}", path, std::strerror(errno)));
    text.assign(std::istreambuf_iterator<char>(in), {});
    if (in.bad()) return IoError(fmt::format("{}: read failed", path));
  }
  auto lines = ParseTokenLines(text);
  if (!lines.ok()) return lines.status().WithContext(path);
  return lines;
}

}  // namespace hypic::tools
