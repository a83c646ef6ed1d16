// A registry of CLI11 subcommands for multi-command tools (hypic-op, hypic-bench). Each
// subcommand lives in its own file and registers itself at static-init time, so adding one
// touches no shared file:
//
//   static const bool kRegistered = hypic::tools::RegisterSubcommand(
//       "run", "Run one linear-attention operator on safetensors files",
//       [](CLI::App& sub) { auto opts = std::make_shared<Opts>(); sub.add_option(...);
//                           return [opts] { return Run(*opts); }; });
//
// The setup function declares the options and returns the action, which returns the exit code.
// Not thread-safe: registration happens before main, dispatch from main only.
#pragma once

#include <CLI/CLI.hpp>
#include <functional>
#include <string>

namespace hypic::tools {

// Exit codes shared by every tool.
inline constexpr int kExitOk = 0;
inline constexpr int kExitFailure = 1;      // the operation ran and failed (e.g. a target missed)
inline constexpr int kExitBadInput = 2;     // bad flags, files or request contents
inline constexpr int kExitUnavailable = 3;  // a daemon or device could not be reached

using Action = std::function<int()>;
using Setup = std::function<Action(CLI::App& sub)>;

bool RegisterSubcommand(std::string name, std::string help, Setup setup);

// Parses argv, runs the chosen subcommand and returns its exit code. Parse errors print CLI11's
// message and return kExitBadInput.
int RunSubcommandMain(const std::string& tool, const std::string& description, int argc,
                      char** argv);

}  // namespace hypic::tools
