#include "tools/common/subcommand.h"

#include <map>
#include <utility>

#include "core/malloc_tuning.h"

namespace hypic::tools {

namespace {
struct Entry {
  std::string help;
  Setup setup;
};
std::map<std::string, Entry>& Registry() {
  static std::map<std::string, Entry> registry;
  return registry;
}
}  // namespace

bool RegisterSubcommand(std::string name, std::string help, Setup setup) {
  Registry().emplace(std::move(name), Entry{std::move(help), std::move(setup)});
  return true;
}

int RunSubcommandMain(const std::string& tool, const std::string& description, int argc,
                      char** argv) {
  TuneMallocForLargeBuffers();  // before any thread: the same allocator behaviour as hypicd
  CLI::App app(description, tool);
  app.require_subcommand(1);
  std::map<CLI::App*, Action> actions;
  for (auto& [name, entry] : Registry()) {
    CLI::App* sub = app.add_subcommand(name, entry.help);
    actions[sub] = entry.setup(*sub);
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int rc = app.exit(e);
    return rc == 0 ? kExitOk : kExitBadInput;
  }
  for (auto& [sub, action] : actions) {
    if (sub->parsed()) return action();
  }
  return kExitBadInput;
}

}  // namespace hypic::tools
