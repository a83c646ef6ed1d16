// RELIABILITY rows 4 and 13 against the real hypicd: bad magic, HTTP and TLS bytes, oversized
// lengths (nothing allocated), bad header and body checksums, reserved bits, unknown opcodes,
// truncated frames. Each gets a clear status or a close within 1 s, and a well-behaved client
// on another connection keeps being served throughout.
#include <doctest/doctest.h>
#include <signal.h>

#include <cstring>

#include "tests/e2e/daemon.h"
#include "tests/support/check_ok.h"

namespace hypic::e2e {
namespace {

using protocol::Opcode;

// A status reply or GOAWAY (then a close), or just a close, within 1 s.
void ExpectRefusedAndClosed(RawConn& c, StatusCode expected) {
  auto r = c.Read(1s);
  if (r.ok()) {
    CHECK(r->status() == expected);
    CHECK(c.WaitClosed(1500ms));
  } else {
    CHECK(r.status().code() == StatusCode::kIoError);  // closed without a frame
  }
}

void ExpectServing(RawConn& good) {
  auto r = good.Call(Opcode::kPing, AsBytes("alive"), {}, {}, 2s);
  REQUIRE_OK(r);
  CHECK(r->text() == "alive");
}

std::array<std::byte, protocol::kHeaderSize> Header(const protocol::FrameHeader& h,
                                                    protocol::ByteSpan body = {}) {
  auto header = protocol::MakeHeader(h, {}, body);
  REQUIRE_OK(header);
  return *header;
}

// Rewrites the header CRC after a deliberate edit, so only the edited field is wrong.
void Reseal(std::array<std::byte, protocol::kHeaderSize>& hdr) {
  uint32_t crc = protocol::Crc32(protocol::ByteSpan(hdr.data(), 60));
  std::memcpy(hdr.data() + 60, &crc, 4);
}

TEST_CASE("malformed input is refused and the daemon keeps serving") {
  DaemonOptions opts;
  opts.config_toml = kLocalWriterTenant;  // PUT's body is decoded only with `write`
  auto d = Daemon::Start(opts);
  REQUIRE_OK(d);
  uint16_t port = (*d)->port();
  auto good = RawConn::TcpHello(port);
  REQUIRE_OK(good);
  uint64_t rss_before = (*d)->RssKiB();

  SUBCASE("HTTP request") {
    auto c = RawConn::Tcp(port);
    REQUIRE_OK(c);
    REQUIRE_OK(c->Send(AsBytes("GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")));
    ExpectRefusedAndClosed(*c, StatusCode::kBadRequest);
  }
  SUBCASE("TLS ClientHello") {
    auto c = RawConn::Tcp(port);
    REQUIRE_OK(c);
    const unsigned char tls[] = {0x16, 0x03, 0x01, 0x02, 0x00, 0x01, 0x00, 0x01, 0xfc, 0x03, 0x03};
    REQUIRE_OK(c->Send(protocol::ByteSpan(reinterpret_cast<const std::byte*>(tls), sizeof(tls))));
    ExpectRefusedAndClosed(*c, StatusCode::kBadRequest);
  }
  SUBCASE("RESP command") {
    auto c = RawConn::Tcp(port);
    REQUIRE_OK(c);
    REQUIRE_OK(c->Send(AsBytes("*1\r\n$4\r\nPING\r\n")));
    ExpectRefusedAndClosed(*c, StatusCode::kBadRequest);
  }
  SUBCASE("oversized body length: refused before anything is allocated") {
    for (bool after_hello : {false, true}) {
      auto c = RawConn::Tcp(port);
      REQUIRE_OK(c);
      if (after_hello) REQUIRE_OK(c->Hello());
      protocol::FrameHeader h;
      h.opcode = after_hello ? Opcode::kPut : Opcode::kPing;
      h.request_id = 9;
      auto hdr = Header(h);
      uint64_t huge = uint64_t{1} << 40;  // 1 TiB
      std::memcpy(hdr.data() + 32, &huge, 8);
      Reseal(hdr);
      REQUIRE_OK(c->Send(hdr));
      auto r = c->Read(1s);
      REQUIRE_OK(r);
      CHECK(r->status() == StatusCode::kTooLarge);
      CHECK(r->header.request_id == 9);
      CHECK(c->WaitClosed(1500ms));
    }
  }
  SUBCASE("oversized ext length") {
    auto c = RawConn::TcpHello(port);
    REQUIRE_OK(c);
    protocol::FrameHeader h;
    h.opcode = Opcode::kPing;
    auto hdr = Header(h);
    uint16_t ext = 60000;
    std::memcpy(hdr.data() + 48, &ext, 2);
    Reseal(hdr);
    REQUIRE_OK(c->Send(hdr));
    ExpectRefusedAndClosed(*c, StatusCode::kTooLarge);
  }
  SUBCASE("bad header checksum") {
    auto c = RawConn::Tcp(port);
    REQUIRE_OK(c);
    protocol::FrameHeader h;
    h.opcode = Opcode::kPing;
    auto hdr = Header(h);
    hdr[20] ^= std::byte{1};  // inside the key, CRC not resealed
    REQUIRE_OK(c->Send(hdr));
    ExpectRefusedAndClosed(*c, StatusCode::kBadChecksum);
  }
  SUBCASE("bad body checksum: answered, and the connection stays in sync") {
    auto c = RawConn::TcpHello(port);
    REQUIRE_OK(c);
    auto body = AsBytes("payload");
    protocol::FrameHeader h;
    h.opcode = Opcode::kPing;
    h.request_id = 77;
    auto hdr = Header(h, body);
    body[0] = std::byte{'X'};
    REQUIRE_OK(c->Send(hdr));
    REQUIRE_OK(c->Send(body));
    auto r = c->Read(1s);
    REQUIRE_OK(r);
    CHECK(r->status() == StatusCode::kBadChecksum);
    CHECK(r->header.request_id == 77);
    auto ping = c->Call(Opcode::kPing, AsBytes("next"));
    REQUIRE_OK(ping);
    CHECK(ping->text() == "next");
  }
  SUBCASE("bad body checksum on a large (out-of-buffer) body") {
    auto c = RawConn::TcpHello(port);
    REQUIRE_OK(c);
    protocol::Bytes body(2 << 20, std::byte{7});
    protocol::FrameHeader h;
    h.opcode = Opcode::kPing;
    h.request_id = 78;
    auto hdr = Header(h, body);
    body[body.size() - 1] = std::byte{8};
    REQUIRE_OK(c->Send(hdr));
    REQUIRE_OK(c->Send(body));
    auto r = c->Read(2s);
    REQUIRE_OK(r);
    CHECK(r->status() == StatusCode::kBadChecksum);
    CHECK(c->Call(Opcode::kPing, AsBytes("x"))->status() == StatusCode::kOk);
  }
  SUBCASE("reserved bits and unknown opcodes") {
    for (int variant = 0; variant < 3; ++variant) {
      auto c = RawConn::TcpHello(port);
      REQUIRE_OK(c);
      protocol::FrameHeader h;
      h.opcode = Opcode::kPing;
      h.request_id = 5;
      auto hdr = Header(h);
      if (variant == 0) hdr[56] = std::byte{1};    // reserved field
      if (variant == 1) hdr[6] = std::byte{0x80};  // unknown flag bit
      if (variant == 2) hdr[5] = std::byte{42};    // unknown opcode
      Reseal(hdr);
      REQUIRE_OK(c->Send(hdr));
      ExpectRefusedAndClosed(*c, StatusCode::kBadRequest);
    }
  }
  SUBCASE("a GOAWAY opcode or a reply flag from a client") {
    auto c = RawConn::Tcp(port);
    REQUIRE_OK(c);
    protocol::FrameHeader h;
    h.opcode = Opcode::kPing;
    h.flags = protocol::kFlagReply;
    REQUIRE_OK(c->SendFrame(h));
    ExpectRefusedAndClosed(*c, StatusCode::kBadRequest);
  }
  SUBCASE("truncated frames, then the peer goes away") {
    for (size_t cut : {size_t{1}, size_t{30}, size_t{63}, size_t{64 + 3}}) {
      auto c = RawConn::Tcp(port);
      REQUIRE_OK(c);
      auto body = AsBytes("truncated");
      protocol::FrameHeader h;
      h.opcode = Opcode::kPing;
      auto frame = protocol::EncodeFrame(h, {}, body);
      REQUIRE_OK(frame);
      REQUIRE_OK(c->Send(protocol::ByteSpan(frame->data(), cut)));
    }  // closed here, mid-frame
  }
  SUBCASE("a request before HELLO") {
    auto c = RawConn::Tcp(port);
    REQUIRE_OK(c);
    auto r = c->Call(Opcode::kGet, {}, {}, Hash128{1, 1});
    REQUIRE_OK(r);
    CHECK(r->status() == StatusCode::kUnauthorized);
    CHECK(c->WaitClosed(1500ms));
  }
  SUBCASE("a malformed HELLO body") {
    auto c = RawConn::Tcp(port);
    REQUIRE_OK(c);
    auto r = c->Call(Opcode::kHello, AsBytes("not a hello"));
    REQUIRE_OK(r);
    CHECK(r->status() == StatusCode::kBadRequest);
    CHECK(c->WaitClosed(1500ms));
  }
  SUBCASE("malformed bodies after HELLO keep the connection") {
    // Over the unix socket, so EVICT and LIST are admitted (own uid) and their bodies decoded.
    auto c = RawConn::UnixHello((*d)->unix_path());
    REQUIRE_OK(c);
    for (Opcode op : {Opcode::kHas, Opcode::kPrefill, Opcode::kCompose, Opcode::kEvict,
                      Opcode::kList, Opcode::kPut}) {
      CAPTURE(op);
      auto r = c->Call(op, AsBytes("\x01\x02\x03"));
      REQUIRE_OK(r);
      CHECK(r->status() != StatusCode::kOk);
      CHECK(r->status() != StatusCode::kUnauthorized);
    }
    // A HAS whose count claims more keys than the body holds.
    protocol::Bytes lying = {std::byte{0xff}, std::byte{0xff}, std::byte{0}, std::byte{0}};
    auto r = c->Call(Opcode::kHas, lying);
    REQUIRE_OK(r);
    CHECK((r->status() == StatusCode::kBadRequest || r->status() == StatusCode::kTooLarge));
    ExpectServing(*c);
  }

  ExpectServing(*good);
  // Nothing was sized from a lying header: the daemon's memory did not grow by the claims.
  CHECK((*d)->RssKiB() < rss_before + 64 * 1024);
  CHECK((*d)->Alive());
}

}  // namespace
}  // namespace hypic::e2e
