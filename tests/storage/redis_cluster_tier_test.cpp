// The remote tier on a live 3-master Redis Cluster that each test creates on loopback ports
// (tests/storage/redis_server.h: redis-server --cluster-enabled yes, redis-cli --cluster
// create), with a password: entries spread over the masters, a slot migrated by hand
// (SETSLOT IMPORTING/MIGRATING, MIGRATE key by key, SETSLOT NODE) while readers keep reading,
// and a master killed and restarted. Every hit is compared with the bytes written. Skips when
// redis-server or redis-cli is not installed (scripts/install-deps.sh installs them).
#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <set>
#include <thread>

#include "storage/redis_manifest.h"
#include "storage/redis_tier.h"
#include "tests/storage/redis_server.h"
#include "tests/storage/storage_test_util.h"
#include "tests/support/check_ok.h"

namespace hypic::storage {
namespace {

using namespace std::chrono_literals;
using hypic::testing::RedisCluster;
using testing::EntryBytes;
using testing::KeyOf;

constexpr char kPassword[] = "cluster-secret";
constexpr uint64_t kEntryBytes = 100 << 10;  // 7 chunks of 16 KiB: migrated one key at a time

#define SKIP_WITHOUT_REDIS_CLUSTER()                                                          \
  if (!RedisCluster::Available()) {                                                           \
    MESSAGE("skipped: redis-server or redis-cli is not installed (scripts/install-deps.sh)"); \
    return;                                                                                   \
  }

std::unique_ptr<RedisTier> Tier(const std::string& url) {
  RedisTierOptions o;
  auto address = ParseRedisUrl(url);
  REQUIRE_OK(address);
  o.address = *address;
  o.prefix = "test";
  o.chunk_bytes = 16 << 10;
  // Generous for a loaded 2-core machine: timeouts here are failures, not the subject.
  o.connect_timeout = 2000ms;
  o.command_timeout = 3000ms;
  o.backoff_min = 100ms;
  o.backoff_max = 400ms;
  auto t = RedisTier::Create(o);
  REQUIRE_OK(t);
  return std::move(t).value();
}

void WriteNow(RedisTier& t, uint64_t seed) {
  auto h = MakeHostHandle(EntryBytes(seed, kEntryBytes));
  REQUIRE_OK(h);
  t.Write(*h);
  t.WaitForWrites();
}

// 1: a hit with exactly the bytes written; 0: a clean miss; -1: an I/O error; -2: wrong bytes.
int Read(RedisTier& t, uint64_t seed) {
  auto got = t.Get(KeyOf(seed, kEntryBytes));
  if (!got.ok()) return got.status().code() == StatusCode::kNotFound ? 0 : -1;
  const auto want = EntryBytes(seed, kEntryBytes);
  return (*got)->size() == want->size() &&
                 std::memcmp((*got)->data(), want->data(), want->size()) == 0
             ? 1
             : -2;
}

uint16_t SlotOf(uint64_t seed) {
  return RedisKeySlot(RedisManifestKey("test", KeyOf(seed, kEntryBytes)));
}

TEST_CASE(
    "redis cluster tier: entries on every master; a slot migrated under load, no wrong read") {
  SKIP_WITHOUT_REDIS_CLUSTER();
  RedisCluster cluster(kPassword);
  REQUIRE(cluster.Start());
  auto t = Tier(cluster.Url());  // one seed: the rest is discovered
  constexpr uint64_t kEntries = 24;
  for (uint64_t s = 1; s <= kEntries; ++s) WriteNow(*t, s);
  std::set<int> owners;
  for (uint64_t s = 1; s <= kEntries; ++s) {
    CHECK(Read(*t, s) == 1);
    owners.insert(cluster.Owner(RedisManifestKey("test", KeyOf(s, kEntryBytes))));
  }
  CHECK(owners == std::set<int>{0, 1, 2});
  TierCounters c = t->Counters();
  CHECK(c.inserts == kEntries);
  CHECK(c.nodes == 3);
  CHECK(c.redirects == 0);  // the map was right from the start
  CHECK_FALSE(c.degraded);
  // A second tier that reads once now and not during the migration: its map goes stale.
  auto stale = Tier(cluster.Url(3));
  CHECK(Read(*stale, 1) == 1);

  // Readers all along, on every entry.
  std::atomic<bool> stop{false};
  std::atomic<int> wrong{0}, hits{0}, misses{0}, errors{0};
  std::vector<std::thread> readers;
  for (int r = 0; r < 2; ++r) {
    readers.emplace_back([&, r] {
      for (uint64_t i = 0; !stop.load(); ++i) {
        const int v = Read(*t, 1 + (i * 7 + static_cast<uint64_t>(r)) % kEntries);
        (v == 1 ? hits : v == 0 ? misses : v == -1 ? errors : wrong)++;
      }
    });
  }
  // Entry 1's slot moves to the next master, key by key; between the keys, entry 1 is read with
  // its chunks split over two nodes (ASK for the moved ones).
  const uint16_t slot = SlotOf(1);
  const int from = cluster.Owner(RedisManifestKey("test", KeyOf(1, kEntryBytes)));
  const int to = (from + 1) % RedisCluster::kNodes;
  REQUIRE(cluster.BeginMigration(slot, from, to));
  int mid_reads = 0;
  REQUIRE(cluster.MoveKeys(slot, from, to, [&](int) {
    CHECK(Read(*t, 1) == 1);
    ++mid_reads;
  }));
  CHECK(mid_reads == 8);  // the manifest and 7 chunks
  // A new entry written into a slot that is half-migrated: every SET is ASKed to the target.
  const uint64_t fresh = 1000;
  const uint16_t fresh_slot = SlotOf(fresh);
  const int fresh_from = cluster.Owner(RedisManifestKey("test", KeyOf(fresh, kEntryBytes)));
  const int fresh_to = (fresh_from + 1) % RedisCluster::kNodes;
  REQUIRE(cluster.BeginMigration(fresh_slot, fresh_from, fresh_to));
  WriteNow(*t, fresh);
  CHECK(Read(*t, fresh) == 1);
  auto keys_in = [&](int node) {  // the keys of fresh's slot that `node` holds
    auto r = cluster.node(node).Command({"CLUSTER", "COUNTKEYSINSLOT", std::to_string(fresh_slot)});
    REQUIRE(r != nullptr);
    return r->integer;
  };
  CHECK(keys_in(fresh_to) == 8);  // the manifest and 7 chunks, all on the target
  CHECK(keys_in(fresh_from) == 0);
  REQUIRE(cluster.EndMigration(fresh_slot, fresh_from, fresh_to));
  REQUIRE(cluster.EndMigration(slot, from, to));
  REQUIRE(cluster.WaitUntilOk());
  CHECK(Read(*t, 1) == 1);
  CHECK(Read(*t, fresh) == 1);
  stop = true;
  for (auto& th : readers) th.join();
  MESSAGE("during the migration: " << hits.load() << " hits, " << misses.load() << " misses, "
                                   << errors.load()
                                   << " errors; redirects followed: " << t->Counters().redirects);
  CHECK(wrong == 0);
  CHECK(hits > 0);
  CHECK(t->Counters().redirects > 0);
  CHECK(t->Counters().checksum_failures == 0);
  // The stale tier's first read of entry 1 meets MOVED, and follows it.
  CHECK(Read(*stale, 1) == 1);
  CHECK(stale->Counters().redirects >= 1);
  // Afterwards every entry is where the cluster says, and readable.
  for (uint64_t s = 1; s <= kEntries; ++s) CHECK(Read(*t, s) == 1);
  CHECK_FALSE(t->Counters().degraded);
}

TEST_CASE(
    "redis cluster tier: a master killed: its entries fail fast, the others hit; it recovers") {
  SKIP_WITHOUT_REDIS_CLUSTER();
  // No node timeout within the test and no full-coverage rule: the other masters keep serving.
  RedisCluster cluster(
      kPassword, {"--cluster-node-timeout", "60000", "--cluster-require-full-coverage", "no"});
  REQUIRE(cluster.Start());
  auto t = Tier(cluster.Url(3));
  constexpr uint64_t kEntries = 18;
  std::vector<int> owner(kEntries + 1);
  for (uint64_t s = 1; s <= kEntries; ++s) {
    WriteNow(*t, s);
    owner[s] = cluster.Owner(RedisManifestKey("test", KeyOf(s, kEntryBytes)));
  }
  const int victim = owner[1];
  cluster.node(victim).Stop();
  const auto t0 = std::chrono::steady_clock::now();
  for (uint64_t s = 1; s <= kEntries; ++s) {
    CAPTURE(s);
    CHECK(Read(*t, s) == (owner[s] == victim ? -1 : 1));
  }
  CHECK(std::chrono::steady_clock::now() - t0 < 3s);  // refused at once, then the breaker
  TierCounters c = t->Counters();
  CHECK(c.degraded);
  CHECK(c.nodes_degraded == 1);
  CHECK(c.io_errors >= 1);
  CHECK(c.checksum_failures == 0);
  // Per node: the three masters with all the slots, the victim alone degraded, with its errors.
  const std::vector<RemoteNodeCounters> nodes = t->Nodes();
  REQUIRE(nodes.size() == 3);
  uint64_t slots = 0;
  for (const RemoteNodeCounters& n : nodes) {
    CAPTURE(n.name);
    slots += n.slots;
    const bool is_victim = n.name == "127.0.0.1:" + std::to_string(cluster.node(victim).port());
    CHECK(n.degraded == is_victim);
    CHECK((n.io_errors >= 1) == is_victim);
  }
  CHECK(slots == kRedisClusterSlots);

  // Back, empty (no persistence), with its slots from nodes.conf: clean misses, then hits again.
  REQUIRE(cluster.node(victim).Start());
  REQUIRE(cluster.WaitUntilOk());
  int v = -1;
  for (int i = 0; i < 200 && v != 0; ++i) {  // past the breaker's backoff
    v = Read(*t, 1);
    if (v != 0) std::this_thread::sleep_for(50ms);
  }
  CHECK(v == 0);
  CHECK_FALSE(t->Counters().degraded);
  WriteNow(*t, 1);
  CHECK(Read(*t, 1) == 1);
  for (uint64_t s = 2; s <= kEntries; ++s) CHECK(Read(*t, s) == (owner[s] == victim ? 0 : 1));
}

TEST_CASE("redis cluster tier: a wrong password is an I/O error and degraded, never a hit") {
  SKIP_WITHOUT_REDIS_CLUSTER();
  RedisCluster cluster(kPassword);
  REQUIRE(cluster.Start());
  auto good = Tier(cluster.Url());
  WriteNow(*good, 1);
  REQUIRE(Read(*good, 1) == 1);
  std::string url = cluster.Url();
  url.replace(url.find(kPassword), std::strlen(kPassword), "wrong");
  auto bad = Tier(url);
  CHECK(Read(*bad, 1) == -1);
  CHECK(bad->Counters().degraded);
  CHECK(bad->Counters().hits == 0);
}

}  // namespace
}  // namespace hypic::storage
