// Test support: a hiredis reply tree built from RESP bytes (hiredis's own reader), so that the
// cluster reply parsers can be tested and fuzzed on exactly what a server could send.
// Header-only, shared by redis_cluster_test and the redis_cluster_reply fuzz target.
#pragma once

#include <hiredis/hiredis.h>

#include <memory>
#include <string_view>

namespace hypic::testing {

struct RedisReplyDeleter {
  void operator()(redisReply* r) const { freeReplyObject(r); }
};
using RedisReplyPtr = std::unique_ptr<redisReply, RedisReplyDeleter>;

// The first whole reply in `resp`, or null when the bytes are malformed or incomplete.
inline RedisReplyPtr ReadResp(std::string_view resp) {
  std::unique_ptr<redisReader, decltype(&redisReaderFree)> reader(redisReaderCreate(),
                                                                  &redisReaderFree);
  if (reader == nullptr || redisReaderFeed(reader.get(), resp.data(), resp.size()) != REDIS_OK) {
    return nullptr;
  }
  void* raw = nullptr;
  if (redisReaderGetReply(reader.get(), &raw) != REDIS_OK) {
    freeReplyObject(raw);
    return nullptr;
  }
  return RedisReplyPtr(static_cast<redisReply*>(raw));
}

}  // namespace hypic::testing
