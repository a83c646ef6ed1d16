// End to end against the real hypicd: every store operation (PUT, HAS, GET, DEL, PIN/UNPIN,
// EVICT, LIST, VERIFY, FLUSH, STATS) and the compute operations (PREFILL, COMPOSE) on the tiny
// built-in model, plus pipelined GETs of large entries.
#include <doctest/doctest.h>
#include <signal.h>

#include <nlohmann/json.hpp>

#include "storage/entry_format.h"
#include "storage/synthetic_entry.h"
#include "tests/e2e/daemon.h"
#include "tests/e2e/synthetic_wire_entry.h"
#include "tests/support/check_ok.h"

namespace hypic::e2e {
namespace {

using protocol::Opcode;

Result<ReplyFrame> Put(RawConn& c, const Entry& e, protocol::PutOptions opts = {}) {
  auto ext = protocol::Encode(opts);
  return c.Call(Opcode::kPut, e.bytes->span(), ext, e.key);
}

std::vector<protocol::Tier> Has(RawConn& c, const std::vector<Hash128>& keys) {
  protocol::HasRequest req;
  req.keys = keys;
  auto r = c.Call(Opcode::kHas, protocol::Encode(req));
  REQUIRE_OK(r);
  REQUIRE(r->status() == StatusCode::kOk);
  auto reply = protocol::Decode<protocol::HasReply>(r->body);
  REQUIRE_OK(reply);
  return reply->tiers;
}

TEST_CASE("store operations end to end") {
  // PUT and DEL need `write`; the admin operations need the unix socket (own uid).
  DaemonOptions opts;
  opts.config_toml = kLocalWriterTenant;
  auto d = Daemon::Start(opts);
  REQUIRE_OK(d);
  auto conn = RawConn::UnixHello((*d)->unix_path());
  REQUIRE_OK(conn);

  Entry a = MakeEntry(1, 1 << 20), b = MakeEntry(2, 300 << 10, "tenant-b"),
        c = MakeEntry(3, 64 << 10);
  for (const Entry* e : {&a, &b, &c}) {
    auto r = Put(*conn, *e);
    REQUIRE_OK(r);
    CHECK_MESSAGE(r->status() == StatusCode::kOk, r->text());
  }
  Entry missing = MakeEntry(4, 4096);
  auto tiers = Has(*conn, {a.key, missing.key, b.key, c.key});
  CHECK(tiers == std::vector<protocol::Tier>{protocol::Tier::kHost, protocol::Tier::kNone,
                                             protocol::Tier::kHost, protocol::Tier::kHost});

  // GET returns the stored bytes unchanged, with the tier in ext.
  auto got = conn->Call(Opcode::kGet, {}, {}, a.key);
  REQUIRE_OK(got);
  REQUIRE(got->status() == StatusCode::kOk);
  CHECK(got->body.size() == a.bytes->size());
  CHECK(std::equal(got->body.begin(), got->body.end(), a.bytes->data()));
  auto info = protocol::Decode<protocol::GetInfo>(got->ext);
  REQUIRE_OK(info);
  CHECK(info->tier == protocol::Tier::kHost);
  auto miss = conn->Call(Opcode::kGet, {}, {}, missing.key);
  REQUIRE_OK(miss);
  CHECK(miss->status() == StatusCode::kNotFound);

  // PUT that lies: a header key that is not the entry's, and a corrupted entry.
  auto wrong_key = conn->Call(Opcode::kPut, a.bytes->span(), {}, b.key);
  REQUIRE_OK(wrong_key);
  CHECK(wrong_key->status() == StatusCode::kBadRequest);
  protocol::Bytes corrupt(a.bytes->span().begin(), a.bytes->span().end());
  corrupt[corrupt.size() / 2] ^= std::byte{0x40};
  auto bad = conn->Call(Opcode::kPut, corrupt, {}, a.key);
  REQUIRE_OK(bad);
  CHECK((bad->status() == StatusCode::kBadChecksum || bad->status() == StatusCode::kCorruption));

  // Pipelined GETs of a 1 MiB entry: every reply complete and matched by id.
  for (int i = 0; i < 16; ++i) {
    protocol::FrameHeader h;
    h.opcode = Opcode::kGet;
    h.request_id = 500 + i;
    h.key = a.key;
    REQUIRE_OK(conn->SendFrame(h));
  }
  for (int i = 0; i < 16; ++i) {
    auto r = conn->Read();
    REQUIRE_OK(r);
    CHECK(r->header.request_id >= 500);
    CHECK(r->body.size() == a.bytes->size());
  }

  // PIN blocks DEL and EVICT; UNPIN releases.
  auto pin = conn->Call(Opcode::kPin, {}, {}, c.key);
  REQUIRE_OK(pin);
  CHECK(pin->status() == StatusCode::kOk);
  auto del_pinned = conn->Call(Opcode::kDel, {}, {}, c.key);
  REQUIRE_OK(del_pinned);
  CHECK(del_pinned->status() != StatusCode::kOk);
  CHECK(conn->Call(Opcode::kUnpin, {}, {}, c.key)->status() == StatusCode::kOk);
  CHECK(conn->Call(Opcode::kDel, {}, {}, c.key)->status() == StatusCode::kOk);
  CHECK(conn->Call(Opcode::kDel, {}, {}, c.key)->status() == StatusCode::kNotFound);
  CHECK(conn->Call(Opcode::kPin, {}, {}, c.key)->status() == StatusCode::kNotFound);

  // LIST (paginated) and VERIFY see the two remaining entries.
  protocol::ListRequest list;
  list.limit = 1;
  auto page1 = conn->Call(Opcode::kList, protocol::Encode(list));
  REQUIRE_OK(page1);
  auto l1 = protocol::Decode<protocol::ListReply>(page1->body);
  REQUIRE_OK(l1);
  REQUIRE(l1->entries.size() == 1);
  CHECK(l1->next_cursor != 0);
  list.cursor = l1->next_cursor;
  auto l2 = protocol::Decode<protocol::ListReply>(
      conn->Call(Opcode::kList, protocol::Encode(list))->body);
  REQUIRE_OK(l2);
  REQUIRE(l2->entries.size() == 1);
  CHECK(l2->next_cursor == 0);
  CHECK(l1->entries[0].key != l2->entries[0].key);
  auto verify = conn->Call(Opcode::kVerify);
  REQUIRE_OK(verify);
  auto v = protocol::Decode<protocol::VerifyReply>(verify->body);
  REQUIRE_OK(v);
  CHECK(v->checked == 2);
  CHECK(v->bad == 0);

  // EVICT by namespace drops only tenant-b; FLUSH writes the rest to the SSD tier.
  protocol::EvictRequest evict;
  evict.by = protocol::EvictBy::kNamespace;
  evict.name_space = "tenant-b";
  auto ev = conn->Call(Opcode::kEvict, protocol::Encode(evict));
  REQUIRE_OK(ev);
  auto er = protocol::Decode<protocol::EvictReply>(ev->body);
  REQUIRE_OK(er);
  CHECK(er->entries >= 1);
  CHECK(Has(*conn, {a.key, b.key}) ==
        std::vector<protocol::Tier>{protocol::Tier::kHost, protocol::Tier::kNone});
  CHECK(conn->Call(Opcode::kFlush)->status() == StatusCode::kOk);

  auto stats = conn->Call(Opcode::kStats);
  REQUIRE_OK(stats);
  auto j = nlohmann::json::parse(stats->text());
  bool saw_ssd = false;
  for (const auto& t : j["tiers"]) {
    if (t["tier"] == "host") CHECK(t["hits"].get<uint64_t>() >= 17);
    if (t["tier"] == "ssd") saw_ssd = t["entries"].get<uint64_t>() >= 1;
  }
  CHECK(saw_ssd);
  CHECK((*d)->Stop(SIGTERM) == 0);
}

TEST_CASE("PREFILL and COMPOSE on the tiny built-in model") {
  auto d = Daemon::Start();
  REQUIRE_OK(d);
  auto conn = RawConn::Tcp((*d)->port());
  REQUIRE_OK(conn);
  auto hello = conn->Hello();
  REQUIRE_OK(hello);
  CHECK_FALSE(hello->model_fingerprint.IsZero());

  std::vector<uint32_t> seg1, seg2, question;
  for (uint32_t i = 0; i < 40; ++i) seg1.push_back(10 + i);
  for (uint32_t i = 0; i < 24; ++i) seg2.push_back(200 + 3 * i);
  for (uint32_t i = 0; i < 5; ++i) question.push_back(7 + i);

  protocol::PrefillRequest prefill;
  prefill.name_space = "docs";
  prefill.segments = {seg1};
  auto p = conn->Call(Opcode::kPrefill, protocol::Encode(prefill), {}, {}, 60s);
  REQUIRE_OK(p);
  REQUIRE_MESSAGE(p->status() == StatusCode::kOk, p->text());
  auto pr = protocol::Decode<protocol::PrefillReply>(p->body);
  REQUIRE_OK(pr);
  REQUIRE(pr->results.size() == 1);
  CHECK_FALSE(pr->results[0].was_cached);
  CHECK(pr->results[0].n_tokens == seg1.size());
  CHECK(pr->results[0].bytes > 0);
  // The key is retrievable with GET.
  auto got = conn->Call(Opcode::kGet, {}, {}, pr->results[0].key);
  REQUIRE_OK(got);
  CHECK(got->status() == StatusCode::kOk);
  CHECK(got->body.size() == pr->results[0].bytes);

  auto compose = [&](protocol::ComposeMode mode, bool by_key) {
    protocol::ComposeRequest req;
    req.name_space = "docs";
    req.mode = mode;
    req.top_k = 5;
    req.return_state = mode == protocol::ComposeMode::kHypic;
    protocol::ComposePart p1, p2, q;
    if (by_key) {
      p1.kind = protocol::PartKind::kSegmentKey;
      p1.key = pr->results[0].key;
    } else {
      p1.tokens = seg1;
    }
    p2.tokens = seg2;
    q.kind = protocol::PartKind::kRaw;
    q.tokens = question;
    req.parts = {p1, p2, q};
    auto r = conn->Call(Opcode::kCompose, protocol::Encode(req), {}, {}, 60s);
    REQUIRE_OK(r);
    REQUIRE_MESSAGE(r->status() == StatusCode::kOk, r->text());
    auto reply = protocol::Decode<protocol::ComposeReply>(r->body);
    REQUIRE_OK(reply);
    return std::move(reply).value();
  };
  auto hypic = compose(protocol::ComposeMode::kHypic, /*by_key=*/true);
  REQUIRE(hypic.parts.size() == 3);
  CHECK(hypic.parts[0].outcome == protocol::PartOutcome::kHit);
  CHECK(hypic.parts[1].outcome == protocol::PartOutcome::kMiss);
  CHECK(hypic.parts[2].outcome == protocol::PartOutcome::kLive);
  CHECK(hypic.n_tokens == seg1.size() + seg2.size() + question.size());
  REQUIRE(hypic.top.size() == 5);
  for (size_t i = 1; i < hypic.top.size(); ++i) CHECK(hypic.top[i - 1].logit >= hypic.top[i].logit);
  REQUIRE(hypic.has_state);
  auto tensors = protocol::DecodeTensorStream(hypic.state);
  REQUIRE_OK(tensors);
  CHECK_FALSE(tensors->empty());

  // The second time both segments hit; the logits are the same computation.
  auto again = compose(protocol::ComposeMode::kHypic, /*by_key=*/false);
  CHECK(again.parts[0].outcome == protocol::PartOutcome::kHit);
  CHECK(again.parts[1].outcome == protocol::PartOutcome::kHit);
  CHECK(again.top == hypic.top);

  // The full recompute agrees with HYPIC on the top token (tiny model, short segments).
  auto full = compose(protocol::ComposeMode::kFull, /*by_key=*/false);
  REQUIRE_FALSE(full.top.empty());
  CHECK(full.top[0].token == hypic.top[0].token);

  // A segment named by an unknown key is NOT_FOUND.
  protocol::ComposeRequest unknown;
  protocol::ComposePart part;
  part.kind = protocol::PartKind::kSegmentKey;
  part.key = Hash128{1, 2};
  unknown.parts = {part};
  auto nf = conn->Call(Opcode::kCompose, protocol::Encode(unknown));
  REQUIRE_OK(nf);
  CHECK(nf->status() == StatusCode::kNotFound);
  CHECK((*d)->Stop(SIGTERM) == 0);
}

}  // namespace
}  // namespace hypic::e2e
