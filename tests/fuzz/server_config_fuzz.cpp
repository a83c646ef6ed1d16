// Fuzzes hypicd's configuration loader (server/config.h) through all three of its sources.
// The input is up to three sections split by NUL bytes: the TOML file's text, then
// environment lines NAME=VALUE, then command-line arguments, one a line. Whatever loads must
// dump (DumpConfig) to TOML that loads back to the same dump, the secrets given again through
// the environment since the dump masks them; a dump that is not valid UTF-8 (bytes that came
// from the environment or a flag) cannot be TOML and is only checked not to crash.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "server/config.h"

namespace {

std::vector<std::string_view> Split(std::string_view s, char sep) {
  std::vector<std::string_view> out;
  for (;;) {
    size_t at = s.find(sep);
    out.push_back(s.substr(0, at));
    if (at == std::string_view::npos) return out;
    s.remove_prefix(at + 1);
  }
}

hypic::server::EnvLookup MapEnv(std::map<std::string, std::string> vars) {
  return [vars = std::move(vars)](const std::string& name) -> std::optional<std::string> {
    auto it = vars.find(name);
    if (it == vars.end()) return std::nullopt;
    return it->second;
  };
}

// Strict UTF-8 (no overlong forms, surrogates or code points above U+10FFFF), as TOML demands.
bool ValidUtf8(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    auto c = static_cast<unsigned char>(s[i]);
    size_t extra = c < 0x80 ? 0 : (c & 0xE0) == 0xC0 ? 1 : (c & 0xF0) == 0xE0 ? 2 : 3;
    if ((c >= 0x80 && c < 0xC2) || c > 0xF4 || s.size() - i <= extra) return false;
    uint32_t cp = extra == 0 ? c : c & (0x3Fu >> extra);
    for (size_t k = 1; k <= extra; ++k) {
      auto b = static_cast<unsigned char>(s[i + k]);
      if ((b & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (b & 0x3Fu);
    }
    static constexpr uint32_t kMin[] = {0, 0x80, 0x800, 0x10000};
    if (cp < kMin[extra] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
    i += extra + 1;
  }
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace hypic::server;
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  std::vector<std::string_view> sections = Split(input, '\0');
  std::map<std::string, std::string> env;
  if (sections.size() > 1) {
    for (std::string_view line : Split(sections[1], '\n')) {
      size_t eq = line.find('=');
      if (eq != std::string_view::npos) env[std::string(line.substr(0, eq))] = line.substr(eq + 1);
    }
  }
  std::vector<std::string> args;
  if (sections.size() > 2) {
    for (std::string_view a : Split(sections[2], '\n')) args.emplace_back(a);
  }
  auto config = LoadConfigWithToml(sections[0], "fuzz.toml", args, MapEnv(env));
  if (!config.ok()) {
    if (config.status().code() != hypic::StatusCode::kBadRequest) std::abort();
    return 0;
  }
  const std::string dump = DumpConfig(*config);
  if (!ValidUtf8(dump)) return 0;
  auto again = LoadConfigWithToml(
      dump, "dump.toml", {},
      MapEnv({{"HYPIC_TOKEN", config->token}, {"HYPIC_ADMIN_TOKEN", config->admin_token}}));
  if (!again.ok() || DumpConfig(*again) != dump) std::abort();
  return 0;
}
