// ServerSession: HELLO negotiation, tokens, the admin grant and per-phase limits
// (RELIABILITY.md row 13).
#include "protocol/session.h"

#include <doctest/doctest.h>

#include "tests/support/check_ok.h"

namespace hypic::protocol {
namespace {

FrameHeader Header(Opcode op, uint8_t version = kMaxVersion) {
  FrameHeader h;
  h.opcode = op;
  h.version = version;
  return h;
}

HelloRequest Hello(std::string token, std::string admin = "") {
  HelloRequest r;
  r.token = std::move(token);
  r.admin_token = std::move(admin);
  return r;
}

TEST_CASE("before HELLO only HELLO and PING pass, with pre-auth limits") {
  ServerSession s(AuthPolicy{}, DecodeLimits{});
  CHECK(s.phase() == ServerSession::Phase::kAwaitHello);
  CHECK_OK(s.Admit(Header(Opcode::kPing)));
  CHECK_OK(s.Admit(Header(Opcode::kHello)));
  CHECK(s.Admit(Header(Opcode::kGet)).code() == StatusCode::kUnauthorized);
  auto f = EncodeFrame(Header(Opcode::kGet), {}, {});
  REQUIRE_OK(f);
  Frame frame;
  size_t consumed = 0;
  CHECK(s.Decode(ByteSpan(*f), &consumed, &frame) == DecodeStatus::kNotAllowed);

  HelloReply reply;
  CHECK_OK(s.OnHello(Hello(""), &reply));
  CHECK(reply.version == kMaxVersion);
  CHECK(s.phase() == ServerSession::Phase::kReady);
  CHECK(s.Decode(ByteSpan(*f), &consumed, &frame) == DecodeStatus::kOk);
  CHECK_OK(s.Admit(Header(Opcode::kGet)));
  // A second HELLO is an error.
  CHECK(s.OnHello(Hello(""), &reply).code() == StatusCode::kBadRequest);
}

TEST_CASE("version negotiation") {
  ServerSession s(AuthPolicy{}, DecodeLimits{});
  HelloRequest r;
  r.min_version = kMaxVersion + 1;
  r.max_version = kMaxVersion + 5;
  HelloReply reply;
  CHECK(s.OnHello(r, &reply).code() == StatusCode::kVersionMismatch);
  CHECK(s.phase() == ServerSession::Phase::kAwaitHello);
  r.min_version = 0;
  r.max_version = 200;
  CHECK_OK(s.OnHello(r, &reply));
  CHECK(reply.version == kMaxVersion);
  CHECK(s.Admit(Header(Opcode::kGet, kMaxVersion + 1)).code() == StatusCode::kVersionMismatch);
}

TEST_CASE("tokens: missing or wrong are refused, the admin token grants admin") {
  AuthPolicy policy{"s3cret", "adm1n", false};
  HelloReply reply;
  {
    ServerSession s(policy, DecodeLimits{});
    CHECK(s.OnHello(Hello(""), &reply).code() == StatusCode::kUnauthorized);
    CHECK(s.OnHello(Hello("s3creT"), &reply).code() == StatusCode::kUnauthorized);
    CHECK(s.OnHello(Hello("s3cret0"), &reply).code() == StatusCode::kUnauthorized);
    CHECK(s.OnHello(Hello("s3cret", "wrong"), &reply).code() == StatusCode::kUnauthorized);
    CHECK_OK(s.OnHello(Hello("s3cret"), &reply));
    CHECK_FALSE(reply.admin);
    CHECK_OK(s.Admit(Header(Opcode::kCompose)));
    CHECK(s.Admit(Header(Opcode::kShutdown)).code() == StatusCode::kUnauthorized);
    CHECK(s.Admit(Header(Opcode::kStats)).code() == StatusCode::kUnauthorized);
  }
  {
    ServerSession s(policy, DecodeLimits{});
    CHECK_OK(s.OnHello(Hello("s3cret", "adm1n"), &reply));
    CHECK(reply.admin);
    CHECK_OK(s.Admit(Header(Opcode::kShutdown)));
  }
  {
    // The admin token alone also authenticates.
    ServerSession s(policy, DecodeLimits{});
    CHECK_OK(s.OnHello(Hello("", "adm1n"), &reply));
    CHECK(s.admin());
  }
}

TEST_CASE("without an admin token, admin is granted to trusted peers only") {
  HelloReply reply;
  ServerSession remote(AuthPolicy{"t", "", false}, DecodeLimits{});
  CHECK_OK(remote.OnHello(Hello("t"), &reply));
  CHECK_FALSE(reply.admin);
  CHECK(remote.Admit(Header(Opcode::kEvict)).code() == StatusCode::kUnauthorized);
  ServerSession local(AuthPolicy{"", "", true}, DecodeLimits{});
  CHECK_OK(local.OnHello(Hello(""), &reply));
  CHECK(reply.admin);
  CHECK_OK(local.Admit(Header(Opcode::kEvict)));
  // Presenting an admin token the server does not have is an error, not a silent downgrade.
  ServerSession none(AuthPolicy{"", "", true}, DecodeLimits{});
  CHECK(none.OnHello(Hello("", "guess"), &reply).code() == StatusCode::kUnauthorized);
}

}  // namespace
}  // namespace hypic::protocol
