// `hypicctl evict`: removes entries by key, namespace, tier, a byte amount (by the daemon's
// eviction policy) or idle age. It states what it is about to remove and asks first, unless
// --yes.
#include <fmt/format.h>

#include "tools/common/subcommand.h"
#include "tools/hypicctl/command.h"
#include "tools/hypicctl/daemon.h"
#include "tools/hypicctl/table.h"

// A namespace of its own: hypic-* tools compile as unity batches (cmake/HypicTargets.cmake).
namespace hypic::tools::cmd_evict {
namespace {

struct EvictOptions {
  CommonOptions common;
  std::vector<std::string> keys;
  std::string name_space;
  std::string tier;
  uint64_t bytes = 0;
  double older_than_s = -1;  // < 0: not given
  bool all = false;
  bool yes = false;
};

int Report(const EvictOptions& opts, uint64_t entries, uint64_t bytes) {
  if (opts.common.json) {
    PrintJson({{"evicted_entries", entries}, {"evicted_bytes", bytes}});
  } else {
    fmt::print("evicted {} entries, {}\n", entries, HumanBytes(bytes));
  }
  return kExitOk;
}

// --older-than: the daemon has no age selector, so list, filter here, and evict by key.
int EvictOlderThan(const EvictOptions& opts, client::Client& client,
                   const protocol::ListRequest& filter) {
  auto entries = ListAll(client, filter);
  if (!entries.ok()) return OperationFailed(opts.common, "evict: list", entries.status());
  const double now = NowUnixSeconds();
  std::vector<protocol::ListEntry> old;
  uint64_t old_bytes = 0;
  for (const auto& e : *entries) {
    if (now - static_cast<double>(e.last_access_ms) / 1000.0 >= opts.older_than_s) {
      old.push_back(e);
      old_bytes += e.bytes;
    }
  }
  if (old.empty()) return Report(opts, 0, 0);
  const int go = Confirm(fmt::format("evict {} entries ({}) idle for {} or more?", old.size(),
                                     HumanBytes(old_bytes), HumanDuration(opts.older_than_s)),
                         opts.yes);
  if (go != kExitOk) return go;
  uint64_t entries_done = 0, bytes_done = 0;
  for (const auto& e : old) {
    protocol::EvictRequest req;
    req.by = protocol::EvictBy::kKey;
    req.key = e.key;
    auto r = client.Evict(req);
    // Gone in the meantime (evicted by the daemon, or expired): nothing left to do.
    if (!r.ok() && r.status().code() == StatusCode::kNotFound) continue;
    if (!r.ok()) return OperationFailed(opts.common, "evict " + e.key.ToHex(), r.status());
    entries_done += r->entries;
    bytes_done += r->bytes;
  }
  return Report(opts, entries_done, bytes_done);
}

int RunEvict(const EvictOptions& opts) {
  const int selectors = (opts.keys.empty() ? 0 : 1) + (opts.bytes > 0 ? 1 : 0) +
                        (opts.older_than_s >= 0 ? 1 : 0) + (opts.all ? 1 : 0);
  // --namespace and --tier select on their own, or narrow --older-than / --bytes.
  const bool alone = selectors == 0;
  if (selectors > 1 || (alone && opts.name_space.empty() && opts.tier.empty())) {
    fmt::print(stderr,
               "{}: evict: choose one of --key, --namespace, --tier, --bytes, --older-than, "
               "--all\n",
               kCtl);
    return kExitBadInput;
  }
  if (alone && !opts.name_space.empty() && !opts.tier.empty()) {
    fmt::print(stderr, "{}: evict: --namespace and --tier together need --older-than\n", kCtl);
    return kExitBadInput;
  }
  protocol::Tier tier = protocol::Tier::kNone;
  if (!opts.tier.empty()) {
    auto t = ParseTier(opts.tier);
    if (!t.ok()) return OperationFailed(opts.common, "--tier", t.status());
    tier = *t;
  }
  std::vector<Hash128> keys;
  for (const auto& hex : opts.keys) {
    auto key = ParseKey(hex);
    if (!key.ok()) return OperationFailed(opts.common, "--key", key.status());
    keys.push_back(*key);
  }

  auto conn = Connect(opts.common, /*need_admin=*/true);
  if (!conn.client) return conn.exit_code;
  client::Client& client = *conn.client;

  if (opts.older_than_s >= 0) {
    protocol::ListRequest filter;
    filter.name_space = opts.name_space;
    filter.tier = tier;
    return EvictOlderThan(opts, client, filter);
  }

  std::vector<protocol::EvictRequest> requests;
  std::string what;
  if (!keys.empty()) {
    for (const auto& key : keys) {
      protocol::EvictRequest r;
      r.by = protocol::EvictBy::kKey;
      r.key = key;
      requests.push_back(r);
    }
    what = keys.size() == 1 ? "entry " + keys[0].ToHex() : fmt::format("{} entries", keys.size());
  } else {
    protocol::EvictRequest r;
    r.tier = tier;
    r.name_space = opts.name_space;
    if (opts.all) {
      r.by = protocol::EvictBy::kAll;
      what = "EVERY entry in every tier";
    } else if (opts.bytes > 0) {
      r.by = protocol::EvictBy::kBytes;
      r.bytes = opts.bytes;
      what = fmt::format("at least {} by the eviction policy{}", HumanBytes(opts.bytes),
                         opts.tier.empty() ? "" : " from tier " + opts.tier);
    } else if (!opts.name_space.empty()) {
      r.by = protocol::EvictBy::kNamespace;
      what = fmt::format("every entry of namespace '{}'", opts.name_space);
    } else {
      r.by = protocol::EvictBy::kTier;
      what =
          fmt::format("every entry in tier {} (demoted where a lower tier admits it)", opts.tier);
    }
    requests.push_back(r);
  }
  const int go = Confirm("evict " + what + "?", opts.yes);
  if (go != kExitOk) return go;
  uint64_t entries = 0, bytes = 0;
  for (const auto& r : requests) {
    auto reply = client.Evict(r);
    if (!reply.ok()) return OperationFailed(opts.common, "evict", reply.status());
    entries += reply->entries;
    bytes += reply->bytes;
  }
  return Report(opts, entries, bytes);
}

const bool kRegistered = RegisterSubcommand(
    "evict", "Evict entries by key, namespace, tier, bytes or age (asks unless --yes)",
    [](CLI::App& sub) -> Action {
      auto opts = std::make_shared<EvictOptions>();
      AddCommonOptions(sub, opts->common);
      sub.add_option("--key", opts->keys, "entry key (32 hex digits); repeatable");
      sub.add_option("--namespace", opts->name_space, "every entry of this namespace");
      sub.add_option("--tier", opts->tier, "every entry of this tier, or narrows --bytes")
          ->check(CLI::IsMember({"hbm", "host", "ram", "ssd"}));
      sub.add_option("--bytes", opts->bytes, "free at least this much (e.g. 512MiB, 2GB)")
          ->transform(CLI::AsSizeValue(false));
      AddDurationOption(sub, "--older-than", opts->older_than_s,
                        "entries idle this long (with --namespace/--tier as filters)");
      sub.add_flag("--all", opts->all, "every entry");
      sub.add_flag("-y,--yes", opts->yes, "do not ask for confirmation");
      return [opts] { return RunEvict(*opts); };
    });

}  // namespace
}  // namespace hypic::tools::cmd_evict
