// End to end: two hypicd sharing one Redis (the remote tier, storage/redis_tier.h), each with
// its own data dir, as two pods' sidecars would. An entry computed by A is a remote hit on B,
// promoted into B's RAM tier, with bitwise the same COMPOSE result; with Redis gone, B still
// answers (its misses computed) and reports the tier degraded. The same over a 3-master Redis
// Cluster with a password (redis-cluster://). Skips without redis-server (and redis-cli).
#include <doctest/doctest.h>

#include <chrono>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <thread>

#include "tests/e2e/daemon.h"
#include "tests/storage/redis_server.h"
#include "tests/support/check_ok.h"
#include "tests/support/seeded_rng.h"

namespace hypic::e2e {
namespace {

using protocol::ComposeMode;
using protocol::Opcode;
using protocol::PartOutcome;
using testing::RedisCluster;
using testing::RedisServer;
using testing::SeededRng;

constexpr uint32_t kVocab = 256;

protocol::ComposePart Part(protocol::PartKind kind, std::vector<uint32_t> tokens) {
  protocol::ComposePart p;
  p.kind = kind;
  p.tokens = std::move(tokens);
  return p;
}

protocol::ComposeReply Compose(RawConn& conn, const std::vector<protocol::ComposePart>& parts) {
  protocol::ComposeRequest req;
  req.name_space = "docs";
  req.mode = ComposeMode::kHypic;
  req.top_k = 8;
  req.parts = parts;
  protocol::ComposeOptions options;
  options.logits = protocol::LogitsMode::kFull;
  auto r = conn.Call(Opcode::kCompose, protocol::Encode(req), protocol::Encode(options), {}, 60s);
  REQUIRE_OK(r);
  REQUIRE_MESSAGE(r->status() == StatusCode::kOk, r->text());
  auto reply = protocol::Decode<protocol::ComposeReply>(r->body);
  REQUIRE_OK(reply);
  return std::move(reply).value();
}

nlohmann::json RemoteStats(RawConn& conn) {
  auto r = conn.Call(Opcode::kStats);
  REQUIRE_OK(r);
  REQUIRE(r->status() == StatusCode::kOk);
  const nlohmann::json stats = nlohmann::json::parse(r->text());
  for (const auto& t : stats["tiers"]) {
    if (t["tier"] == "remote") return t;
  }
  FAIL("no remote tier in STATS: " << r->text());
  return {};
}

void CheckOutcomes(const protocol::ComposeReply& reply, PartOutcome segments) {
  for (size_t i = 0; i + 1 < reply.parts.size(); ++i) {
    CAPTURE(i);
    CHECK(reply.parts[i].outcome == segments);
  }
}

// Two hypicd (A and B, own data dirs) sharing the remote store at `url`, and a connection to
// each over its unix socket.
struct SharedPair {
  std::unique_ptr<Daemon> a, b;
  std::optional<RawConn> ca, cb;
};
SharedPair StartSharing(const std::string& url, const std::string& timeout_ms) {
  DaemonOptions options;
  options.args = {"--remote-store",      url,       "--remote-min-tokens", "0",
                  "--remote-timeout-ms", timeout_ms};
  SharedPair p;
  auto a = Daemon::Start(options);
  REQUIRE_OK(a);
  auto b = Daemon::Start(options);
  REQUIRE_OK(b);
  p.a = std::move(a).value();
  p.b = std::move(b).value();
  auto ca = RawConn::UnixHello(p.a->unix_path());
  REQUIRE_OK(ca);
  auto cb = RawConn::UnixHello(p.b->unix_path());
  REQUIRE_OK(cb);
  p.ca.emplace(std::move(ca).value());
  p.cb.emplace(std::move(cb).value());
  return p;
}

TEST_CASE("two daemons sharing a Redis: A's entries are remote hits on B, bitwise the same") {
  if (!RedisServer::Available()) {
    MESSAGE("skipped: redis-server is not installed (scripts/install-deps.sh)");
    return;
  }
  RedisServer redis;
  REQUIRE(redis.Start());
  SharedPair pair = StartSharing(redis.Url(), "300");
  RawConn* ca = &*pair.ca;
  RawConn* cb = &*pair.cb;

  SeededRng rng(18);
  using protocol::PartKind;
  std::vector<protocol::ComposePart> prompt = {
      Part(PartKind::kSegmentTokens, rng.Tokens(40, kVocab)),
      Part(PartKind::kSegmentTokens, rng.Tokens(24, kVocab)),
      Part(PartKind::kSegmentTokens, rng.Tokens(32, kVocab)),
      Part(PartKind::kRaw, rng.Tokens(6, kVocab))};
  const auto cold = Compose(*ca, prompt);
  CheckOutcomes(cold, PartOutcome::kMiss);

  // A writes its three entries asynchronously: wait for their manifests.
  for (int i = 0; i < 200 && redis.Keys("hypic:*:m").size() < 3; ++i) {
    std::this_thread::sleep_for(25ms);
  }
  REQUIRE(redis.Keys("hypic:*:m").size() == 3);
  CHECK(RemoteStats(*ca)["inserts"] == 3);

  const auto remote = Compose(*cb, prompt);
  CheckOutcomes(remote, PartOutcome::kHit);
  for (size_t i = 0; i + 1 < remote.parts.size(); ++i) {
    CHECK(remote.parts[i].tier == protocol::Tier::kHost);  // promoted before the compose
  }
  auto rb = RemoteStats(*cb);
  CHECK(rb["hits"] == 3);
  CHECK(rb["inserts"] == 0);  // promoted entries are not written back
  CHECK(rb["degraded"] == false);
  CHECK(rb["bytes_read"].get<uint64_t>() > 0);
  const auto warm = Compose(*ca, prompt);
  // Bitwise: the whole logit row, not only the top tokens.
  REQUIRE(remote.logits.size() == warm.logits.size());
  CHECK(remote.logits == warm.logits);
  CHECK(remote.logits == cold.logits);
  CHECK(remote.top == warm.top);

  // Redis gone: B still answers a new prompt (computing its misses) and says it is degraded.
  redis.Stop();
  std::vector<protocol::ComposePart> other = {
      Part(PartKind::kSegmentTokens, rng.Tokens(30, kVocab)),
      Part(PartKind::kRaw, rng.Tokens(4, kVocab))};
  const auto t0 = std::chrono::steady_clock::now();
  const auto alone = Compose(*cb, other);
  CHECK(std::chrono::steady_clock::now() - t0 < 20s);
  CheckOutcomes(alone, PartOutcome::kMiss);
  rb = RemoteStats(*cb);
  CHECK(rb["degraded"] == true);
  CHECK(rb["io_errors"].get<uint64_t>() >= 1);
  // And the entries it had promoted are local hits still.
  CheckOutcomes(Compose(*cb, prompt), PartOutcome::kHit);
}

TEST_CASE("two daemons sharing a Redis Cluster: remote hits, bitwise the same") {
  if (!RedisCluster::Available()) {
    MESSAGE("skipped: redis-server or redis-cli is not installed (scripts/install-deps.sh)");
    return;
  }
  RedisCluster cluster("e2e-secret");
  REQUIRE(cluster.Start());
  SharedPair pair = StartSharing(cluster.Url(2), "2000");
  RawConn* ca = &*pair.ca;
  RawConn* cb = &*pair.cb;
  SeededRng rng(1818);
  using protocol::PartKind;
  std::vector<protocol::ComposePart> prompt;
  for (int i = 0; i < 6; ++i)
    prompt.push_back(Part(PartKind::kSegmentTokens, rng.Tokens(24, kVocab)));
  prompt.push_back(Part(PartKind::kRaw, rng.Tokens(6, kVocab)));
  const auto cold = Compose(*ca, prompt);
  CheckOutcomes(cold, PartOutcome::kMiss);
  auto manifests = [&] {
    size_t n = 0;
    for (int i = 0; i < RedisCluster::kNodes; ++i) n += cluster.node(i).Keys("hypic:*:m").size();
    return n;
  };
  for (int i = 0; i < 400 && manifests() < 6; ++i) std::this_thread::sleep_for(25ms);
  REQUIRE(manifests() == 6);
  const auto remote = Compose(*cb, prompt);
  CheckOutcomes(remote, PartOutcome::kHit);
  CHECK(remote.logits == cold.logits);
  CHECK(remote.top == cold.top);
  auto rb = RemoteStats(*cb);
  CHECK(rb["hits"] == 6);
  CHECK(rb["nodes"] == 3);
  CHECK(rb["nodes_degraded"] == 0);
  CHECK(rb["degraded"] == false);
  CHECK(rb["checksum_failures"] == 0);
  // STATS has a row per master: all the slots between them, none degraded.
  auto r = cb->Call(Opcode::kStats);
  REQUIRE_OK(r);
  const nlohmann::json stats = nlohmann::json::parse(r->text());
  REQUIRE(stats.contains("remote_nodes"));
  REQUIRE(stats["remote_nodes"].size() == 3);
  uint64_t slots = 0;
  for (const auto& n : stats["remote_nodes"]) {
    slots += n["slots"].get<uint64_t>();
    CHECK(n["degraded"] == false);
  }
  CHECK(slots == 16384);
}

}  // namespace
}  // namespace hypic::e2e
