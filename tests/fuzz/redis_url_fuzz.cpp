// Fuzzes the remote store URL parser (storage/redis_client.h: redis:// and redis-cluster://),
// which reads an operator's config value. What parses must name at least one node, each with a
// host and a port, one node unless it is a cluster; and the URL written back from the parsed
// parts must parse to the same parts.
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "storage/redis_client.h"

namespace {

bool Same(const hypic::storage::RedisStoreAddress& a, const hypic::storage::RedisStoreAddress& b) {
  return a.cluster == b.cluster && a.nodes == b.nodes && a.user == b.user &&
         a.password == b.password;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view url(reinterpret_cast<const char*>(data), size);
  const auto a = hypic::storage::ParseRedisUrl(url);
  if (!a.ok()) {
    if (a.status().message().empty()) std::abort();
    return 0;
  }
  if (a->nodes.empty() || (!a->cluster && a->nodes.size() != 1)) std::abort();
  std::string again = a->cluster ? "redis-cluster://" : "redis://";
  if (!a->user.empty() || !a->password.empty()) again += a->user + ":" + a->password + "@";
  for (size_t i = 0; i < a->nodes.size(); ++i) {
    if (a->nodes[i].host.empty() || a->nodes[i].port == 0) std::abort();
    again += (i == 0 ? "" : ",") + a->nodes[i].ToString();
  }
  const auto back = hypic::storage::ParseRedisUrl(again);
  if (!back.ok() || !Same(*a, *back)) std::abort();
  return 0;
}
