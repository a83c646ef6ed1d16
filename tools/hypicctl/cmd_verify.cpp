// `hypicctl verify`: reads every entry (or one, --key) and checks its checksums, entry by entry
// with a progress bar; reports the corrupt ones and, with --evict, removes them. Exit code 1
// when any entry was corrupt (evicted or not), so a cron job notices.
#include <fmt/format.h>
#include <unistd.h>

#include "tools/common/subcommand.h"
#include "tools/hypicctl/command.h"
#include "tools/hypicctl/daemon.h"
#include "tools/hypicctl/progress_bar.h"
#include "tools/hypicctl/table.h"

// A namespace of its own: hypic-* tools compile as unity batches (cmake/HypicTargets.cmake).
namespace hypic::tools::cmd_verify {
namespace {

struct VerifyOptions {
  CommonOptions common;
  std::string key;
  bool evict = false;
};

int RunVerify(const VerifyOptions& opts) {
  std::vector<Hash128> keys;
  if (!opts.key.empty()) {
    auto key = ParseKey(opts.key);
    if (!key.ok()) return OperationFailed(opts.common, "--key", key.status());
    keys.push_back(*key);
  }
  auto conn = Connect(opts.common, /*need_admin=*/true);
  if (!conn.client) return conn.exit_code;
  client::Client& client = *conn.client;
  if (keys.empty()) {
    auto entries = ListAll(client, {});
    if (!entries.ok()) return OperationFailed(opts.common, "verify: list", entries.status());
    for (const auto& e : *entries) keys.push_back(e.key);
  }

  ProgressBar bar("verify", "entries", keys.size(), stderr,
                  !opts.common.json && ::isatty(STDERR_FILENO) != 0);
  uint64_t checked = 0;
  std::vector<Hash128> corrupt;
  for (const auto& key : keys) {
    auto r = client.Verify(key);
    bar.Advance();
    // Evicted or expired since the listing: nothing to check.
    if (!r.ok() && r.status().code() == StatusCode::kNotFound && opts.key.empty()) continue;
    if (!r.ok()) return OperationFailed(opts.common, "verify " + key.ToHex(), r.status());
    checked += r->checked;
    if (r->bad > 0) corrupt.push_back(key);
  }
  bar.Finish();

  uint64_t evicted = 0;
  if (opts.evict) {
    for (const auto& key : corrupt) {
      protocol::EvictRequest req;
      req.by = protocol::EvictBy::kKey;
      req.key = key;
      auto r = client.Evict(req);
      // The daemon may already have dropped an entry that failed its checksum.
      if (!r.ok() && r.status().code() != StatusCode::kNotFound) {
        return OperationFailed(opts.common, "evict " + key.ToHex(), r.status());
      }
      if (r.ok()) evicted += r->entries;
    }
  }

  if (opts.common.json) {
    nlohmann::json bad = nlohmann::json::array();
    for (const auto& k : corrupt) bad.push_back(k.ToHex());
    PrintJson({{"checked", checked},
               {"corrupt", corrupt.size()},
               {"corrupt_keys", bad},
               {"evicted", evicted},
               {"seconds", bar.ElapsedSeconds()}});
  } else {
    for (const auto& k : corrupt) fmt::print("CORRUPT {}\n", k.ToHex());
    fmt::print("verified {} entries in {}: {} corrupt{}\n", checked,
               HumanDuration(bar.ElapsedSeconds()), corrupt.size(),
               opts.evict ? fmt::format(", {} evicted", evicted) : std::string());
  }
  return corrupt.empty() ? kExitOk : kExitFailure;
}

const bool kRegistered = RegisterSubcommand(
    "verify", "Check every entry's checksums (progress bar); report and optionally evict corrupt",
    [](CLI::App& sub) -> Action {
      auto opts = std::make_shared<VerifyOptions>();
      AddCommonOptions(sub, opts->common);
      sub.add_option("--key", opts->key, "verify only this entry");
      sub.add_flag("--evict", opts->evict, "evict the corrupt entries");
      return [opts] { return RunVerify(*opts); };
    });

}  // namespace
}  // namespace hypic::tools::cmd_verify
