// `hypicctl pin KEY...` / `hypicctl unpin KEY...`: explicit pins keep entries from eviction.
#include <fmt/format.h>

#include "tools/common/subcommand.h"
#include "tools/hypicctl/command.h"
#include "tools/hypicctl/daemon.h"

// A namespace of its own: hypic-* tools compile as unity batches (cmake/HypicTargets.cmake).
namespace hypic::tools::cmd_pin {
namespace {

struct PinOptions {
  CommonOptions common;
  std::vector<std::string> keys;
};

int RunPin(const PinOptions& opts, bool pin) {
  const char* verb = pin ? "pin" : "unpin";
  std::vector<Hash128> keys;
  for (const auto& hex : opts.keys) {
    auto key = ParseKey(hex);
    if (!key.ok()) return OperationFailed(opts.common, verb, key.status());
    keys.push_back(*key);
  }
  auto conn = Connect(opts.common, /*need_admin=*/true);
  if (!conn.client) return conn.exit_code;
  nlohmann::json done = nlohmann::json::array();
  for (const auto& key : keys) {
    const Status st = pin ? conn.client->Pin(key) : conn.client->Unpin(key);
    if (!st.ok()) return OperationFailed(opts.common, fmt::format("{} {}", verb, key.ToHex()), st);
    done.push_back(key.ToHex());
    if (!opts.common.json) fmt::print("{}ned {}\n", verb, key.ToHex());
  }
  if (opts.common.json) PrintJson({{pin ? "pinned" : "unpinned", done}});
  return kExitOk;
}

Setup PinSetup(bool pin) {
  return [pin](CLI::App& sub) -> Action {
    auto opts = std::make_shared<PinOptions>();
    AddCommonOptions(sub, opts->common);
    sub.add_option("keys", opts->keys, "entry keys (32 hex digits)")->required();
    return [opts, pin] { return RunPin(*opts, pin); };
  };
}

const bool kPin =
    RegisterSubcommand("pin", "Pin entries so that eviction skips them", PinSetup(true));
const bool kUnpin = RegisterSubcommand("unpin", "Remove explicit pins", PinSetup(false));

}  // namespace
}  // namespace hypic::tools::cmd_pin
