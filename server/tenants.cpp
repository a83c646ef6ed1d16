#include "server/tenants.h"

namespace hypic::server {

Tenants::Tenants(const ServerConfig& config) {
  policy_.tenants.clear();
  policy_.admin_token = config.admin_token;
  for (TenantConfig& t : EffectiveTenants(config)) {
    policy_.tenants.push_back(protocol::AuthTenant{t.token, t.permissions});
    tenants_.push_back(std::make_unique<Tenant>(std::move(t)));
  }
}

protocol::AuthPolicy Tenants::Policy(bool trusted_peer) const {
  protocol::AuthPolicy p = policy_;
  p.trusted_peer = trusted_peer;
  return p;
}

Tenant* Tenants::Get(int index) const {
  if (index < 0 || static_cast<size_t>(index) >= tenants_.size()) return nullptr;
  return tenants_[static_cast<size_t>(index)].get();
}

}  // namespace hypic::server
