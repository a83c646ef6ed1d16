// ServerSession: HELLO negotiation, tokens, tenants and their permissions, the admin grant and
// per-phase limits (RELIABILITY.md row 13).
#include "protocol/session.h"

#include <doctest/doctest.h>

#include <memory>
#include <string>

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

// One tenant of `token` that may read and compute (the daemon's default tenant).
AuthPolicy Policy(std::string token, std::string admin, bool trusted) {
  AuthPolicy p;
  p.tenants = {AuthTenant{std::move(token), kPermRead | kPermCompute}};
  p.admin_token = std::move(admin);
  p.trusted_peer = trusted;
  return p;
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
  AuthPolicy policy = Policy("s3cret", "adm1n", false);
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
    // The admin token alone authenticates, for admin operations only: no data access.
    ServerSession s(policy, DecodeLimits{});
    CHECK_OK(s.OnHello(Hello("", "adm1n"), &reply));
    CHECK(s.admin());
    CHECK(s.admin_daemon_wide());
    CHECK(s.tenant() == -1);
    CHECK_OK(s.Admit(Header(Opcode::kStats)));
    CHECK_OK(s.Admit(Header(Opcode::kPing)));
    for (Opcode op : {Opcode::kGet, Opcode::kHas, Opcode::kPut, Opcode::kDel, Opcode::kCompose,
                      Opcode::kPrefill}) {
      CHECK(s.Admit(Header(op)).code() == StatusCode::kUnauthorized);
    }
  }
}

TEST_CASE("a token picks its tenant; each opcode needs its permission") {
  AuthPolicy policy;
  policy.tenants = {AuthTenant{"reader", kPermRead}, AuthTenant{"writer", kPermRead | kPermWrite},
                    AuthTenant{"computer", kPermCompute}, AuthTenant{"owner", kPermAdmin}};
  HelloReply reply;
  auto session = [&](const std::string& token) {
    auto s = std::make_unique<ServerSession>(policy, DecodeLimits{});
    REQUIRE_OK(s->OnHello(Hello(token), &reply));
    return s;
  };
  auto reader = session("reader");
  CHECK(reader->tenant() == 0);
  CHECK_OK(reader->Admit(Header(Opcode::kGet)));
  CHECK_OK(reader->Admit(Header(Opcode::kHas)));
  CHECK(reader->Admit(Header(Opcode::kPut)).code() == StatusCode::kUnauthorized);
  CHECK(reader->Admit(Header(Opcode::kDel)).code() == StatusCode::kUnauthorized);
  CHECK(reader->Admit(Header(Opcode::kCompose)).code() == StatusCode::kUnauthorized);
  CHECK(reader->Admit(Header(Opcode::kPin)).code() == StatusCode::kUnauthorized);
  auto writer = session("writer");
  CHECK(writer->tenant() == 1);
  CHECK_OK(writer->Admit(Header(Opcode::kPut)));
  CHECK_OK(writer->Admit(Header(Opcode::kDel)));
  auto computer = session("computer");
  CHECK_OK(computer->Admit(Header(Opcode::kPrefill)));
  CHECK(computer->Admit(Header(Opcode::kGet)).code() == StatusCode::kUnauthorized);
  // The tenant's own admin permission: the grant, bound to its namespace.
  auto owner = session("owner");
  CHECK(reply.admin);
  CHECK(owner->admin());
  CHECK_FALSE(owner->admin_daemon_wide());
  CHECK_OK(owner->Admit(Header(Opcode::kList)));
  CHECK(owner->Admit(Header(Opcode::kGet)).code() == StatusCode::kUnauthorized);
  // No tenant without a token here: an empty token is refused.
  ServerSession none(policy, DecodeLimits{});
  CHECK(none.OnHello(Hello(""), &reply).code() == StatusCode::kUnauthorized);
}

TEST_CASE("TokensEqual: bytes and lengths") {
  CHECK(TokensEqual("", ""));
  CHECK(TokensEqual("abc", "abc"));
  CHECK_FALSE(TokensEqual("abc", "abd"));
  CHECK_FALSE(TokensEqual("abc", std::string_view("abc\0", 4)));  // padding is not equality
  CHECK_FALSE(TokensEqual("abc", "ab"));
  CHECK_FALSE(TokensEqual("", "a"));
  const std::string max(kMaxAuthTokenLen, 'x');
  CHECK(TokensEqual(max, max));
  CHECK_FALSE(TokensEqual(max + "x", max + "x"));  // over the limit never matches
}

TEST_CASE("without an admin token, admin is granted to trusted peers only") {
  HelloReply reply;
  ServerSession remote(Policy("t", "", false), DecodeLimits{});
  CHECK_OK(remote.OnHello(Hello("t"), &reply));
  CHECK_FALSE(reply.admin);
  CHECK(remote.Admit(Header(Opcode::kEvict)).code() == StatusCode::kUnauthorized);
  ServerSession local(Policy("", "", true), DecodeLimits{});
  CHECK_OK(local.OnHello(Hello(""), &reply));
  CHECK(reply.admin);
  CHECK_OK(local.Admit(Header(Opcode::kEvict)));
  // Presenting an admin token the server does not have is an error, not a silent downgrade.
  ServerSession none(Policy("", "", true), DecodeLimits{});
  CHECK(none.OnHello(Hello("", "guess"), &reply).code() == StatusCode::kUnauthorized);
}

}  // namespace
}  // namespace hypic::protocol
