#include "tools/hypic-bench/trace_report.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>

#include "tools/hypic-bench/gnuplot.h"

namespace hypic::tools {

namespace {

constexpr size_t kCdfPoints = 400;

std::string Ms(double s) {
  if (std::isinf(s)) return "inf";
  return fmt::format("{:.1f}", s * 1000.0);
}

// JSON has no infinity: a request that never completed is null.
nlohmann::json JsonSeconds(double s) {
  return std::isfinite(s) ? nlohmann::json(s) : nlohmann::json(nullptr);
}

uint64_t SegmentParts(const ModeRun& run) {
  uint64_t n = 0;
  for (const auto& [k, v] : run.parts) {
    if (k.starts_with("hit:") || k == "miss") n += v;
  }
  return n;
}

uint64_t Hits(const ModeRun& run) {
  uint64_t n = 0;
  for (const auto& [k, v] : run.parts) {
    if (k.starts_with("hit:")) n += v;
  }
  return n;
}

std::string Percent(uint64_t num, uint64_t den) {
  return den == 0 ? "-" : fmt::format("{:.1f}%", 100.0 * static_cast<double>(num) / den);
}

}  // namespace

void ModeRun::Finish() {
  ttft = SummarizeLatencies(ttft_s);
  if (!service_s.empty()) service = SummarizeLatencies(service_s);
  const size_t completed = ttft.count - ttft.failed;
  throughput_rps = wall_s > 0 ? static_cast<double>(completed) / wall_s : 0.0;
}

const ModeRun* TraceReport::Find(const std::string& mode) const {
  for (const auto& m : modes) {
    if (m.mode == mode) return &m;
  }
  return nullptr;
}

std::string RenderTable(const TraceReport& report) {
  std::string out = fmt::format(
      "trace: {} requests ({} warm-up{}) over {} documents, k {}-{}, zipf {}, new-doc share {}, "
      "seed {}\n\n",
      report.trace.n_requests, report.warmup_requests, report.prewarm ? ", corpus prewarmed" : "",
      report.trace.n_docs, report.trace.docs_min, report.trace.docs_max, report.trace.zipf_alpha,
      report.trace.new_doc_share, report.trace.seed);
  out += fmt::format("{:<8} {:>7} {:>9} {:>9} {:>9} {:>10} {:>8} {:>8} {:>8} {:>10} {:>10}\n",
                     "mode", "qps", "p50 ms", "p90 ms", "p99 ms", "svc p50 ms", "req/s", "hit",
                     "reuse", "MiB moved", report.slo_s > 0 ? "sust. qps" : "");
  for (const auto& m : report.modes) {
    const double mib = static_cast<double>(m.bytes_sent + m.bytes_received) / (1 << 20);
    out += fmt::format(
        "{:<8} {:>7.3g} {:>9} {:>9} {:>9} {:>10} {:>8.3f} {:>8} {:>8} {:>10.1f} {:>10}\n", m.mode,
        m.offered_qps, Ms(m.ttft.p50), Ms(m.ttft.p90), Ms(m.ttft.p99),
        m.service.count ? Ms(m.service.p50) : "-", m.throughput_rps,
        Percent(Hits(m), SegmentParts(m)), Percent(m.reused_tokens, m.prompt_tokens), mib,
        m.sustainable_qps >= 0 ? fmt::format("{:.3g}", m.sustainable_qps) : "");
  }
  for (const auto& m : report.modes) {
    std::string tiers;
    for (const auto& [k, v] : m.parts) tiers += fmt::format(" {}={}", k, v);
    out += fmt::format("  {:<8} parts:{}{}\n", m.mode, tiers,
                       m.note.empty() ? "" : "  (" + m.note + ")");
  }
  const ModeRun* hypic = report.Find("hypic");
  const ModeRun* prefix = report.Find("prefix");
  if (hypic != nullptr && prefix != nullptr && hypic->ttft.p50 > 0 &&
      std::isfinite(hypic->ttft.p50) && std::isfinite(prefix->ttft.p50)) {
    out += fmt::format("\nhypic vs prefix: p50 TTFT {:.2f}x lower",
                       prefix->ttft.p50 / hypic->ttft.p50);
    if (hypic->service.count > 0 && prefix->service.count > 0 && hypic->service.p50 > 0) {
      out += fmt::format(" (service p50 {:.2f}x)", prefix->service.p50 / hypic->service.p50);
    }
    if (hypic->sustainable_qps >= 0 && prefix->sustainable_qps > 0) {
      out += fmt::format(", sustainable QPS {:.2f}x higher",
                         hypic->sustainable_qps / prefix->sustainable_qps);
    }
    out += "\n";
  }
  return out;
}

nlohmann::json ToJson(const TraceReport& report) {
  const TraceConfig& c = report.trace;
  nlohmann::json j;
  j["command"] = report.command;
  j["date"] = report.date;
  j["machine"] = report.machine;
  j["trace"] = {{"n_docs", c.n_docs},
                {"doc_len_median", c.doc_len_median},
                {"doc_len_sigma", c.doc_len_sigma},
                {"doc_len_min", c.doc_len_min},
                {"doc_len_max", c.doc_len_max},
                {"zipf_alpha", c.zipf_alpha},
                {"docs_min", c.docs_min},
                {"docs_max", c.docs_max},
                {"query_min", c.query_min},
                {"query_max", c.query_max},
                {"new_doc_share", c.new_doc_share},
                {"n_requests", c.n_requests},
                {"qps", c.qps},
                {"seed", c.seed}};
  j["warmup_requests"] = report.warmup_requests;
  j["prewarm"] = report.prewarm;
  j["slo_s"] = report.slo_s;
  j["modes"] = nlohmann::json::array();
  for (const auto& m : report.modes) {
    nlohmann::json mj;
    mj["mode"] = m.mode;
    if (!m.note.empty()) mj["note"] = m.note;
    mj["offered_qps"] = m.offered_qps;
    mj["wall_s"] = m.wall_s;
    mj["requests"] = m.ttft.count;
    mj["failed"] = m.ttft.failed;
    mj["ttft_s"] = {{"p50", JsonSeconds(m.ttft.p50)},
                    {"p90", JsonSeconds(m.ttft.p90)},
                    {"p99", JsonSeconds(m.ttft.p99)},
                    {"mean", JsonSeconds(m.ttft.mean)},
                    {"max", JsonSeconds(m.ttft.max)}};
    if (m.service.count > 0) {
      mj["service_s"] = {{"p50", JsonSeconds(m.service.p50)},
                         {"mean", JsonSeconds(m.service.mean)}};
    }
    mj["throughput_rps"] = m.throughput_rps;
    mj["parts"] = m.parts;
    mj["prompt_tokens"] = m.prompt_tokens;
    mj["reused_tokens"] = m.reused_tokens;
    mj["bytes_sent"] = m.bytes_sent;
    mj["bytes_received"] = m.bytes_received;
    if (m.sustainable_qps >= 0) {
      mj["sustainable_qps"] = m.sustainable_qps;
      mj["probes"] = nlohmann::json::array();
      for (const auto& p : m.probes) {
        mj["probes"].push_back(
            {{"qps", p.qps}, {"p99_s", JsonSeconds(p.p99_s)}, {"meets_slo", p.meets_slo}});
      }
    }
    nlohmann::json cdf = nlohmann::json::array();
    for (const auto& [lat, frac] : LatencyCdf(m.ttft_s, kCdfPoints)) cdf.push_back({lat, frac});
    mj["ttft_cdf"] = std::move(cdf);
    j["modes"].push_back(std::move(mj));
  }
  return j;
}

Status WriteCsv(const TraceReport& report, const std::filesystem::path& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return IoError(fmt::format("cannot create {}: {}", dir.string(), ec.message()));
  std::string summary =
      "mode,offered_qps,requests,failed,p50_s,p90_s,p99_s,mean_s,throughput_rps,hit_rate,"
      "token_reuse,bytes_sent,bytes_received,sustainable_qps,service_p50_s\n";
  std::string ttft = "mode,request,ttft_s\n";
  std::string qps = "mode,qps,p99_s,meets_slo\n";
  for (const auto& m : report.modes) {
    const uint64_t segs = SegmentParts(m);
    summary += fmt::format(
        "{},{},{},{},{},{},{},{},{},{},{},{},{},{},{}\n", m.mode, m.offered_qps, m.ttft.count,
        m.ttft.failed, m.ttft.p50, m.ttft.p90, m.ttft.p99, m.ttft.mean, m.throughput_rps,
        segs ? static_cast<double>(Hits(m)) / segs : 0.0,
        m.prompt_tokens ? static_cast<double>(m.reused_tokens) / m.prompt_tokens : 0.0,
        m.bytes_sent, m.bytes_received, m.sustainable_qps, m.service.count ? m.service.p50 : 0.0);
    for (size_t i = 0; i < m.ttft_s.size(); ++i)
      ttft += fmt::format("{},{},{}\n", m.mode, i, m.ttft_s[i]);
    for (const auto& p : m.probes) {
      qps += fmt::format("{},{},{},{}\n", m.mode, p.qps, p.p99_s, p.meets_slo ? 1 : 0);
    }
  }
  HYPIC_RETURN_IF_ERROR(WriteTextFile(dir / "summary.csv", summary));
  HYPIC_RETURN_IF_ERROR(WriteTextFile(dir / "ttft.csv", ttft));
  return WriteTextFile(dir / "qps.csv", qps);
}

Status WritePlots(const TraceReport& report, const std::filesystem::path& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return IoError(fmt::format("cannot create {}: {}", dir.string(), ec.message()));
  std::vector<std::string> scripts;

  // TTFT CDF: one gnuplot data block ("index") per mode.
  {
    std::string data, plot;
    int index = 0;
    for (const auto& m : report.modes) {
      data += fmt::format("# {}\n", m.mode);
      for (const auto& [lat, frac] : LatencyCdf(m.ttft_s, kCdfPoints)) {
        data += fmt::format("{} {}\n", lat * 1000.0, frac);
      }
      data += "\n\n";
      plot += fmt::format("{}'ttft_cdf.dat' index {} using 1:2 with steps lw 2 title {}",
                          index == 0 ? "plot " : ", \\\n     ", index, GnuplotQuote(m.mode));
      ++index;
    }
    std::string gp = GnuplotHeader("ttft_cdf.png", "TTFT CDF per mode (from scheduled start)");
    gp += "set xlabel 'TTFT (ms, log scale)'\nset ylabel 'fraction of requests'\n";
    gp += "set logscale x\nset yrange [0:1.02]\n" + plot + "\n";
    HYPIC_RETURN_IF_ERROR(WriteTextFile(dir / "ttft_cdf.dat", data));
    HYPIC_RETURN_IF_ERROR(WriteTextFile(dir / "ttft_cdf.gp", gp));
    scripts.push_back("ttft_cdf.gp");
  }

  // p99 TTFT against offered QPS, from the SLO search's probes (sorted by rate).
  if (report.slo_s > 0) {
    std::string data, plot;
    int index = 0;
    double worst = report.slo_s * 2;
    for (const auto& m : report.modes) {
      std::vector<QpsProbe> probes = m.probes;
      std::sort(probes.begin(), probes.end(),
                [](const QpsProbe& a, const QpsProbe& b) { return a.qps < b.qps; });
      data += fmt::format("# {}\n", m.mode);
      for (const auto& p : probes) {
        // An overloaded probe has p99 = inf; draw it at the top of the plot.
        const double p99 = std::isfinite(p.p99_s) ? p.p99_s : -1;
        if (p99 > worst) worst = p99;
        data += fmt::format("{} {}\n", p.qps, p99 < 0 ? -1 : p99 * 1000.0);
      }
      data += "\n\n";
      plot += fmt::format(
          "{}'p99_vs_qps.dat' index {} using 1:($2 < 0 ? ymax : $2) with linespoints lw 2 "
          "pt 7 title {}",
          index == 0 ? "plot " : ", \\\n     ", index, GnuplotQuote(m.mode));
      ++index;
    }
    std::string gp = GnuplotHeader("p99_vs_qps.png", "p99 TTFT vs offered QPS");
    gp += fmt::format("ymax = {}\n", worst * 1000.0 * 1.5);
    gp += "set xlabel 'offered QPS (log scale)'\nset ylabel 'p99 TTFT (ms, log scale)'\n";
    gp += "set logscale xy\nset key top left\n";
    gp += fmt::format("set arrow from graph 0, first {0} to graph 1, first {0} nohead dt 2 lw 2\n",
                      report.slo_s * 1000.0);
    gp += fmt::format("set label 'SLO {:.0f} ms' at graph 0.02, first {} offset 0,0.7\n",
                      report.slo_s * 1000.0, report.slo_s * 1000.0);
    gp += plot + "\n";
    HYPIC_RETURN_IF_ERROR(WriteTextFile(dir / "p99_vs_qps.dat", data));
    HYPIC_RETURN_IF_ERROR(WriteTextFile(dir / "p99_vs_qps.gp", gp));
    scripts.push_back("p99_vs_qps.gp");
  }

  return RunGnuplot(dir, scripts);
}

}  // namespace hypic::tools
