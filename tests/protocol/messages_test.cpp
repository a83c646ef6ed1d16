// Typed message bodies: byte-identical round trips for every message type (RELIABILITY.md
// row 11), inside whole frames too, and rejection of truncated, padded and lying encodings.
#include "protocol/messages.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <cstring>

#include "protocol/decoder.h"
#include "tests/support/check_ok.h"
#include "tests/support/seeded_rng.h"

namespace hypic::protocol {
namespace {

using testing::SeededRng;

Hash128 RandomKey(SeededRng& rng) { return Hash128{rng.engine()(), rng.engine()()}; }
Tier RandomTier(SeededRng& rng) { return static_cast<Tier>(rng.UniformInt(0, kMaxTier)); }
std::string RandomString(SeededRng& rng, uint32_t max) {
  std::string s(rng.UniformInt(0, max), ' ');
  for (auto& c : s) c = static_cast<char>(rng.UniformInt(0, 255));
  return s;
}
Timings RandomTimings(SeededRng& rng) {
  return Timings{rng.engine()(), rng.engine()(), rng.engine()(), rng.engine()(), rng.engine()()};
}

HelloRequest MakeHelloRequest(SeededRng& rng) {
  return HelloRequest{
      1, 1, rng.engine()(), RandomString(rng, 20), RandomString(rng, 40), RandomString(rng, 40)};
}
HelloReply MakeHelloReply(SeededRng& rng) {
  HelloReply m;
  m.version = 1;
  m.features = kFeatureXxh3 | kFeatureChunked;
  m.server_version = "hypicd 0.1.0";
  m.model_fingerprint = RandomKey(rng);
  m.model_name = "builtin:small";
  m.seam_w = 8;
  m.format_version = 1;
  m.limits = ServerLimits{64 << 20, 1ull << 32, 64, 256 << 20, 65536, 4096};
  m.admin = rng.UniformInt(0, 1) == 1;
  m.state_contract = rng.UniformInt(0, 3);
  return m;
}
HasRequest MakeHasRequest(SeededRng& rng) {
  HasRequest m;
  for (uint32_t i = 0, n = rng.UniformInt(0, 64); i < n; ++i) m.keys.push_back(RandomKey(rng));
  return m;
}
HasReply MakeHasReply(SeededRng& rng) {
  HasReply m;
  for (uint32_t i = 0, n = rng.UniformInt(0, 64); i < n; ++i) m.tiers.push_back(RandomTier(rng));
  return m;
}
GetInfo MakeGetInfo(SeededRng& rng) { return GetInfo{RandomTier(rng)}; }
PutOptions MakePutOptions(SeededRng& rng) {
  return PutOptions{rng.UniformInt(0, 100000), rng.UniformInt(0, 1) == 1};
}
PrefillRequest MakePrefillRequest(SeededRng& rng) {
  PrefillRequest m;
  m.name_space = RandomString(rng, 16);
  m.seam_w = rng.UniformInt(0, 1) ? kDefaultSeam : rng.UniformInt(0, 64);
  for (uint32_t i = 0, n = rng.UniformInt(0, 6); i < n; ++i) {
    m.segments.push_back(rng.Tokens(rng.UniformInt(0, 300), 151936));
  }
  return m;
}
PrefillReply MakePrefillReply(SeededRng& rng) {
  PrefillReply m;
  for (uint32_t i = 0, n = rng.UniformInt(0, 6); i < n; ++i) {
    m.results.push_back(PrefillResult{RandomKey(rng), rng.UniformInt(0, 1) == 1, RandomTier(rng),
                                      rng.UniformInt(0, 5000), rng.engine()()});
  }
  m.timings = RandomTimings(rng);
  return m;
}
ComposeRequest MakeComposeRequest(SeededRng& rng) {
  ComposeRequest m;
  m.name_space = RandomString(rng, 16);
  m.mode = static_cast<ComposeMode>(rng.UniformInt(0, kMaxComposeMode));
  m.seam_w = rng.UniformInt(0, 32);
  m.top_k = rng.UniformInt(0, kMaxTopK);
  m.return_state = rng.UniformInt(0, 1) == 1;
  for (uint32_t i = 0, n = rng.UniformInt(0, 8); i < n; ++i) {
    ComposePart p;
    p.kind = static_cast<PartKind>(rng.UniformInt(0, kMaxPartKind));
    if (p.kind == PartKind::kSegmentKey) {
      p.key = RandomKey(rng);
    } else {
      p.tokens = rng.Tokens(rng.UniformInt(0, 200), 1000);
    }
    m.parts.push_back(std::move(p));
  }
  return m;
}
ComposeReply MakeComposeReply(SeededRng& rng, bool with_state) {
  ComposeReply m;
  for (uint32_t i = 0, n = rng.UniformInt(0, 8); i < n; ++i) {
    m.parts.push_back(PartResult{static_cast<PartOutcome>(rng.UniformInt(0, kMaxPartOutcome)),
                                 RandomTier(rng), rng.UniformInt(0, 4000), RandomKey(rng)});
  }
  m.timings = RandomTimings(rng);
  m.n_tokens = rng.UniformInt(0, 100000);
  for (uint32_t i = 0, n = rng.UniformInt(0, 20); i < n; ++i) {
    m.top.push_back(TopLogit{rng.UniformInt(0, 150000), rng.Normal()});
  }
  if (rng.UniformInt(0, 1) == 1) m.logits = rng.NormalVector(rng.UniformInt(1, 64));
  m.has_state = with_state;
  if (with_state) {
    m.state.resize(rng.UniformInt(1, 300));
    for (auto& b : m.state) b = std::byte(rng.UniformInt(0, 255));
  }
  return m;
}
EvictRequest MakeEvictRequest(SeededRng& rng) {
  return EvictRequest{static_cast<EvictBy>(rng.UniformInt(0, kMaxEvictBy)), RandomKey(rng),
                      RandomString(rng, 10), RandomTier(rng), rng.engine()()};
}
EvictReply MakeEvictReply(SeededRng& rng) { return EvictReply{rng.engine()(), rng.engine()()}; }
ListRequest MakeListRequest(SeededRng& rng) {
  return ListRequest{rng.engine()(), rng.UniformInt(0, kMaxListEntries), RandomString(rng, 10),
                     RandomTier(rng)};
}
ListReply MakeListReply(SeededRng& rng) {
  ListReply m;
  m.next_cursor = rng.engine()();
  for (uint32_t i = 0, n = rng.UniformInt(0, 10); i < n; ++i) {
    m.entries.push_back(ListEntry{RandomKey(rng), RandomTier(rng), RandomString(rng, 12),
                                  rng.UniformInt(0, 9000), rng.engine()(), rng.engine()(),
                                  rng.engine()(), rng.UniformInt(0, 5), rng.UniformInt(0, 999)});
  }
  return m;
}
VerifyReply MakeVerifyReply(SeededRng& rng) {
  VerifyReply m{rng.engine()(), rng.engine()(), {}};
  for (uint32_t i = 0, n = rng.UniformInt(0, 10); i < n; ++i) m.bad_keys.push_back(RandomKey(rng));
  return m;
}

// Encode -> Decode -> equal; Decode -> Encode -> identical bytes; and through a whole frame.
// `prefix_fails`: every strict prefix and one trailing byte must be rejected (false for
// encodings whose tail is open-ended, the COMPOSE reply with a state stream).
template <typename T>
void CheckRoundTrip(const T& m, Opcode op, bool reply, bool prefix_fails = true) {
  Bytes bytes = Encode(m);
  auto decoded = Decode<T>(ByteSpan(bytes));
  REQUIRE_OK(decoded);
  CHECK(*decoded == m);
  CHECK(Encode(*decoded) == bytes);

  FrameHeader h;
  h.opcode = op;
  h.flags = reply ? kFlagReply : 0;
  h.request_id = 42;
  auto frame_bytes = EncodeFrame(h, {}, ByteSpan(bytes));
  REQUIRE_OK(frame_bytes);
  Decoder d(reply ? Decoder::Role::kClient : Decoder::Role::kServer, DecodeLimits{});
  Frame frame;
  size_t consumed = 0;
  REQUIRE(d.Decode(ByteSpan(*frame_bytes), &consumed, &frame) == DecodeStatus::kOk);
  auto again = Decode<T>(frame.body);
  REQUIRE_OK(again);
  CHECK(*again == m);
  auto reencoded = EncodeFrame(frame.header, frame.ext, ByteSpan(Encode(*again)));
  REQUIRE_OK(reencoded);
  CHECK(*reencoded == *frame_bytes);

  if (!prefix_fails) return;
  for (size_t n = 0; n < bytes.size(); ++n) {
    CAPTURE(n);
    CHECK_FALSE(Decode<T>(ByteSpan(bytes).first(n)).ok());
  }
  Bytes longer = bytes;
  longer.push_back(std::byte{0});
  CHECK_FALSE(Decode<T>(ByteSpan(longer)).ok());
}

TEST_CASE("every message type round-trips byte-identically") {
  SeededRng rng(20261129);
  for (int iter = 0; iter < 25; ++iter) {
    CAPTURE(iter);
    CheckRoundTrip(MakeHelloRequest(rng), Opcode::kHello, false);
    CheckRoundTrip(MakeHelloReply(rng), Opcode::kHello, true);
    CheckRoundTrip(MakeHasRequest(rng), Opcode::kHas, false);
    CheckRoundTrip(MakeHasReply(rng), Opcode::kHas, true);
    CheckRoundTrip(MakeGetInfo(rng), Opcode::kGet, true);
    CheckRoundTrip(MakePutOptions(rng), Opcode::kPut, false);
    CheckRoundTrip(MakePrefillRequest(rng), Opcode::kPrefill, false);
    CheckRoundTrip(MakePrefillReply(rng), Opcode::kPrefill, true);
    CheckRoundTrip(MakeComposeRequest(rng), Opcode::kCompose, false);
    CheckRoundTrip(MakeComposeReply(rng, false), Opcode::kCompose, true);
    CheckRoundTrip(MakeComposeReply(rng, true), Opcode::kCompose, true, false);
    CheckRoundTrip(MakeEvictRequest(rng), Opcode::kEvict, false);
    CheckRoundTrip(MakeEvictReply(rng), Opcode::kEvict, true);
    CheckRoundTrip(MakeListRequest(rng), Opcode::kList, false);
    CheckRoundTrip(MakeListReply(rng), Opcode::kList, true);
    CheckRoundTrip(MakeVerifyReply(rng), Opcode::kVerify, true);
  }
}

TEST_CASE("COMPOSE options: an empty ext is f32 + top-k; every byte is checked") {
  auto d = DecodeComposeOptions({});
  REQUIRE_OK(d);
  CHECK(*d == ComposeOptions{});
  for (DType t : {DType::kF32, DType::kBF16, DType::kF16, DType::kI32}) {
    for (LogitsMode l : {LogitsMode::kTopK, LogitsMode::kFull}) {
      Bytes e = Encode(ComposeOptions{t, l});
      CHECK(e.size() == 2);
      auto back = DecodeComposeOptions(ByteSpan(e));
      REQUIRE_OK(back);
      CHECK(*back == ComposeOptions{t, l});
    }
  }
  Bytes bad_dtype = Encode(ComposeOptions{});
  bad_dtype[0] = std::byte{kMaxDType + 1};
  CHECK(DecodeComposeOptions(ByteSpan(bad_dtype)).status().code() == StatusCode::kBadRequest);
  Bytes bad_logits = Encode(ComposeOptions{});
  bad_logits[1] = std::byte{kMaxLogitsMode + 1};
  CHECK(DecodeComposeOptions(ByteSpan(bad_logits)).status().code() == StatusCode::kBadRequest);
  Bytes longer = Encode(ComposeOptions{});
  longer.push_back(std::byte{0});
  CHECK_FALSE(DecodeComposeOptions(ByteSpan(longer)).ok());
}

TEST_CASE("COMPOSE options: the state layout byte is there only for state first, and checked") {
  const ComposeOptions first{DType::kBF16, LogitsMode::kFull, StateLayout::kStateFirst};
  Bytes e = Encode(first);
  CHECK(e == Bytes{std::byte{2}, std::byte{1}, std::byte{1}});
  auto back = DecodeComposeOptions(ByteSpan(e));
  REQUIRE_OK(back);
  CHECK(*back == first);
  // The head-first layout is the two-byte form (what daemons before the layout byte take);
  // the same value spelled with a third byte would be a second encoding.
  CHECK(Encode(ComposeOptions{DType::kBF16, LogitsMode::kFull}).size() == 2);
  Bytes spelled = Encode(ComposeOptions{DType::kBF16, LogitsMode::kFull});
  spelled.push_back(std::byte{0});
  CHECK(DecodeComposeOptions(ByteSpan(spelled)).status().code() == StatusCode::kBadRequest);
  Bytes unknown = e;
  unknown[2] = std::byte{kMaxStateLayout + 1};
  auto bad = DecodeComposeOptions(ByteSpan(unknown));
  CHECK(bad.status().code() == StatusCode::kBadRequest);
  CHECK_MESSAGE(bad.status().message().find("state layout 2") != std::string::npos,
                bad.status().message());
  Bytes four = e;
  four.push_back(std::byte{1});
  CHECK(DecodeComposeOptions(ByteSpan(four)).status().code() == StatusCode::kBadRequest);
}

TEST_CASE("a state-first COMPOSE reply: the stream, then the head; it decodes to the same reply") {
  SeededRng rng(17);
  for (int iter = 0; iter < 20; ++iter) {
    CAPTURE(iter);
    ComposeReply m = MakeComposeReply(rng, true);
    // A real tensor stream (the state-first decoder must find where it ends).
    std::vector<float> data = rng.NormalVector(rng.UniformInt(0, 12));
    StreamTensor t{0, TensorKind::kState, DType::kF32, Shape{static_cast<int64_t>(data.size())},
                   ByteSpan(reinterpret_cast<const std::byte*>(data.data()), data.size() * 4)};
    auto stream = EncodeTensorStream(std::span<const StreamTensor>(&t, 1));
    REQUIRE_OK(stream);
    m.state = *stream;
    ComposeReply head = m;
    head.state.clear();
    Bytes body = *stream;
    const Bytes h = Encode(head);
    body.insert(body.end(), h.begin(), h.end());
    auto got = DecodeComposeReply(ByteSpan(body), StateLayout::kStateFirst);
    REQUIRE_OK(got);
    CHECK(*got == m);
    auto same = DecodeComposeReply(ByteSpan(Encode(m)), StateLayout::kHeadFirst);
    REQUIRE_OK(same);
    CHECK(*same == m);
    // Every truncation fails; so does a head that says it has no state, or bytes after it.
    for (size_t n = 0; n < body.size(); n += 1 + body.size() / 50) {
      CHECK_FALSE(DecodeComposeReply(ByteSpan(body).first(n), StateLayout::kStateFirst).ok());
    }
    ComposeReply stateless = head;
    stateless.has_state = false;
    Bytes no_state = *stream;
    const Bytes s = Encode(stateless);
    no_state.insert(no_state.end(), s.begin(), s.end());
    CHECK(DecodeComposeReply(ByteSpan(no_state), StateLayout::kStateFirst).status().code() ==
          StatusCode::kBadRequest);
    Bytes longer = body;
    longer.push_back(std::byte{7});
    CHECK(DecodeComposeReply(ByteSpan(longer), StateLayout::kStateFirst).status().code() ==
          StatusCode::kBadRequest);
  }
}

TEST_CASE("the COMPOSE reply head: its size is found from every prefix, then it decodes") {
  SeededRng rng(16);
  for (int iter = 0; iter < 20; ++iter) {
    ComposeReply m = MakeComposeReply(rng, true);
    Bytes head_only = m.state;  // the stream bytes
    ComposeReply h = m;
    h.state.clear();
    const Bytes head = Encode(h);
    Bytes all = Encode(m);
    REQUIRE(all.size() == head.size() + head_only.size());
    for (size_t n = 0; n < head.size(); ++n) {
      auto size = ComposeReplyHeadSize(ByteSpan(all).first(n));
      REQUIRE_OK(size);
      CHECK_FALSE(size->has_value());
    }
    for (size_t n : {head.size(), all.size()}) {
      auto size = ComposeReplyHeadSize(ByteSpan(all).first(n));
      REQUIRE_OK(size);
      REQUIRE(size->has_value());
      CHECK(**size == head.size());
    }
    auto decoded = Decode<ComposeReply>(ByteSpan(all).first(head.size()));
    REQUIRE_OK(decoded);
    CHECK(decoded->has_state);
    CHECK(decoded->state.empty());
    CHECK(decoded->logits == m.logits);
    CHECK(decoded->top == m.top);
  }
  Bytes lying(4);
  uint32_t n = kMaxParts + 1;
  std::memcpy(lying.data(), &n, 4);
  CHECK(ComposeReplyHeadSize(ByteSpan(lying)).status().code() == StatusCode::kTooLarge);
}

TEST_CASE("an empty PUT ext means the default options") {
  auto o = DecodePutOptions({});
  REQUIRE_OK(o);
  CHECK(*o == PutOptions{});
  Bytes e = Encode(PutOptions{60, true});
  auto p = DecodePutOptions(ByteSpan(e));
  REQUIRE_OK(p);
  CHECK(p->ttl_s == 60);
  CHECK(p->pin);
}

TEST_CASE("PREFILL options: an empty ext is the default; return_entries round-trips") {
  auto o = DecodePrefillOptions({});
  REQUIRE_OK(o);
  CHECK_FALSE(o->return_entries);
  Bytes e = Encode(PrefillOptions{.return_entries = true});
  CHECK(e.size() == 1);
  auto p = DecodePrefillOptions(ByteSpan(e));
  REQUIRE_OK(p);
  CHECK(p->return_entries);
  e[0] = std::byte{2};  // a bool is 0 or 1
  CHECK(DecodePrefillOptions(ByteSpan(e)).status().code() == StatusCode::kBadRequest);
}

TEST_CASE("a PREFILL reply with entries: the head, then each result's bytes, exactly") {
  SeededRng rng(18);
  PrefillReply r = MakePrefillReply(rng);
  std::vector<Bytes> entries;
  for (auto& p : r.results) {
    entries.emplace_back(rng.UniformInt(0, 300), std::byte{static_cast<uint8_t>(p.n_tokens)});
    p.bytes = entries.back().size();
  }
  Bytes body = Encode(r);
  CHECK(body.size() == PrefillReplyHeadSize(static_cast<uint32_t>(r.results.size())));
  for (const Bytes& e : entries) body.insert(body.end(), e.begin(), e.end());
  auto d = DecodePrefillEntriesReply(ByteSpan(body));
  REQUIRE_OK(d);
  CHECK(d->reply == r);
  REQUIRE(d->entries.size() == entries.size());
  for (size_t i = 0; i < entries.size(); ++i) {
    CHECK(std::equal(d->entries[i].begin(), d->entries[i].end(), entries[i].begin(),
                     entries[i].end()));
  }
  // One byte short or one too many: the entries do not match their declared sizes.
  Bytes shorter(body.begin(), body.end() - (body.size() > 0 ? 1 : 0));
  if (!r.results.empty() && r.results.back().bytes > 0) {
    CHECK(DecodePrefillEntriesReply(ByteSpan(shorter)).status().code() == StatusCode::kBadRequest);
  }
  Bytes longer = body;
  longer.push_back(std::byte{0});
  CHECK(DecodePrefillEntriesReply(ByteSpan(longer)).status().code() == StatusCode::kBadRequest);
  // A result declaring more bytes than the body has left.
  PrefillReply lying;
  lying.results.push_back(PrefillResult{RandomKey(rng), false, Tier::kHost, 10, ~uint64_t{0}});
  Bytes lie = Encode(lying);
  CHECK(DecodePrefillEntriesReply(ByteSpan(lie)).status().code() == StatusCode::kBadRequest);
}

TEST_CASE("lying counts are rejected before anything is sized from them") {
  auto with_count = [](uint32_t n, size_t payload) {
    Bytes b(4 + payload);
    std::memcpy(b.data(), &n, 4);
    return b;
  };
  auto huge = Decode<HasRequest>(ByteSpan(with_count(0xFFFFFFFFu, 0)));
  CHECK(huge.status().code() == StatusCode::kTooLarge);
  auto short_body = Decode<HasRequest>(ByteSpan(with_count(1000, 16)));
  CHECK(short_body.status().code() == StatusCode::kBadRequest);
  auto top = Decode<ComposeReply>(ByteSpan(with_count(kMaxParts + 1, 0)));
  CHECK(top.status().code() == StatusCode::kTooLarge);
  // A string length over its cap.
  Bytes hello = Encode(HelloRequest{1, 1, 0, std::string(kMaxNameLen + 1, 'x'), "", ""});
  CHECK(Decode<HelloRequest>(ByteSpan(hello)).status().code() == StatusCode::kTooLarge);
  // A version range that is empty.
  Bytes backwards = Encode(HelloRequest{2, 1, 0, "", "", ""});
  CHECK(Decode<HelloRequest>(ByteSpan(backwards)).status().code() == StatusCode::kBadRequest);
  ComposeRequest too_many_logits;
  too_many_logits.top_k = kMaxTopK + 1;
  CHECK(Decode<ComposeRequest>(ByteSpan(Encode(too_many_logits))).status().code() ==
        StatusCode::kTooLarge);
}

TEST_CASE("enum and boolean bytes out of range are rejected") {
  Bytes tiers = Encode(HasReply{{Tier::kHost}});
  tiers.back() = std::byte{kMaxTier + 1};
  CHECK(Decode<HasReply>(ByteSpan(tiers)).status().code() == StatusCode::kBadRequest);
  Bytes put = Encode(PutOptions{0, true});
  put.back() = std::byte{2};
  CHECK_FALSE(Decode<PutOptions>(ByteSpan(put)).ok());
  ComposeRequest c;
  Bytes compose = Encode(c);
  compose[4] = std::byte{kMaxComposeMode + 1};  // after the empty namespace
  CHECK_FALSE(Decode<ComposeRequest>(ByteSpan(compose)).ok());
  Bytes evict = Encode(EvictRequest{});
  evict[0] = std::byte{kMaxEvictBy + 1};
  CHECK_FALSE(Decode<EvictRequest>(ByteSpan(evict)).ok());
}

TEST_CASE("tensor stream round trip and validation") {
  SeededRng rng(5);
  std::vector<float> s = rng.NormalVector(2 * 3 * 4);
  std::vector<uint16_t> kv(5 * 8);
  for (auto& x : kv) x = static_cast<uint16_t>(rng.UniformInt(0, 65535));
  std::vector<StreamTensor> in = {
      {0, TensorKind::kState, DType::kF32, Shape{2, 3, 4},
       ByteSpan(reinterpret_cast<const std::byte*>(s.data()), s.size() * 4)},
      {3, TensorKind::kKey, DType::kBF16, Shape{5, 8},
       ByteSpan(reinterpret_cast<const std::byte*>(kv.data()), kv.size() * 2)},
      {3, TensorKind::kValue, DType::kF32, Shape{0, 8}, ByteSpan()},
  };
  auto bytes = EncodeTensorStream(in);
  REQUIRE_OK(bytes);
  auto out = DecodeTensorStream(ByteSpan(*bytes));
  REQUIRE_OK(out);
  REQUIRE(out->size() == in.size());
  for (size_t i = 0; i < in.size(); ++i) {
    CHECK((*out)[i].layer == in[i].layer);
    CHECK((*out)[i].kind == in[i].kind);
    CHECK((*out)[i].dtype == in[i].dtype);
    CHECK((*out)[i].shape == in[i].shape);
    REQUIRE((*out)[i].data.size() == in[i].data.size());
    CHECK(std::equal(in[i].data.begin(), in[i].data.end(), (*out)[i].data.begin()));
  }
  auto re = EncodeTensorStream(*out);
  REQUIRE_OK(re);
  CHECK(*re == *bytes);
  for (size_t n = 0; n < bytes->size(); ++n) {
    CHECK_FALSE(DecodeTensorStream(ByteSpan(*bytes).first(n)).ok());
  }
  // A data size that does not match the shape cannot be encoded.
  std::vector<StreamTensor> wrong = {in[0]};
  wrong[0].shape = Shape{2, 3, 5};
  CHECK(EncodeTensorStream(wrong).status().code() == StatusCode::kBadRequest);
  // Rank 7 is rejected (byte 10 is the rank of the first tensor: count u32, layer u32, kind,
  // dtype).
  Bytes bad = *bytes;
  bad[10] = std::byte{7};
  CHECK_FALSE(DecodeTensorStream(ByteSpan(bad)).ok());
}

TEST_CASE("names") {
  CHECK(TierName(Tier::kSsd) == "ssd");
  CHECK(ComposeModeName(ComposeMode::kOracle) == "oracle");
}

}  // namespace
}  // namespace hypic::protocol
