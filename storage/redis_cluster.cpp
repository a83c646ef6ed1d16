#include "storage/redis_cluster.h"

#include <fmt/format.h>
#include <hiredis/hiredis.h>

#include <algorithm>
#include <array>
#include <charconv>

namespace hypic::storage {

namespace {

constexpr std::array<uint16_t, 256> MakeCrc16Table() {
  std::array<uint16_t, 256> t{};
  for (unsigned i = 0; i < 256; ++i) {
    uint16_t c = static_cast<uint16_t>(i << 8);
    for (int b = 0; b < 8; ++b) {
      c = static_cast<uint16_t>((c & 0x8000) != 0 ? (c << 1) ^ 0x1021 : c << 1);
    }
    t[i] = c;
  }
  return t;
}
constexpr std::array<uint16_t, 256> kCrc16Table = MakeCrc16Table();

bool IsString(const redisReply& r) {
  return r.type == REDIS_REPLY_STRING || r.type == REDIS_REPLY_STATUS;
}

Result<uint16_t> SlotOf(const redisReply& r) {
  if (r.type != REDIS_REPLY_INTEGER || r.integer < 0 || r.integer >= kRedisClusterSlots) {
    return Corruption("CLUSTER SLOTS: a slot that is not an integer in [0, 16383]");
  }
  return static_cast<uint16_t>(r.integer);
}

}  // namespace

std::string RedisEndpoint::ToString() const {
  return host.find(':') != std::string::npos ? fmt::format("[{}]:{}", host, port)
                                             : fmt::format("{}:{}", host, port);
}

std::optional<uint16_t> ParseRedisPort(std::string_view digits) {
  unsigned v = 0;
  auto [p, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), v);
  if (digits.empty() || ec != std::errc() || p != digits.data() + digits.size() || v == 0 ||
      v > 65535) {
    return std::nullopt;
  }
  return static_cast<uint16_t>(v);
}

uint16_t RedisCrc16(std::string_view bytes) {
  uint16_t crc = 0;
  for (char ch : bytes) {
    crc = static_cast<uint16_t>((crc << 8) ^
                                kCrc16Table[((crc >> 8) ^ static_cast<uint8_t>(ch)) & 0xff]);
  }
  return crc;
}

uint16_t RedisKeySlot(std::string_view key) {
  if (size_t open = key.find('{'); open != std::string_view::npos) {
    if (size_t close = key.find('}', open + 1);
        close != std::string_view::npos && close > open + 1) {
      key = key.substr(open + 1, close - open - 1);
    }
  }
  return RedisCrc16(key) & (kRedisClusterSlots - 1);
}

std::optional<RedisRedirect> ParseRedisRedirect(std::string_view error) {
  RedisRedirect r;
  if (error.starts_with("MOVED ")) {
    r.kind = RedisRedirect::Kind::kMoved;
    error.remove_prefix(6);
  } else if (error.starts_with("ASK ")) {
    r.kind = RedisRedirect::Kind::kAsk;
    error.remove_prefix(4);
  } else {
    return std::nullopt;
  }
  const size_t space = error.find(' ');
  if (space == std::string_view::npos) return std::nullopt;
  const std::string_view slot = error.substr(0, space);
  unsigned v = 0;
  auto [p, ec] = std::from_chars(slot.data(), slot.data() + slot.size(), v);
  if (slot.empty() || ec != std::errc() || p != slot.data() + slot.size() ||
      v >= kRedisClusterSlots) {
    return std::nullopt;
  }
  r.slot = static_cast<uint16_t>(v);
  const std::string_view endpoint = error.substr(space + 1);
  const size_t colon = endpoint.rfind(':');
  if (colon == std::string_view::npos) return std::nullopt;
  const std::string_view host = endpoint.substr(0, colon);
  if (host.find_first_of(" \r\n") != std::string_view::npos) return std::nullopt;
  const std::optional<uint16_t> port = ParseRedisPort(endpoint.substr(colon + 1));
  if (!port) return std::nullopt;
  r.target = RedisEndpoint{std::string(host), *port};
  return r;
}

Result<std::vector<RedisSlotRange>> ParseClusterSlots(const redisReply& reply) {
  if (reply.type != REDIS_REPLY_ARRAY) return Corruption("CLUSTER SLOTS: the reply is no array");
  std::vector<RedisSlotRange> ranges;
  for (size_t i = 0; i < reply.elements; ++i) {
    const redisReply& e = *reply.element[i];
    if (e.type != REDIS_REPLY_ARRAY || e.elements < 3) {
      return Corruption(fmt::format("CLUSTER SLOTS: range {} is not [first, last, master...]", i));
    }
    HYPIC_ASSIGN_OR_RETURN(const uint16_t first, SlotOf(*e.element[0]));
    HYPIC_ASSIGN_OR_RETURN(const uint16_t last, SlotOf(*e.element[1]));
    if (first > last) {
      return Corruption(fmt::format("CLUSTER SLOTS: range {}-{} is backwards", first, last));
    }
    const redisReply& m = *e.element[2];
    if (m.type != REDIS_REPLY_ARRAY || m.elements < 2 ||
        (m.element[0]->type != REDIS_REPLY_NIL && !IsString(*m.element[0])) ||
        m.element[1]->type != REDIS_REPLY_INTEGER || m.element[1]->integer <= 0 ||
        m.element[1]->integer > 65535) {
      return Corruption(
          fmt::format("CLUSTER SLOTS: the master of {}-{} is not [host, port]", first, last));
    }
    std::string host = m.element[0]->type == REDIS_REPLY_NIL
                           ? std::string()
                           : std::string(m.element[0]->str, m.element[0]->len);
    if (host == "?") continue;  // no known endpoint: those slots are unserved for us
    ranges.push_back(
        {first, last, {std::move(host), static_cast<uint16_t>(m.element[1]->integer)}});
  }
  std::sort(ranges.begin(), ranges.end(),
            [](const RedisSlotRange& a, const RedisSlotRange& b) { return a.first < b.first; });
  for (size_t i = 1; i < ranges.size(); ++i) {
    if (ranges[i].first <= ranges[i - 1].last) {
      return Corruption(fmt::format("CLUSTER SLOTS: ranges {}-{} and {}-{} overlap",
                                    ranges[i - 1].first, ranges[i - 1].last, ranges[i].first,
                                    ranges[i].last));
    }
  }
  return ranges;
}

}  // namespace hypic::storage
