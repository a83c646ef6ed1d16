#include "core/logging.h"

#include <spdlog/sinks/stdout_color_sinks.h>

#include <memory>
#include <string>

namespace hypic {

namespace {
std::shared_ptr<spdlog::logger> MakeLogger() {
  auto sink = std::make_shared<spdlog::sinks::stderr_color_sink_mt>();
  auto logger = std::make_shared<spdlog::logger>("hypic", sink);
  logger->set_pattern("%Y-%m-%dT%H:%M:%S.%e %^%L%$ [%t] %v");
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
  if (json) {
    Log().set_pattern(R"({"ts":"%Y-%m-%dT%H:%M:%S.%e","level":"%l","thread":%t,"msg":"%v"})");
  }
  return Status::Ok();
}

}  // namespace hypic
