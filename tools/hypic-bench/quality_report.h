// The outputs of `hypic-bench quality` (docs/quality.md): the human table, the JSON document
// (one object; `results` holds one row per mode and seam) and the gnuplot PNG of accuracy
// against seam width per mode, whose data and script are written beside it (OUT.dat, OUT.gp)
// so `gnuplot OUT.gp` there redraws it. Pure functions apart from the plot's files;
// thread-compatible.
#pragma once

#include <filesystem>
#include <nlohmann/json_fwd.hpp>
#include <string>

#include "core/status.h"
#include "tools/hypic-bench/quality_eval.h"

namespace hypic::tools {

// What the run was, for the header and the JSON.
struct QualitySetup {
  std::string model;         // --model as given
  std::string data;          // --data as given
  std::string source;        // "in process" or "daemon HOST:PORT"
  std::string cpu;           // the CPU model name
  std::string gemm;          // cpu::GemmSummary()
  std::string entry_dtypes;  // in process: the entries' dtypes; empty for a daemon
};

std::string RenderQualityTable(const QualitySetup& setup, const QualityResult& result);

nlohmann::json QualityJson(const QualitySetup& setup, const QualityResult& result);

// Writes `png` and, beside it, the .dat and .gp it is drawn from. kUnsupported when gnuplot is
// not installed (the data and script are written anyway), kIoError when a file cannot be
// written or gnuplot fails.
[[nodiscard]] Status WriteQualityPlot(const QualitySetup& setup, const QualityResult& result,
                                      const std::filesystem::path& png);

}  // namespace hypic::tools
