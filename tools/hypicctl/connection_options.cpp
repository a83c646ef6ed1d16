#include "tools/hypicctl/connection_options.h"

#include <fmt/format.h>

#include "tools/common/subcommand.h"

namespace hypic::tools {

std::string ConnectionOptions::Describe() const {
  return unix_socket.empty() ? fmt::format("{}:{}", host, port) : "unix:" + unix_socket;
}

void AddConnectionOptions(CLI::App& app, ConnectionOptions& opts) {
  auto given = [&opts](const std::string&) { opts.endpoint_given = true; };
  app.add_option("--host", opts.host, "daemon host")
      ->envname("HYPIC_HOST")
      ->capture_default_str()
      ->each(given);
  app.add_option("--port", opts.port, "daemon TCP port")
      ->envname("HYPIC_PORT")
      ->capture_default_str()
      ->each(given);
  app.add_option("--unix", opts.unix_socket, "daemon unix socket (instead of TCP)")
      ->envname("HYPIC_UNIX_SOCKET");
  app.add_option("--token", opts.token, "data-plane token")->envname("HYPIC_TOKEN");
  app.add_option("--admin-token", opts.admin_token, "admin token")->envname("HYPIC_ADMIN_TOKEN");
  app.add_option("--timeout", opts.timeout_s, "seconds to wait for the daemon per request")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
}

int ExitCodeFor(const Status& status, FailurePhase phase) {
  switch (status.code()) {
    case StatusCode::kOk: return kExitOk;
    case StatusCode::kShuttingDown: return kExitUnavailable;
    case StatusCode::kIoError:
    case StatusCode::kDeadlineExceeded:
    case StatusCode::kBusy:
      return phase == FailurePhase::kConnect ? kExitUnavailable : kExitFailure;
    case StatusCode::kBadRequest:
    case StatusCode::kNotFound:
    case StatusCode::kUnauthorized:
    case StatusCode::kTooLarge:
    case StatusCode::kVersionMismatch: return kExitBadInput;
    default: return kExitFailure;
  }
}

int ReportFailure(std::string_view tool, const ConnectionOptions& opts, std::string_view context,
                  const Status& status, FailurePhase phase) {
  fmt::print(stderr, "{}: {}: {}\n", tool, context, status.ToString());
  const int code = ExitCodeFor(status, phase);
  if (code == kExitUnavailable) {
    fmt::print(stderr,
               "{}: cannot reach hypicd at {}: is it running? (--host/--port or --unix, or "
               "HYPIC_HOST/HYPIC_PORT/HYPIC_UNIX_SOCKET)\n",
               tool, opts.Describe());
  } else if (status.code() == StatusCode::kUnauthorized) {
    fmt::print(stderr,
               "{}: the daemon rejected the credentials: check --token/HYPIC_TOKEN, and "
               "--admin-token/HYPIC_ADMIN_TOKEN for admin commands\n",
               tool);
  }
  return code;
}

}  // namespace hypic::tools
