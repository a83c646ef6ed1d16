// End to end against the real hypicd: tenants (issue 17). A tenant's token binds its
// connections to its namespace: it cannot GET, HAS, DEL, PIN, LIST, VERIFY, EVICT or
// COMPOSE-by-key another tenant's entries (they answer as absent). PUT needs `write`; a second
// PUT of a key leaves the first entry byte-identical, its pins and TTL unchanged. Quotas answer
// QUOTA_EXCEEDED and are counted. Admin: over TCP only with a token; over the unix socket the
// daemon's own uid without one. The admin token alone has no data access.
#include <doctest/doctest.h>
#include <signal.h>

#include <algorithm>
#include <array>
#include <thread>
#include <vector>

#include "storage/entry_format.h"
#include "storage/synthetic_entry.h"
#include "tests/e2e/daemon.h"
#include "tests/e2e/synthetic_wire_entry.h"
#include "tests/support/check_ok.h"

namespace hypic::e2e {
namespace {

using protocol::Opcode;

constexpr char kTenants[] = R"(admin_token = "root-admin"

[[tenant]]
name = "alpha"
token = "alpha-token"
namespace = "alpha"
ops = ["read", "compute", "write", "admin"]

[[tenant]]
name = "beta"
token = "beta-token"
namespace = "beta"
ops = ["read", "compute", "write", "admin"]
max_compute_inflight = 1

[[tenant]]
name = "alpha-reader"
token = "reader-token"
namespace = "alpha"
ops = ["read"]

[[tenant]]
name = "small"
token = "small-token"
namespace = "small"
ops = ["read", "write"]
max_bytes = "160KiB"
)";

RawConn Connect(const Daemon& d, const std::string& token, const std::string& admin = "") {
  auto c = RawConn::Tcp(d.port());
  REQUIRE_OK(c);
  REQUIRE_OK(c->Hello(token, admin));
  return std::move(c).value();
}

StatusCode Put(RawConn& c, const Entry& e, protocol::PutOptions opts = {}) {
  auto r = c.Call(Opcode::kPut, e.bytes->span(), protocol::Encode(opts), e.key);
  REQUIRE_OK(r);
  return r->status();
}

StatusCode KeyOp(RawConn& c, Opcode op, const Hash128& key) {
  auto r = c.Call(op, {}, {}, key);
  REQUIRE_OK(r);
  return r->status();
}

protocol::Tier Has(RawConn& c, const Hash128& key) {
  protocol::HasRequest req;
  req.keys = {key};
  auto r = c.Call(Opcode::kHas, protocol::Encode(req));
  REQUIRE_OK(r);
  REQUIRE(r->status() == StatusCode::kOk);
  auto reply = protocol::Decode<protocol::HasReply>(r->body);
  REQUIRE_OK(reply);
  return reply->tiers.at(0);
}

std::vector<protocol::ListEntry> List(RawConn& c, const std::string& ns = "") {
  protocol::ListRequest req;
  req.limit = 1000;
  req.name_space = ns;
  auto r = c.Call(Opcode::kList, protocol::Encode(req));
  REQUIRE_OK(r);
  REQUIRE(r->status() == StatusCode::kOk);
  auto reply = protocol::Decode<protocol::ListReply>(r->body);
  REQUIRE_OK(reply);
  return reply->entries;
}

bool Listed(const std::vector<protocol::ListEntry>& entries, const Hash128& key) {
  return std::any_of(entries.begin(), entries.end(),
                     [&](const protocol::ListEntry& e) { return e.key == key; });
}

uint64_t Evicted(RawConn& c, protocol::EvictRequest req) {
  auto r = c.Call(Opcode::kEvict, protocol::Encode(req));
  REQUIRE_OK(r);
  REQUIRE(r->status() == StatusCode::kOk);
  auto reply = protocol::Decode<protocol::EvictReply>(r->body);
  REQUIRE_OK(reply);
  return reply->entries;
}

std::vector<uint32_t> Tokens(uint32_t n, uint32_t from) {
  std::vector<uint32_t> t(n);
  for (uint32_t i = 0; i < n; ++i) t[i] = (from + 7 * i) % 250 + 1;
  return t;
}

ReplyFrame Prefill(RawConn& c, const std::string& ns, std::vector<uint32_t> tokens) {
  protocol::PrefillRequest req;
  req.name_space = ns;
  req.segments = {std::move(tokens)};
  auto r = c.Call(Opcode::kPrefill, protocol::Encode(req), {}, {}, 60s);
  REQUIRE_OK(r);
  return std::move(r).value();
}

TEST_CASE("a tenant cannot reach another tenant's entries") {
  DaemonOptions opts;
  opts.config_toml = kTenants;
  auto d = Daemon::Start(opts);
  REQUIRE_OK(d);
  RawConn alpha = Connect(**d, "alpha-token");
  RawConn beta = Connect(**d, "beta-token");

  // alpha's entries: one PUT, one computed (its PREFILL names no namespace: it gets its own).
  Entry put = MakeEntry(1, 64 << 10, "alpha");
  REQUIRE(Put(alpha, put) == StatusCode::kOk);
  ReplyFrame prefilled = Prefill(alpha, "", Tokens(40, 3));
  REQUIRE_MESSAGE(prefilled.status() == StatusCode::kOk, prefilled.text());
  auto pr = protocol::Decode<protocol::PrefillReply>(prefilled.body);
  REQUIRE_OK(pr);
  const Hash128 computed = pr->results.at(0).key;
  // The entry is alpha's: its namespace came from the token.
  auto got = alpha.Call(Opcode::kGet, {}, {}, computed);
  REQUIRE_OK(got);
  REQUIRE(got->status() == StatusCode::kOk);
  auto info = storage::ReadEntryInfo(got->body);
  REQUIRE_OK(info);
  CHECK(info->name_space == "alpha");

  for (const Hash128& key : {put.key, computed}) {
    CAPTURE(key.ToHex());
    CHECK(Has(alpha, key) != protocol::Tier::kNone);
    // beta sees nothing: every key-addressed operation answers as for an absent key.
    CHECK(Has(beta, key) == protocol::Tier::kNone);
    CHECK(KeyOp(beta, Opcode::kGet, key) == StatusCode::kNotFound);
    CHECK(KeyOp(beta, Opcode::kDel, key) == StatusCode::kNotFound);
    CHECK(KeyOp(beta, Opcode::kPin, key) == StatusCode::kNotFound);
    CHECK(KeyOp(beta, Opcode::kUnpin, key) == StatusCode::kNotFound);
    CHECK(KeyOp(beta, Opcode::kVerify, key) == StatusCode::kNotFound);
    CHECK_FALSE(Listed(List(beta), key));
    CHECK_FALSE(Listed(List(beta, "alpha"), key));
    CHECK(Listed(List(alpha), key));
  }
  // COMPOSE naming alpha's entry by key: NOT_FOUND for beta, a hit for alpha.
  protocol::ComposeRequest compose;
  compose.mode = protocol::ComposeMode::kHypic;
  compose.top_k = 1;
  protocol::ComposePart by_key, question;
  by_key.kind = protocol::PartKind::kSegmentKey;
  by_key.key = computed;
  question.kind = protocol::PartKind::kRaw;
  question.tokens = Tokens(4, 9);
  compose.parts = {by_key, question};
  auto refused = beta.Call(Opcode::kCompose, protocol::Encode(compose), {}, {}, 60s);
  REQUIRE_OK(refused);
  CHECK(refused->status() == StatusCode::kNotFound);
  auto composed = alpha.Call(Opcode::kCompose, protocol::Encode(compose), {}, {}, 60s);
  REQUIRE_OK(composed);
  CHECK_MESSAGE(composed->status() == StatusCode::kOk, composed->text());
  // Naming another namespace in a compute request is refused, not silently rebound.
  CHECK(Prefill(beta, "alpha", Tokens(40, 3)).status() == StatusCode::kUnauthorized);
  // beta's EVICTs never touch alpha's entries.
  protocol::EvictRequest by_ns;
  by_ns.by = protocol::EvictBy::kNamespace;
  by_ns.name_space = "alpha";
  CHECK(Evicted(beta, by_ns) == 0);
  protocol::EvictRequest all;
  all.by = protocol::EvictBy::kAll;
  Evicted(beta, all);
  CHECK(Has(alpha, put.key) != protocol::Tier::kNone);
  CHECK(Has(alpha, computed) != protocol::Tier::kNone);
  // beta cannot plant an entry in alpha's namespace either.
  CHECK(Put(beta, MakeEntry(2, 64 << 10, "alpha")) == StatusCode::kUnauthorized);

  // Permissions: alpha's reader reads alpha's entries and does nothing else.
  RawConn reader = Connect(**d, "reader-token");
  CHECK(KeyOp(reader, Opcode::kGet, put.key) == StatusCode::kOk);
  CHECK(Put(reader, MakeEntry(3, 64 << 10, "alpha")) == StatusCode::kUnauthorized);
  CHECK(KeyOp(reader, Opcode::kDel, put.key) == StatusCode::kUnauthorized);
  CHECK(Prefill(reader, "", Tokens(40, 5)).status() == StatusCode::kUnauthorized);
  CHECK(KeyOp(reader, Opcode::kPin, put.key) == StatusCode::kUnauthorized);

  // The admin token alone: admin operations over every namespace, no data access.
  RawConn admin = Connect(**d, "", "root-admin");
  CHECK(KeyOp(admin, Opcode::kGet, put.key) == StatusCode::kUnauthorized);
  CHECK(Listed(List(admin), put.key));
  CHECK(KeyOp(admin, Opcode::kPin, put.key) == StatusCode::kOk);
  CHECK(KeyOp(admin, Opcode::kUnpin, put.key) == StatusCode::kOk);
  // alpha deletes its own entry.
  CHECK(KeyOp(alpha, Opcode::kDel, put.key) == StatusCode::kOk);
  CHECK((*d)->Stop(SIGTERM) == 0);
}

TEST_CASE("no poisoning: PUT needs write, and never changes a stored entry") {
  {  // The default tenant (no tokens configured) may read and compute, not write.
    auto d = Daemon::Start();
    REQUIRE_OK(d);
    auto conn = RawConn::TcpHello((*d)->port());
    REQUIRE_OK(conn);
    CHECK(Put(*conn, MakeEntry(1, 64 << 10, "default")) == StatusCode::kUnauthorized);
    CHECK(KeyOp(*conn, Opcode::kDel, Hash128{1, 2}) == StatusCode::kUnauthorized);
    CHECK((*d)->Stop(SIGTERM) == 0);
  }
  DaemonOptions opts;
  opts.config_toml = kTenants;
  auto d = Daemon::Start(opts);
  REQUIRE_OK(d);
  RawConn alpha = Connect(**d, "alpha-token");
  RawConn reader = Connect(**d, "reader-token");
  // Same seed, other size: the same key (namespace, model, settings, tokens), other tensors.
  Entry first = MakeEntry(7, 64 << 10, "alpha");
  Entry second = MakeEntry(7, 96 << 10, "alpha");
  REQUIRE(first.key == second.key);
  REQUIRE(first.bytes->size() != second.bytes->size());
  REQUIRE(Put(alpha, first) == StatusCode::kOk);
  // The second writer, with a pin and a TTL: accepted, and nothing changes.
  CHECK(Put(alpha, second, protocol::PutOptions{1, true}) == StatusCode::kOk);
  auto got = reader.Call(Opcode::kGet, {}, {}, first.key);
  REQUIRE_OK(got);
  REQUIRE(got->status() == StatusCode::kOk);
  CHECK(got->body.size() == first.bytes->size());
  CHECK(std::equal(got->body.begin(), got->body.end(), first.bytes->data()));
  auto entries = List(alpha);
  auto it = std::find_if(entries.begin(), entries.end(),
                         [&](const protocol::ListEntry& e) { return e.key == first.key; });
  REQUIRE(it != entries.end());
  CHECK(it->pins == 0);
  CHECK(it->ttl_s == 0);
  // A pin rides on no PUT without the admin grant (PIN is admin-only).
  RawConn small = Connect(**d, "small-token");
  CHECK(Put(small, MakeEntry(8, 16 << 10, "small"), protocol::PutOptions{0, true}) ==
        StatusCode::kUnauthorized);
  CHECK((*d)->Stop(SIGTERM) == 0);
}

TEST_CASE("a PUT without write is refused at its header, before its body is buffered") {
  DaemonOptions opts;
  opts.config_toml = kTenants;
  auto d = Daemon::Start(opts);
  REQUIRE_OK(d);
  RawConn reader = Connect(**d, "reader-token");
  {  // A declared 200 MiB body, none of it sent: the refusal comes from the header alone.
    protocol::FrameHeader h;
    h.opcode = Opcode::kPut;
    h.request_id = reader.next_id();
    h.key = Hash128{3, 4};
    h.checksum_kind = protocol::ChecksumKind::kXxh3_64;
    h.body_len = uint64_t{200} << 20;
    std::array<std::byte, protocol::kHeaderSize> header;
    protocol::EncodeHeader(h, header.data());
    REQUIRE_OK(reader.Send(header));
    auto r = reader.Read(10s);
    REQUIRE_OK(r);
    CHECK(r->header.request_id == h.request_id);
    CHECK(r->status() == StatusCode::kUnauthorized);
    CHECK(r->text().find("'write'") != std::string::npos);
  }
  // The stream stays in sync: a refused 1 MiB body sent after its refusal is discarded, and the
  // next request on the connection is answered.
  RawConn reader2 = Connect(**d, "reader-token");
  Entry e = MakeEntry(11, 1 << 20, "alpha");
  protocol::FrameHeader h;
  h.opcode = Opcode::kPut;
  h.request_id = reader2.next_id();
  h.key = e.key;
  auto header = protocol::MakeHeader(h, {}, e.bytes->span());
  REQUIRE_OK(header);
  REQUIRE_OK(reader2.Send(*header));
  auto refused = reader2.Read(10s);
  REQUIRE_OK(refused);
  CHECK(refused->header.request_id == h.request_id);
  CHECK(refused->status() == StatusCode::kUnauthorized);
  REQUIRE_OK(reader2.Send(e.bytes->span()));
  auto ping = reader2.Call(Opcode::kPing, AsBytes("still here"));
  REQUIRE_OK(ping);
  CHECK(ping->status() == StatusCode::kOk);
  CHECK(ping->text() == "still here");
  // Nothing was stored, and nothing is held for the refused bodies.
  RawConn alpha = Connect(**d, "alpha-token");
  CHECK(KeyOp(alpha, Opcode::kGet, e.key) == StatusCode::kNotFound);
  const std::string metrics = HttpGet((*d)->metrics_port(), "/metrics");
  CHECK(metrics.find("\nhypic_pending_request_bytes 0\n") != std::string::npos);
  CHECK((*d)->Stop(SIGTERM) == 0);
}

TEST_CASE("quotas: bytes in the store and compute in flight") {
  DaemonOptions opts;
  opts.config_toml = kTenants;
  auto d = Daemon::Start(opts);
  REQUIRE_OK(d);
  RawConn small = Connect(**d, "small-token");
  Entry a = MakeEntry(11, 64 << 10, "small"), b = MakeEntry(12, 64 << 10, "small");
  Entry c = MakeEntry(13, 64 << 10, "small");
  // Two fit the tenant's max_bytes (160 KiB), three do not.
  REQUIRE(a.bytes->size() + b.bytes->size() <= 160 << 10);
  REQUIRE(a.bytes->size() + b.bytes->size() + c.bytes->size() > 160 << 10);
  CHECK(Put(small, a) == StatusCode::kOk);
  CHECK(Put(small, b) == StatusCode::kOk);
  CHECK(Put(small, c) == StatusCode::kQuotaExceeded);  // 3 x 64 KiB > 160 KiB
  CHECK(Put(small, a) == StatusCode::kOk);             // already stored: nothing added
  CHECK(KeyOp(small, Opcode::kDel, a.key) == StatusCode::kOk);
  CHECK(Put(small, c) == StatusCode::kOk);  // room again

  // beta may have one compute request in flight: a long PREFILL, then one behind it at once.
  RawConn beta = Connect(**d, "beta-token");
  protocol::PrefillRequest slow, quick;
  slow.segments = {Tokens(2000, 1)};
  quick.segments = {Tokens(40, 2)};
  protocol::FrameHeader h;
  h.opcode = Opcode::kPrefill;
  h.request_id = 100;
  REQUIRE_OK(beta.SendFrame(h, {}, protocol::Encode(slow)));
  h.request_id = 101;
  REQUIRE_OK(beta.SendFrame(h, {}, protocol::Encode(quick)));
  StatusCode slow_status = StatusCode::kInternal, quick_status = StatusCode::kInternal;
  for (int i = 0; i < 2; ++i) {
    auto r = beta.Read(60s);
    REQUIRE_OK(r);
    (r->header.request_id == 100 ? slow_status : quick_status) = r->status();
  }
  CHECK(slow_status == StatusCode::kOk);
  CHECK(quick_status == StatusCode::kQuotaExceeded);
  // The slot is back once the first one is answered.
  CHECK(Prefill(beta, "", Tokens(40, 2)).status() == StatusCode::kOk);

  const std::string metrics = HttpGet((*d)->metrics_port(), "/metrics");
  CHECK(metrics.find("hypic_quota_refusals_total{quota=\"bytes\",tenant=\"small\"} 1") !=
        std::string::npos);
  CHECK(metrics.find("hypic_quota_refusals_total{quota=\"compute_inflight\",tenant=\"beta\"} 1") !=
        std::string::npos);
  CHECK((*d)->Stop(SIGTERM) == 0);
}

TEST_CASE("admin: over TCP only with a token, over the unix socket to the daemon's own uid") {
  auto d = Daemon::Start();
  REQUIRE_OK(d);
  auto tcp = RawConn::TcpHello((*d)->port());
  REQUIRE_OK(tcp);
  for (Opcode op : {Opcode::kStats, Opcode::kConfig, Opcode::kFlush}) {
    CHECK(tcp->Call(op)->status() == StatusCode::kUnauthorized);
  }
  auto unix = RawConn::Unix((*d)->unix_path());
  REQUIRE_OK(unix);
  auto hello = unix->Hello();
  REQUIRE_OK(hello);
  CHECK(hello->admin);  // this test runs as the daemon's user
  CHECK(unix->Call(Opcode::kStats)->status() == StatusCode::kOk);
  CHECK(unix->Call(Opcode::kShutdown)->status() == StatusCode::kOk);
  CHECK((*d)->WaitExit(15s) == 0);
}

TEST_CASE("metrics_token: /metrics needs the bearer token, the probes stay open") {
  DaemonOptions opts;
  opts.args = {"--metrics-token", "scrape-secret"};
  auto d = Daemon::Start(opts);
  REQUIRE_OK(d);
  const uint16_t port = (*d)->metrics_port();
  CHECK(HttpGet(port, "/metrics").rfind("HTTP/1.1 401", 0) == 0);
  CHECK(HttpGet(port, "/metrics", "Authorization: Bearer wrong\r\n").rfind("HTTP/1.1 401", 0) == 0);
  CHECK(HttpGet(port, "/metrics", "authorization: Bearer scrape-secret\r\n")
            .rfind("HTTP/1.1 200", 0) == 0);
  CHECK(HttpGet(port, "/healthz").rfind("HTTP/1.1 200", 0) == 0);
  CHECK(HttpGet(port, "/readyz").rfind("HTTP/1.1 200", 0) == 0);
  CHECK((*d)->Stop(SIGTERM) == 0);
}

}  // namespace
}  // namespace hypic::e2e
