// ServerSession: the pure, per-connection state machine of the server side of the protocol
// (README "Connection lifecycle" and "Auth"). It owns the connection's Decoder and moves it
// from the pre-auth limits (HELLO and PING, tiny bodies) to the full limits once HELLO has
// negotiated a version and checked the tokens; then Admit() gates every request (negotiated
// version, the tenant's permissions, the admin grant). HELLO's token picks the connection's
// tenant (AuthPolicy::tenants); what a tenant's namespace means is the daemon's business
// (server/tenants.h), this layer only knows the permissions. It does no I/O: the daemon feeds
// it bytes and acts on the results, and the request-sequence fuzzer drives it the same way.
// Not thread-safe; one per connection (the daemon runs each connection on one strand).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "protocol/decoder.h"
#include "protocol/messages.h"

namespace hypic::protocol {

// What a tenant may do (a bit set): read = HAS, GET; compute = PREFILL, COMPOSE; write = PUT,
// DEL; admin = the admin opcodes, within the tenant's namespace.
inline constexpr uint8_t kPermRead = 1;
inline constexpr uint8_t kPermCompute = 2;
inline constexpr uint8_t kPermWrite = 4;
inline constexpr uint8_t kPermAdmin = 8;
inline constexpr uint8_t kPermAll = kPermRead | kPermCompute | kPermWrite | kPermAdmin;

// The permission a data opcode needs (0 for PING, HELLO, GOAWAY and the admin opcodes).
uint8_t PermissionOf(Opcode op);
// The names of the bits set in `permissions`, in bit order: "read", "compute", "write",
// "admin" (the config's `ops`).
std::vector<std::string_view> PermissionNames(uint8_t permissions);
// The bit of one name; 0 for an unknown name.
uint8_t PermissionFromName(std::string_view name);

// One tenant as HELLO sees it: the token that selects it and what it may do.
struct AuthTenant {
  std::string token;  // empty: the tenant of connections that present no token
  uint8_t permissions = kPermRead | kPermCompute;
};

struct AuthPolicy {
  // The tenants; a session's tenant() indexes this. The default is the daemon's default: one
  // tenant without a token that may read and compute.
  std::vector<AuthTenant> tenants = {AuthTenant{}};
  std::string admin_token;  // empty: admin is granted to trusted peers only
  // The peer is trusted with admin when no admin token is configured: the daemon grants this
  // only to a unix-socket peer running as the daemon's own uid or root (SO_PEERCRED).
  bool trusted_peer = false;
};

// Equality of two tokens in a time that depends on neither their bytes nor their lengths:
// both are compared over kMaxAuthTokenLen bytes, zero-padded. REQUIRES: each is at most
// kMaxAuthTokenLen bytes (HELLO's decoder and the daemon's config enforce it); a longer one
// compares unequal.
bool TokensEqual(std::string_view a, std::string_view b);

class ServerSession {
 public:
  enum class Phase : uint8_t { kAwaitHello, kReady };

  ServerSession(AuthPolicy policy, DecodeLimits ready_limits);

  // The connection's decoder, with the limits of the current phase.
  DecodeStatus Decode(ByteSpan bytes, size_t* consumed, Frame* frame) {
    return decoder_.Decode(bytes, consumed, frame);
  }
  uint64_t needed() const { return decoder_.needed(); }

  // Handles a decoded HELLO. `reply` comes in with the server's part filled (server version,
  // features, model, limits) and goes out with the negotiated version and the admin grant.
  // Errors (the caller replies with them and closes): kBadRequest (a second HELLO),
  // kVersionMismatch (no common version), kUnauthorized (a token is missing or wrong). A
  // right admin token without a tenant's token gives a session with the admin grant and no
  // data access.
  Status OnHello(const HelloRequest& request, HelloReply* reply);

  // OK when the request may run; kUnauthorized before HELLO (other than PING), for a data
  // opcode without a tenant or without the tenant's permission for it, or for an admin opcode
  // without the admin grant; kVersionMismatch when the frame's version is not the negotiated
  // one.
  Status Admit(const FrameHeader& header) const;

  Phase phase() const { return phase_; }
  bool admin() const { return admin_; }
  // The admin grant came from the admin token or a trusted peer, so it spans every namespace;
  // false when only the tenant's `admin` permission granted it (then it is the tenant's
  // namespace only).
  bool admin_daemon_wide() const { return admin_daemon_wide_; }
  // The index of the HELLO's tenant in AuthPolicy::tenants; -1 before HELLO or for a session
  // that holds only the admin token.
  int tenant() const { return tenant_; }
  uint8_t version() const { return version_; }
  // The feature bits the client's HELLO announced (0 before HELLO).
  uint64_t client_features() const { return client_features_; }

 private:
  AuthPolicy policy_;
  DecodeLimits ready_limits_;
  Decoder decoder_;
  Phase phase_ = Phase::kAwaitHello;
  bool admin_ = false;
  bool admin_daemon_wide_ = false;
  int tenant_ = -1;
  uint8_t version_ = 0;
  uint64_t client_features_ = 0;
};

}  // namespace hypic::protocol
