// DeviceSelection: the `devices` setting's forms, its errors, and its resolution against the
// number of visible CUDA devices (so the GPU cases run without a GPU).
#include "gpu/runtime/device_selection.h"

#include <doctest/doctest.h>

#include <vector>

#include "tests/support/check_ok.h"

namespace hypic::runtime {
namespace {

using Mode = DeviceSelection::Mode;

TEST_CASE("devices: every form parses and prints back") {
  struct Case {
    const char* text;
    Mode mode;
    std::vector<int> cuda;
    const char* canonical;
  };
  for (const Case& c :
       {Case{"auto", Mode::kAuto, {}, "auto"}, Case{" CPU ", Mode::kCpu, {}, "cpu"},
        Case{"cuda", Mode::kCuda, {}, "cuda"}, Case{"cuda:0", Mode::kCuda, {0}, "cuda:0"},
        Case{"cuda:3, 1", Mode::kCuda, {1, 3}, "cuda:1,3"}}) {
    CAPTURE(c.text);
    auto d = DeviceSelection::Parse(c.text);
    REQUIRE_OK(d);
    CHECK(d->mode == c.mode);
    CHECK(d->cuda == c.cuda);
    CHECK(d->ToString() == c.canonical);
    auto again = DeviceSelection::Parse(d->ToString());
    REQUIRE_OK(again);
    CHECK(again->cuda == d->cuda);
  }
}

TEST_CASE("devices: bad text is refused with the offending part") {
  for (const char* text : {"", "gpu", "cuda:", "cuda:x", "cuda:-1", "cuda:1,,2", "cuda:0,0",
                           "cuda:99999999999", "cuda:1024", "cpu,cuda"}) {
    CAPTURE(text);
    auto d = DeviceSelection::Parse(text);
    REQUIRE_FALSE(d.ok());
    CHECK(d.status().code() == StatusCode::kBadRequest);
    CHECK(d.status().message().find("devices") != std::string::npos);
  }
}

TEST_CASE("devices: resolution against the visible CUDA devices") {
  auto parse = [](const char* text) {
    auto d = DeviceSelection::Parse(text);
    REQUIRE_OK(d);
    return *d;
  };
  // auto: the GPUs when there are some, else the CPU path, never an error.
  CHECK(*ResolveCudaDevices(parse("auto"), 0) == std::vector<int>{});
  CHECK(*ResolveCudaDevices(parse("auto"), 2) == std::vector<int>{0, 1});
  // cpu: never a GPU.
  CHECK(*ResolveCudaDevices(parse("cpu"), 4) == std::vector<int>{});
  // cuda: every visible one, or an error without one.
  CHECK(*ResolveCudaDevices(parse("cuda"), 3) == std::vector<int>{0, 1, 2});
  auto none = ResolveCudaDevices(parse("cuda"), 0);
  REQUIRE_FALSE(none.ok());
  CHECK(none.status().code() == StatusCode::kUnsupported);
  // cuda:N: exactly those, each of which must be visible.
  CHECK(*ResolveCudaDevices(parse("cuda:1"), 2) == std::vector<int>{1});
  auto missing = ResolveCudaDevices(parse("cuda:0,2"), 2);
  REQUIRE_FALSE(missing.ok());
  CHECK(missing.status().code() == StatusCode::kNotFound);
  CHECK(missing.status().message().find("device 2") != std::string::npos);
}

}  // namespace
}  // namespace hypic::runtime
