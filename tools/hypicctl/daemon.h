// Opening a hypic::client::Client from ConnectionOptions, for hypicctl and hypic-bench, plus
// the small parsers the admin commands share (tier names, key hex). Connecting does HELLO;
// `need_admin` turns a connection without the admin grant into a clear kUnauthorized at once
// instead of a failure on the first admin request. Thread-compatible free functions.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "client/client.h"
#include "core/hash.h"
#include "core/status.h"
#include "protocol/messages.h"
#include "tools/hypicctl/connection_options.h"

namespace hypic::tools {

// "host:port" ("[v6]:port") or "unix:/path", the client library's address form.
std::string ClientAddress(const ConnectionOptions& opts);

[[nodiscard]] Result<std::unique_ptr<client::Client>> ConnectDaemon(const ConnectionOptions& opts,
                                                                    std::string_view client_name,
                                                                    bool need_admin);

// "hbm", "host" (alias "ram"), "ssd". kBadRequest otherwise.
[[nodiscard]] Result<protocol::Tier> ParseTier(std::string_view name);

// 32 hex digits (Hash128::ToHex). kBadRequest otherwise.
[[nodiscard]] Result<Hash128> ParseKey(std::string_view hex);

}  // namespace hypic::tools
