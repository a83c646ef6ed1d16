// The remote tier against a real redis-server that each test starts on a free loopback port
// (tests/storage/redis_server.h): round trip, AUTH, corrupted, missing and evicted chunks, Redis
// killed, hung and restarted, and two TierManagers sharing one Redis. Skips when redis-server
// is not installed (scripts/install-deps.sh installs it).
#include "storage/redis_tier.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <thread>

#include "storage/host_tier.h"
#include "storage/redis_manifest.h"
#include "storage/tier_manager.h"
#include "tests/storage/redis_server.h"
#include "tests/storage/storage_test_util.h"
#include "tests/support/check_ok.h"

namespace hypic::storage {
namespace {

using namespace std::chrono_literals;
using hypic::testing::RedisServer;
using testing::EntryBytes;
using testing::KeyOf;

#define SKIP_WITHOUT_REDIS()                                                     \
  if (!RedisServer::Available()) {                                               \
    MESSAGE("skipped: redis-server is not installed (scripts/install-deps.sh)"); \
    return;                                                                      \
  }

RedisTierOptions Options(const RedisServer& server, uint64_t chunk = 64 << 10) {
  RedisTierOptions o;
  o.address = *ParseRedisUrl(server.Url());
  o.prefix = "test";
  o.chunk_bytes = chunk;
  o.connect_timeout = 200ms;
  o.command_timeout = 300ms;
  o.backoff_min = 100ms;
  o.backoff_max = 400ms;
  return o;
}

std::unique_ptr<RedisTier> Tier(const RedisTierOptions& o) {
  auto t = RedisTier::Create(o);
  REQUIRE_OK(t);
  return std::move(t).value();
}

void WriteNow(RedisTier& t, const std::shared_ptr<const HostBuffer>& bytes) {
  auto h = MakeHostHandle(bytes);
  REQUIRE_OK(h);
  t.Write(*h);
  t.WaitForWrites();
}

bool Same(const std::shared_ptr<const HostBuffer>& a, const HostBuffer& b) {
  return a != nullptr && a->size() == b.size() && std::memcmp(a->data(), b.data(), b.size()) == 0;
}

TEST_CASE("redis tier: round trip of a chunked entry; a second write is skipped") {
  SKIP_WITHOUT_REDIS();
  RedisServer server;
  REQUIRE(server.Start());
  auto t = Tier(Options(server));
  const auto bytes = EntryBytes(1, 300 << 10);  // 5 chunks of 64 KiB
  CHECK(t->Get(KeyOf(1, 300 << 10)).status().code() == StatusCode::kNotFound);
  WriteNow(*t, bytes);
  CHECK(server.Keys("test:*").size() == 1 + (bytes->size() + (64 << 10) - 1) / (64 << 10));
  auto got = t->Get(KeyOf(1, 300 << 10));
  REQUIRE_OK(got);
  CHECK(Same(*got, *bytes));
  WriteNow(*t, bytes);  // the manifest exists: nothing is written again
  TierCounters c = t->Counters();
  CHECK(c.inserts == 1);
  CHECK(c.hits == 1);
  CHECK(c.misses == 1);
  CHECK(c.bytes_read == bytes->size());
  CHECK(c.bytes_written == bytes->size());
  CHECK_FALSE(c.degraded);
  CHECK(c.io_errors == 0);
  CHECK(c.nodes == 1);
  CHECK(c.nodes_degraded == 0);
  CHECK(c.redirects == 0);
}

TEST_CASE("redis tier: a corrupted chunk or manifest is a miss plus a counter, then rewritable") {
  SKIP_WITHOUT_REDIS();
  RedisServer server;
  REQUIRE(server.Start());
  auto t = Tier(Options(server));
  const auto bytes = EntryBytes(2, 200 << 10);
  const SegmentKey key = KeyOf(2, 200 << 10);
  WriteNow(*t, bytes);
  std::vector<std::string> keys = server.Keys("test:*:*:*");  // the chunks
  REQUIRE(keys.size() == 4);
  std::sort(keys.begin(), keys.end());
  REQUIRE(server.Command({"SETRANGE", keys[1], "100", "\x7f"}) != nullptr);
  CHECK(t->Get(key).status().code() == StatusCode::kNotFound);
  CHECK(t->Counters().checksum_failures == 1);
  CHECK(server.Keys(RedisManifestKey("test", key)).empty());  // dropped for the next writer
  WriteNow(*t, bytes);
  auto got = t->Get(key);
  REQUIRE_OK(got);
  CHECK(Same(*got, *bytes));

  // A manifest with a flipped byte.
  const std::string mkey = RedisManifestKey("test", key);
  REQUIRE(server.Command({"SETRANGE", mkey, "20", "\x01"}) != nullptr);
  CHECK(t->Get(key).status().code() == StatusCode::kNotFound);
  CHECK(t->Counters().checksum_failures == 2);
  // A manifest that is valid but belongs to another key.
  const auto other = EntryBytes(3, 20 << 10);
  WriteNow(*t, other);
  auto moved = server.Command({"GET", RedisManifestKey("test", KeyOf(3, 20 << 10))});
  REQUIRE(moved != nullptr);
  REQUIRE(server.Command({"SET", mkey, std::string(moved->str, moved->len)}) != nullptr);
  CHECK(t->Get(key).status().code() == StatusCode::kNotFound);
  CHECK(t->Counters().checksum_failures == 3);
}

TEST_CASE("redis tier: a missing manifest or chunk is a miss, never a wrong read") {
  SKIP_WITHOUT_REDIS();
  RedisServer server;
  REQUIRE(server.Start());
  auto t = Tier(Options(server));
  const auto bytes = EntryBytes(4, 200 << 10);
  const SegmentKey key = KeyOf(4, 200 << 10);
  WriteNow(*t, bytes);
  // Chunks without a manifest: a write cut short before its last step.
  REQUIRE(server.Command({"DEL", RedisManifestKey("test", key)}) != nullptr);
  CHECK(t->Get(key).status().code() == StatusCode::kNotFound);
  REQUIRE(server.Command({"FLUSHALL"}) != nullptr);  // the orphaned chunks too
  WriteNow(*t, bytes);
  REQUIRE_OK(t->Get(key));
  // A manifest with a chunk gone: evicted, or written by a writer that died.
  std::vector<std::string> chunks = server.Keys("test:*:*:*");
  std::sort(chunks.begin(), chunks.end());
  REQUIRE(server.Command({"DEL", chunks.back()}) != nullptr);
  CHECK(t->Get(key).status().code() == StatusCode::kNotFound);
  TierCounters c = t->Counters();
  CHECK(c.evictions == 1);
  CHECK(c.checksum_failures == 0);
  CHECK(c.hits == 1);
}

TEST_CASE("redis tier: AUTH with the URL's password; a wrong one is an I/O error, degraded") {
  SKIP_WITHOUT_REDIS();
  RedisServer server({}, "pw-1");
  REQUIRE(server.Start());
  const std::string port = std::to_string(server.port());
  RedisTierOptions o = Options(server);
  o.address = *ParseRedisUrl("redis://:pw-1@127.0.0.1:" + port);
  auto t = Tier(o);
  const auto bytes = EntryBytes(10, 50 << 10);
  WriteNow(*t, bytes);
  auto got = t->Get(KeyOf(10, 50 << 10));
  REQUIRE_OK(got);
  CHECK(Same(*got, *bytes));
  o.address = *ParseRedisUrl("redis://default:wrong@127.0.0.1:" + port);
  auto wrong = Tier(o);
  CHECK(wrong->Get(KeyOf(10, 50 << 10)).status().code() == StatusCode::kIoError);
  CHECK(wrong->Counters().degraded);
  o.address = *ParseRedisUrl("redis://127.0.0.1:" + port);  // none at all
  auto none = Tier(o);
  CHECK(none->Get(KeyOf(10, 50 << 10)).status().code() == StatusCode::kIoError);
  CHECK(none->Counters().hits == 0);
}

TEST_CASE("redis tier: redis-cluster:// at a server without cluster mode is degraded, no hit") {
  SKIP_WITHOUT_REDIS();
  RedisServer server;
  REQUIRE(server.Start());
  RedisTierOptions o = Options(server);
  auto single = Tier(o);
  const auto bytes = EntryBytes(11, 50 << 10);
  WriteNow(*single, bytes);
  REQUIRE_OK(single->Get(KeyOf(11, 50 << 10)));
  o.address = *ParseRedisUrl("redis-cluster://127.0.0.1:" + std::to_string(server.port()));
  auto t = Tier(o);
  CHECK(t->Get(KeyOf(11, 50 << 10)).status().code() == StatusCode::kIoError);  // no slot map
  TierCounters c = t->Counters();
  CHECK(c.degraded);
  CHECK(c.hits == 0);
  CHECK(c.nodes == 0);
}

TEST_CASE("redis tier: Redis killed, then restarted: degraded at once, recovered after") {
  SKIP_WITHOUT_REDIS();
  RedisServer server;
  REQUIRE(server.Start());
  auto t = Tier(Options(server));
  const auto bytes = EntryBytes(5, 100 << 10);
  const SegmentKey key = KeyOf(5, 100 << 10);
  WriteNow(*t, bytes);
  REQUIRE_OK(t->Get(key));
  server.Stop();
  auto t0 = std::chrono::steady_clock::now();
  CHECK(t->Get(key).status().code() == StatusCode::kIoError);
  CHECK(t->Counters().degraded);
  CHECK(t->Counters().nodes_degraded == 1);
  REQUIRE(t->Nodes().size() == 1);
  CHECK(t->Nodes()[0].name == "127.0.0.1:" + std::to_string(server.port()));
  CHECK(t->Nodes()[0].degraded);
  CHECK(t->Nodes()[0].io_errors >= 1);
  // While the breaker is open, a Get costs no network time at all.
  for (int i = 0; i < 100; ++i) CHECK(t->Get(key).status().code() == StatusCode::kIoError);
  CHECK(std::chrono::steady_clock::now() - t0 < 1s);
  WriteNow(*t, EntryBytes(6, 20 << 10));  // dropped while degraded
  REQUIRE(server.Start());                // empty: it kept nothing
  std::this_thread::sleep_for(500ms);     // past the longest backoff
  CHECK(t->Get(key).status().code() == StatusCode::kNotFound);
  CHECK_FALSE(t->Counters().degraded);
  WriteNow(*t, bytes);
  auto got = t->Get(key);
  REQUIRE_OK(got);
  CHECK(Same(*got, *bytes));
  CHECK(t->Counters().io_errors >= 1);
}

TEST_CASE("redis tier: a hung Redis times out into degraded; it recovers when it answers") {
  SKIP_WITHOUT_REDIS();
  RedisServer server;
  REQUIRE(server.Start());
  auto t = Tier(Options(server));
  const auto bytes = EntryBytes(7, 100 << 10);
  const SegmentKey key = KeyOf(7, 100 << 10);
  WriteNow(*t, bytes);
  REQUIRE_OK(t->Get(key));  // leaves a pooled connection
  server.Pause();
  auto t0 = std::chrono::steady_clock::now();
  CHECK(t->Get(key).status().code() == StatusCode::kIoError);
  CHECK(std::chrono::steady_clock::now() - t0 < 1s);  // the 300 ms command timeout
  CHECK(t->Counters().degraded);
  server.Resume();
  std::this_thread::sleep_for(500ms);
  auto got = t->Get(key);
  REQUIRE_OK(got);
  CHECK(Same(*got, *bytes));
  CHECK_FALSE(t->Counters().degraded);
}

TEST_CASE("redis tier: maxmemory eviction inside Redis only ever produces misses") {
  SKIP_WITHOUT_REDIS();
  RedisServer server({"--maxmemory", "6mb", "--maxmemory-policy", "allkeys-random"});
  REQUIRE(server.Start());
  auto t = Tier(Options(server, 16 << 10));
  constexpr int kEntries = 60;
  for (int i = 0; i < kEntries; ++i) WriteNow(*t, EntryBytes(100 + i, 256 << 10));
  int hits = 0;
  for (int i = 0; i < kEntries; ++i) {
    auto got = t->Get(KeyOf(100 + i, 256 << 10));
    if (got.ok()) {
      ++hits;
      CHECK(Same(*got, *EntryBytes(100 + i, 256 << 10)));
    } else {
      CHECK(got.status().code() == StatusCode::kNotFound);
    }
  }
  TierCounters c = t->Counters();
  MESSAGE("maxmemory 6 MiB, 60 entries of 256 KiB: " << hits << " hits, " << c.evictions
                                                     << " entries with chunks gone");
  CHECK(hits < kEntries);
  CHECK(c.checksum_failures == 0);
  CHECK_FALSE(c.degraded);
}

TEST_CASE("redis tier under TierManager: an entry put by one manager is a hit on another") {
  SKIP_WITHOUT_REDIS();
  RedisServer server;
  REQUIRE(server.Start());
  TierManagerOptions mo;
  mo.remote_min_tokens = 32;  // the synthetic entries have 32 tokens
  auto make = [&] {
    auto m = TierManager::Create(mo, nullptr, std::make_unique<HostTier>(16 << 20), nullptr,
                                 Tier(Options(server)));
    REQUIRE_OK(m);
    return std::move(m).value();
  };
  auto a = make();
  auto b = make();
  const auto bytes = EntryBytes(8, 200 << 10);
  const SegmentKey key = KeyOf(8, 200 << 10);
  REQUIRE_OK(a->Put(bytes));
  a->WaitForWriteBacks();
  // Another namespace's probe does not see it (nor promote it).
  const std::string other = "other";
  CHECK_FALSE(b->Probe(std::span(&key, 1), false, &other).tiers[0].has_value());
  ProbeResult p = b->Probe(std::span(&key, 1));
  REQUIRE(p.tiers[0].has_value());
  CHECK(*p.tiers[0] == TierKind::kHost);
  CHECK(p.pins.size() == 1);
  auto got = b->Get(key);
  REQUIRE_OK(got);
  CHECK(testing::SameBytes(*got, *bytes));
  b->WaitForWriteBacks();
  auto remote_of = [](const TierManager& m) {
    auto stats = m.Stats();
    REQUIRE(stats.back().kind == TierKind::kRemote);
    return stats.back().counters;
  };
  CHECK(remote_of(*a).inserts == 1);
  CHECK(remote_of(*b).inserts == 0);  // a promoted entry is not written back
  CHECK(remote_of(*b).hits == 2);     // the other namespace's probe read it too, then dropped it
  // An entry under the admission threshold stays local.
  mo.remote_min_tokens = 33;
  auto c = make();
  REQUIRE_OK(c->Put(EntryBytes(9, 20 << 10)));
  c->WaitForWriteBacks();
  CHECK(remote_of(*c).inserts == 0);
}

}  // namespace
}  // namespace hypic::storage
