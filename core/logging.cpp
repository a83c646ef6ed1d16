#include "core/logging.h"

#include <spdlog/pattern_formatter.h>
#include <spdlog/sinks/stdout_color_sinks.h>

#include <cstdio>
#include <memory>
#include <string>

namespace hypic {

namespace {

constexpr const char* kTextPattern = "%Y-%m-%dT%H:%M:%S.%e %^%L%$ [%t] %v";
// %* is the message, JSON-escaped (JsonEscapedMessage).
constexpr const char* kJsonPattern =
    R"({"ts":"%Y-%m-%dT%H:%M:%S.%e","level":"%l","thread":%t,"msg":"%*"})";

// Writes the message JSON-escaped, so that a quote, backslash or newline in a message cannot
// break the one-object-per-line format.
class JsonEscapedMessage final : public spdlog::custom_flag_formatter {
 public:
  void format(const spdlog::details::log_msg& msg, const std::tm&,
              spdlog::memory_buf_t& dest) override {
    auto put = [&dest](std::string_view s) { dest.append(s.data(), s.data() + s.size()); };
    for (char c : std::string_view(msg.payload.data(), msg.payload.size())) {
      switch (c) {
        case '"': put("\\\""); break;
        case '\\': put("\\\\"); break;
        case '\n': put("\\n"); break;
        case '\r': put("\\r"); break;
        case '\t': put("\\t"); break;
        default:
          if (static_cast<unsigned char>(c) < 0x20) {
            char esc[8];
            std::snprintf(esc, sizeof(esc), "\\u%04x", static_cast<unsigned>(c));
            put(std::string_view(esc, 6));
          } else {
            dest.push_back(c);
          }
      }
    }
  }
  std::unique_ptr<custom_flag_formatter> clone() const override {
    return std::make_unique<JsonEscapedMessage>();
  }
};

std::unique_ptr<spdlog::formatter> MakeFormatter(bool json) {
  auto f = std::make_unique<spdlog::pattern_formatter>();
  if (json) {
    f->add_flag<JsonEscapedMessage>('*').set_pattern(kJsonPattern);
  } else {
    f->set_pattern(kTextPattern);
  }
  return f;
}

std::shared_ptr<spdlog::logger> MakeLogger() {
  auto sink = std::make_shared<spdlog::sinks::stderr_color_sink_mt>();
  auto logger = std::make_shared<spdlog::logger>("hypic", sink);
  logger->set_formatter(MakeFormatter(/*json=*/false));
  logger->set_level(spdlog::level::info);
  return logger;
}

}  // namespace

spdlog::logger& Log() {
  static std::shared_ptr<spdlog::logger> logger = MakeLogger();
  return *logger;
}

Status InitLogging(std::string_view level, bool json) {
  auto lvl = spdlog::level::from_str(std::string(level));
  if (lvl == spdlog::level::off && level != "off") {
    return BadRequest("log level '" + std::string(level) +
                      "' is not one of trace, debug, info, warn, error, critical, off");
  }
  Log().set_level(lvl);
  Log().set_formatter(MakeFormatter(json));
  return Status::Ok();
}

}  // namespace hypic
