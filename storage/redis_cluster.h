// The pure parts of Redis Cluster that the remote tier's client (storage/redis_client.h) needs:
// a key's hash slot (CRC16-XMODEM of the key or of its {hash tag}, modulo 16384, as in the
// Redis Cluster specification), the MOVED/ASK redirection an error reply may carry, and the
// slot map a CLUSTER SLOTS reply describes. Nothing here touches the network; pure functions,
// thread-safe.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

struct redisReply;

namespace hypic::storage {

inline constexpr uint16_t kRedisClusterSlots = 16384;

struct RedisEndpoint {
  std::string host;  // empty: the host of the node that named it (Redis 7's unknown endpoint)
  uint16_t port = 6379;

  std::string ToString() const;  // "host:port", "[v6]:port"
  friend bool operator==(const RedisEndpoint&, const RedisEndpoint&) = default;
};

// A port number in [1, 65535], digits only; nullopt otherwise.
std::optional<uint16_t> ParseRedisPort(std::string_view digits);

// CRC16-XMODEM (polynomial 0x1021, initial value 0), the checksum Redis Cluster hashes keys with.
uint16_t RedisCrc16(std::string_view bytes);

// The hash slot of `key`: of the part between the first '{' and the next '}' when that part is
// not empty (the hash tag), otherwise of the whole key.
uint16_t RedisKeySlot(std::string_view key);

struct RedisRedirect {
  enum class Kind { kMoved, kAsk };
  Kind kind = Kind::kMoved;
  uint16_t slot = 0;
  RedisEndpoint target;
};

// The redirection in an error reply's text, "MOVED <slot> <host>:<port>" or "ASK <slot>
// <host>:<port>" (the host may be empty, an IPv6 host is everything before the last ':').
// nullopt for any other error, and for a malformed redirection (a slot outside [0, 16383], a
// port outside [1, 65535], junk), which the caller then treats as a plain error.
std::optional<RedisRedirect> ParseRedisRedirect(std::string_view error);

// One range of slots and the master that serves it.
struct RedisSlotRange {
  uint16_t first = 0;
  uint16_t last = 0;  // inclusive
  RedisEndpoint master;
};

// The ranges of a CLUSTER SLOTS reply: an array of [first, last, [host, port, ...], replicas...].
// A master whose host is NIL or empty gets an empty host (the asked node's, for the caller to
// fill in); a range whose master host is "?" (no known endpoint) is left out. kCorruption for
// anything else malformed: a wrong type, a slot out of range or first > last, a bad port, or
// ranges that overlap. The ranges come back sorted by first slot.
Result<std::vector<RedisSlotRange>> ParseClusterSlots(const redisReply& reply);

}  // namespace hypic::storage
