// `hypic-bench trace` end to end on a tiny trace against a live hypicd (builtin:tiny): every mode
// runs (corpus prewarmed, then a warm-up), the JSON report holds each mode's facts (no cache hits
// without a cache, segment hits for the PIC modes, prefix reuse only behind identical prefixes),
// and the CSV and plot files are written.
#include <doctest/doctest.h>
#include <fmt/format.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "tests/e2e/daemon.h"
#include "tests/support/check_ok.h"

namespace hypic::tools {
namespace {

TEST_CASE("hypic-bench trace: four modes side by side on a live daemon") {
  e2e::DaemonOptions options;
  options.metrics = false;
  // The prefix mode's counters come from STATS: over TCP, admin needs the admin token.
  options.args = {"--admin-token", "bench-admin"};
  auto daemon = e2e::Daemon::Start(options);
  REQUIRE_OK(daemon);
  const std::string bin_dir = std::getenv("HYPIC_BIN_DIR");
  const auto out_dir = std::filesystem::path((*daemon)->data_dir()) / "trace-out";
  const auto json_path = std::filesystem::path((*daemon)->data_dir()) / "trace.json";
  const std::string cmd = fmt::format(
      "{}/hypic-bench trace --port {} --vocab 256 --docs 12 --doc-len-median 40 --doc-len-min 16 "
      "--doc-len-max 64 "
      "--docs-min 2 --docs-max 4 --query-min 4 --query-max 8 --zipf 1.2 --requests 16 "
      "--warmup 3 --prewarm --qps 20 --workers 2 --seed 3 --slo-ms 5000 --max-probes 1 --json "
      "--admin-token bench-admin --out {} > {}",
      bin_dir, (*daemon)->port(), out_dir.string(), json_path.string());
  const int rc = std::system(cmd.c_str());
  REQUIRE(WIFEXITED(rc));
  REQUIRE(WEXITSTATUS(rc) == 0);

  std::ifstream in(json_path);
  std::stringstream text;
  text << in.rdbuf();
  const auto j = nlohmann::json::parse(text.str(), nullptr, false);
  REQUIRE_FALSE(j.is_discarded());
  REQUIRE(j["modes"].size() == 4);
  std::map<std::string, nlohmann::json> modes;
  for (const auto& m : j["modes"]) modes[m["mode"]] = m;
  for (const auto& [name, m] : modes) {
    CAPTURE(name);
    CHECK(m["requests"] == 13);  // 16 minus 3 warm-up
    CHECK(m["failed"] == 0);
    CHECK(m["ttft_s"]["p50"].get<double>() > 0);
    // The daemon's own time is part of the TTFT (which adds the queueing and the wire).
    CHECK(m["service_s"]["p50"].get<double>() > 0);
    CHECK(m["service_s"]["p50"].get<double>() <= m["ttft_s"]["max"].get<double>());
    CHECK(m["prompt_tokens"].get<uint64_t>() > 0);
    // The measured run is the first SLO probe; one more ran on a fresh window of requests.
    REQUIRE(m["probes"].size() == 2);
    CHECK(m["probes"][0]["qps"].get<double>() == 20.0);
    CHECK(m["probes"][1]["qps"].get<double>() > 0);
    CHECK(m.contains("sustainable_qps"));
    // Every mode went through the daemon's protocol.
    CHECK(m["bytes_sent"].get<uint64_t>() > 0);
    CHECK(m["bytes_received"].get<uint64_t>() > 0);
  }
  // full keeps nothing; the PIC modes hit the popular documents the warm-up cached.
  CHECK(modes["full"]["reused_tokens"] == 0);
  CHECK_FALSE(modes["full"]["parts"].contains("hit:host"));
  for (const char* pic : {"naive", "hypic"}) {
    CAPTURE(pic);
    CHECK(modes[pic]["parts"].value("hit:host", 0) > 0);
    CHECK(modes[pic]["reused_tokens"].get<uint64_t>() > 0);
    CHECK(modes[pic]["bytes_sent"].get<uint64_t>() > 0);
  }
  // The daemon's prefix cache restored the prewarmed first documents (host hits), but random
  // order defeats it: it reuses far fewer documents than hypic.
  const uint64_t prefix_reused = modes["prefix"]["parts"].value("hit:host", 0);
  CHECK(prefix_reused > 0);
  CHECK(prefix_reused < modes["hypic"]["parts"].value("hit:host", 0));
  CHECK(modes["prefix"]["parts"].value("miss", 0) > 0);
  // Its counters come from the daemon's STATS, with nothing evicted at the default capacity.
  CHECK(modes["prefix"]["note"].get<std::string>().find(" 0 evicted") != std::string::npos);

  for (const char* f : {"report.json", "summary.csv", "ttft.csv", "ttft_cdf.gp"}) {
    CHECK(std::filesystem::exists(out_dir / f));
  }
}

}  // namespace
}  // namespace hypic::tools
