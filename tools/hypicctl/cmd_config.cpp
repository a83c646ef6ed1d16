// `hypicctl config`: the daemon's effective configuration (secrets redacted by the daemon).
#include <fmt/format.h>

#include "tools/common/subcommand.h"
#include "tools/hypicctl/command.h"

// A namespace of its own: hypic-* tools compile as unity batches (cmake/HypicTargets.cmake).
namespace hypic::tools::cmd_config {
namespace {

int RunConfig(const CommonOptions& opts) {
  auto conn = Connect(opts, /*need_admin=*/true);
  if (!conn.client) return conn.exit_code;
  auto body = conn.client->Config();
  if (!body.ok()) return OperationFailed(opts, "config", body.status());
  auto config = ParseJsonReply("config", *body);
  if (!config.ok()) return OperationFailed(opts, "config", config.status());
  if (opts.json) {
    PrintJson(*config);
    return kExitOk;
  }
  // The TOML form hypicd reads, so the output can seed a config file: the flat keys, then the
  // tenants as [[tenant]] tables (TOML puts every key after a table header into the table).
  for (const auto& [key, value] : config->items()) {
    if (key != "tenant") fmt::print("{} = {}\n", key, value.dump());
  }
  for (const auto& tenant : config->value("tenant", nlohmann::json::array())) {
    fmt::print("\n[[tenant]]\n");
    for (const auto& [key, value] : tenant.items()) fmt::print("{} = {}\n", key, value.dump());
  }
  return kExitOk;
}

const bool kRegistered = RegisterSubcommand("config", "Print the daemon's effective configuration",
                                            [](CLI::App& sub) -> Action {
                                              auto opts = std::make_shared<CommonOptions>();
                                              AddCommonOptions(sub, *opts);
                                              return [opts] { return RunConfig(*opts); };
                                            });

}  // namespace
}  // namespace hypic::tools::cmd_config
