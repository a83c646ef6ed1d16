#include "tools/hypic-bench/quality_report.h"

#include <fmt/format.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <set>

#include "tools/hypic-bench/gnuplot.h"
#include "tools/hypicctl/table.h"

namespace hypic::tools {
namespace {

using model::ComposeMode;

std::string ModeName(const QualityRow& row) {
  return std::string(model::ComposeModeName(row.run.mode));
}

std::string Split(const EvidenceSplit& s) {
  return s.n == 0 ? "-" : fmt::format("{:.1f}% ({})", 100.0 * s.Accuracy(), s.n);
}

nlohmann::json SplitJson(const EvidenceSplit& s) {
  return {{"n", s.n},
          {"accuracy", s.n == 0 ? nlohmann::json(nullptr) : nlohmann::json(s.Accuracy())}};
}

}  // namespace

std::string RenderQualityTable(const QualitySetup& setup, const QualityResult& result) {
  std::vector<std::string> headers = {"mode",         "w",         "n",        "accuracy",
                                      "95% CI",       "first tok", "vs full",  "KL mean",
                                      "argmax agree", "P(answer)", "ms/prompt"};
  if (result.has_evidence) {
    headers.push_back("evidence in seam");
    headers.push_back("outside");
  }
  Table table(headers);
  for (size_t c = 1; c < headers.size(); ++c) table.AlignRight(c);
  for (const QualityRow& r : result.rows) {
    std::vector<std::string> cells = {
        ModeName(r),
        std::to_string(r.run.seam),
        std::to_string(r.n),
        fmt::format("{:.1f}%", 100.0 * r.accuracy),
        fmt::format("[{:.1f}, {:.1f}]", 100.0 * r.ci95.low, 100.0 * r.ci95.high),
        fmt::format("{:.1f}%", 100.0 * r.first_token_accuracy),
        fmt::format("{:+.1f} pts", r.delta_vs_full_points),
        fmt::format("{:.3e}", r.kl_mean),
        fmt::format("{:.1f}%", 100.0 * r.argmax_agree),
        fmt::format("{:.3g}", r.answer_prob_mean),
        fmt::format("{:.1f}", 1e3 * r.seconds_per_prompt)};
    if (result.has_evidence) {
      cells.push_back(Split(r.evidence_in_seam));
      cells.push_back(Split(r.evidence_outside));
    }
    table.AddRow(std::move(cells));
  }
  std::string out = fmt::format(
      "hypic-bench quality: {} on {}: {} prompts, {}, {} workers, {:.1f} s{}\n"
      "cpu: {}; gemm: {}\n",
      setup.model, setup.data, result.n, setup.source, result.workers, result.wall_s,
      setup.entry_dtypes.empty() ? "" : ", entries " + setup.entry_dtypes, setup.cpu, setup.gemm);
  out += table.Render();
  out +=
      "accuracy: exact match of the whole greedy answer; 95% CI: Wilson score interval; vs full: "
      "accuracy minus full's, in points; KL: KL(full || mode) of the first answer token, nats";
  if (result.has_evidence) out += "; evidence in seam: evidence_pos < w";
  return out + "\n";
}

nlohmann::json QualityJson(const QualitySetup& setup, const QualityResult& result) {
  nlohmann::json rows = nlohmann::json::array();
  for (const QualityRow& r : result.rows) {
    nlohmann::json row = {{"mode", ModeName(r)},
                          {"seam", r.run.seam},
                          {"n", r.n},
                          {"correct", r.correct},
                          {"accuracy", r.accuracy},
                          {"ci95", r.ci95.HalfWidth()},
                          {"ci95_low", r.ci95.low},
                          {"ci95_high", r.ci95.high},
                          {"first_token_accuracy", r.first_token_accuracy},
                          {"delta_vs_full", r.delta_vs_full_points},
                          {"kl_mean", r.kl_mean},
                          {"argmax_agree", r.argmax_agree},
                          {"answer_prob_mean", r.answer_prob_mean},
                          {"ms_per_prompt", 1e3 * r.seconds_per_prompt}};
    if (result.has_evidence) {
      row["evidence_in_seam"] = SplitJson(r.evidence_in_seam);
      row["evidence_outside"] = SplitJson(r.evidence_outside);
    }
    rows.push_back(std::move(row));
  }
  nlohmann::json j = {{"model", setup.model},      {"data", setup.data},      {"n", result.n},
                      {"source", setup.source},    {"cpu", setup.cpu},        {"gemm", setup.gemm},
                      {"workers", result.workers}, {"wall_s", result.wall_s}, {"ci", "wilson"},
                      {"results", std::move(rows)}};
  if (!setup.entry_dtypes.empty()) j["entry_dtypes"] = setup.entry_dtypes;
  return j;
}

Status WriteQualityPlot(const QualitySetup& setup, const QualityResult& result,
                        const std::filesystem::path& png) {
  const std::filesystem::path dir = png.parent_path().empty() ? "." : png.parent_path();
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return IoError(fmt::format("cannot create {}: {}", dir.string(), ec.message()));
  const std::string stem = png.stem().string();
  std::set<uint32_t> seams;
  for (const QualityRow& r : result.rows) seams.insert(r.run.seam);
  std::string data, plot;
  int index = 0;
  for (ComposeMode mode :
       {ComposeMode::kFull, ComposeMode::kOracle, ComposeMode::kNaive, ComposeMode::kHypic}) {
    // Full and oracle do not depend on w: they are references, drawn flat across the widths
    // measured, dashed and without error bars (which would hide the others').
    const bool flat = mode == ComposeMode::kFull || mode == ComposeMode::kOracle;
    std::string block;
    for (const QualityRow& r : result.rows) {
      if (r.run.mode != mode) continue;
      for (uint32_t w : flat ? seams : std::set<uint32_t>{r.run.seam}) {
        block += fmt::format("{} {} {} {}\n", w, 100.0 * r.accuracy, 100.0 * r.ci95.low,
                             100.0 * r.ci95.high);
      }
    }
    if (block.empty()) continue;
    const std::string name(model::ComposeModeName(mode));
    data += fmt::format("# {}: seam accuracy ci95_low ci95_high (percent)\n{}\n\n", name, block);
    plot +=
        fmt::format("{}{} index {} {} title {}", index == 0 ? "plot " : ", \\\n     ",
                    GnuplotQuote(stem + ".dat"), index,
                    flat ? "using 1:2 with lines dt 2 lw 2" : "using 1:2:3:4 with yerrorlines lw 2",
                    GnuplotQuote(name));
    ++index;
  }
  std::string gp = GnuplotHeader(
      png.filename().string(),
      fmt::format("{} on {}: accuracy vs seam width ({} prompts, 95% Wilson)", setup.model,
                  std::filesystem::path(setup.data).filename().string(), result.n));
  gp += "set xlabel 'seam width w (tokens)'\nset ylabel 'exact-match accuracy (%)'\n";
  gp +=
      "set termoption noenhanced\nset key below\nset yrange [0:105]\nset offsets 0.5, 0.5, 0, 0\n";
  gp += plot + "\n";
  HYPIC_RETURN_IF_ERROR(WriteTextFile(dir / (stem + ".dat"), data));
  HYPIC_RETURN_IF_ERROR(WriteTextFile(dir / (stem + ".gp"), gp));
  return RunGnuplot(dir, {stem + ".gp"});
}

}  // namespace hypic::tools
