#include "tools/hypicctl/command.h"

#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <map>

#include "tools/common/subcommand.h"
#include "tools/hypicctl/daemon.h"

namespace hypic::tools {

void AddCommonOptions(CLI::App& sub, CommonOptions& opts) {
  AddConnectionOptions(sub, opts.conn);
  sub.add_flag("--json", opts.json, "machine-readable JSON on stdout");
}

ConnectionOptions ResolveEndpoint(const ConnectionOptions& conn) {
  if (!conn.unix_socket.empty() || conn.endpoint_given) return conn;
  const char* dir = std::getenv("HYPIC_DATA_DIR");
  const std::string path =
      (std::filesystem::path(dir != nullptr && *dir != 0 ? dir : "./hypic-data") / "hypicd.sock")
          .string();
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0 || !S_ISSOCK(st.st_mode)) return conn;
  ConnectionOptions local = conn;
  local.unix_socket = path;
  return local;
}

Connected Connect(const CommonOptions& opts, bool need_admin) {
  Connected c;
  const ConnectionOptions conn = ResolveEndpoint(opts.conn);
  auto client = ConnectDaemon(conn, kCtl, need_admin);
  if (!client.ok()) {
    c.exit_code = ReportFailure(kCtl, conn, "connect " + conn.Describe(), client.status(),
                                FailurePhase::kConnect);
    return c;
  }
  c.client = std::move(client).value();
  return c;
}

int OperationFailed(const CommonOptions& opts, std::string_view what, const Status& status) {
  return ReportFailure(kCtl, opts.conn, what, status, FailurePhase::kOperation);
}

void PrintJson(const nlohmann::json& j) { fmt::print("{}\n", j.dump(2)); }

Result<nlohmann::json> ParseJsonReply(std::string_view what, const std::string& body) {
  auto j = nlohmann::json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return Internal(fmt::format("{}: the daemon sent invalid JSON", what));
  return j;
}

int Confirm(const std::string& question, bool yes) {
  if (yes) return kExitOk;
  if (::isatty(STDIN_FILENO) == 0) {
    fmt::print(stderr, "{}: {} refusing without --yes (stdin is not a terminal)\n", kCtl, question);
    return kExitBadInput;
  }
  fmt::print(stderr, "{} [y/N] ", question);
  std::string answer;
  std::getline(std::cin, answer);
  if (answer == "y" || answer == "Y" || answer == "yes") return kExitOk;
  fmt::print(stderr, "{}: not confirmed, nothing done\n", kCtl);
  return kExitFailure;
}

CLI::Option* AddDurationOption(CLI::App& sub, const std::string& name, double& seconds,
                               const std::string& help) {
  static const std::map<std::string, double> kUnits = {
      {"ms", 0.001}, {"s", 1}, {"m", 60}, {"h", 3600}, {"d", 86400}};
  return sub.add_option(name, seconds, help + " (e.g. 90s, 15m, 2h, 7d)")
      ->transform(CLI::AsNumberWithUnit(kUnits))
      ->check(CLI::NonNegativeNumber);
}

Result<std::vector<protocol::ListEntry>> ListAll(client::Client& client,
                                                 protocol::ListRequest request) {
  std::vector<protocol::ListEntry> entries;
  request.cursor = 0;
  request.limit = 1000;
  for (;;) {
    HYPIC_ASSIGN_OR_RETURN(protocol::ListReply page, client.List(request));
    entries.insert(entries.end(), page.entries.begin(), page.entries.end());
    if (page.next_cursor == 0) return entries;
    request.cursor = page.next_cursor;
  }
}

double NowUnixSeconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace hypic::tools
