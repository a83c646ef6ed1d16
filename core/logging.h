// Logging through spdlog. One process-wide logger named "hypic"; InitLogging configures its
// level and pattern once at startup (thread-safe afterwards, as spdlog's loggers are).
// Use the HYPIC_LOG_* macros so call sites stay short and the source location is kept.
#pragma once

#include <spdlog/spdlog.h>

#include <string_view>

#include "core/status.h"

namespace hypic {

// `level` is one of trace, debug, info, warn, error, critical, off. `json` selects one JSON
// object per line (for log shippers). Returns kBadRequest naming the bad level.
Status InitLogging(std::string_view level, bool json = false);

spdlog::logger& Log();

}  // namespace hypic

#define HYPIC_LOG_TRACE(...) SPDLOG_LOGGER_TRACE(&::hypic::Log(), __VA_ARGS__)
#define HYPIC_LOG_DEBUG(...) SPDLOG_LOGGER_DEBUG(&::hypic::Log(), __VA_ARGS__)
#define HYPIC_LOG_INFO(...) SPDLOG_LOGGER_INFO(&::hypic::Log(), __VA_ARGS__)
#define HYPIC_LOG_WARN(...) SPDLOG_LOGGER_WARN(&::hypic::Log(), __VA_ARGS__)
#define HYPIC_LOG_ERROR(...) SPDLOG_LOGGER_ERROR(&::hypic::Log(), __VA_ARGS__)
#define HYPIC_LOG_CRITICAL(...) SPDLOG_LOGGER_CRITICAL(&::hypic::Log(), __VA_ARGS__)
