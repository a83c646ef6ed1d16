// What every hypicctl subcommand shares: the connection options and --json, connecting with a
// reported failure, JSON output, and the confirmation prompt of destructive commands.
// Used from main's thread only.
#pragma once

#include <CLI/CLI.hpp>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "client/client.h"
#include "protocol/messages.h"
#include "tools/hypicctl/connection_options.h"

namespace hypic::tools {

inline constexpr std::string_view kCtl = "hypicctl";

struct CommonOptions {
  ConnectionOptions conn;
  bool json = false;
};

void AddCommonOptions(CLI::App& sub, CommonOptions& opts);

// The endpoint hypicctl uses: the options' own, except that with neither --unix nor
// --host/--port it is the daemon's unix socket when one is there ($HYPIC_DATA_DIR/hypicd.sock,
// else ./hypic-data/hypicd.sock, hypicd's default). Over the socket the daemon grants admin to
// its own account and root without an admin token, which it never does over TCP.
ConnectionOptions ResolveEndpoint(const ConnectionOptions& conn);

// A connected client (to ResolveEndpoint's endpoint), or the exit code after the failure was
// reported.
struct Connected {
  std::unique_ptr<client::Client> client;
  int exit_code = 0;
};
Connected Connect(const CommonOptions& opts, bool need_admin);

// Reports a failed operation (after connecting) and returns its exit code.
int OperationFailed(const CommonOptions& opts, std::string_view what, const Status& status);

// Pretty JSON on stdout.
void PrintJson(const nlohmann::json& j);

// Parses a JSON reply body; a malformed one is reported as kInternal (a daemon bug).
Result<nlohmann::json> ParseJsonReply(std::string_view what, const std::string& body);

// Asks "<question> [y/N]" on the terminal and returns kExitOk to go ahead. Otherwise it
// returns the exit code to stop with: kExitFailure when the operator declined, kExitBadInput
// when stdin is not a terminal and `yes` is not set (a script never blocks on a prompt and
// never destroys data by accident).
int Confirm(const std::string& question, bool yes);

// A duration option ("90", "90s", "15m", "2h", "7d") stored as seconds.
CLI::Option* AddDurationOption(CLI::App& sub, const std::string& name, double& seconds,
                               const std::string& help);

// Every entry LIST returns for `request`'s filters, all pages.
Result<std::vector<protocol::ListEntry>> ListAll(client::Client& client,
                                                 protocol::ListRequest request);

// Seconds since the Unix epoch, for LIST's last_access_ms.
double NowUnixSeconds();

}  // namespace hypic::tools
