// End to end against the real hypicd: the entry_dtype key. A daemon prefills its entries in the
// configured precision under keys that fold it in, so two daemons of different precision never
// find each other's entries by tokens, and a daemon refuses a less precise entry named by key.
#include <doctest/doctest.h>
#include <signal.h>

#include "storage/entry_format.h"
#include "tests/e2e/daemon.h"
#include "tests/support/check_ok.h"

namespace hypic::e2e {
namespace {

using protocol::Opcode;

struct Prefilled {
  Hash128 key;
  std::shared_ptr<const HostBuffer> bytes;  // the stored entry, from GET
};

Prefilled Prefill(RawConn& conn, const std::vector<uint32_t>& tokens) {
  protocol::PrefillRequest req;
  req.name_space = "docs";
  req.segments = {tokens};
  auto r = conn.Call(Opcode::kPrefill, protocol::Encode(req), {}, {}, 60s);
  REQUIRE_OK(r);
  REQUIRE_MESSAGE(r->status() == StatusCode::kOk, r->text());
  auto reply = protocol::Decode<protocol::PrefillReply>(r->body);
  REQUIRE_OK(reply);
  REQUIRE(reply->results.size() == 1);
  auto got = conn.Call(Opcode::kGet, {}, {}, reply->results[0].key);
  REQUIRE_OK(got);
  REQUIRE(got->status() == StatusCode::kOk);
  auto bytes = HostBuffer::CopyOf(got->body);
  REQUIRE_OK(bytes);
  return {reply->results[0].key, std::make_shared<const HostBuffer>(std::move(bytes).value())};
}

TEST_CASE(
    "entry_dtype: entries in the daemon's precision, keys apart, a less precise one refused") {
  std::vector<uint32_t> seg, question;
  for (uint32_t i = 0; i < 40; ++i) seg.push_back(10 + i);
  for (uint32_t i = 0; i < 5; ++i) question.push_back(7 + i);

  DaemonOptions low_options, high_options;
  low_options.args = {"--entry-dtype", "bf16,t=f32"};
  high_options.args = {"--entry-dtype", "f32"};
  high_options.config_toml = kLocalWriterTenant;  // this test PUTs an entry
  auto low = Daemon::Start(low_options);
  REQUIRE_OK(low);
  auto low_conn = RawConn::Tcp((*low)->port());
  REQUIRE_OK(low_conn);
  REQUIRE_OK(low_conn->Hello());
  const Prefilled bf16 = Prefill(*low_conn, seg);
  auto parsed = storage::Parse(bf16.bytes);
  REQUIRE_OK(parsed);
  const EntryDTypes want{DType::kF32, DType::kBF16, DType::kBF16, DType::kBF16};
  CHECK((*parsed)->meta().settings.entry_dtypes == want);
  for (const EntryTensor& t : (*parsed)->tensors()) {
    CHECK(t.view.dtype() == (t.kind == TensorKind::kTransition ? DType::kF32 : DType::kBF16));
  }

  auto high = Daemon::Start(high_options);
  REQUIRE_OK(high);
  auto conn = RawConn::Tcp((*high)->port());
  REQUIRE_OK(conn);
  REQUIRE_OK(conn->Hello());
  const Prefilled f32 = Prefill(*conn, seg);
  CHECK(f32.key != bf16.key);
  auto f32_parsed = storage::Parse(f32.bytes);
  REQUIRE_OK(f32_parsed);
  CHECK((*f32_parsed)->meta().settings.entry_dtypes.AllF32());

  // The bf16 entry stored in the f32 daemon: a lookup by tokens still finds the f32 entry, and
  // naming the bf16 one by key is refused.
  auto put = conn->Call(Opcode::kPut, bf16.bytes->span(), {}, bf16.key);
  REQUIRE_OK(put);
  REQUIRE_MESSAGE(put->status() == StatusCode::kOk, put->text());
  auto compose = [&](bool by_key) {
    protocol::ComposeRequest req;
    req.name_space = "docs";
    req.mode = protocol::ComposeMode::kHypic;
    req.top_k = 1;
    protocol::ComposePart p, q;
    if (by_key) {
      p.kind = protocol::PartKind::kSegmentKey;
      p.key = bf16.key;
    } else {
      p.tokens = seg;
    }
    q.kind = protocol::PartKind::kRaw;
    q.tokens = question;
    req.parts = {p, q};
    auto r = conn->Call(Opcode::kCompose, protocol::Encode(req), {}, {}, 60s);
    REQUIRE_OK(r);
    return std::move(r).value();
  };
  auto by_tokens = compose(/*by_key=*/false);
  REQUIRE_MESSAGE(by_tokens.status() == StatusCode::kOk, by_tokens.text());
  auto reply = protocol::Decode<protocol::ComposeReply>(by_tokens.body);
  REQUIRE_OK(reply);
  REQUIRE(reply->parts.size() == 2);
  CHECK(reply->parts[0].outcome == protocol::PartOutcome::kHit);
  CHECK(reply->parts[0].key == f32.key);
  auto by_key = compose(/*by_key=*/true);
  CHECK(by_key.status() == StatusCode::kBadRequest);
  CHECK_MESSAGE(by_key.text().find("less precise") != std::string::npos, by_key.text());

  CHECK((*high)->Stop(SIGTERM) == 0);
  CHECK((*low)->Stop(SIGTERM) == 0);
}

}  // namespace
}  // namespace hypic::e2e
