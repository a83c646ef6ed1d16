#include "tools/hypicctl/daemon.h"

#include <fmt/format.h>

#include <cmath>

namespace hypic::tools {

std::string ClientAddress(const ConnectionOptions& opts) {
  if (!opts.unix_socket.empty()) return "unix:" + opts.unix_socket;
  if (opts.host.find(':') != std::string::npos) return fmt::format("[{}]:{}", opts.host, opts.port);
  return fmt::format("{}:{}", opts.host, opts.port);
}

Result<std::unique_ptr<client::Client>> ConnectDaemon(const ConnectionOptions& opts,
                                                      std::string_view client_name,
                                                      bool need_admin) {
  client::ClientOptions co;
  co.address = ClientAddress(opts);
  co.token = opts.token;
  co.admin_token = opts.admin_token;
  co.client_name = std::string(client_name);
  const int timeout_ms = static_cast<int>(std::lround(opts.timeout_s * 1000.0));
  co.connect_timeout_ms = timeout_ms;
  co.io_timeout_ms = timeout_ms;
  HYPIC_ASSIGN_OR_RETURN(auto client, client::Client::Connect(co));
  if (need_admin && !(client->hello_reply() && client->hello_reply()->admin)) {
    return Unauthorized(opts.admin_token.empty()
                            ? "this command needs the admin grant: pass --admin-token, or run it "
                              "as the daemon's user over its unix socket (--unix)"
                            : "the daemon did not grant admin for this --admin-token");
  }
  return client;
}

Result<protocol::Tier> ParseTier(std::string_view name) {
  if (name == "hbm") return protocol::Tier::kHbm;
  if (name == "host" || name == "ram") return protocol::Tier::kHost;
  if (name == "ssd") return protocol::Tier::kSsd;
  return BadRequest(fmt::format("unknown tier '{}' (hbm, host, ssd)", name));
}

Result<Hash128> ParseKey(std::string_view hex) {
  auto key = Hash128::FromHex(hex);
  if (!key) return BadRequest(fmt::format("'{}' is not a key (32 hex digits)", hex));
  return *key;
}

}  // namespace hypic::tools
