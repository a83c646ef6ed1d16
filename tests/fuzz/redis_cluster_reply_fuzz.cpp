// Fuzzes the Redis Cluster reply parsers (storage/redis_cluster.h) on what a node could send:
// the input is RESP bytes, read into a reply tree by hiredis's own reader, then given to
// ParseClusterSlots (and, for an error or status reply, to ParseRedisRedirect); the raw input
// is also parsed as a redirection's text. What parses must hold its promises: ranges sorted,
// apart, within the slots, with a port; a redirection within the slots, with a port, that reads
// back the same when written out again. hiredis 0.14's reader allocates an array as large as
// declared before its elements arrive, so inputs that declare one of more than 65536 elements
// are skipped (a real CLUSTER SLOTS reply has at most 16384 ranges): that is hiredis's
// allocation, not the parsers under test.
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "storage/redis_cluster.h"
#include "tests/storage/redis_resp.h"

namespace {

using hypic::storage::ParseRedisRedirect;
using hypic::storage::RedisRedirect;

void CheckRedirect(std::string_view text) {
  const auto r = ParseRedisRedirect(text);
  if (!r) return;
  if (r->slot >= hypic::storage::kRedisClusterSlots || r->target.port == 0) std::abort();
  const std::string again = (r->kind == RedisRedirect::Kind::kMoved ? "MOVED " : "ASK ") +
                            std::to_string(r->slot) + " " + r->target.host + ":" +
                            std::to_string(r->target.port);
  const auto back = ParseRedisRedirect(again);
  if (!back || back->kind != r->kind || back->slot != r->slot || !(back->target == r->target)) {
    std::abort();
  }
}

// True when some RESP array or map header ("*<n>" or "%<n>" at a line start) declares more
// than 65536 elements.
bool DeclaresHugeArray(std::string_view in) {
  for (size_t at = 0; at < in.size();) {
    if (in[at] == '*' || in[at] == '%') {
      uint64_t n = 0;
      for (size_t i = at + 1; i < in.size() && in[i] >= '0' && in[i] <= '9' && n <= 65536; ++i) {
        n = n * 10 + static_cast<uint64_t>(in[i] - '0');
      }
      if (n > 65536) return true;
    }
    const size_t eol = in.find('\n', at);
    if (eol == std::string_view::npos) break;
    at = eol + 1;
  }
  return false;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  CheckRedirect(input);
  if (DeclaresHugeArray(input)) return 0;
  const auto reply = hypic::testing::ReadResp(input);
  if (reply == nullptr) return 0;
  if (reply->type == REDIS_REPLY_ERROR || reply->type == REDIS_REPLY_STATUS) {
    CheckRedirect({reply->str, reply->len});
  }
  const auto ranges = hypic::storage::ParseClusterSlots(*reply);
  if (!ranges.ok()) return 0;
  for (size_t i = 0; i < ranges->size(); ++i) {
    const auto& r = (*ranges)[i];
    if (r.first > r.last || r.last >= hypic::storage::kRedisClusterSlots || r.master.port == 0 ||
        r.master.host == "?") {
      std::abort();
    }
    if (i > 0 && (*ranges)[i - 1].last >= r.first) std::abort();
  }
  return 0;
}
