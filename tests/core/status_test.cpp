#include "core/status.h"

#include <doctest/doctest.h>

#include <memory>
#include <string>

#include "tests/support/check_ok.h"

namespace hypic {
namespace {

Result<int> ParsePositive(int v) {
  if (v <= 0) return BadRequest("not positive: " + std::to_string(v));
  return v;
}

Result<int> Doubled(int v) {
  HYPIC_ASSIGN_OR_RETURN(int x, ParsePositive(v));
  return 2 * x;
}

Status Chain(int v) {
  HYPIC_RETURN_IF_ERROR(ParsePositive(v).status());
  return Status::Ok();
}

TEST_CASE("status codes keep their wire numbers") {
  // These numbers are on the wire (protocol/README.md). Changing one breaks every client.
  CHECK(static_cast<int>(StatusCode::kOk) == 0);
  CHECK(static_cast<int>(StatusCode::kNotFound) == 1);
  CHECK(static_cast<int>(StatusCode::kBadRequest) == 2);
  CHECK(static_cast<int>(StatusCode::kBadChecksum) == 3);
  CHECK(static_cast<int>(StatusCode::kTooLarge) == 4);
  CHECK(static_cast<int>(StatusCode::kUnauthorized) == 5);
  CHECK(static_cast<int>(StatusCode::kBusy) == 6);
  CHECK(static_cast<int>(StatusCode::kDeadlineExceeded) == 7);
  CHECK(static_cast<int>(StatusCode::kVersionMismatch) == 8);
  CHECK(static_cast<int>(StatusCode::kComputeFailed) == 9);
  CHECK(static_cast<int>(StatusCode::kShuttingDown) == 10);
  CHECK(static_cast<int>(StatusCode::kInternal) == 11);
  CHECK(static_cast<int>(StatusCode::kIoError) == 12);
  CHECK(static_cast<int>(StatusCode::kNoSpace) == 13);
  CHECK(static_cast<int>(StatusCode::kDeviceError) == 14);
  CHECK(static_cast<int>(StatusCode::kCancelled) == 15);
  CHECK(static_cast<int>(StatusCode::kUnsupported) == 16);
  CHECK(static_cast<int>(StatusCode::kCorruption) == 17);
  CHECK(static_cast<int>(StatusCode::kQuotaExceeded) == 18);
  CHECK(kMaxStatusCode == 18);
}

TEST_CASE("every code has a distinct name") {
  for (uint16_t a = 0; a <= kMaxStatusCode; ++a) {
    CHECK(StatusCodeName(static_cast<StatusCode>(a)) != "UNKNOWN");
    for (uint16_t b = a + 1; b <= kMaxStatusCode; ++b) {
      CHECK(StatusCodeName(static_cast<StatusCode>(a)) !=
            StatusCodeName(static_cast<StatusCode>(b)));
    }
  }
}

TEST_CASE("Status semantics") {
  Status ok;
  CHECK(ok.ok());
  CHECK(ok.ToString() == "OK");
  Status bad = NotFound("key 12");
  CHECK_FALSE(bad.ok());
  CHECK(bad.code() == StatusCode::kNotFound);
  CHECK(bad.ToString() == "NOT_FOUND: key 12");
  CHECK(bad.WithContext("GET").ToString() == "NOT_FOUND: GET: key 12");
  CHECK(ok.WithContext("ignored").ok());
  CHECK(bad == NotFound("key 12"));
  CHECK_FALSE(bad == NotFound("key 13"));
}

TEST_CASE("Result holds a value or an error") {
  Result<int> good = Doubled(21);
  REQUIRE(good.ok());
  CHECK(*good == 42);
  CHECK(good.status().ok());
  Result<int> bad = Doubled(-1);
  CHECK_FALSE(bad.ok());
  CHECK(bad.status().code() == StatusCode::kBadRequest);
  CHECK(bad.status().message() == "not positive: -1");
  CHECK(bad.value_or(7) == 7);
  CHECK(Chain(3).ok());
  CHECK(Chain(0).code() == StatusCode::kBadRequest);
}

TEST_CASE("a Result built from an OK status is an internal error, never a fake value") {
  Result<int> r{Status::Ok()};
  CHECK_FALSE(r.ok());
  CHECK(r.status().code() == StatusCode::kInternal);
}

TEST_CASE("Result moves move-only values") {
  Result<std::unique_ptr<int>> r = std::make_unique<int>(5);
  REQUIRE(r.ok());
  std::unique_ptr<int> p = std::move(r).value();
  CHECK(*p == 5);
}

}  // namespace
}  // namespace hypic
