// hypicctl: the admin CLI of hypicd (docs/operations-ctl.md). Subcommands register themselves
// (cmd_*.cpp) and talk to the daemon only through the client library.
#include "tools/common/subcommand.h"

int main(int argc, char** argv) {
  return hypic::tools::RunSubcommandMain("hypicctl", "hypicd admin CLI", argc, argv);
}
