// `hypicctl flush`: waits until every dirty entry is durable in the SSD tier (FLUSH).
#include <fmt/format.h>

#include "tools/common/subcommand.h"
#include "tools/hypicctl/command.h"

// A namespace of its own: hypic-* tools compile as unity batches (cmake/HypicTargets.cmake).
namespace hypic::tools::cmd_flush {
namespace {

int RunFlush(const CommonOptions& opts) {
  auto conn = Connect(opts, /*need_admin=*/true);
  if (!conn.client) return conn.exit_code;
  const Status st = conn.client->Flush();
  if (!st.ok()) return OperationFailed(opts, "flush", st);
  if (opts.json) {
    PrintJson({{"flushed", true}});
  } else {
    fmt::print("flushed: dirty entries are durable\n");
  }
  return kExitOk;
}

const bool kRegistered = RegisterSubcommand("flush", "Make every dirty entry durable (SSD tier)",
                                            [](CLI::App& sub) -> Action {
                                              auto opts = std::make_shared<CommonOptions>();
                                              AddCommonOptions(sub, *opts);
                                              return [opts] { return RunFlush(*opts); };
                                            });

}  // namespace
}  // namespace hypic::tools::cmd_flush
