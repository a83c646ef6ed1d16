// `hypicctl stats`: the daemon's STATS document as tables: one key/value block per section,
// and a per-tier table (entries, bytes against capacity, hit rate, evictions, promotions,
// demotions, checksum failures) for every section that holds one object per tier, and a table of
// the remote nodes and of the peers (up, jobs, failures by kind, tokens/s). The layout
// follows the document, so counters the daemon adds later show up without a change here.
#include <fmt/format.h>
#include <unistd.h>

#include <chrono>
#include <thread>

#include "tools/common/subcommand.h"
#include "tools/hypicctl/command.h"
#include "tools/hypicctl/table.h"

// A namespace of its own: hypic-* tools compile as unity batches (cmake/HypicTargets.cmake).
namespace hypic::tools::cmd_stats {
namespace {

struct StatsOptions {
  CommonOptions common;
  double watch_s = 0;
  uint32_t count = 0;
};

bool IsBytesKey(const std::string& key) {
  return key.find("bytes") != std::string::npos || key.find("capacity") != std::string::npos;
}

std::string FormatValue(const std::string& key, const nlohmann::json& v) {
  if (v.is_number_unsigned() || v.is_number_integer()) {
    if (IsBytesKey(key)) return HumanBytes(v.get<uint64_t>());
    return fmt::format("{}", v.get<int64_t>());
  }
  if (v.is_number_float()) {
    if (key.ends_with("_s")) return HumanDuration(v.get<double>());
    return fmt::format("{:.4g}", v.get<double>());
  }
  if (v.is_string()) return v.get<std::string>();
  if (v.is_boolean()) return v.get<bool>() ? "yes" : "no";
  return v.dump();
}

bool IsTableOfObjects(const nlohmann::json& v) {
  if (!(v.is_array() || v.is_object()) || v.empty()) return false;
  for (const auto& item : v) {
    if (!item.is_object()) return false;
  }
  return true;
}

std::string RenderRows(const nlohmann::json& section) {
  // Rows are the items (named by their key, or by a "tier"/"name" field); columns the union
  // of their scalar fields in first-seen order, plus a hit rate where hits and misses exist.
  std::vector<std::string> columns;
  for (const auto& item : section) {
    for (const auto& [k, v] : item.items()) {
      if (v.is_primitive() && k != "tier" && k != "name" &&
          std::find(columns.begin(), columns.end(), k) == columns.end()) {
        columns.push_back(k);
      }
    }
  }
  auto has = [&](std::string_view c) {
    return std::find(columns.begin(), columns.end(), c) != columns.end();
  };
  const bool hit_rate = has("hits") && has("misses");
  if (hit_rate) columns.emplace_back("hit_rate");
  // The operator's reading order first (fill, then traffic, then trouble); the rest after.
  static constexpr std::string_view kOrder[] = {
      "entries",    "bytes",     "capacity",          "hit_rate",
      "hits",       "misses",    "inserts",           "evictions",
      "promotions", "demotions", "checksum_failures", "io_errors",
      "degraded"};
  auto rank = [](const std::string& c) {
    const auto it = std::find(std::begin(kOrder), std::end(kOrder), c);
    return static_cast<size_t>(it - std::begin(kOrder));
  };
  std::stable_sort(columns.begin(), columns.end(),
                   [&](const std::string& a, const std::string& b) { return rank(a) < rank(b); });
  // Rows named by a "name" field (remote nodes, peers) head their column with it.
  const bool by_name = std::all_of(section.begin(), section.end(), [](const nlohmann::json& item) {
    return item.contains("name");
  });
  std::vector<std::string> headers = {by_name ? "name" : "tier"};
  headers.insert(headers.end(), columns.begin(), columns.end());
  Table table(headers);
  for (size_t c = 1; c < headers.size(); ++c) table.AlignRight(c);
  for (auto it = section.begin(); it != section.end(); ++it) {
    const auto& item = *it;
    std::string name = section.is_object() ? it.key() : "";
    if (item.contains("tier")) name = FormatValue("tier", item["tier"]);
    if (item.contains("name")) name = FormatValue("name", item["name"]);
    std::vector<std::string> row = {name};
    for (const auto& c : columns) {
      if (c == "hit_rate" && hit_rate) {
        const double hits = item.value("hits", 0.0);
        row.push_back(HumanPercent(hits, hits + item.value("misses", 0.0)));
      } else {
        row.push_back(item.contains(c) ? FormatValue(c, item[c]) : "-");
      }
    }
    table.AddRow(std::move(row));
  }
  return table.Render();
}

std::string RenderStats(const nlohmann::json& stats) {
  std::string out;
  for (const auto& [section, value] : stats.items()) {
    out += fmt::format("{}\n", section);
    if (IsTableOfObjects(value)) {
      out += RenderRows(value);
    } else if (value.is_object()) {
      size_t width = 0;
      for (const auto& [k, v] : value.items()) width = std::max(width, k.size());
      for (const auto& [k, v] : value.items()) {
        out += fmt::format("  {:<{}}  {}\n", k, width, FormatValue(k, v));
      }
    } else {
      out += fmt::format("  {}\n", FormatValue(section, value));
    }
    out += "\n";
  }
  return out;
}

int RunStats(const StatsOptions& opts) {
  auto conn = Connect(opts.common, /*need_admin=*/true);
  if (!conn.client) return conn.exit_code;
  for (uint32_t round = 1;; ++round) {
    auto body = conn.client->Stats();
    if (!body.ok()) return OperationFailed(opts.common, "stats", body.status());
    auto stats = ParseJsonReply("stats", *body);
    if (!stats.ok()) return OperationFailed(opts.common, "stats", stats.status());
    if (opts.common.json) {
      PrintJson(*stats);
    } else {
      // Redraw in place on a terminal; append (with a separator) otherwise.
      if (opts.watch_s > 0 && ::isatty(STDOUT_FILENO)) fmt::print("\x1b[H\x1b[2J");
      fmt::print("{}", RenderStats(*stats));
    }
    std::fflush(stdout);
    if (opts.watch_s <= 0 || (opts.count > 0 && round >= opts.count)) return kExitOk;
    std::this_thread::sleep_for(std::chrono::duration<double>(opts.watch_s));
  }
}

const bool kRegistered = RegisterSubcommand(
    "stats", "Per-tier entries, bytes, hit rate, evictions, checksum failures, queue, uptime",
    [](CLI::App& sub) -> Action {
      auto opts = std::make_shared<StatsOptions>();
      AddCommonOptions(sub, opts->common);
      sub.add_option("--watch", opts->watch_s, "refresh every SECONDS until interrupted")
          ->check(CLI::PositiveNumber);
      sub.add_option("--count", opts->count, "with --watch: stop after N refreshes");
      return [opts] { return RunStats(*opts); };
    });

}  // namespace
}  // namespace hypic::tools::cmd_stats
