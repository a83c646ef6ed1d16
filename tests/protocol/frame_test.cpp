// Frame header layout, CRC-32, and the incremental decoder against valid, truncated and hostile
// input (RELIABILITY.md rows 4 and 11).
#include "protocol/frame.h"

#include <doctest/doctest.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <new>
#include <string>

#include "protocol/decoder.h"
#include "tests/support/check_ok.h"
#include "tests/support/seeded_rng.h"

// Counts heap allocations so tests can show that rejecting an oversized length allocates
// nothing.
static std::atomic<size_t> g_allocations{0};
void* operator new(size_t n) {
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(n == 0 ? 1 : n)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, size_t) noexcept { std::free(p); }

namespace hypic::protocol {
namespace {

ByteSpan AsBytes(std::string_view s) {
  return ByteSpan(reinterpret_cast<const std::byte*>(s.data()), s.size());
}

Bytes MakeFrame(Opcode op, std::string_view body, std::string_view ext = {},
                ChecksumKind kind = ChecksumKind::kXxh3_64, uint8_t flags = 0) {
  FrameHeader h;
  h.opcode = op;
  h.flags = flags;
  h.checksum_kind = kind;
  h.request_id = 0x1122334455667788ull;
  h.key = Hash128{0x0102030405060708ull, 0x1112131415161718ull};
  h.deadline_ms = 250;
  auto r = EncodeFrame(h, AsBytes(ext), AsBytes(body));
  REQUIRE_OK(r);
  return std::move(r).value();
}

// Recomputes the header CRC after a test edits header bytes, so the edit reaches the checks
// behind the CRC.
void Reseal(Bytes& f) {
  uint32_t crc = Crc32(ByteSpan(f.data(), 60));
  std::memcpy(f.data() + 60, &crc, 4);
}

uint32_t Crc32Bitwise(ByteSpan b) {
  uint32_t c = 0xFFFFFFFFu;
  for (std::byte x : b) {
    c ^= static_cast<uint8_t>(x);
    for (int k = 0; k < 8; ++k) c = (c & 1u) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
  }
  return ~c;
}

DecodeStatus DecodeAll(Decoder& d, const Bytes& f, size_t* consumed, Frame* frame) {
  return d.Decode(ByteSpan(f), consumed, frame);
}

TEST_CASE("CRC-32 matches the zlib check value, a bitwise reference and chains") {
  CHECK(Crc32(AsBytes("123456789")) == 0xCBF43926u);
  CHECK(Crc32(ByteSpan()) == 0u);
  testing::SeededRng rng(7);
  for (size_t n : {1, 7, 8, 9, 63, 64, 65, 1000}) {
    Bytes b(n);
    for (auto& x : b) x = std::byte(rng.UniformInt(0, 255));
    CHECK(Crc32(ByteSpan(b)) == Crc32Bitwise(ByteSpan(b)));
    size_t cut = n / 3;
    CHECK(Crc32(ByteSpan(b).subspan(cut), Crc32(ByteSpan(b).first(cut))) == Crc32(ByteSpan(b)));
  }
}

TEST_CASE("BodyHasher fed in pieces equals the one-shot body checksum") {
  testing::SeededRng rng(11);
  for (size_t n : {0, 1, 240, 241, 1024, 70000, 300000}) {
    Bytes all(n + 37);
    for (auto& x : all) x = std::byte(rng.UniformInt(0, 255));
    for (size_t ext_len : {size_t{0}, size_t{37}}) {
      ByteSpan ext = ByteSpan(all).first(ext_len);
      ByteSpan body = ByteSpan(all).subspan(ext_len, n);
      for (ChecksumKind kind : {ChecksumKind::kCrc32, ChecksumKind::kXxh3_64}) {
        CAPTURE(n);
        CAPTURE(ext_len);
        CAPTURE(static_cast<int>(kind));
        // The whole of ext+body is one stream: cut it at random places, across the boundary.
        BodyHasher h(kind);
        ByteSpan rest = ByteSpan(all).first(ext_len + n);
        while (!rest.empty()) {
          size_t take = std::min<size_t>(rest.size(), rng.UniformInt(0, 70000));
          h.Update(rest.first(take));
          rest = rest.subspan(take);
        }
        uint64_t want = BodyChecksum(kind, ext, body);
        CHECK(h.Digest() == want);
        if (kind == ChecksumKind::kCrc32) CHECK(want == Crc32(ByteSpan(all).first(ext_len + n)));
        // A changed byte changes the digest.
        if (n > 0) {
          Bytes bad(all.begin(), all.begin() + static_cast<ptrdiff_t>(ext_len + n));
          bad[ext_len + n / 2] ^= std::byte{1};
          BodyHasher hb(kind);
          hb.Update(ByteSpan(bad));
          CHECK(hb.Digest() != want);
        }
      }
    }
  }
}

TEST_CASE("header layout is the one in protocol/README.md") {
  Bytes f = MakeFrame(Opcode::kGet, "body", "ex", ChecksumKind::kCrc32);
  REQUIRE(f.size() == 64 + 2 + 4);
  auto u8 = [&](size_t o) { return static_cast<uint8_t>(f[o]); };
  auto load = [&](size_t o, size_t n) {
    uint64_t v = 0;
    std::memcpy(&v, f.data() + o, n);
    return v;
  };
  CHECK(u8(0) == 0x89);
  CHECK(u8(1) == 'H');
  CHECK(u8(2) == 'Y');
  CHECK(u8(3) == 'P');
  CHECK(u8(4) == 1);  // version
  CHECK(u8(5) == 4);  // GET
  CHECK(u8(6) == 0);  // flags
  CHECK(u8(7) == 1);  // CRC-32 body checksum
  CHECK(load(8, 8) == 0x1122334455667788ull);
  CHECK(load(16, 8) == 0x0102030405060708ull);  // key lo
  CHECK(load(24, 8) == 0x1112131415161718ull);  // key hi
  CHECK(load(32, 8) == 4);                      // body_len
  CHECK(load(40, 8) == Crc32(AsBytes("exbody")));
  CHECK(load(48, 2) == 2);    // ext_len
  CHECK(load(50, 2) == 0);    // status
  CHECK(load(52, 4) == 250);  // deadline_ms
  CHECK(load(56, 4) == 0);    // reserved
  CHECK(load(60, 4) == Crc32(ByteSpan(f.data(), 60)));
}

TEST_CASE("every prefix of a valid frame is NeedMore, the whole frame decodes") {
  for (ChecksumKind kind : {ChecksumKind::kCrc32, ChecksumKind::kXxh3_64}) {
    Bytes f = MakeFrame(Opcode::kPut, "some entry bytes", "opts", kind);
    Decoder d(Decoder::Role::kServer, DecodeLimits{});
    Frame frame;
    size_t consumed = 99;
    for (size_t n = 0; n < f.size(); ++n) {
      CAPTURE(n);
      REQUIRE(d.Decode(ByteSpan(f).first(n), &consumed, &frame) == DecodeStatus::kNeedMore);
      CHECK(consumed == 0);
      CHECK(d.needed() == (n < kHeaderSize ? kHeaderSize : f.size()));
    }
    REQUIRE(DecodeAll(d, f, &consumed, &frame) == DecodeStatus::kOk);
    CHECK(consumed == f.size());
    CHECK(frame.header.opcode == Opcode::kPut);
    CHECK(frame.header.request_id == 0x1122334455667788ull);
    CHECK(frame.header.deadline_ms == 250);
    CHECK(frame.header.checksum_kind == kind);
    CHECK(std::string(reinterpret_cast<const char*>(frame.ext.data()), frame.ext.size()) == "opts");
    CHECK(std::string(reinterpret_cast<const char*>(frame.body.data()), frame.body.size()) ==
          "some entry bytes");
  }
}

TEST_CASE("back-to-back frames decode one at a time") {
  Bytes a = MakeFrame(Opcode::kPing, "a");
  Bytes b = MakeFrame(Opcode::kHas, "bb");
  Bytes both = a;
  both.insert(both.end(), b.begin(), b.end());
  Decoder d(Decoder::Role::kServer, DecodeLimits{});
  Frame frame;
  size_t consumed = 0;
  REQUIRE(d.Decode(ByteSpan(both), &consumed, &frame) == DecodeStatus::kOk);
  CHECK(consumed == a.size());
  CHECK(frame.header.opcode == Opcode::kPing);
  REQUIRE(d.Decode(ByteSpan(both).subspan(consumed), &consumed, &frame) == DecodeStatus::kOk);
  CHECK(consumed == b.size());
  CHECK(frame.header.opcode == Opcode::kHas);
}

TEST_CASE("HTTP, TLS, RESP and garbage fail at the first byte") {
  Decoder d(Decoder::Role::kServer, DecodeLimits{});
  Frame frame;
  size_t consumed = 0;
  for (std::string_view s :
       {std::string_view("GET / HTTP/1.1\r\n"), std::string_view("POST /x"),
        std::string_view("*1\r\n$4\r\nPING\r\n"), std::string_view("\x16\x03\x01\x02\x00", 5),
        std::string_view("\x89HYX"), std::string_view("\x89HY\0", 4)}) {
    CAPTURE(s);
    DecodeStatus st = d.Decode(AsBytes(s), &consumed, &frame);
    CHECK(st == DecodeStatus::kBadMagic);
    CHECK_FALSE(HeaderTrusted(st));
    CHECK(DecodeStatusCode(st) == StatusCode::kBadRequest);
  }
  CHECK(d.Decode(AsBytes("G"), &consumed, &frame) == DecodeStatus::kBadMagic);
  CHECK(d.Decode(AsBytes("\x16"), &consumed, &frame) == DecodeStatus::kBadMagic);
  CHECK(d.Decode(AsBytes("\x89H"), &consumed, &frame) == DecodeStatus::kNeedMore);
}

TEST_CASE("oversized lengths are rejected from the header alone, allocating nothing") {
  DecodeLimits limits;
  limits.max_body = 1 << 20;
  limits.max_ext = 128;
  Decoder d(Decoder::Role::kServer, limits);
  for (uint64_t body_len : {uint64_t{1} << 20 | 1, uint64_t{1} << 40, ~uint64_t{0}}) {
    Bytes f = MakeFrame(Opcode::kPut, "");
    std::memcpy(f.data() + 32, &body_len, 8);
    Reseal(f);
    Frame frame;
    size_t consumed = 0;
    size_t before = g_allocations.load();
    DecodeStatus st = d.Decode(ByteSpan(f), &consumed, &frame);
    CHECK(g_allocations.load() == before);
    CHECK(st == DecodeStatus::kBodyTooLarge);
    CHECK(HeaderTrusted(st));
    CHECK(DecodeStatusCode(st) == StatusCode::kTooLarge);
    CHECK(d.needed() == kHeaderSize);  // the caller is never told to grow its buffer
    CHECK(frame.header.request_id == 0x1122334455667788ull);
  }
  Bytes f = MakeFrame(Opcode::kPut, "", std::string(129, 'x'));
  Frame frame;
  size_t consumed = 0;
  CHECK(d.Decode(ByteSpan(f), &consumed, &frame) == DecodeStatus::kExtTooLarge);
}

TEST_CASE("any flipped header bit is caught") {
  Bytes good = MakeFrame(Opcode::kGet, "xyz");
  for (size_t bit = 0; bit < kHeaderSize * 8; ++bit) {
    Bytes f = good;
    f[bit / 8] ^= std::byte(1u << (bit % 8));
    Decoder d(Decoder::Role::kServer, DecodeLimits{});
    Frame frame;
    size_t consumed = 0;
    DecodeStatus st = d.Decode(ByteSpan(f), &consumed, &frame);
    CAPTURE(bit);
    CHECK((st == DecodeStatus::kBadMagic || st == DecodeStatus::kBadHeaderChecksum));
    CHECK(consumed == 0);
  }
}

TEST_CASE("a bad body checksum is reported with the frame consumed") {
  for (ChecksumKind kind : {ChecksumKind::kCrc32, ChecksumKind::kXxh3_64}) {
    Bytes next = MakeFrame(Opcode::kPing, "next");
    for (size_t at : {size_t{64}, size_t{66}, size_t{70}}) {  // ext, body start, body end
      Bytes f = MakeFrame(Opcode::kPut, "body!!", "ex", kind);
      f[at] ^= std::byte{0x40};
      f.insert(f.end(), next.begin(), next.end());
      Decoder d(Decoder::Role::kServer, DecodeLimits{});
      Frame frame;
      size_t consumed = 0;
      REQUIRE(d.Decode(ByteSpan(f), &consumed, &frame) == DecodeStatus::kBadBodyChecksum);
      CHECK(DecodeStatusCode(DecodeStatus::kBadBodyChecksum) == StatusCode::kBadChecksum);
      CHECK(consumed == 64 + 2 + 6);
      // The stream is still in sync: the next frame decodes.
      REQUIRE(d.Decode(ByteSpan(f).subspan(consumed), &consumed, &frame) == DecodeStatus::kOk);
      CHECK(frame.header.opcode == Opcode::kPing);
    }
  }
}

TEST_CASE("reserved bytes, unknown flags, versions and checksum kinds are rejected") {
  Decoder d(Decoder::Role::kServer, DecodeLimits{});
  Frame frame;
  size_t consumed = 0;
  auto with = [&](size_t offset, uint8_t value) {
    Bytes f = MakeFrame(Opcode::kGet, "");
    f[offset] = std::byte{value};
    Reseal(f);
    return d.Decode(ByteSpan(f), &consumed, &frame);
  };
  for (size_t o = 56; o < 60; ++o) CHECK(with(o, 1) == DecodeStatus::kBadReserved);
  CHECK(with(6, 0x04) == DecodeStatus::kBadReserved);
  CHECK(with(6, 0x80) == DecodeStatus::kBadReserved);
  CHECK(with(4, 0) == DecodeStatus::kBadVersion);
  CHECK(with(4, 2) == DecodeStatus::kBadVersion);
  CHECK(DecodeStatusCode(DecodeStatus::kBadVersion) == StatusCode::kVersionMismatch);
  CHECK(with(7, 0) == DecodeStatus::kBadChecksumKind);
  CHECK(with(7, 3) == DecodeStatus::kBadChecksumKind);
  CHECK(with(50, 1) == DecodeStatus::kBadStatus);             // a request carries no status
  CHECK(with(6, kFlagReply) == DecodeStatus::kBadDirection);  // a reply sent to the server
}

TEST_CASE("unknown opcodes are rejected, GOAWAY only flows to clients") {
  Decoder d(Decoder::Role::kServer, DecodeLimits{});
  Frame frame;
  size_t consumed = 0;
  for (int op = 0; op < 256; ++op) {
    Bytes f = MakeFrame(Opcode::kGet, "");
    f[5] = std::byte(op);
    Reseal(f);
    DecodeStatus st = d.Decode(ByteSpan(f), &consumed, &frame);
    bool known = IsKnownOpcode(static_cast<uint8_t>(op)) && op != 63;
    CAPTURE(op);
    CHECK(st == (known ? DecodeStatus::kOk : DecodeStatus::kUnknownOpcode));
  }
  Decoder client(Decoder::Role::kClient, DecodeLimits{});
  Bytes away = EncodeGoAway(Busy("too many connections"));
  REQUIRE(client.Decode(ByteSpan(away), &consumed, &frame) == DecodeStatus::kOk);
  CHECK(frame.header.opcode == Opcode::kGoAway);
  CHECK(frame.header.status == static_cast<uint16_t>(StatusCode::kBusy));
  CHECK(frame.header.request_id == 0);
}

TEST_CASE("pre-auth limits: only HELLO and PING, tiny bodies, no ext") {
  Decoder d(Decoder::Role::kServer, DecodeLimits::PreAuth());
  Frame frame;
  size_t consumed = 0;
  CHECK(DecodeAll(d, MakeFrame(Opcode::kHello, "hi"), &consumed, &frame) == DecodeStatus::kOk);
  CHECK(DecodeAll(d, MakeFrame(Opcode::kPing, "hi"), &consumed, &frame) == DecodeStatus::kOk);
  CHECK(DecodeAll(d, MakeFrame(Opcode::kGet, ""), &consumed, &frame) == DecodeStatus::kNotAllowed);
  CHECK(DecodeAll(d, MakeFrame(Opcode::kShutdown, ""), &consumed, &frame) ==
        DecodeStatus::kNotAllowed);
  CHECK(DecodeAll(d, MakeFrame(Opcode::kHello, std::string(4097, 'x')), &consumed, &frame) ==
        DecodeStatus::kBodyTooLarge);
  CHECK(DecodeAll(d, MakeFrame(Opcode::kHello, "", "e"), &consumed, &frame) ==
        DecodeStatus::kExtTooLarge);
  d.set_limits(DecodeLimits{});
  CHECK(DecodeAll(d, MakeFrame(Opcode::kGet, ""), &consumed, &frame) == DecodeStatus::kOk);
}

TEST_CASE("replies: client decoder, status range, error and reply helpers") {
  Bytes req = MakeFrame(Opcode::kGet, "");
  Decoder server(Decoder::Role::kServer, DecodeLimits{});
  Frame request;
  size_t consumed = 0;
  REQUIRE(server.Decode(ByteSpan(req), &consumed, &request) == DecodeStatus::kOk);

  Decoder client(Decoder::Role::kClient, DecodeLimits{});
  Frame reply;
  Bytes err = EncodeErrorReply(request.header, NotFound("no such key"));
  REQUIRE(client.Decode(ByteSpan(err), &consumed, &reply) == DecodeStatus::kOk);
  CHECK(reply.header.is_reply());
  CHECK(reply.header.request_id == request.header.request_id);
  CHECK(reply.header.key == request.header.key);
  CHECK(reply.header.status == static_cast<uint16_t>(StatusCode::kNotFound));
  CHECK(reply.header.checksum_kind == request.header.checksum_kind);
  CHECK(std::string(reinterpret_cast<const char*>(reply.body.data()), reply.body.size()) ==
        "no such key");
  // A request frame is not a reply; a status above the last code is rejected.
  CHECK(client.Decode(ByteSpan(req), &consumed, &reply) == DecodeStatus::kBadDirection);
  Bytes bad = err;
  uint16_t status = kMaxStatusCode + 1;
  std::memcpy(bad.data() + 50, &status, 2);
  Reseal(bad);
  CHECK(client.Decode(ByteSpan(bad), &consumed, &reply) == DecodeStatus::kBadStatus);
  // Long error messages are cut so they fit any client's limits.
  Bytes longer = EncodeErrorReply(request.header, Internal(std::string(5000, 'm')));
  CHECK(longer.size() == kHeaderSize + kMaxErrorMessage);
  CHECK_FALSE(MakeHeader(FrameHeader{}, ByteSpan(Bytes(kMaxExtLen + 1)), {}).ok());
}

TEST_CASE("opcode names and the admin set") {
  CHECK(OpcodeName(Opcode::kCompose) == "COMPOSE");
  CHECK(OpcodeName(static_cast<Opcode>(200)) == "UNKNOWN");
  for (Opcode op : {Opcode::kStats, Opcode::kEvict, Opcode::kPin, Opcode::kUnpin, Opcode::kFlush,
                    Opcode::kConfig, Opcode::kShutdown, Opcode::kList, Opcode::kVerify}) {
    CHECK(IsAdminOpcode(op));
  }
  for (Opcode op : {Opcode::kHello, Opcode::kPing, Opcode::kHas, Opcode::kGet, Opcode::kPut,
                    Opcode::kDel, Opcode::kPrefill, Opcode::kCompose, Opcode::kGoAway}) {
    CHECK_FALSE(IsAdminOpcode(op));
  }
}

}  // namespace
}  // namespace hypic::protocol
