// `hypicctl ls`: the cached entries (LIST, every page), filtered by tier, namespace and age,
// sorted, limited, as a table or JSON.
#include <fmt/format.h>

#include <algorithm>

#include "tools/common/subcommand.h"
#include "tools/hypicctl/command.h"
#include "tools/hypicctl/daemon.h"
#include "tools/hypicctl/table.h"

// A namespace of its own: hypic-* tools compile as unity batches (cmake/HypicTargets.cmake).
namespace hypic::tools::cmd_ls {
namespace {

struct LsOptions {
  CommonOptions common;
  std::string tier;
  std::string name_space;
  double older_than_s = -1;  // < 0: not given
  std::string sort = "last-access";
  bool reverse = false;
  size_t limit = 0;
};

nlohmann::json EntryJson(const protocol::ListEntry& e) {
  return {{"key", e.key.ToHex()},
          {"tier", protocol::TierName(e.tier)},
          {"namespace", e.name_space},
          {"bytes", e.bytes},
          {"tokens", e.n_tokens},
          {"hits", e.hits},
          {"last_access_ms", e.last_access_ms},
          {"pins", e.pins},
          {"ttl_s", e.ttl_s}};
}

// Descending by the numeric fields (largest, busiest, most recent first), ascending by text.
void SortEntries(std::vector<protocol::ListEntry>& entries, const std::string& by, bool reverse) {
  auto less = [&](const protocol::ListEntry& a, const protocol::ListEntry& b) {
    if (by == "size") return a.bytes > b.bytes;
    if (by == "tokens") return a.n_tokens > b.n_tokens;
    if (by == "hits") return a.hits > b.hits;
    if (by == "tier") return a.tier < b.tier;
    if (by == "namespace") return a.name_space < b.name_space;
    if (by == "key") return a.key < b.key;
    return a.last_access_ms > b.last_access_ms;  // last-access
  };
  std::stable_sort(entries.begin(), entries.end(), less);
  if (reverse) std::reverse(entries.begin(), entries.end());
}

int RunLs(const LsOptions& opts) {
  protocol::ListRequest request;
  request.name_space = opts.name_space;
  if (!opts.tier.empty()) {
    auto tier = ParseTier(opts.tier);
    if (!tier.ok()) return OperationFailed(opts.common, "--tier", tier.status());
    request.tier = *tier;
  }
  auto conn = Connect(opts.common, /*need_admin=*/true);
  if (!conn.client) return conn.exit_code;
  auto entries = ListAll(*conn.client, request);
  if (!entries.ok()) return OperationFailed(opts.common, "ls", entries.status());

  const double now = NowUnixSeconds();
  if (opts.older_than_s >= 0) {
    std::erase_if(*entries, [&](const protocol::ListEntry& e) {
      return now - static_cast<double>(e.last_access_ms) / 1000.0 < opts.older_than_s;
    });
  }
  SortEntries(*entries, opts.sort, opts.reverse);
  const size_t total = entries->size();
  if (opts.limit > 0 && entries->size() > opts.limit) entries->resize(opts.limit);

  if (opts.common.json) {
    nlohmann::json j = nlohmann::json::array();
    for (const auto& e : *entries) j.push_back(EntryJson(e));
    PrintJson(j);
    return kExitOk;
  }
  Table table({"KEY", "TIER", "NAMESPACE", "SIZE", "TOKENS", "HITS", "LAST ACCESS", "PINS", "TTL"});
  for (size_t c : {3, 4, 5, 6, 7, 8}) table.AlignRight(c);
  for (const auto& e : *entries) {
    const double age = now - static_cast<double>(e.last_access_ms) / 1000.0;
    table.AddRow({e.key.ToHex(), std::string(protocol::TierName(e.tier)),
                  e.name_space.empty() ? "-" : e.name_space, HumanBytes(e.bytes),
                  fmt::format("{}", e.n_tokens), fmt::format("{}", e.hits),
                  HumanDuration(std::max(0.0, age)) + " ago", fmt::format("{}", e.pins),
                  e.ttl_s > 0 ? HumanDuration(e.ttl_s) : "-"});
  }
  fmt::print("{}", table.Render());
  fmt::print("{} of {} entries\n", entries->size(), total);
  return kExitOk;
}

const bool kRegistered = RegisterSubcommand(
    "ls", "List cached entries (key, tier, size, tokens, hits, last access, pins, TTL)",
    [](CLI::App& sub) -> Action {
      auto opts = std::make_shared<LsOptions>();
      AddCommonOptions(sub, opts->common);
      sub.add_option("--tier", opts->tier, "only this tier")
          ->check(CLI::IsMember({"hbm", "host", "ram", "ssd"}));
      sub.add_option("--namespace", opts->name_space, "only this namespace");
      AddDurationOption(sub, "--older-than", opts->older_than_s, "only entries idle this long");
      sub.add_option("--sort", opts->sort, "sort key")
          ->check(
              CLI::IsMember({"last-access", "size", "tokens", "hits", "tier", "namespace", "key"}))
          ->capture_default_str();
      sub.add_flag("--reverse", opts->reverse, "reverse the order");
      sub.add_option("--limit", opts->limit, "print at most N entries (0: all)");
      return [opts] { return RunLs(*opts); };
    });

}  // namespace
}  // namespace hypic::tools::cmd_ls
