// hypic-op: runs one operator or model pass on safetensors files, so that external references
// can check our numerics. Subcommands register themselves (op_*.cpp).
#include "tools/common/subcommand.h"

int main(int argc, char** argv) {
  return hypic::tools::RunSubcommandMain(
      "hypic-op", "Run one hypic operator or model pass on files", argc, argv);
}
