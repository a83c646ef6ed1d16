// End to end against the real hypicd on a CUDA device (issue 15 §7): a daemon with
// `--devices cuda` prefills the missed segments and runs the combine on its GPU, and its COMPOSE
// logits equal a CPU daemon's within the fp32 bound (builtin:tiny has fp32 weights, and the
// device GEMMs run without TF32): the largest difference is at most 1e-4 of the largest |logit|,
// the top tokens agree, and both daemons key the segments alike. The metrics show the device
// worker, healthy. Without a usable device the GPU daemon refuses to start, and the test says
// "skipped" and passes.
#include <doctest/doctest.h>
#include <signal.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "tests/e2e/daemon.h"
#include "tests/support/check_ok.h"

namespace hypic::e2e {
namespace {

using protocol::Opcode;

protocol::ComposeReply Compose(RawConn& conn, const std::vector<protocol::ComposePart>& parts) {
  protocol::ComposeRequest req;
  req.mode = protocol::ComposeMode::kHypic;
  req.top_k = 4;
  req.parts = parts;
  protocol::ComposeOptions options;
  options.logits = protocol::LogitsMode::kFull;
  auto r = conn.Call(Opcode::kCompose, protocol::Encode(req), protocol::Encode(options), {}, 120s);
  REQUIRE_OK(r);
  REQUIRE_MESSAGE(r->status() == StatusCode::kOk, r->text());
  auto reply = protocol::Decode<protocol::ComposeReply>(r->body);
  REQUIRE_OK(reply);
  return std::move(reply).value();
}

// A daemon on builtin:tiny (Daemon::Start's model) with `devices` set.
Result<std::unique_ptr<Daemon>> StartOn(const std::string& devices) {
  DaemonOptions options;
  options.args = {"--devices", devices};
  return Daemon::Start(options);
}

TEST_CASE("hypicd --devices cuda: COMPOSE logits equal the CPU daemon's within the fp32 bound") {
  auto gpu = StartOn("cuda");
  if (!gpu.ok() && gpu.status().message().find("no CUDA device is visible") != std::string::npos) {
    MESSAGE("skipped: no CUDA device (hypicd --devices cuda refused to start, as it should)");
    return;
  }
  REQUIRE_OK(gpu);
  auto cpu = StartOn("cpu");
  REQUIRE_OK(cpu);
  CHECK_MESSAGE((*gpu)->Log().find("devices: cuda:0") != std::string::npos, (*gpu)->Log());
  auto c = RawConn::TcpHello((*cpu)->port());
  REQUIRE_OK(c);
  auto g = RawConn::TcpHello((*gpu)->port());
  REQUIRE_OK(g);

  for (uint64_t seed : {1u, 2u}) {  // the second prompt shares nothing: all misses again
    CAPTURE(seed);
    const auto prompt = SegmentsPrompt(seed, 6, 120);
    const protocol::ComposeReply want = Compose(*c, prompt);
    const protocol::ComposeReply got = Compose(*g, prompt);
    REQUIRE(got.logits.size() == want.logits.size());
    REQUIRE_FALSE(want.logits.empty());
    float scale = 0.0f, worst = 0.0f;
    for (size_t i = 0; i < want.logits.size(); ++i) {
      scale = std::max(scale, std::abs(want.logits[i]));
      worst = std::max(worst, std::abs(got.logits[i] - want.logits[i]));
    }
    CHECK_MESSAGE(worst <= 1e-4f * scale, "max |dlogit| " << worst << " of " << scale);
    CHECK(got.top == want.top);
    REQUIRE(got.parts.size() == want.parts.size());
    for (size_t i = 0; i + 1 < got.parts.size(); ++i) CHECK(got.parts[i].key == want.parts[i].key);
  }
  const std::string metrics = HttpGet((*gpu)->metrics_port(), "/metrics");
  CHECK(metrics.find("hypic_worker_healthy{worker=\"cuda:0\"} 1") != std::string::npos);
  CHECK((*gpu)->Stop(SIGTERM) == 0);
  CHECK((*cpu)->Stop(SIGTERM) == 0);
}

}  // namespace
}  // namespace hypic::e2e
