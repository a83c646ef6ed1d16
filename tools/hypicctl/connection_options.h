// How hypicctl and hypic-bench find and authenticate to hypicd: --host, --port, --unix,
// --token and --admin-token, each also read from the environment (HYPIC_HOST, HYPIC_PORT,
// HYPIC_UNIX_SOCKET, HYPIC_TOKEN, HYPIC_ADMIN_TOKEN; a flag wins over the variable), and
// --timeout. --unix, when given, is used instead of TCP. The variable names match hypicd's own
// configuration keys where they exist, so one environment serves both. hypicctl prefers the
// daemon's unix socket when no endpoint was chosen (tools/hypicctl/command.h, Connect).
// Value type; thread-compatible.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <string>

#include "core/status.h"

namespace hypic::tools {

struct ConnectionOptions {
  std::string host = "127.0.0.1";
  uint16_t port = 7411;
  std::string unix_socket;  // non-empty: connect here instead of host:port
  std::string token;
  std::string admin_token;
  double timeout_s = 30;
  bool endpoint_given = false;  // --host or --port (or their variables) was set

  // "unix:/path" or "host:port", for messages.
  std::string Describe() const;
};

// Declares the options on `app`, bound to `opts`, with the HYPIC_* variables as fallbacks.
void AddConnectionOptions(CLI::App& app, ConnectionOptions& opts);

// Where a failure happened: reaching the daemon (connect + HELLO) or in an operation after.
enum class FailurePhase { kConnect, kOperation };

// The exit code for a failed daemon call (tools/common/subcommand.h):
//   kConnect: kIoError, kDeadlineExceeded, kShuttingDown, kBusy -> kExitUnavailable;
//   either:   kShuttingDown -> kExitUnavailable; kBadRequest, kNotFound, kUnauthorized,
//             kTooLarge, kVersionMismatch -> kExitBadInput; anything else -> kExitFailure.
int ExitCodeFor(const Status& status, FailurePhase phase);

// Prints "<tool>: <context>: <status>" to stderr, plus a hint for the common cases (daemon not
// reachable, wrong token), and returns ExitCodeFor(status, phase).
int ReportFailure(std::string_view tool, const ConnectionOptions& opts, std::string_view context,
                  const Status& status, FailurePhase phase);

}  // namespace hypic::tools
