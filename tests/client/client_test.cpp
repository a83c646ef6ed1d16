// The C++ client against a scripted peer (FakeServer): HELLO, typed operations, pipelining
// with out-of-order replies, chunked replies (small and large), state-first COMPOSE streams,
// error statuses, GOAWAY, corrupt frames and the in-flight limit. The tests against the real
// hypicd are in client_e2e_test.cpp.
#include "client/client.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <cstring>

#include "tests/client/fake_server.h"
#include "tests/support/check_ok.h"
#include "tests/support/seeded_rng.h"

namespace hypic::client {
namespace {

using fake::FakeServer;
using fake::ReplyTo;
using protocol::Frame;
using protocol::Opcode;

protocol::HelloReply DefaultHello(uint32_t max_inflight = 0) {
  protocol::HelloReply h;
  h.features = protocol::kFeatureXxh3 | protocol::kFeatureChunked;
  h.server_version = "fake 1";
  h.model_fingerprint = Hash128{1, 2};
  h.model_name = "fake";
  h.seam_w = 8;
  h.format_version = 1;
  h.limits.max_frame_body = 1 << 20;
  h.limits.max_inflight_requests = max_inflight;
  return h;
}

std::unique_ptr<Client> ConnectTo(const FakeServer& s,
                                  protocol::ChecksumKind kind = protocol::ChecksumKind::kXxh3_64) {
  ClientOptions o;
  o.address = s.address();
  o.io_timeout_ms = 5000;
  o.checksum = kind;
  auto c = Client::Connect(o);
  REQUIRE_OK(c);
  return std::move(c).value();
}

// Answers PING by echo and typed requests with replies derived from the request, so the test
// sees that the request was encoded and the reply decoded correctly.
void EchoHandler(const Frame* f, const FakeServer::Send& send) {
  if (f == nullptr) return;
  const auto& h = f->header;
  switch (h.opcode) {
    case Opcode::kPing: send(ByteSpan(ReplyTo(h, f->body))); break;
    case Opcode::kHas: {
      auto req = protocol::Decode<protocol::HasRequest>(f->body).value();
      protocol::HasReply rep;
      for (const auto& k : req.keys) rep.tiers.push_back(static_cast<protocol::Tier>(k.lo % 4));
      send(ByteSpan(ReplyTo(h, ByteSpan(protocol::Encode(rep)))));
      break;
    }
    case Opcode::kCompose: {
      auto req = protocol::Decode<protocol::ComposeRequest>(f->body).value();
      protocol::ComposeReply rep;
      for (const auto& p : req.parts) {
        rep.parts.push_back({p.kind == protocol::PartKind::kRaw ? protocol::PartOutcome::kLive
                                                                : protocol::PartOutcome::kHit,
                             protocol::Tier::kHost, static_cast<uint32_t>(p.tokens.size()), p.key});
        rep.n_tokens += static_cast<uint32_t>(p.tokens.size());
      }
      for (uint32_t i = 0; i < req.top_k; ++i) rep.top.push_back({i, 10.0f - i});
      send(ByteSpan(ReplyTo(h, ByteSpan(protocol::Encode(rep)))));
      break;
    }
    case Opcode::kDel:
      send(ByteSpan(protocol::EncodeErrorReply(h, NotFound("no entry with that key"))));
      break;
    default: send(ByteSpan(protocol::EncodeErrorReply(h, Unsupported("not in the fake")))); break;
  }
}

TEST_CASE("HELLO, PING and typed operations over unix and TCP, both checksum kinds") {
  for (bool tcp : {false, true}) {
    for (auto kind : {protocol::ChecksumKind::kXxh3_64, protocol::ChecksumKind::kCrc32}) {
      FakeServer server(tcp, DefaultHello(), EchoHandler);
      auto c = ConnectTo(server, kind);
      REQUIRE(c->hello_reply().has_value());
      CHECK(c->hello_reply()->server_version == "fake 1");
      CHECK(c->hello_reply()->version == protocol::kMaxVersion);
      CHECK(c->hello_reply()->admin);  // trusted peer, no admin token configured

      Bytes payload = {std::byte{1}, std::byte{2}, std::byte{3}};
      auto pong = c->Ping(ByteSpan(payload));
      REQUIRE_OK(pong);
      CHECK(*pong == payload);

      std::vector<Hash128> keys = {{5, 0}, {6, 0}, {7, 0}, {8, 0}};
      auto tiers = c->Has(keys);
      REQUIRE_OK(tiers);
      CHECK(*tiers == std::vector<protocol::Tier>{protocol::Tier::kHbm, protocol::Tier::kHost,
                                                  protocol::Tier::kSsd, protocol::Tier::kNone});

      protocol::ComposeRequest req;
      req.top_k = 3;
      req.parts = {{protocol::PartKind::kRaw, {}, {1, 2, 3}},
                   {protocol::PartKind::kSegmentKey, Hash128{9, 9}, {}},
                   {protocol::PartKind::kSegmentTokens, {}, {4, 5}}};
      auto rep = c->Compose(req);
      REQUIRE_OK(rep);
      CHECK(rep->n_tokens == 5);
      REQUIRE(rep->parts.size() == 3);
      CHECK(rep->parts[0].outcome == protocol::PartOutcome::kLive);
      CHECK(rep->parts[1].key == Hash128{9, 9});
      CHECK(rep->top.size() == 3);

      Status del = c->Del(Hash128{1, 1});
      CHECK(del.code() == StatusCode::kNotFound);
      CHECK(del.message() == "no entry with that key");
      // The connection is still usable after an error reply.
      CHECK_OK(c->Ping());
    }
  }
}

TEST_CASE("pipelined requests are matched to out-of-order replies by request_id") {
  std::vector<Bytes> held;
  FakeServer server(false, DefaultHello(), [&](const Frame* f, const FakeServer::Send& send) {
    if (f != nullptr) {
      held.push_back(ReplyTo(f->header, f->body));
      return;
    }
    // Idle: release everything held, newest first.
    std::reverse(held.begin(), held.end());
    for (const auto& r : held) send(ByteSpan(r));
    held.clear();
  });
  auto c = ConnectTo(server);
  std::vector<Pending<Bytes>> pending;
  for (uint8_t i = 0; i < 50; ++i) {
    Bytes payload(i + 1u, std::byte{i});
    auto p = c->SubmitPing(ByteSpan(payload));
    REQUIRE_OK(p);
    pending.push_back(*p);
  }
  CHECK(c->outstanding() == 50);
  for (uint8_t i = 0; i < 50; ++i) {
    auto r = pending[i].Wait();
    REQUIRE_OK(r);
    CHECK(*r == Bytes(i + 1u, std::byte{i}));
  }
  CHECK(c->outstanding() == 0);
  auto stale = c->Wait(pending[0].request_id());
  CHECK(stale.status().code() == StatusCode::kInternal);  // not in flight any more
}

TEST_CASE("chunked replies are reassembled, small and large") {
  hypic::testing::SeededRng rng(3);
  for (size_t total : {size_t{10}, size_t{3} << 20}) {
    Bytes entry(total);
    for (auto& b : entry) b = std::byte(rng.UniformInt(0, 255));
    FakeServer server(false, DefaultHello(), [&](const Frame* f, const FakeServer::Send& send) {
      if (f == nullptr) return;
      Bytes ext = protocol::Encode(protocol::GetInfo{protocol::Tier::kSsd});
      size_t chunk = std::max<size_t>(1, total / 5 + 1);
      for (size_t off = 0; off < total; off += chunk) {
        size_t n = std::min(chunk, total - off);
        bool last = off + n == total;
        send(ByteSpan(ReplyTo(f->header, ByteSpan(entry).subspan(off, n),
                              off == 0 ? ByteSpan(ext) : ByteSpan(),
                              protocol::kFlagReply | (last ? 0 : protocol::kFlagMore))));
      }
    });
    auto c = ConnectTo(server);
    auto g = c->Get(Hash128{3, 4});
    REQUIRE_OK(g);
    CHECK(g->tier == protocol::Tier::kSsd);
    CHECK(g->entry == entry);
  }
}

TEST_CASE("a large single-frame reply is read straight into its buffer and verified") {
  Bytes entry(2 << 20, std::byte{0x5a});
  FakeServer server(false, DefaultHello(), [&](const Frame* f, const FakeServer::Send& send) {
    if (f == nullptr) return;
    Bytes ext = protocol::Encode(protocol::GetInfo{protocol::Tier::kHost});
    send(ByteSpan(ReplyTo(f->header, ByteSpan(entry), ByteSpan(ext))));
  });
  auto c = ConnectTo(server);
  // Two in flight: the second reply starts while the first is still being read.
  auto a = c->SubmitGet(Hash128{1, 0});
  auto b = c->SubmitGet(Hash128{2, 0});
  REQUIRE_OK(a);
  REQUIRE_OK(b);
  auto rb = b->Wait();
  auto ra = a->Wait();
  REQUIRE_OK(ra);
  REQUIRE_OK(rb);
  CHECK(ra->entry == entry);
  CHECK(rb->entry == entry);
  CHECK(ra->tier == protocol::Tier::kHost);
}

TEST_CASE("a corrupt reply breaks the connection with a checksum error") {
  // Small replies go through the decoder (kCorruption); large ones are read straight into
  // their buffer and checked by the client itself (kBadChecksum).
  for (size_t size : {size_t{8}, size_t{1} << 20}) {
    FakeServer server(false, DefaultHello(), [&](const Frame* f, const FakeServer::Send& send) {
      if (f == nullptr) return;
      Bytes r = ReplyTo(f->header, f->body);
      r.back() ^= std::byte{1};
      send(ByteSpan(r));
    });
    auto c = ConnectTo(server);
    Bytes payload(size, std::byte{1});
    auto r = c->Ping(ByteSpan(payload));
    CHECK(r.status().code() == (size == 8 ? StatusCode::kCorruption : StatusCode::kBadChecksum));
    // The connection is unusable from then on.
    CHECK(c->Ping().status().code() == r.status().code());
  }
}

TEST_CASE("GOAWAY fails the outstanding and later requests with its status") {
  FakeServer server(false, DefaultHello(), [&](const Frame* f, const FakeServer::Send& send) {
    if (f == nullptr) return;
    send(ByteSpan(protocol::EncodeGoAway(Busy("draining for a test"))));
  });
  auto c = ConnectTo(server);
  auto p = c->SubmitPing({});
  REQUIRE_OK(p);
  auto r = p->Wait();
  CHECK(r.status().code() == StatusCode::kBusy);
  CHECK(r.status().message().find("draining for a test") != std::string::npos);
  CHECK(c->Ping().status().code() == StatusCode::kBusy);
}

TEST_CASE("the client keeps at most the server's max_inflight_requests outstanding") {
  std::vector<Bytes> held;
  std::atomic<size_t> max_held{0};
  FakeServer server(false, DefaultHello(4), [&](const Frame* f, const FakeServer::Send& send) {
    if (f != nullptr) {
      held.push_back(ReplyTo(f->header, f->body));
      max_held = std::max(max_held.load(), held.size());
      return;
    }
    for (const auto& r : held) send(ByteSpan(r));
    held.clear();
  });
  auto c = ConnectTo(server);
  std::vector<Pending<Bytes>> pending;
  for (int i = 0; i < 20; ++i) {
    auto p = c->SubmitPing({});
    REQUIRE_OK(p);
    CHECK(c->outstanding() <= 4);
    pending.push_back(*p);
  }
  for (auto& p : pending) CHECK_OK(p.Wait());
  CHECK(max_held == 4);
}

TEST_CASE("a state-first COMPOSE reply: layers as they arrive, then the head, at any chunking") {
  // Three layers of two tensors; the head after them.
  std::vector<std::vector<float>> data;
  std::vector<protocol::StreamTensor> tensors;
  for (uint32_t i = 0; i < 6; ++i) data.push_back(std::vector<float>(3 + i, 0.5f * i));
  for (uint32_t i = 0; i < 6; ++i) {
    tensors.push_back({i / 2, i % 2 == 0 ? TensorKind::kKey : TensorKind::kValue, DType::kF32,
                       Shape{static_cast<int64_t>(data[i].size())},
                       ByteSpan(reinterpret_cast<const std::byte*>(data[i].data()),
                                data[i].size() * sizeof(float))});
  }
  const Bytes stream = protocol::EncodeTensorStream(tensors).value();
  protocol::ComposeReply head;
  head.n_tokens = 9;
  head.top = {{4, 1.5f}};
  head.has_state = true;
  Bytes body = stream;
  const Bytes h = protocol::Encode(head);
  body.insert(body.end(), h.begin(), h.end());

  for (size_t piece : {size_t{1}, size_t{13}, stream.size() - 2, body.size()}) {
    CAPTURE(piece);
    protocol::HelloReply hello = DefaultHello();
    hello.features |= protocol::kFeatureStateFirst;
    FakeServer server(false, hello, [&](const Frame* f, const FakeServer::Send& send) {
      if (f == nullptr) return;
      auto options = protocol::DecodeComposeOptions(f->ext);
      if (!options.ok() || options->state_layout != protocol::StateLayout::kStateFirst) {
        send(ByteSpan(protocol::EncodeErrorReply(f->header, BadRequest("not asked state first"))));
        return;
      }
      for (size_t at = 0; at < body.size(); at += piece) {
        const size_t n = std::min(piece, body.size() - at);
        const bool last = at + n == body.size();
        send(ByteSpan(ReplyTo(f->header, ByteSpan(body).subspan(at, n), {},
                              protocol::kFlagReply | (last ? 0 : protocol::kFlagMore))));
      }
    });
    auto c = ConnectTo(server);
    protocol::ComposeRequest req;
    req.return_state = true;
    req.parts = {{protocol::PartKind::kRaw, {}, {1, 2, 3}}};
    const protocol::ComposeOptions options{DType::kF32, protocol::LogitsMode::kTopK,
                                           protocol::StateLayout::kStateFirst};
    std::vector<uint32_t> layers;
    std::vector<protocol::OwnedStreamTensor> got;
    auto reply = c->ComposeStreaming(
        req, options, [&](uint32_t layer, std::vector<protocol::OwnedStreamTensor>& t) {
          layers.push_back(layer);
          for (auto& x : t) got.push_back(std::move(x));
          return Status::Ok();
        });
    REQUIRE_OK(reply);
    CHECK(layers == std::vector<uint32_t>{0, 1, 2});
    REQUIRE(got.size() == tensors.size());
    for (size_t i = 0; i < got.size(); ++i) {
      CHECK(got[i].kind == tensors[i].kind);
      CHECK(std::equal(got[i].data.begin(), got[i].data.end(), tensors[i].data.begin(),
                       tensors[i].data.end()));
    }
    CHECK(reply->n_tokens == 9);
    CHECK(reply->top == head.top);
    CHECK(reply->has_state);
    // Assembled whole, the same reply with the state in it.
    auto whole = c->Compose(req, options);
    REQUIRE_OK(whole);
    CHECK(whole->state == stream);
    CHECK(whole->top == head.top);
  }
  // A server that does not announce STATE_FIRST is not asked for it.
  FakeServer plain(false, DefaultHello(), [](const Frame*, const FakeServer::Send&) {});
  auto c = ConnectTo(plain);
  protocol::ComposeRequest req;
  req.return_state = true;
  req.parts = {{protocol::PartKind::kRaw, {}, {1}}};
  auto refused = c->Compose(
      req, {DType::kF32, protocol::LogitsMode::kTopK, protocol::StateLayout::kStateFirst});
  CHECK(refused.status().code() == StatusCode::kUnsupported);
  CHECK(c->outstanding() == 0);
}

TEST_CASE("connect errors") {
  ClientOptions o;
  o.address = "unix:/nonexistent/hypic.sock";
  CHECK(Client::Connect(o).status().code() == StatusCode::kIoError);
  o.address = "no-port";
  CHECK(Client::Connect(o).status().code() == StatusCode::kBadRequest);
}

}  // namespace
}  // namespace hypic::client
