#include "protocol/session.h"

#include <algorithm>

namespace hypic::protocol {

namespace {

// Token comparison whose time does not depend on where the first difference is, so a remote
// peer cannot find a token byte by byte from reply timings.
bool ConstantTimeEqual(std::string_view a, std::string_view b) {
  size_t n = std::max(a.size(), b.size());
  unsigned diff = a.size() == b.size() ? 0u : 1u;
  for (size_t i = 0; i < n; ++i) {
    unsigned ca = i < a.size() ? static_cast<unsigned char>(a[i]) : 0u;
    unsigned cb = i < b.size() ? static_cast<unsigned char>(b[i]) : 0u;
    diff |= ca ^ cb;
  }
  return diff == 0;
}

}  // namespace

ServerSession::ServerSession(AuthPolicy policy, DecodeLimits ready_limits)
    : policy_(std::move(policy)),
      ready_limits_(ready_limits),
      decoder_(Decoder::Role::kServer, DecodeLimits::PreAuth()) {}

Status ServerSession::OnHello(const HelloRequest& request, HelloReply* reply) {
  if (phase_ != Phase::kAwaitHello) return BadRequest("HELLO was already completed");
  uint16_t lo = std::max<uint16_t>(request.min_version, kMinVersion);
  uint16_t hi = std::min<uint16_t>(request.max_version, kMaxVersion);
  if (lo > hi) {
    return VersionMismatch("client speaks versions " + std::to_string(request.min_version) + ".." +
                           std::to_string(request.max_version) + ", server " +
                           std::to_string(kMinVersion) + ".." + std::to_string(kMaxVersion));
  }
  bool admin_ok = !policy_.admin_token.empty() && !request.admin_token.empty() &&
                  ConstantTimeEqual(request.admin_token, policy_.admin_token);
  if (!request.admin_token.empty() && !admin_ok) return Unauthorized("wrong admin token");
  bool token_ok = policy_.token.empty() || ConstantTimeEqual(request.token, policy_.token);
  if (!token_ok && !admin_ok) {
    return Unauthorized(request.token.empty() ? "this server requires a token" : "wrong token");
  }
  admin_ = admin_ok || (policy_.admin_token.empty() && policy_.trusted_peer);
  version_ = static_cast<uint8_t>(hi);
  client_features_ = request.features;
  phase_ = Phase::kReady;
  decoder_.set_limits(ready_limits_);
  reply->version = hi;
  reply->admin = admin_;
  return Status::Ok();
}

Status ServerSession::Admit(const FrameHeader& header) const {
  if (header.opcode == Opcode::kHello) return Status::Ok();  // OnHello rejects a second one
  if (phase_ != Phase::kReady) {
    if (header.opcode == Opcode::kPing) return Status::Ok();
    return Unauthorized(std::string(OpcodeName(header.opcode)) + " before HELLO");
  }
  if (header.version != version_) {
    return VersionMismatch("frame version " + std::to_string(header.version) +
                           " but the session negotiated " + std::to_string(version_));
  }
  if (IsAdminOpcode(header.opcode) && !admin_) {
    return Unauthorized(std::string(OpcodeName(header.opcode)) + " needs the admin token");
  }
  return Status::Ok();
}

}  // namespace hypic::protocol
