// The results of `hypic-bench trace` and their outputs: the stdout table, the JSON document,
// CSV files and gnuplot PNGs (the TTFT CDF per mode, p99 TTFT against offered QPS per mode).
// The plot scripts are written next to their data, so `gnuplot ttft_cdf.gp` in the output
// directory redraws a plot. Value types; thread-compatible.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

#include "core/status.h"
#include "tools/hypic-bench/trace_stats.h"
#include "tools/hypic-bench/trace_workload.h"

namespace hypic::tools {

struct ModeRun {
  std::string mode;  // full, prefix, naive, hypic
  std::string note;  // how the mode was run, when that differs from the others
  double offered_qps = 0;
  double wall_s = 0;
  std::vector<double> ttft_s;  // one per measured request; +inf when it did not complete
  LatencySummary ttft;
  // The daemon's own time per completed request (its reply's total_us): the TTFT without the
  // queueing before a compute worker took the request, so a loaded run shows what is queueing.
  std::vector<double> service_s;
  LatencySummary service;
  double throughput_rps = 0;  // completed requests / wall time
  // Part outcomes over the measured requests, as the daemon reports them: "hit:hbm",
  // "hit:host", "hit:ssd", "miss", "live" (raw parts, and every part of mode full); for
  // prefix, parts restored from a checkpoint are host hits and the rest misses.
  std::map<std::string, uint64_t> parts;
  uint64_t prompt_tokens = 0;
  uint64_t reused_tokens = 0;  // tokens whose state came from the cache
  uint64_t bytes_sent = 0;     // request bytes on the wire
  uint64_t bytes_received = 0;
  std::vector<QpsProbe> probes;  // the SLO search, in order
  double sustainable_qps = -1;   // < 0: not searched

  // Fills ttft, service and throughput_rps from ttft_s, service_s and wall_s.
  void Finish();
};

struct TraceReport {
  std::string command;  // the exact command line
  std::string date;     // UTC, ISO 8601
  std::string machine;  // e.g. "2 cores, 24 GiB, no GPU"
  TraceConfig trace;
  uint32_t warmup_requests = 0;
  bool prewarm = false;  // every initial document cached on its own before the warm-up
  double slo_s = 0;      // 0: no SLO search
  std::vector<ModeRun> modes;

  const ModeRun* Find(const std::string& mode) const;
};

// The human table, with hypic-vs-prefix ratios underneath when both ran.
std::string RenderTable(const TraceReport& report);

nlohmann::json ToJson(const TraceReport& report);

// summary.csv, ttft.csv (mode,request,ttft_s) and qps.csv (mode,qps,p99_s,meets_slo).
[[nodiscard]] Status WriteCsv(const TraceReport& report, const std::filesystem::path& dir);

// ttft_cdf.{dat,gp,png} and, when the SLO search ran, p99_vs_qps.{dat,gp,png}. kUnsupported
// when gnuplot is not installed (the data and scripts are written anyway).
[[nodiscard]] Status WritePlots(const TraceReport& report, const std::filesystem::path& dir);

}  // namespace hypic::tools
