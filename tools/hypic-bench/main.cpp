// hypic-bench: benchmarks that print the figures quoted in docs/benchmarks.md. Subcommands
// register themselves (bench_*.cpp).
#include "tools/common/subcommand.h"

int main(int argc, char** argv) {
  return hypic::tools::RunSubcommandMain("hypic-bench", "hypic benchmarks", argc, argv);
}
