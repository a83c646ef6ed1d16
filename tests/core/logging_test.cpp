#include "core/logging.h"

#include <doctest/doctest.h>
#include <spdlog/sinks/ostream_sink.h>

#include <algorithm>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "tests/support/check_ok.h"

namespace hypic {
namespace {

TEST_CASE("InitLogging accepts every documented level and sets it") {
  const std::pair<const char*, spdlog::level::level_enum> levels[] = {
      {"trace", spdlog::level::trace}, {"debug", spdlog::level::debug},
      {"info", spdlog::level::info},   {"warn", spdlog::level::warn},
      {"error", spdlog::level::err},   {"critical", spdlog::level::critical},
      {"off", spdlog::level::off}};
  for (const auto& entry : levels) {  // no structured binding: clang 14 cannot CAPTURE one
    CAPTURE(entry.first);
    CHECK_OK(InitLogging(entry.first));
    CHECK(Log().level() == entry.second);
  }
  CHECK_OK(InitLogging("info"));
}

TEST_CASE("InitLogging names a bad level and leaves the current one") {
  CHECK_OK(InitLogging("warn"));
  Status s = InitLogging("loud");
  CHECK(s.code() == StatusCode::kBadRequest);
  CHECK(s.message().find("'loud'") != std::string::npos);
  CHECK(Log().level() == spdlog::level::warn);
  CHECK_OK(InitLogging("info"));
}

// Adds a sink writing into `out` for the scope; InitLogging afterwards formats it too.
class CapturedLog {
 public:
  CapturedLog() : sink_(std::make_shared<spdlog::sinks::ostream_sink_st>(out_)) {
    Log().sinks().push_back(sink_);
  }
  ~CapturedLog() {
    auto& sinks = Log().sinks();
    sinks.erase(std::remove(sinks.begin(), sinks.end(), sink_), sinks.end());
  }
  CapturedLog(const CapturedLog&) = delete;
  CapturedLog& operator=(const CapturedLog&) = delete;
  std::string text() const { return out_.str(); }

 private:
  std::ostringstream out_;
  std::shared_ptr<spdlog::sinks::ostream_sink_st> sink_;
};

TEST_CASE("JSON logging writes one valid object per line, whatever the message holds") {
  CHECK(&Log() == &Log());
  CHECK(Log().name() == "hypic");
  const std::string nasty = "quote \" backslash \\ newline \n tab \t bell \a end";
  std::string text;
  {
    CapturedLog capture;
    REQUIRE_OK(InitLogging("info", /*json=*/true));
    HYPIC_LOG_INFO("{}", nasty);
    HYPIC_LOG_DEBUG("below the level: not written");
    text = capture.text();
  }
  REQUIRE_OK(InitLogging("info"));
  CAPTURE(text);
  REQUIRE(std::count(text.begin(), text.end(), '\n') == 1);
  nlohmann::json line = nlohmann::json::parse(text);  // throws (fails the test) when invalid
  CHECK(line["msg"] == nasty);
  CHECK(line["level"] == "info");
  CHECK(line["thread"].is_number_unsigned());
  CHECK(line["ts"].get<std::string>().size() == 23);  // 2026-11-29T17:00:00.000
}

TEST_CASE("text logging is restored after JSON logging") {
  CapturedLog capture;
  REQUIRE_OK(InitLogging("info", /*json=*/true));
  REQUIRE_OK(InitLogging("info", /*json=*/false));
  HYPIC_LOG_WARN("plain {}", "text");
  const std::string text = capture.text();
  CAPTURE(text);
  CHECK(text.find(" W [") != std::string::npos);
  CHECK(text.find("] plain text") != std::string::npos);
  CHECK(text.find("{\"ts\"") == std::string::npos);
}

}  // namespace
}  // namespace hypic
