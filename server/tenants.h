// Tenants: the daemon's tenants at run time (EffectiveTenants of the config), each with its
// compute-in-flight counter, and the AuthPolicy a connection's HELLO is checked against.
//
// A tenant is bound to its namespace (docs/operations-server.md, "Tenants"): every key its
// connections address must be a key of that namespace. The binding needs no table of keys:
// a SegmentKey hashes the namespace in (core/segment_key.h), every entry records its namespace
// in its header, and the entry parser checks the key against it, so a stored key's namespace
// is fixed and the store can filter by it. A tenant of namespace "" is unbound (the
// single-tenant default): its requests name their namespace, as before tenants existed.
//
// Ownership: the Server owns the Tenants; sessions and requests hold Tenant pointers, valid
// for the Server's life. Thread-safe: the configuration is immutable, the counter atomic.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "protocol/session.h"
#include "server/config.h"

namespace hypic::server {

struct Tenant {
  explicit Tenant(TenantConfig c) : config(std::move(c)) {}

  // The namespace its keys must be in; nullptr when unbound (namespace "").
  const std::string* bound_namespace() const {
    return config.name_space.empty() ? nullptr : &config.name_space;
  }

  const TenantConfig config;
  // PREFILL and COMPOSE requests of this tenant queued or running (max_compute_inflight).
  std::atomic<uint32_t> compute_inflight{0};
};

class Tenants {
 public:
  explicit Tenants(const ServerConfig& config);

  // The policy of one connection; `trusted_peer` as in protocol::AuthPolicy.
  protocol::AuthPolicy Policy(bool trusted_peer) const;
  // The tenant of ServerSession::tenant()'s index; nullptr for -1 (no tenant).
  Tenant* Get(int index) const;

 private:
  std::vector<std::unique_ptr<Tenant>> tenants_;  // pointers: a Tenant holds an atomic
  protocol::AuthPolicy policy_;                   // trusted_peer false
};

}  // namespace hypic::server
