// ServerSession: the pure, per-connection state machine of the server side of the protocol
// (README "Connection lifecycle" and "Auth"). It owns the connection's Decoder and moves it
// from the pre-auth limits (HELLO and PING, tiny bodies) to the full limits once HELLO has
// negotiated a version and checked the tokens; then Admit() gates every request (negotiated
// version, admin grant). It does no I/O: the daemon feeds it bytes and acts on the results,
// and the request-sequence fuzzer drives it the same way.
// Not thread-safe; one per connection (the daemon runs each connection on one strand).
#pragma once

#include <string>

#include "core/status.h"
#include "protocol/decoder.h"
#include "protocol/messages.h"

namespace hypic::protocol {

struct AuthPolicy {
  std::string token;          // empty: no client token required
  std::string admin_token;    // empty: admin is granted to trusted peers only
  bool trusted_peer = false;  // the connection came over loopback TCP or the unix socket
};

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
  // kVersionMismatch (no common version), kUnauthorized (a token is missing or wrong).
  Status OnHello(const HelloRequest& request, HelloReply* reply);

  // OK when the request may run; kUnauthorized before HELLO (other than PING) or for an admin
  // opcode without the admin grant; kVersionMismatch when the frame's version is not the
  // negotiated one.
  Status Admit(const FrameHeader& header) const;

  Phase phase() const { return phase_; }
  bool admin() const { return admin_; }
  uint8_t version() const { return version_; }
  // The feature bits the client's HELLO announced (0 before HELLO).
  uint64_t client_features() const { return client_features_; }

 private:
  AuthPolicy policy_;
  DecodeLimits ready_limits_;
  Decoder decoder_;
  Phase phase_ = Phase::kAwaitHello;
  bool admin_ = false;
  uint8_t version_ = 0;
  uint64_t client_features_ = 0;
};

}  // namespace hypic::protocol
