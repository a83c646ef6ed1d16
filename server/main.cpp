// hypicd: the hypic segment-state cache daemon. Configuration: server/config.h (file < env <
// flags); operations: docs/operations-server.md. Exit codes: 0 after a clean drain, 1 when
// the daemon fails at runtime, 2 for a bad configuration.
#include <cstdio>
#include <string>
#include <vector>

#include "core/logging.h"
#include "core/malloc_tuning.h"
#include "server/config.h"
#include "server/server.h"

int main(int argc, char** argv) {
  using namespace hypic::server;
  hypic::TuneMallocForLargeBuffers();  // before any thread starts (core/malloc_tuning.h)
  std::vector<std::string> args(argv + 1, argv + argc);
  for (const auto& a : args) {
    if (a == "-h" || a == "--help") {
      std::fputs(ConfigHelp().c_str(), stdout);
      return 0;
    }
  }
  auto config = LoadConfig(args, ProcessEnv());
  if (!config.ok()) {
    std::fprintf(stderr, "hypicd: %s\n", config.status().message().c_str());
    return 2;
  }
  if (auto st = hypic::InitLogging(config->log_level, config->log_json); !st.ok()) {
    std::fprintf(stderr, "hypicd: config key 'log_level': %s\n", st.message().c_str());
    return 2;
  }
  if (auto st = ResolveMachineDefaults(*config); !st.ok()) {
    std::fprintf(stderr, "hypicd: %s\n", st.message().c_str());
    return 2;
  }
  if (config->check_only) {
    std::fputs(DumpConfig(*config).c_str(), stdout);
    return 0;
  }
  auto server = Server::Create(std::move(config).value());
  if (!server.ok()) {
    HYPIC_LOG_CRITICAL("cannot start: {}", server.status().ToString());
    return server.status().code() == hypic::StatusCode::kBadRequest ? 2 : 1;
  }
  if (auto st = (*server)->Start(); !st.ok()) {
    HYPIC_LOG_CRITICAL("cannot start: {}", st.ToString());
    return st.code() == hypic::StatusCode::kBadRequest ? 2 : 1;
  }
  return (*server)->Run();
}
