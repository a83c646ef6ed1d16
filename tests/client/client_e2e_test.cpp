// The C++ client against the real hypicd (started by tests/e2e/daemon.h on ephemeral ports in
// a temp data dir): every operation, pipelining, the unix socket, auth and the admin token, and
// the congestion control of a loopback connection.
#include <doctest/doctest.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>

#include "client/client.h"
#include "storage/entry_format.h"
#include "storage/synthetic_entry.h"
#include "tests/e2e/daemon.h"
#include "tests/support/check_ok.h"
#include "tests/support/seeded_rng.h"

namespace hypic::client {
namespace {

using protocol::Tier;

std::unique_ptr<e2e::Daemon> StartDaemon(std::vector<std::string> args = {},
                                         std::string config_toml = "") {
  e2e::DaemonOptions o;
  o.args = std::move(args);
  o.config_toml = std::move(config_toml);
  o.metrics = false;
  auto d = e2e::Daemon::Start(o);
  REQUIRE_OK(d);
  return std::move(d).value();
}

std::unique_ptr<Client> ConnectTcp(const e2e::Daemon& d, std::string token = "",
                                   std::string admin = "") {
  ClientOptions o;
  o.address = "127.0.0.1:" + std::to_string(d.port());
  o.token = std::move(token);
  o.admin_token = std::move(admin);
  auto c = Client::Connect(o);
  REQUIRE_OK(c);
  return std::move(c).value();
}

// Over the unix socket as the daemon's own user: the admin grant without an admin token.
std::unique_ptr<Client> ConnectUnix(const e2e::Daemon& d) {
  ClientOptions o;
  o.address = "unix:" + d.unix_path();
  auto c = Client::Connect(o);
  REQUIRE_OK(c);
  return std::move(c).value();
}

struct TestEntry {
  Hash128 key;
  Bytes bytes;
};

TestEntry MakeEntry(uint64_t seed, uint64_t bytes) {
  storage::SyntheticSpec spec;
  spec.seed = seed;
  spec.name_space = "client-e2e";
  spec.target_bytes = bytes;
  auto entry = storage::MakeSyntheticEntry(spec);
  REQUIRE_OK(entry);
  auto buf = storage::Serialize(**entry);
  REQUIRE_OK(buf);
  return {(*entry)->key().hash(), Bytes((*buf)->data(), (*buf)->data() + (*buf)->size())};
}

TEST_CASE("HELLO and PING over TCP and the unix socket") {
  auto d = StartDaemon();
  for (std::string addr : {"127.0.0.1:" + std::to_string(d->port()), "unix:" + d->unix_path()}) {
    CAPTURE(addr);
    ClientOptions o;
    o.address = addr;
    auto c = Client::Connect(o);
    REQUIRE_OK(c);
    REQUIRE((*c)->hello_reply().has_value());
    CHECK((*c)->hello_reply()->version == protocol::kMaxVersion);
    // No admin token configured: admin over the unix socket (own uid), never over TCP.
    CHECK((*c)->hello_reply()->admin == addr.starts_with("unix:"));
    CHECK((*c)->hello_reply()->limits.max_frame_body > 0);
    Bytes payload(1000, std::byte{7});
    auto pong = (*c)->Ping(ByteSpan(payload));
    REQUIRE_OK(pong);
    CHECK(*pong == payload);
  }
}

// The congestion control of this process's TCP socket connected to 127.0.0.1:`port`.
std::optional<std::string> OwnCongestionTo(uint16_t port) {
  for (const auto& entry : std::filesystem::directory_iterator("/proc/self/fd")) {
    int fd = std::atoi(entry.path().filename().c_str());
    sockaddr_in peer{};
    socklen_t len = sizeof(peer);
    if (::getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &len) != 0 ||
        peer.sin_family != AF_INET || ntohs(peer.sin_port) != port) {
      continue;
    }
    char name[16] = {};
    socklen_t nlen = sizeof(name);
    if (::getsockopt(fd, IPPROTO_TCP, TCP_CONGESTION, name, &nlen) != 0) return std::nullopt;
    return std::string(name, ::strnlen(name, nlen));
  }
  return std::nullopt;
}

TEST_CASE("a loopback TCP connection is on reno (PUT bodies are not paced)") {
  auto d = StartDaemon();
  auto c = ConnectTcp(*d);
  auto cc = OwnCongestionTo(d->port());
  REQUIRE(cc.has_value());
  CHECK(*cc == "reno");
}

TEST_CASE("PUT, HAS, GET, LIST, PIN, VERIFY, EVICT, DEL, FLUSH, STATS, CONFIG") {
  auto d = StartDaemon({}, e2e::kLocalWriterTenant);
  auto c = ConnectUnix(*d);
  TestEntry a = MakeEntry(1, 256 << 10);
  TestEntry b = MakeEntry(2, 3 << 20);  // large enough for the direct-read path
  Hash128 absent{12345, 678};

  CHECK_OK(c->Put(a.key, ByteSpan(a.bytes)));
  CHECK_OK(c->Put(b.key, ByteSpan(b.bytes), protocol::PutOptions{3600, false}));
  auto tiers = c->Has(std::vector<Hash128>{a.key, absent, b.key});
  REQUIRE_OK(tiers);
  CHECK((*tiers)[0] != Tier::kNone);
  CHECK((*tiers)[1] == Tier::kNone);
  CHECK((*tiers)[2] != Tier::kNone);

  for (const TestEntry* e : {&a, &b}) {
    auto g = c->Get(e->key);
    REQUIRE_OK(g);
    CHECK(g->tier != Tier::kNone);
    CHECK(g->entry == e->bytes);
  }
  CHECK(c->Get(absent).status().code() == StatusCode::kNotFound);

  // A PUT whose header key does not match the entry is refused, and nothing is stored.
  CHECK(c->Put(absent, ByteSpan(a.bytes)).code() == StatusCode::kBadRequest);
  Bytes corrupt = a.bytes;
  corrupt[corrupt.size() / 2] ^= std::byte{1};
  CHECK_FALSE(c->Put(a.key, ByteSpan(corrupt)).ok());

  auto list = c->List(protocol::ListRequest{0, 100, "", Tier::kNone});
  REQUIRE_OK(list);
  size_t found = 0;
  for (const auto& e : list->entries) found += (e.key == a.key || e.key == b.key) ? 1 : 0;
  CHECK(found == 2);

  CHECK_OK(c->Pin(a.key));
  CHECK(c->Del(a.key).code() == StatusCode::kBusy);  // pinned
  CHECK_OK(c->Unpin(a.key));

  auto verify = c->Verify();
  REQUIRE_OK(verify);
  CHECK(verify->checked >= 2);
  CHECK(verify->bad == 0);

  auto evicted = c->Evict(protocol::EvictRequest{protocol::EvictBy::kKey, b.key, "", {}, 0});
  REQUIRE_OK(evicted);
  CHECK(evicted->entries == 1);
  CHECK_OK(c->Del(a.key));
  CHECK(c->Del(a.key).code() == StatusCode::kNotFound);
  auto after = c->Has(std::vector<Hash128>{a.key, b.key});
  REQUIRE_OK(after);
  CHECK(*after == std::vector<Tier>{Tier::kNone, Tier::kNone});
  CHECK_OK(c->Flush());

  auto stats = c->Stats();
  REQUIRE_OK(stats);
  CHECK(nlohmann::json::parse(*stats).is_object());
  auto config = c->Config();
  REQUIRE_OK(config);
  CHECK(nlohmann::json::parse(*config).contains("listen"));
}

TEST_CASE("pipelined PUTs and GETs on one connection") {
  auto d = StartDaemon({}, e2e::kLocalWriterTenant);
  auto c = ConnectTcp(*d);
  std::vector<TestEntry> entries;
  for (uint64_t i = 0; i < 12; ++i) entries.push_back(MakeEntry(100 + i, (64 << 10) * (i + 1)));
  std::vector<Pending<Done>> puts;
  for (const auto& e : entries) {
    auto p = c->SubmitPut(e.key, ByteSpan(e.bytes));
    REQUIRE_OK(p);
    puts.push_back(*p);
  }
  for (auto& p : puts) CHECK_OK(p.Wait());
  std::vector<Pending<GetResult>> gets;
  for (const auto& e : entries) {
    auto p = c->SubmitGet(e.key);
    REQUIRE_OK(p);
    gets.push_back(*p);
  }
  for (size_t i = gets.size(); i-- > 0;) {  // collected in reverse order
    auto g = gets[i].Wait();
    REQUIRE_OK(g);
    CHECK(g->entry == entries[i].bytes);
  }
  CHECK(c->outstanding() == 0);
}

TEST_CASE("PREFILL then COMPOSE hits the cached segments") {
  auto d = StartDaemon();
  auto c = ConnectTcp(*d);
  testing::SeededRng rng(11);
  protocol::PrefillRequest pre;
  pre.name_space = "client-e2e";
  for (int i = 0; i < 3; ++i) pre.segments.push_back(rng.Tokens(24, 200));
  auto rep = c->Prefill(pre);
  REQUIRE_OK(rep);
  REQUIRE(rep->results.size() == 3);
  for (const auto& r : rep->results) {
    CHECK_FALSE(r.was_cached);
    CHECK(r.n_tokens == 24);
  }
  protocol::ComposeRequest req;
  req.name_space = "client-e2e";
  req.top_k = 5;
  req.parts.push_back({protocol::PartKind::kRaw, {}, rng.Tokens(4, 200)});
  req.parts.push_back({protocol::PartKind::kSegmentTokens, {}, pre.segments[0]});
  req.parts.push_back({protocol::PartKind::kSegmentKey, rep->results[1].key, {}});
  req.parts.push_back({protocol::PartKind::kSegmentTokens, {}, pre.segments[2]});
  auto out = c->Compose(req);
  REQUIRE_OK(out);
  REQUIRE(out->parts.size() == 4);
  CHECK(out->parts[0].outcome == protocol::PartOutcome::kLive);
  for (size_t i = 1; i < 4; ++i) {
    CAPTURE(i);
    CHECK(out->parts[i].outcome == protocol::PartOutcome::kHit);
    CHECK(out->parts[i].key == rep->results[i - 1].key);
  }
  CHECK(out->n_tokens == 4 + 3 * 24);
  REQUIRE(out->top.size() == 5);
  for (size_t i = 1; i < out->top.size(); ++i) CHECK(out->top[i - 1].logit >= out->top[i].logit);
  // A key that is not cached is NOT_FOUND.
  req.parts = {{protocol::PartKind::kSegmentKey, Hash128{1, 2}, {}}};
  auto missing = c->Compose(req);
  CHECK_MESSAGE(missing.status().code() == StatusCode::kNotFound, missing.status().ToString());
}

TEST_CASE("auth: tokens and the admin token") {
  auto d = StartDaemon({"--token", "user-secret", "--admin-token", "admin-secret"});
  ClientOptions o;
  o.address = "127.0.0.1:" + std::to_string(d->port());
  CHECK(Client::Connect(o).status().code() == StatusCode::kUnauthorized);
  o.token = "wrong";
  CHECK(Client::Connect(o).status().code() == StatusCode::kUnauthorized);
  o.token = "user-secret";
  o.admin_token = "guess";
  CHECK(Client::Connect(o).status().code() == StatusCode::kUnauthorized);

  auto user = ConnectTcp(*d, "user-secret");
  CHECK_FALSE(user->hello_reply()->admin);
  CHECK_OK(user->Ping());
  CHECK(user->Stats().status().code() == StatusCode::kUnauthorized);
  CHECK(user->Flush().code() == StatusCode::kUnauthorized);
  CHECK(user->Shutdown().code() == StatusCode::kUnauthorized);
  CHECK_OK(user->Ping());  // refused admin ops leave the connection usable

  auto admin = ConnectTcp(*d, "user-secret", "admin-secret");
  CHECK(admin->hello_reply()->admin);
  CHECK_OK(admin->Stats());
  CHECK_OK(admin->Shutdown());
  CHECK(d->WaitExit(std::chrono::seconds(20)) == 0);
}

}  // namespace
}  // namespace hypic::client
