#include "protocol/session.h"

#include <algorithm>
#include <utility>

namespace hypic::protocol {

uint8_t PermissionOf(Opcode op) {
  switch (op) {
    case Opcode::kHas:
    case Opcode::kGet: return kPermRead;
    case Opcode::kPrefill:
    case Opcode::kCompose: return kPermCompute;
    case Opcode::kPut:
    case Opcode::kDel: return kPermWrite;
    default: return 0;
  }
}

namespace {
constexpr std::pair<uint8_t, std::string_view> kPermissionNames[] = {
    {kPermRead, "read"}, {kPermCompute, "compute"}, {kPermWrite, "write"}, {kPermAdmin, "admin"}};
}  // namespace

std::vector<std::string_view> PermissionNames(uint8_t permissions) {
  std::vector<std::string_view> out;
  for (const auto& [bit, name] : kPermissionNames) {
    if ((permissions & bit) != 0) out.push_back(name);
  }
  return out;
}

uint8_t PermissionFromName(std::string_view name) {
  for (const auto& [bit, n] : kPermissionNames) {
    if (n == name) return bit;
  }
  return 0;
}

bool TokensEqual(std::string_view a, std::string_view b) {
  // Every byte of both padded buffers is visited whatever the inputs, so neither where the
  // first difference is nor how long the configured token is shows in the time.
  unsigned diff = (a.size() > kMaxAuthTokenLen) | (b.size() > kMaxAuthTokenLen);
  diff |= static_cast<unsigned>(a.size() != b.size());
  for (size_t i = 0; i < kMaxAuthTokenLen; ++i) {
    unsigned ca = i < a.size() ? static_cast<unsigned char>(a[i]) : 0u;
    unsigned cb = i < b.size() ? static_cast<unsigned char>(b[i]) : 0u;
    diff |= ca ^ cb;
  }
  return diff == 0;
}

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
                  TokensEqual(request.admin_token, policy_.admin_token);
  if (!request.admin_token.empty() && !admin_ok) return Unauthorized("wrong admin token");
  // Every tenant's token is compared (no early exit), so the time does not tell which matched.
  int tenant = -1;
  for (size_t i = 0; i < policy_.tenants.size(); ++i) {
    const AuthTenant& t = policy_.tenants[i];
    bool match = t.token.empty() ? request.token.empty() : TokensEqual(request.token, t.token);
    if (match && tenant < 0) tenant = static_cast<int>(i);
  }
  if (tenant < 0 && !(admin_ok && request.token.empty())) {
    return Unauthorized(request.token.empty() ? "this server requires a token" : "wrong token");
  }
  const bool trusted = policy_.admin_token.empty() && policy_.trusted_peer;
  admin_daemon_wide_ = admin_ok || trusted;
  admin_ =
      admin_daemon_wide_ ||
      (tenant >= 0 && (policy_.tenants[static_cast<size_t>(tenant)].permissions & kPermAdmin) != 0);
  tenant_ = tenant;
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
  if (IsAdminOpcode(header.opcode)) {
    if (!admin_) {
      return Unauthorized(std::string(OpcodeName(header.opcode)) + " needs the admin grant");
    }
    return Status::Ok();
  }
  const uint8_t need = PermissionOf(header.opcode);
  if (need == 0) return Status::Ok();
  if (tenant_ < 0) {
    return Unauthorized(std::string(OpcodeName(header.opcode)) +
                        " needs a tenant's token: the admin token grants admin operations only");
  }
  if ((policy_.tenants[static_cast<size_t>(tenant_)].permissions & need) == 0) {
    return Unauthorized(std::string(OpcodeName(header.opcode)) + " needs the '" +
                        std::string(PermissionNames(need).at(0)) +
                        "' permission, which this connection's tenant does not have");
  }
  return Status::Ok();
}

}  // namespace hypic::protocol
