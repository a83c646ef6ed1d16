// The measurement side of `hypic-bench trace`: percentiles, the CDF, the sustainable-QPS
// search, and the open-loop driver's timing from the scheduled start.
#include <doctest/doctest.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "tests/support/check_ok.h"
#include "tools/hypic-bench/trace_driver.h"
#include "tools/hypic-bench/trace_report.h"
#include "tools/hypic-bench/trace_stats.h"

namespace hypic::tools {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

TEST_CASE("percentiles interpolate between closest ranks") {
  const std::vector<double> v = {1, 2, 3, 4, 5};
  CHECK(Percentile(v, 0.0) == 1);
  CHECK(Percentile(v, 0.25) == 2);
  CHECK(Percentile(v, 0.5) == 3);
  CHECK(Percentile(v, 0.9) == doctest::Approx(4.6));
  CHECK(Percentile(v, 1.0) == 5);
  const std::vector<double> with_inf = {1, 2, kInf};
  CHECK(Percentile(with_inf, 0.5) == 2);
  CHECK(std::isinf(Percentile(with_inf, 0.99)));
}

TEST_CASE("summary: requests that did not complete count as infinitely slow") {
  std::vector<double> lat;
  for (int i = 1; i <= 100; ++i) lat.push_back(i * 0.01);
  auto s = SummarizeLatencies(lat);
  CHECK(s.count == 100);
  CHECK(s.failed == 0);
  CHECK(s.p50 == doctest::Approx(0.505));
  CHECK(s.p99 == doctest::Approx(0.9901));
  CHECK(s.mean == doctest::Approx(0.505));
  CHECK(s.max == doctest::Approx(1.0));

  lat[0] = kInf;
  lat[1] = kInf;
  s = SummarizeLatencies(lat);
  CHECK(s.failed == 2);
  CHECK(std::isinf(s.p99));
  CHECK(std::isinf(s.max));
  CHECK(std::isfinite(s.p90));
  CHECK(SummarizeLatencies({}).count == 0);
}

TEST_CASE("CDF: monotone, ends at 1 without failures, below 1 with them") {
  std::vector<double> lat;
  for (int i = 0; i < 1000; ++i) lat.push_back(std::fmod(i * 0.37, 1.0));
  auto cdf = LatencyCdf(lat, 50);
  REQUIRE(cdf.size() == 50);
  for (size_t i = 1; i < cdf.size(); ++i) {
    CHECK(cdf[i].first >= cdf[i - 1].first);
    CHECK(cdf[i].second > cdf[i - 1].second);
  }
  CHECK(cdf.back().second == 1.0);
  lat.push_back(kInf);
  cdf = LatencyCdf(lat, 2000);
  CHECK(cdf.size() == 1000);
  CHECK(cdf.back().second < 1.0);
}

// An M/M/1-like system with capacity 10 req/s: p99 = 0.1 / (1 - qps/10).
Result<double> QueueP99(double qps) { return qps < 10 ? 0.1 / (1 - qps / 10) : kInf; }

TEST_CASE("QPS search: brackets by doubling, then bisects to the SLO boundary") {
  // p99 <= 1 s  <=>  qps <= 9.
  auto r = SearchSustainableQps(1.0, 1.0, 30, 0.01, QueueP99);
  REQUIRE_OK(r);
  CHECK(r->sustainable_qps <= 9.0);
  CHECK(r->sustainable_qps >= 9.0 / 1.01);
  CHECK(r->probes[0].qps == 1.0);
  CHECK(r->probes[1].qps == 2.0);
  for (const auto& p : r->probes) CHECK(p.meets_slo == (p.qps <= 9.0));
}

TEST_CASE("QPS search: halves when the start rate already misses; 0 when nothing meets it") {
  auto r = SearchSustainableQps(64.0, 1.0, 30, 0.05, QueueP99);
  REQUIRE_OK(r);
  CHECK(r->probes[1].qps == 32.0);
  CHECK(r->sustainable_qps == doctest::Approx(9.0).epsilon(0.05));
  auto never = SearchSustainableQps(1.0, 0.05, 6, 0.05, QueueP99);  // p99 >= 0.1 always
  REQUIRE_OK(never);
  CHECK(never->sustainable_qps == 0.0);
  CHECK(never->probes.size() == 6);
}

TEST_CASE("QPS search: known probes seed the bracket and save probes") {
  // The measured run passed at 2 and failed at 32: no doubling from 2 is needed.
  const std::vector<QpsProbe> known = {{2.0, QueueP99(2.0).value(), true}, {32.0, kInf, false}};
  std::vector<double> asked;
  auto r = SearchSustainableQps(
      1.0, 1.0, 3, 0.05,
      [&](double qps) -> Result<double> {
        asked.push_back(qps);
        return QueueP99(qps);
      },
      known);
  REQUIRE_OK(r);
  REQUIRE(asked.size() == 3);               // all three probes bisect
  CHECK(asked[0] == doctest::Approx(8.0));  // sqrt(2 * 32)
  CHECK(r->probes.size() == 5);
  CHECK(r->probes[0].qps == 2.0);
  CHECK(asked[1] == doctest::Approx(16.0));                   // 8 passed: sqrt(8 * 32)
  CHECK(asked[2] == doctest::Approx(std::sqrt(8.0 * 16.0)));  // 16 failed
  CHECK(r->sustainable_qps == doctest::Approx(8.0));
  // A start below the known passing rate moves above it instead of re-measuring it.
  asked.clear();
  const std::vector<QpsProbe> passed = {{2.0, QueueP99(2.0).value(), true}};
  auto up = SearchSustainableQps(
      1.0, 1.0, 1, 0.05,
      [&](double qps) -> Result<double> {
        asked.push_back(qps);
        return QueueP99(qps);
      },
      passed);
  REQUIRE_OK(up);
  REQUIRE(asked.size() == 1);
  CHECK(asked[0] == 4.0);
  CHECK(up->sustainable_qps == 4.0);
}

TEST_CASE("QPS search: a failing probe stops it with that error") {
  int calls = 0;
  auto r = SearchSustainableQps(1.0, 1.0, 10, 0.05, [&](double) -> Result<double> {
    if (++calls == 3) return Unsupported("probe failed");
    return 0.5;
  });
  REQUIRE_FALSE(r.ok());
  CHECK(r.status().code() == StatusCode::kUnsupported);
  CHECK(calls == 3);
}

void SleepMs(int ms) { std::this_thread::sleep_for(std::chrono::milliseconds(ms)); }

TEST_CASE("open loop: latency runs from the scheduled start, so a backlog shows") {
  // One worker, a 30 ms service, arrivals every 10 ms: request i waits for the i before it,
  // so its latency is at least 30 + 20 i ms. A closed-loop timer would report ~30 ms each.
  std::vector<double> schedule;
  for (int i = 0; i < 12; ++i) schedule.push_back(0.01 * i);
  auto t = RunOpenLoop(schedule, {.workers = 1}, [](size_t worker, size_t) {
    CHECK(worker == 0);
    SleepMs(30);
    return Status::Ok();
  });
  REQUIRE(t.size() == schedule.size());
  for (size_t i = 0; i < t.size(); ++i) {
    CAPTURE(i);
    CHECK(t[i].completed);
    CHECK(t[i].scheduled_s == schedule[i]);
    CHECK(t[i].issued_s >= t[i].scheduled_s);
    CHECK(t[i].Latency() >= 0.030 + 0.020 * static_cast<double>(i) - 1e-3);
  }
}

TEST_CASE("open loop: enough workers keep up, and nothing is sent early") {
  std::vector<double> schedule;
  for (int i = 0; i < 16; ++i) schedule.push_back(0.005 * i);
  auto t = RunOpenLoop(schedule, {.workers = 16}, [](size_t, size_t) {
    SleepMs(20);
    return Status::Ok();
  });
  std::vector<double> lat;
  for (const auto& x : t) {
    CHECK(x.issued_s >= x.scheduled_s);
    lat.push_back(x.Latency());
  }
  // 16 workers for 16 requests: no queueing, each ~20 ms (generous bound for a loaded CI box).
  CHECK(SummarizeLatencies(lat).p50 < 0.2);
}

TEST_CASE("open loop: errors are recorded, and an overloaded run is cut short") {
  std::vector<double> schedule(200);
  for (size_t i = 0; i < schedule.size(); ++i) schedule[i] = 0.001 * static_cast<double>(i);
  const auto t0 = std::chrono::steady_clock::now();
  auto t = RunOpenLoop(schedule, {.workers = 2, .abort_after_s = 0.2},
                       [](size_t, size_t index) -> Status {
                         SleepMs(50);
                         if (index % 2 == 1) return ComputeFailed("odd");
                         return Status::Ok();
                       });
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  // Uncut, 200 requests at 25 ms each would take 5 s.
  CHECK(wall < 2.5);
  size_t completed = 0, failed_with_status = 0, not_issued = 0;
  for (const auto& x : t) {
    if (x.completed) {
      ++completed;
    } else if (!x.status.ok()) {
      CHECK(x.status.code() == StatusCode::kComputeFailed);
      ++failed_with_status;
    } else {
      ++not_issued;
    }
    if (!x.completed) CHECK(std::isinf(x.Latency()));
  }
  CHECK(completed > 0);
  CHECK(failed_with_status > 0);
  CHECK(not_issued > 100);
}

ModeRun FakeRun(std::string mode, double scale, double sustainable) {
  ModeRun m;
  m.mode = std::move(mode);
  m.offered_qps = 0.5;
  m.wall_s = 10;
  for (int i = 1; i <= 20; ++i) m.ttft_s.push_back(scale * i);
  for (int i = 1; i <= 20; ++i) m.service_s.push_back(scale * 0.5 * i);
  m.parts = {{"hit:host", 30}, {"miss", 10}, {"live", 40}};
  m.prompt_tokens = 1000;
  m.reused_tokens = 600;
  m.bytes_sent = 1 << 20;
  m.bytes_received = 1 << 20;
  m.sustainable_qps = sustainable;
  m.probes = {{1.0, scale * 10, true}, {2.0, kInf, false}};
  m.Finish();
  return m;
}

TraceReport FakeReport() {
  TraceReport r;
  r.command = "hypic-bench trace --test";
  r.slo_s = 1.0;
  r.trace.n_requests = 20;
  r.modes.push_back(FakeRun("prefix", 0.3, 0.4));
  r.modes.push_back(FakeRun("hypic", 0.1, 0.8));
  return r;
}

TEST_CASE("report: table rows, ratios, and a JSON document that parses back") {
  TraceReport r = FakeReport();
  CHECK(r.modes[0].throughput_rps == doctest::Approx(2.0));
  const std::string table = RenderTable(r);
  CHECK(table.find("prefix") != std::string::npos);
  CHECK(table.find("hit:host=30") != std::string::npos);
  CHECK(table.find("75.0%") != std::string::npos);  // 30 hits of 40 segment parts
  CHECK(table.find("p50 TTFT 3.00x lower (service p50 3.00x)") != std::string::npos);
  CHECK(table.find("sustainable QPS 2.00x higher") != std::string::npos);

  const auto j = nlohmann::json::parse(ToJson(r).dump());
  REQUIRE(j["modes"].size() == 2);
  CHECK(j["modes"][1]["mode"] == "hypic");
  CHECK(j["modes"][1]["ttft_s"]["p50"].get<double>() == doctest::Approx(1.05));
  CHECK(j["modes"][1]["service_s"]["p50"].get<double>() == doctest::Approx(0.525));
  CHECK(j["modes"][1]["probes"][1]["p99_s"].is_null());  // inf is not JSON
  CHECK(j["modes"][0]["ttft_cdf"].size() == 20);
}

TEST_CASE("report: CSV files and gnuplot plots are written") {
  const auto dir =
      std::filesystem::temp_directory_path() / ("hypic_trace_report_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  TraceReport r = FakeReport();
  REQUIRE_OK(WriteCsv(r, dir));
  std::ifstream ttft(dir / "ttft.csv");
  std::stringstream text;
  text << ttft.rdbuf();
  CHECK(text.str().starts_with("mode,request,ttft_s\nprefix,0,0.3\n"));
  CHECK(std::filesystem::file_size(dir / "qps.csv") > 0);
  CHECK(std::filesystem::file_size(dir / "summary.csv") > 0);

  const Status plots = WritePlots(r, dir);
  CHECK(std::filesystem::exists(dir / "ttft_cdf.gp"));
  CHECK(std::filesystem::exists(dir / "p99_vs_qps.dat"));
  if (plots.code() == StatusCode::kUnsupported) {
    MESSAGE("gnuplot missing: " << plots.ToString());
  } else {
    REQUIRE_OK(plots);
    CHECK(std::filesystem::file_size(dir / "ttft_cdf.png") > 1000);
    CHECK(std::filesystem::file_size(dir / "p99_vs_qps.png") > 1000);
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace hypic::tools
