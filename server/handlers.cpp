#include "server/handlers.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>
#include <numeric>
#include <optional>

#include "core/logging.h"
#include "gpu/runtime/model_jobs.h"
#include "protocol/wire_codec.h"
#include "server/state_stream.h"
#include "server/tenants.h"
#include "storage/entry_format.h"

namespace hypic::server {

using namespace std::chrono_literals;

namespace {

using protocol::Opcode;

constexpr std::string_view kServerVersion = "hypicd 0.1.0";

protocol::Bytes JsonBytes(const nlohmann::json& j) {
  std::string s = j.dump(2);
  protocol::Bytes out(s.size());
  std::memcpy(out.data(), s.data(), s.size());
  return out;
}

// storage::TierKind (hbm=0, host=1, ssd=2) -> protocol::Tier (none=0, hbm=1, host=2, ssd=3).
protocol::Tier WireTier(storage::TierKind k) {
  return static_cast<protocol::Tier>(static_cast<uint8_t>(k) + 1);
}
std::optional<storage::TierKind> StoreTier(protocol::Tier t) {
  if (t == protocol::Tier::kNone) return std::nullopt;
  return static_cast<storage::TierKind>(static_cast<uint8_t>(t) - 1);
}

uint64_t Micros(std::chrono::steady_clock::duration d) {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::microseconds>(d).count());
}

Status CheckDeadline(const Request& req) {
  if (std::chrono::steady_clock::now() > req.deadline) {
    return DeadlineExceeded(
        fmt::format("{} ran past its deadline; the rest of the work was cancelled",
                    protocol::OpcodeName(req.header.opcode)));
  }
  return Status::Ok();
}

}  // namespace

Handlers::Handlers(const ServerConfig& config, Metrics& metrics, ComputeQueue& compute,
                   ServerControl control, storage::TierManager& store,
                   std::shared_ptr<const model::Model> model, runtime::MissScheduler* scheduler,
                   model::PrefixCache* prefix_cache, model::ComputeDevice combine_device)
    : config_(config),
      metrics_(metrics),
      compute_(compute),
      control_(std::move(control)),
      store_(store),
      model_(std::move(model)),
      scheduler_(scheduler),
      prefix_cache_(prefix_cache),
      combine_device_(combine_device),
      started_(Clock::now()) {}

Handlers::~Handlers() = default;

protocol::HelloReply Handlers::HelloInfo() const {
  protocol::HelloReply r;
  r.features = protocol::kFeatureXxh3 | protocol::kFeatureChunked | protocol::kFeatureStateInline |
               protocol::kFeatureStateFirst | protocol::kFeaturePrefillEntries;
  r.server_version = std::string(kServerVersion);
  r.model_name = config_.model;
  if (model_) r.model_fingerprint = model_->fingerprint();
  CacheSettings settings;
  r.seam_w = config_.seam_w;
  r.format_version = settings.format_version;
  r.limits.max_frame_body = config_.max_body_bytes;
  r.limits.max_message_bytes = config_.max_message_bytes;
  r.limits.max_inflight_requests = config_.max_inflight_requests;
  r.limits.max_inflight_bytes = config_.max_inflight_bytes;
  r.limits.max_keys = protocol::kMaxHasKeys;
  r.limits.max_parts = protocol::kMaxParts;
  return r;
}

protocol::DecodeLimits Handlers::ReadyLimits() const {
  protocol::DecodeLimits l;
  l.max_body = config_.max_body_bytes;
  return l;
}

void Handlers::Handle(Request req, Done done) {
  switch (req.header.opcode) {
    case Opcode::kPing: return done(Ping(req));
    case Opcode::kHas: return done(Has(req));
    case Opcode::kGet: return done(Get(req));
    case Opcode::kPut: return done(Put(req));
    case Opcode::kDel: return done(Del(req));
    case Opcode::kStats: return done(Stats(req));
    case Opcode::kEvict: return done(Evict(req));
    case Opcode::kPin: return done(PinOp(req, true));
    case Opcode::kUnpin: return done(PinOp(req, false));
    case Opcode::kFlush: return done(FlushOp(req));
    case Opcode::kConfig: return done(Config(req));
    case Opcode::kShutdown: return done(Shutdown(req));
    case Opcode::kList: return done(List(req));
    case Opcode::kVerify: return done(Verify(req));
    case Opcode::kPrefill:
    case Opcode::kCompose: return Compute(std::move(req), std::move(done));
    default:
      return done(
          Reply::Error(req, BadRequest(fmt::format("{} is not a request opcode",
                                                   protocol::OpcodeName(req.header.opcode)))));
  }
}

Status Handlers::Flush() { return store_.Flush(); }

Reply Handlers::Ping(const Request& req) const {
  auto body = req.Body();
  return Reply::Ok(req, protocol::Bytes(body.begin(), body.end()));
}

Reply Handlers::Has(const Request& req) {
  auto has = protocol::Decode<protocol::HasRequest>(req.Body());
  if (!has.ok()) return Reply::Error(req, has.status());
  std::vector<SegmentKey> keys;
  keys.reserve(has->keys.size());
  for (const auto& k : has->keys) keys.emplace_back(k);
  auto probe = store_.Probe(keys, /*pin_hits=*/false, BoundNamespace(req));
  protocol::HasReply reply;
  reply.tiers.reserve(keys.size());
  for (const auto& t : probe.tiers) reply.tiers.push_back(t ? WireTier(*t) : protocol::Tier::kNone);
  return Reply::Ok(req, protocol::Encode(reply));
}

Reply Handlers::Get(const Request& req) {
  SegmentKey key(req.header.key);
  // The tier first (it is not part of the handle), then the bytes. A key of another namespace
  // is absent for this tenant; it stays so, as a key's namespace is hashed into it.
  auto probe =
      store_.Probe(std::span<const SegmentKey>(&key, 1), /*pin_hits=*/false, BoundNamespace(req));
  if (!probe.tiers[0]) return Reply::Error(req, NotFound("no entry " + key.ToHex()));
  auto handle = store_.Get(key, storage::Access::kHostBytes);
  if (!handle.ok()) return Reply::Error(req, handle.status());
  protocol::GetInfo info;
  info.tier = WireTier(*probe.tiers[0]);
  Reply r = Reply::Ok(req, {}, protocol::Encode(info));
  // Zero copy: the reply streams the tier's bytes; the handle keeps them alive until written.
  r.view = (*handle)->host;
  r.view_owner = *handle;
  r.body_checksum = GetChecksum((*handle)->owner, r.ext, r.view, req.header.checksum_kind,
                                static_cast<uint8_t>(info.tier));
  return r;
}

uint64_t Handlers::GetChecksum(const std::shared_ptr<const void>& owner, protocol::ByteSpan ext,
                               protocol::ByteSpan body, protocol::ChecksumKind kind, uint8_t tier) {
  SumKey key{body.data(), tier, static_cast<uint8_t>(kind)};
  {
    MutexLock lock(&sums_mu_);
    auto it = sums_.find(key);
    if (it != sums_.end() && !it->second.owner.owner_before(owner) &&
        !owner.owner_before(it->second.owner) && !it->second.owner.expired()) {
      return it->second.sum;
    }
  }
  uint64_t sum = protocol::BodyChecksum(kind, ext, body);
  MutexLock lock(&sums_mu_);
  if (sums_.size() >= kMaxCachedSums) {
    std::erase_if(sums_, [](const auto& kv) { return kv.second.owner.expired(); });
    if (sums_.size() >= kMaxCachedSums) sums_.clear();
  }
  sums_[key] = SumValue{owner, sum};
  return sum;
}

Reply Handlers::Put(const Request& req) {
  auto options = protocol::DecodePutOptions(req.ext);
  if (!options.ok()) return Reply::Error(req, options.status());
  if (!req.body) return Reply::Error(req, BadRequest("PUT without an entry body"));
  // A pin is an admin operation (PIN): a PUT may not take one on the side.
  if (options->pin && !req.admin) {
    return Reply::Error(req, Unauthorized("PUT with pin needs the admin grant; use PIN"));
  }
  // Full validation (layout, every checksum, key == hash of its contents) before anything is
  // stored; the entry then views the request's buffer, which the store keeps.
  auto entry = storage::Parse(req.body);
  if (!entry.ok()) return Reply::Error(req, entry.status().WithContext("PUT entry"));
  if ((*entry)->key().hash() != req.header.key) {
    return Reply::Error(req,
                        BadRequest(fmt::format("PUT: header key {} but the entry is {}",
                                               req.header.key.ToHex(), (*entry)->key().ToHex())));
  }
  if (const std::string* ns = BoundNamespace(req); ns && (*entry)->meta().name_space != *ns) {
    return Reply::Error(
        req, Unauthorized(fmt::format("PUT: the entry is of namespace '{}', this tenant's is '{}'",
                                      (*entry)->meta().name_space, *ns)));
  }
  // An entry already stored is left as it is (TierManager::Put): no second writer, and the
  // options apply to a new entry only, which is also all that counts against a quota.
  if (req.tenant->config.max_bytes && !Visible(req, (*entry)->key())) {
    if (Status quota = CheckBytesQuota(req, req.body->size()); !quota.ok()) {
      return Reply::Error(req, quota);
    }
  }
  storage::PutOptions put;
  put.ttl = std::chrono::seconds(options->ttl_s);
  put.pin = options->pin;
  Status st = store_.Put(req.body, put);
  if (!st.ok()) return Reply::Error(req, st);
  return Reply::Ok(req);
}

Reply Handlers::Del(const Request& req) {
  storage::EvictRequest evict;
  evict.key = SegmentKey(req.header.key);
  if (const std::string* ns = BoundNamespace(req)) evict.name_space = *ns;
  auto result = store_.Evict(evict);
  if (result.entries == 0) {
    if (result.skipped_pinned > 0) {
      return Reply::Error(req, Busy("the entry is pinned; UNPIN it first"));
    }
    return Reply::Error(req, NotFound("no entry " + req.header.key.ToHex()));
  }
  return Reply::Ok(req);
}

Reply Handlers::PinOp(const Request& req, bool pin) {
  SegmentKey key(req.header.key);
  if (!Visible(req, key)) return Reply::Error(req, NotFound("no entry " + key.ToHex()));
  Status st = pin ? store_.Pin(key) : store_.Unpin(key);
  return st.ok() ? Reply::Ok(req) : Reply::Error(req, st);
}

Reply Handlers::Evict(const Request& req) {
  auto in = protocol::Decode<protocol::EvictRequest>(req.Body());
  if (!in.ok()) return Reply::Error(req, in.status());
  storage::EvictRequest evict;
  switch (in->by) {
    case protocol::EvictBy::kKey: evict.key = SegmentKey(in->key); break;
    case protocol::EvictBy::kNamespace: evict.name_space = in->name_space; break;
    case protocol::EvictBy::kTier:
      evict.tier = StoreTier(in->tier);
      if (!evict.tier) return Reply::Error(req, BadRequest("EVICT by tier needs a tier"));
      break;
    case protocol::EvictBy::kBytes:
      if (in->bytes == 0) return Reply::Error(req, BadRequest("EVICT by bytes needs bytes > 0"));
      evict.tier = StoreTier(in->tier);
      evict.max_bytes = in->bytes;
      break;
    case protocol::EvictBy::kAll: break;
  }
  protocol::EvictReply out;
  if (const std::string* ns = BoundNamespace(req)) {
    // Only this tenant's entries; another namespace has none for it.
    if (evict.name_space && *evict.name_space != *ns) return Reply::Ok(req, protocol::Encode(out));
    evict.name_space = *ns;
  }
  auto result = store_.Evict(evict);
  out.entries = result.entries;
  out.bytes = result.bytes;
  return Reply::Ok(req, protocol::Encode(out));
}

Reply Handlers::FlushOp(const Request& req) {
  Status st = store_.Flush();
  return st.ok() ? Reply::Ok(req) : Reply::Error(req, st);
}

Reply Handlers::List(const Request& req) const {
  auto in = protocol::Decode<protocol::ListRequest>(req.Body());
  if (!in.ok()) return Reply::Error(req, in.status());
  std::optional<std::string> ns;
  if (!in->name_space.empty()) ns = in->name_space;
  if (const std::string* bound = BoundNamespace(req)) {
    if (ns && *ns != *bound) return Reply::Ok(req, protocol::Encode(protocol::ListReply{}));
    ns = *bound;
  }
  auto all = store_.List(ns);
  auto tier = StoreTier(in->tier);
  if (tier) {
    std::erase_if(all, [&](const storage::EntryListing& e) {
      return (e.tier_mask & (1u << static_cast<uint8_t>(*tier))) == 0;
    });
  }
  // The cursor is the position after the last entry returned (keys are listed in order).
  uint64_t start = std::min<uint64_t>(in->cursor, all.size());
  uint64_t limit = std::clamp<uint64_t>(in->limit, 1, protocol::kMaxListEntries);
  uint64_t end = std::min<uint64_t>(start + limit, all.size());
  protocol::ListReply out;
  out.next_cursor = end < all.size() ? end : 0;
  for (uint64_t i = start; i < end; ++i) {
    const auto& e = all[i];
    protocol::ListEntry le;
    le.key = e.info.key.hash();
    le.tier = WireTier(tier.value_or(e.tier));
    le.name_space = e.info.name_space;
    le.n_tokens = e.info.n_tokens;
    le.bytes = e.info.bytes;
    le.hits = e.hits;
    le.last_access_ms = static_cast<uint64_t>(
        std::chrono::duration_cast<std::chrono::milliseconds>(e.last_access.time_since_epoch())
            .count());
    le.pins = e.inflight_pins + (e.pinned ? 1 : 0);
    le.ttl_s = e.ttl_left
                   ? static_cast<uint32_t>(
                         std::chrono::duration_cast<std::chrono::seconds>(*e.ttl_left).count())
                   : 0;
    out.entries.push_back(std::move(le));
  }
  return Reply::Ok(req, protocol::Encode(out));
}

Reply Handlers::Verify(const Request& req) {
  std::vector<SegmentKey> keys;
  const std::string* bound = BoundNamespace(req);
  if (req.header.key.IsZero()) {
    for (const auto& e : store_.List(bound ? std::optional<std::string>(*bound) : std::nullopt)) {
      keys.push_back(e.info.key);
    }
  } else {
    keys.emplace_back(req.header.key);
    if (!Visible(req, keys[0])) return Reply::Error(req, NotFound("no entry " + keys[0].ToHex()));
  }
  protocol::VerifyReply out;
  for (const auto& key : keys) {
    auto handle = store_.Get(key, storage::Access::kHostBytes);
    if (!handle.ok() && handle.status().code() == StatusCode::kNotFound &&
        !req.header.key.IsZero()) {
      return Reply::Error(req, handle.status());
    }
    ++out.checked;
    // Get already verifies SSD and device copies; host bytes get the full parse here.
    Status st =
        handle.ok() ? storage::ParseView((*handle)->host, *handle).status() : handle.status();
    if (!st.ok() && st.code() != StatusCode::kNotFound) {
      ++out.bad;
      if (out.bad_keys.size() < protocol::kMaxVerifyBadKeys) out.bad_keys.push_back(key.hash());
      HYPIC_LOG_WARN("VERIFY: entry {} failed: {}", key.ToHex(), st.ToString());
    }
  }
  return Reply::Ok(req, protocol::Encode(out));
}

Reply Handlers::Stats(const Request& req) const {
  nlohmann::json j;
  j["server"] = {
      {"version", kServerVersion},
      {"uptime_s", std::chrono::duration<double>(Clock::now() - started_).count()},
      {"connections", control_.connection_count ? control_.connection_count() : 0},
      {"compute_queue_depth", compute_.depth()},
      {"model", config_.model},
  };
  nlohmann::json tiers = nlohmann::json::array();
  for (const auto& t : store_.Stats()) {
    const auto& c = t.counters;
    tiers.push_back({{"tier", storage::TierKindName(t.kind)},
                     {"entries", c.entries},
                     {"bytes", c.bytes},
                     {"capacity", c.capacity},
                     {"hits", c.hits},
                     {"misses", c.misses},
                     {"inserts", c.inserts},
                     {"evictions", c.evictions},
                     {"promotions", c.promotions},
                     {"demotions", c.demotions},
                     {"checksum_failures", c.checksum_failures},
                     {"io_errors", c.io_errors},
                     {"degraded", c.degraded}});
    if (t.kind == storage::TierKind::kRemote) {
      tiers.back()["bytes_read"] = c.bytes_read;
      tiers.back()["bytes_written"] = c.bytes_written;
      tiers.back()["nodes"] = c.nodes;
      tiers.back()["nodes_degraded"] = c.nodes_degraded;
      tiers.back()["redirects"] = c.redirects;
    }
  }
  j["tiers"] = std::move(tiers);
  if (const auto nodes = store_.RemoteNodes(); !nodes.empty()) {
    nlohmann::json rows = nlohmann::json::array();
    for (const auto& n : nodes) {
      rows.push_back({{"name", n.name},
                      {"slots", n.slots},
                      {"degraded", n.degraded},
                      {"io_errors", n.io_errors}});
    }
    j["remote_nodes"] = std::move(rows);
  }
  if (const auto peers = control_.peer_stats ? control_.peer_stats() : std::vector<PeerStats>();
      !peers.empty()) {
    nlohmann::json rows = nlohmann::json::array();
    for (const PeerStats& p : peers) {
      rows.push_back({{"name", p.address},
                      {"up", p.up},
                      {"refused", p.refused},
                      {"jobs", p.jobs_ok},
                      {"failures", p.jobs_failed},
                      {"timeouts", p.timeouts},
                      {"errors", p.errors},
                      {"bad_entries", p.bad_entries},
                      {"refusals", p.refusals},
                      {"tokens", p.tokens},
                      {"bytes_received", p.bytes_received},
                      {"tokens_per_s", p.tokens_per_s},
                      {"bytes_per_s", p.bytes_per_s},
                      {"last_error", p.last_error}});
    }
    j["peers"] = std::move(rows);
    j["scheduler"] = {{"failovers", scheduler_ ? scheduler_->stats().failovers : 0}};
  }
  if (prefix_cache_) {
    model::PrefixCacheStats p = prefix_cache_->Stats();
    j["prefix_cache"] = {{"nodes", p.nodes},
                         {"bytes", p.bytes},
                         {"capacity", p.capacity_bytes},
                         {"runs", p.runs},
                         {"reused_parts", p.reused_parts},
                         {"reused_tokens", p.reused_tokens},
                         {"computed_tokens", p.computed_tokens},
                         {"evictions", p.evictions}};
  }
  return Reply::Ok(req, JsonBytes(j));
}

Reply Handlers::Config(const Request& req) const {
  nlohmann::json j = nlohmann::json::object();
  for (const auto& k : ConfigKeys()) j[std::string(k.name)] = k.get(config_);
  nlohmann::json tenants = nlohmann::json::array();
  for (const TenantConfig& t : EffectiveTenants(config_)) {
    nlohmann::json ops = nlohmann::json::array();
    for (std::string_view name : protocol::PermissionNames(t.permissions)) {
      ops.push_back(std::string(name));
    }
    nlohmann::json tj = {{"name", t.name},
                         {"token", t.token.empty() ? "" : "<set>"},
                         {"namespace", t.name_space},
                         {"ops", std::move(ops)}};
    if (t.max_bytes) tj["max_bytes"] = *t.max_bytes;
    if (t.max_compute_inflight) tj["max_compute_inflight"] = *t.max_compute_inflight;
    tenants.push_back(std::move(tj));
  }
  j["tenant"] = std::move(tenants);
  return Reply::Ok(req, JsonBytes(j));
}

Reply Handlers::Shutdown(const Request& req) const {
  HYPIC_LOG_WARN("SHUTDOWN requested by an admin client");
  if (control_.request_shutdown) control_.request_shutdown("admin SHUTDOWN");
  return Reply::Ok(req);
}

void Handlers::Compute(Request req, Done done) {
  if (!model_) {
    return done(Reply::Error(
        req, Unsupported(fmt::format("{}: this daemon serves no model (model = \"none\")",
                                     protocol::OpcodeName(req.header.opcode)))));
  }
  Tenant* tenant = req.tenant;  // non-null: the session admits compute only with a tenant
  const std::optional<uint32_t> limit = tenant->config.max_compute_inflight;
  if (tenant->compute_inflight.fetch_add(1) >=
      limit.value_or(std::numeric_limits<uint32_t>::max())) {
    tenant->compute_inflight.fetch_sub(1);
    metrics_.QuotaRefused(tenant->config.name, "compute_inflight");
    return done(
        Reply::Error(req, QuotaExceeded(fmt::format("tenant '{}' has {} compute requests in flight "
                                                    "(max_compute_inflight)",
                                                    tenant->config.name, *limit))));
  }
  // The slot is given back when the reply is produced, whichever path produces it.
  Done release = [tenant, done = std::move(done)](Reply reply) {
    tenant->compute_inflight.fetch_sub(1);
    done(std::move(reply));
  };
  auto shared = std::make_shared<Request>(std::move(req));
  Status st = compute_.Submit(shared->deadline, [this, shared, release](Status ready) {
    if (!ready.ok()) return release(Reply::Error(*shared, ready));
    bool compose = shared->header.opcode == Opcode::kCompose;
    auto body = compose ? Compose(*shared) : Prefill(*shared);
    if (!body.ok()) return release(Reply::Error(*shared, body.status()));
    release(Reply::Ok(*shared, std::move(body).value()));
  });
  if (!st.ok()) release(Reply::Error(*shared, st));
}

const std::string* Handlers::BoundNamespace(const Request& req) {
  if (protocol::IsAdminOpcode(req.header.opcode) && req.admin_daemon_wide) return nullptr;
  return req.tenant != nullptr ? req.tenant->bound_namespace() : nullptr;
}

Result<std::string> Handlers::ComputeNamespace(const Request& req, const std::string& requested) {
  const std::string* bound = BoundNamespace(req);
  if (bound == nullptr) return requested;
  if (!requested.empty() && requested != *bound) {
    return Unauthorized(fmt::format("{}: namespace '{}', but this token is bound to '{}'",
                                    protocol::OpcodeName(req.header.opcode), requested, *bound));
  }
  return *bound;
}

Status Handlers::CheckBytesQuota(const Request& req, uint64_t adding) {
  if (req.tenant == nullptr || !req.tenant->config.max_bytes) return Status::Ok();
  const TenantConfig& t = req.tenant->config;
  const uint64_t used = store_.NamespaceBytes(t.name_space);
  if (used < *t.max_bytes && adding <= *t.max_bytes - used) return Status::Ok();
  metrics_.QuotaRefused(t.name, "bytes");
  return QuotaExceeded(fmt::format(
      "tenant '{}' stores {} bytes in namespace '{}'; {} more would pass its max_bytes {}", t.name,
      used, t.name_space, adding, *t.max_bytes));
}

bool Handlers::Visible(const Request& req, const SegmentKey& key) {
  return store_.Probe(std::span<const SegmentKey>(&key, 1), /*pin_hits=*/false, BoundNamespace(req))
      .tiers[0]
      .has_value();
}

uint32_t Handlers::SeamOf(uint32_t requested) const {
  return requested == protocol::kDefaultSeam ? config_.seam_w : requested;
}

model::SegmentOptions Handlers::SegmentOptionsOf(const std::string& name_space,
                                                 uint32_t seam_w) const {
  model::SegmentOptions options;
  options.seam_w = seam_w;
  options.name_space = name_space;
  options.entry_dtypes = config_.entry_dtype;
  options.device = combine_device_;
  return options;
}

SegmentKey Handlers::KeyOf(const std::string& name_space, uint32_t seam_w,
                           std::span<const uint32_t> tokens) const {
  return SegmentKey::Compute(name_space, model_->fingerprint(),
                             SegmentOptionsOf(name_space, seam_w).Settings(), tokens);
}

Result<Handlers::EntryPtr> Handlers::Lookup(const SegmentKey& key, protocol::Tier* tier,
                                            const std::string* only_namespace, Reader reader) {
  auto probe =
      store_.Probe(std::span<const SegmentKey>(&key, 1), /*pin_hits=*/false, only_namespace);
  if (!probe.tiers[0]) return EntryPtr();
  // A pass on a CUDA device reads the entry where the HBM tier holds it on that device (made
  // there now if it is only in host RAM or on SSD); a CPU pass reads host bytes, verified.
  const bool on_device =
      reader == Reader::kCombinePass && combine_device_.kind == gpu::BackendKind::kCuda;
  auto handle = store_.Get(key, on_device ? storage::Access::kDevice : storage::Access::kHostBytes);
  if (!handle.ok()) {
    if (handle.status().code() == StatusCode::kNotFound) return EntryPtr();  // raced an evict
    return handle.status();
  }
  *tier = WireTier(*probe.tiers[0]);
  // The only device copies are the HBM tier's, on the combine device (server.cpp).
  return storage::ParseHandle(*handle);
}

protocol::Tier Handlers::StoredTier(const SegmentKey& key) {
  auto probe = store_.Probe(std::span<const SegmentKey>(&key, 1), /*pin_hits=*/false);
  return probe.tiers[0] ? WireTier(*probe.tiers[0]) : protocol::Tier::kNone;
}

Result<protocol::Bytes> Handlers::Prefill(const Request& req) {
  auto start = Clock::now();
  HYPIC_ASSIGN_OR_RETURN(protocol::PrefillRequest in,
                         protocol::Decode<protocol::PrefillRequest>(req.Body()));
  HYPIC_ASSIGN_OR_RETURN(const protocol::PrefillOptions prefill_options,
                         protocol::DecodePrefillOptions(req.ext));
  HYPIC_ASSIGN_OR_RETURN(in.name_space, ComputeNamespace(req, in.name_space));
  uint32_t seam = SeamOf(in.seam_w);
  const model::SegmentOptions options = SegmentOptionsOf(in.name_space, seam);
  protocol::PrefillReply out;
  out.results.resize(in.segments.size());
  std::vector<EntryPtr> entries(in.segments.size());
  // Hits from the store; the misses go to the scheduler together, so they are computed in
  // parallel over the workers (LPT), once per key even across concurrent requests.
  std::vector<runtime::PrefillJob> jobs;
  std::vector<size_t> job_index;
  for (size_t i = 0; i < in.segments.size(); ++i) {
    SegmentKey key = KeyOf(in.name_space, seam, in.segments[i]);
    protocol::PrefillResult& r = out.results[i];
    r.key = key.hash();
    r.n_tokens = static_cast<uint32_t>(in.segments[i].size());
    HYPIC_ASSIGN_OR_RETURN(entries[i], Lookup(key, &r.tier));
    r.was_cached = entries[i] != nullptr;
    if (!entries[i]) {
      jobs.push_back(runtime::MakeSegmentJob(model_, in.segments[i], options));
      // A router's request: computed here, never forwarded to this daemon's own peers.
      jobs.back().local_only = prefill_options.return_entries;
      job_index.push_back(i);
    }
  }
  auto probe_done = Clock::now();
  if (!jobs.empty()) {
    // The misses' entries are stored in the tenant's namespace: checked before they are made.
    HYPIC_RETURN_IF_ERROR(CheckBytesQuota(req, 0));
    HYPIC_ASSIGN_OR_RETURN(auto pending, scheduler_->Submit(std::move(jobs), req.deadline));
    HYPIC_ASSIGN_OR_RETURN(std::vector<EntryPtr> computed, pending->Wait());
    for (size_t j = 0; j < computed.size(); ++j) {
      entries[job_index[j]] = computed[j];
      // The scheduler offers each entry to the store; PREFILL promises it is stored when it
      // answers, so an entry the store did not take is put again and a failure reported.
      if (StoredTier(computed[j]->key()) == protocol::Tier::kNone) {
        HYPIC_ASSIGN_OR_RETURN(auto bytes, HostBytesOf(*computed[j]));
        Status st = store_.Put(bytes);
        if (!st.ok()) return st.WithContext("storing a prefilled entry");
      }
    }
  }
  for (size_t i = 0; i < entries.size(); ++i) {
    protocol::PrefillResult& r = out.results[i];
    HYPIC_ASSIGN_OR_RETURN(auto info, storage::InfoOf(*entries[i]));
    r.bytes = info.bytes;
    if (!r.was_cached) r.tier = StoredTier(SegmentKey(r.key));
  }
  out.timings.probe_us = Micros(probe_done - start);
  out.timings.prefill_us = Micros(Clock::now() - probe_done);
  out.timings.total_us = Micros(Clock::now() - start);
  if (!prefill_options.return_entries) return protocol::Encode(out);
  return PrefillEntriesBody(req, out, entries);
}

Result<std::shared_ptr<const HostBuffer>> Handlers::HostBytesOf(const SegmentEntry& entry) {
  const bool on_device =
      std::any_of(entry.tensors().begin(), entry.tensors().end(),
                  [](const EntryTensor& t) { return t.view.memory() == MemoryKind::kDevice; });
  if (!on_device) return storage::Serialize(entry);
  // An entry viewed in the HBM tier (lookups and deliveries for a CUDA combine device): its
  // stored bytes, copied back and verified.
  HYPIC_ASSIGN_OR_RETURN(storage::EntryHandle handle,
                         store_.Get(entry.key(), storage::Access::kHostBytes));
  return storage::CopyToHost(*handle);
}

Result<protocol::Bytes> Handlers::PrefillEntriesBody(const Request& req,
                                                     protocol::PrefillReply& out,
                                                     std::span<const EntryPtr> entries) {
  std::vector<std::shared_ptr<const HostBuffer>> bytes;
  uint64_t total = protocol::PrefillReplyHeadSize(static_cast<uint32_t>(entries.size()));
  for (size_t i = 0; i < entries.size(); ++i) {
    HYPIC_ASSIGN_OR_RETURN(auto serialized, HostBytesOf(*entries[i]));
    out.results[i].bytes = serialized->size();
    total += serialized->size();
    bytes.push_back(std::move(serialized));
  }
  protocol::Bytes head = protocol::Encode(out);
  const uint64_t limit = req.chunks ? config_.max_message_bytes : config_.max_body_bytes;
  if (total > limit) {
    return TooLarge(fmt::format("the PREFILL reply with its entries is {} bytes, over {} {}", total,
                                req.chunks ? "max_message_bytes" : "max_frame_body", limit));
  }
  if (!req.chunks) {
    protocol::Bytes body = std::move(head);
    body.reserve(total);
    for (const auto& b : bytes) body.insert(body.end(), b->span().begin(), b->span().end());
    return body;
  }
  // Streamed: the head, then each entry from its own buffer, in chunks.
  HYPIC_RETURN_IF_ERROR(req.chunks->Queue(Reply::Ok(req, std::move(head))));
  for (const auto& b : bytes) HYPIC_RETURN_IF_ERROR(QueueChunks(req, b, b->span()));
  HYPIC_RETURN_IF_ERROR(req.chunks->Flush(StreamFlushTimeout()));
  return protocol::Bytes();  // the final chunk: the stream is complete
}

Result<protocol::Bytes> Handlers::Compose(const Request& req) {
  auto start = Clock::now();
  HYPIC_ASSIGN_OR_RETURN(protocol::ComposeRequest in,
                         protocol::Decode<protocol::ComposeRequest>(req.Body()));
  HYPIC_ASSIGN_OR_RETURN(protocol::ComposeOptions reply_options,
                         protocol::DecodeComposeOptions(req.ext));
  HYPIC_ASSIGN_OR_RETURN(in.name_space, ComputeNamespace(req, in.name_space));
  const DType state_dtype = reply_options.state_dtype;
  if (state_dtype != DType::kF32 && state_dtype != DType::kBF16 && state_dtype != DType::kF16) {
    return BadRequest(fmt::format("COMPOSE state_dtype {}: the state is sent as F32, BF16 or F16",
                                  DTypeName(state_dtype)));
  }
  const bool state_first = reply_options.state_layout == protocol::StateLayout::kStateFirst;
  if (state_first && !in.return_state) {
    return BadRequest("COMPOSE state layout state_first needs return_state");
  }
  if (state_first && !req.chunks) {
    return BadRequest(
        "COMPOSE state layout state_first streams the state while the compose runs: announce "
        "CHUNKED in HELLO");
  }
  bool prefix_mode = in.mode == protocol::ComposeMode::kPrefix;
  if (prefix_mode && !prefix_cache_) {
    return Unsupported(
        "COMPOSE mode prefix is disabled on this daemon (prefix_cache_capacity = 0)");
  }
  if (prefix_mode && in.return_state) {
    return BadRequest(
        "COMPOSE mode prefix does not return the state; use mode full for the exact state");
  }
  if (in.parts.empty()) return BadRequest("COMPOSE without parts");
  uint32_t seam = SeamOf(in.seam_w);
  // The prefix mode resolves parts as the full recompute does (tokens only, no entries).
  auto mode = prefix_mode ? model::ComposeMode::kFull
                          : static_cast<model::ComposeMode>(static_cast<uint8_t>(in.mode));
  bool cached_mode = mode == model::ComposeMode::kHypic || mode == model::ComposeMode::kNaive;

  protocol::ComposeReply out;
  std::vector<model::ComposePart> parts(in.parts.size());
  uint64_t probe_us = 0, prefill_us = 0;
  for (size_t i = 0; i < in.parts.size(); ++i) {
    HYPIC_RETURN_IF_ERROR(CheckDeadline(req));
    const auto& p = in.parts[i];
    protocol::PartResult pr;
    model::ComposePart& mp = parts[i];
    if (p.kind == protocol::PartKind::kRaw) {
      mp.kind = model::ComposePart::Kind::kRaw;
      mp.tokens = p.tokens;
      pr.outcome = protocol::PartOutcome::kLive;
      pr.n_tokens = static_cast<uint32_t>(p.tokens.size());
      out.parts.push_back(pr);
      continue;
    }
    mp.kind = model::ComposePart::Kind::kSegment;
    auto t0 = Clock::now();
    if (p.kind == protocol::PartKind::kSegmentKey) {
      // Named by key: the tokens come from the stored entry (one of this tenant's).
      SegmentKey key(p.key);
      HYPIC_ASSIGN_OR_RETURN(EntryPtr entry,
                             Lookup(key, &pr.tier, BoundNamespace(req), Reader::kCombinePass));
      if (!entry) return NotFound(fmt::format("COMPOSE part {}: no entry {}", i, key.ToHex()));
      if (entry->meta().settings.seam_w != seam) {
        return BadRequest(fmt::format("COMPOSE part {}: entry has seam {} but the request uses {}",
                                      i, entry->meta().settings.seam_w, seam));
      }
      // Never a lower precision than this daemon's: a lookup by tokens would not find it.
      const EntryDTypes& have = entry->meta().settings.entry_dtypes;
      if (!have.AtLeastAsPrecise(config_.entry_dtype)) {
        return BadRequest(fmt::format(
            "COMPOSE part {}: entry {} stores {}, less precise than this daemon's entry_dtype {}",
            i, key.ToHex(), have.ToString(), config_.entry_dtype.ToString()));
      }
      mp.tokens = entry->meta().tokens;
      if (cached_mode) mp.entry = entry;
      pr.outcome = protocol::PartOutcome::kHit;
      pr.key = p.key;
      probe_us += Micros(Clock::now() - t0);
    } else {
      mp.tokens = p.tokens;
      SegmentKey key = KeyOf(in.name_space, seam, p.tokens);
      pr.key = key.hash();
      if (cached_mode && p.tokens.size() > seam) {
        // A miss stays without an entry: ColdCompose scatters the misses to the workers.
        HYPIC_ASSIGN_OR_RETURN(mp.entry, Lookup(key, &pr.tier, nullptr, Reader::kCombinePass));
        pr.outcome = mp.entry ? protocol::PartOutcome::kHit : protocol::PartOutcome::kMiss;
        probe_us += Micros(Clock::now() - t0);
      } else {
        pr.outcome = protocol::PartOutcome::kLive;
      }
    }
    pr.n_tokens = static_cast<uint32_t>(mp.tokens.size());
    out.parts.push_back(pr);
  }
  if (std::any_of(out.parts.begin(), out.parts.end(), [](const protocol::PartResult& p) {
        return p.outcome == protocol::PartOutcome::kMiss;
      })) {
    HYPIC_RETURN_IF_ERROR(CheckBytesQuota(req, 0));  // the misses will be stored
  }
  if (in.return_state) {
    // Refuse a reply that cannot be sent before computing it: its size is known from the prompt
    // length and the model (the same check runs on the composed reply below).
    uint64_t n = 0;
    for (const auto& p : out.parts) n += p.n_tokens;
    const model::ModelConfig& c = model_->config();
    uint64_t stream = 4;
    for (int64_t l = 0; l < c.num_layers; ++l) {
      const bool linear = c.layer_kinds[static_cast<size_t>(l)] == model::LayerKind::kLinear;
      const auto u = [](int64_t v) { return static_cast<uint64_t>(v); };
      const uint64_t a = linear ? u(c.linear_value_heads * c.linear_key_dim * c.linear_value_dim)
                                : n * u(c.num_kv_heads * c.head_dim);
      const uint64_t b = linear ? u((c.conv_kernel - 1) * c.conv_channels()) : a;
      stream += (linear ? 40 + 32 : 80) + (a + b) * DTypeSize(state_dtype);
    }
    const uint64_t vocab = static_cast<uint64_t>(c.vocab_size);
    const uint64_t head = 4 + out.parts.size() * 22 + 40 + 4 + 4 +
                          std::min<uint64_t>(in.top_k, vocab) * 8 + 4 +
                          (reply_options.logits == protocol::LogitsMode::kFull ? vocab * 4 : 0) + 1;
    const uint64_t limit = req.chunks ? config_.max_message_bytes : config_.max_body_bytes;
    if (head + stream > limit) {
      return TooLarge(fmt::format(
          "the COMPOSE reply with its {} state would be {} bytes ({} tokens), over {} {}{}",
          DTypeName(state_dtype), head + stream, n,
          req.chunks ? "max_message_bytes" : "max_frame_body", limit,
          req.chunks ? ""
                     : "; announce CHUNKED in HELLO to receive it streamed (up to "
                       "max_message_bytes), or ask for state_dtype bf16"));
    }
  }
  if (mode == model::ComposeMode::kOracle) {
    auto t0 = Clock::now();
    HYPIC_RETURN_IF_ERROR(
        model_->PrefillEntries(parts, mode, SegmentOptionsOf(in.name_space, seam)));
    prefill_us += Micros(Clock::now() - t0);
  }
  HYPIC_RETURN_IF_ERROR(CheckDeadline(req));

  auto t0 = Clock::now();
  model::ComposeOptions options;
  options.mode = mode;
  options.seam_w = seam;
  options.want_state = in.return_state;
  options.device = combine_device_;
  options.deadline = req.deadline;  // a long prompt's combine stops one layer past it
  // State first: each layer leaves as the pass completes it, so the state is not kept.
  std::optional<StateStreamer> streamer;
  if (state_first) {
    streamer.emplace(req, state_dtype, 2 * static_cast<uint32_t>(model_->config().num_layers),
                     protocol::Bytes(), StreamChunkBytes(), StreamFlushTimeout());
    options.want_state = false;
    options.on_layer = [&streamer](uint32_t, std::span<const model::StateTensorView> tensors) {
      return streamer->Layer(tensors);
    };
  }
  Result<model::ComposeResult> composed = Internal("unset");
  if (prefix_mode) {
    composed = ComposePrefix(in.name_space, parts, req.deadline, out);
    out.timings.compose_us = Micros(Clock::now() - t0);
  } else if (cached_mode) {
    // Misses are prefilled on the workers (single flight, LPT), each entry streamed to this
    // thread and stored as it completes; the combine (Compose) runs when the last arrives.
    const model::SegmentOptions segment_options = SegmentOptionsOf(in.name_space, seam);
    runtime::ColdComposeReport report;
    composed = runtime::ColdCompose(*scheduler_, model_, std::move(parts), options, segment_options,
                                    req.deadline, &report);
    prefill_us += static_cast<uint64_t>(report.miss.last_arrival_s * 1e6);
    out.timings.transfer_us = static_cast<uint64_t>(report.miss.transfer_s * 1e6);
    out.timings.compose_us = static_cast<uint64_t>(report.compose_s * 1e6);
  } else {
    composed = model_->Compose(parts, options);
    out.timings.compose_us = Micros(Clock::now() - t0);
  }
  if (!composed.ok()) {
    StatusCode code = composed.status().code();
    if (code == StatusCode::kBadRequest || code == StatusCode::kBusy ||
        code == StatusCode::kTooLarge || code == StatusCode::kDeadlineExceeded ||
        code == StatusCode::kShuttingDown || code == StatusCode::kCancelled) {
      return composed.status();
    }
    return ComputeFailed(composed.status().ToString());
  }
  for (size_t i = 0; i < out.parts.size(); ++i) {
    if (cached_mode && out.parts[i].outcome == protocol::PartOutcome::kMiss) {
      out.parts[i].tier = StoredTier(SegmentKey(out.parts[i].key));
    }
  }
  metrics_.ObserveTtft(std::chrono::duration<double>(Clock::now() - req.received).count());

  const std::vector<float>& logits = composed->logits;
  uint32_t k = std::min<uint32_t>(in.top_k, static_cast<uint32_t>(logits.size()));
  std::vector<uint32_t> order(logits.size());
  std::iota(order.begin(), order.end(), 0u);
  std::partial_sort(order.begin(), order.begin() + k, order.end(), [&](uint32_t a, uint32_t b) {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  });
  for (uint32_t i = 0; i < k; ++i) out.top.push_back({order[i], logits[order[i]]});
  if (reply_options.logits == protocol::LogitsMode::kFull) out.logits = logits;
  out.n_tokens = 0;
  for (const auto& p : out.parts) out.n_tokens += p.n_tokens;
  out.timings.probe_us = probe_us;
  out.timings.prefill_us = prefill_us;
  out.timings.total_us = Micros(Clock::now() - start);
  if (!in.return_state) return protocol::Encode(out);

  out.has_state = true;
  // State first, the stream is out already: the head (has_state and no stream) ends the reply.
  if (state_first) return protocol::Encode(out);
  auto result = std::make_shared<model::ComposeResult>(std::move(composed).value());
  const std::vector<model::StateTensorView> tensors =
      model::StateTensors(model_->config(), result->state);
  protocol::Bytes head = protocol::Encode(out);  // has_state and no stream yet: the head
  const uint64_t total = head.size() + StreamBytes(tensors, state_dtype);
  if (!req.chunks) {
    // One frame: it must fit the frame limit, never a truncated or oversized frame.
    if (total > config_.max_body_bytes) {
      return TooLarge(fmt::format(
          "the COMPOSE reply with its {} state is {} bytes, over max_frame_body {}: announce "
          "CHUNKED in HELLO to receive it streamed (up to max_message_bytes {}), or ask for "
          "state_dtype bf16",
          DTypeName(state_dtype), total, config_.max_body_bytes, config_.max_message_bytes));
    }
    protocol::Bytes body = std::move(head);
    body.reserve(total);
    protocol::WireWriter w(&body);
    w.U32(static_cast<uint32_t>(tensors.size()));
    for (const auto& t : tensors) AppendTensor(body, t, state_dtype);
    return body;
  }
  if (total > config_.max_message_bytes) {
    return TooLarge(
        fmt::format("the COMPOSE reply with its {} state is {} bytes, over max_message_bytes {}",
                    DTypeName(state_dtype), total, config_.max_message_bytes));
  }
  // Head first: layer by layer, every layer's f32 tensors viewing the composed state.
  StateStreamer stream(req, state_dtype, static_cast<uint32_t>(tensors.size()), std::move(head),
                       StreamChunkBytes(), StreamFlushTimeout());
  for (size_t i = 0; i < tensors.size(); i += 2) {
    HYPIC_RETURN_IF_ERROR(stream.Layer(std::span(tensors).subspan(i, 2), result));
  }
  return protocol::Bytes();  // the final chunk: the stream is complete
}

uint64_t Handlers::StreamChunkBytes() const {
  return std::min<uint64_t>(config_.max_body_bytes, kStreamChunk);
}

std::chrono::milliseconds Handlers::StreamFlushTimeout() const {
  // Past the session's write deadline, which closes a connection that stopped reading first.
  return std::chrono::milliseconds(config_.idle_timeout_ms) + 5s;
}

Status Handlers::QueueChunks(const Request& req, std::shared_ptr<const void> owner,
                             protocol::ByteSpan bytes) {
  const uint64_t piece = StreamChunkBytes();
  for (uint64_t at = 0; at < bytes.size(); at += piece) {
    Reply r = Reply::Ok(req);
    r.view_owner = owner;
    r.view = bytes.subspan(at, std::min<uint64_t>(piece, bytes.size() - at));
    HYPIC_RETURN_IF_ERROR(req.chunks->Queue(std::move(r)));
  }
  return Status::Ok();
}

Result<model::ComposeResult> Handlers::ComposePrefix(const std::string& name_space,
                                                     std::span<const model::ComposePart> parts,
                                                     std::chrono::steady_clock::time_point deadline,
                                                     protocol::ComposeReply& out) {
  HYPIC_ASSIGN_OR_RETURN(model::PrefixRunResult run,
                         prefix_cache_->Run(name_space, parts, deadline));
  // The checkpoints live in host RAM: restored parts are host hits whatever they were named
  // by; the rest ran through the model (segments as misses, never stored in the tiers).
  for (size_t i = 0; i < out.parts.size(); ++i) {
    protocol::PartResult& pr = out.parts[i];
    bool raw = parts[i].kind == model::ComposePart::Kind::kRaw;
    if (i < run.reused_parts) {
      pr.outcome = protocol::PartOutcome::kHit;
      pr.tier = protocol::Tier::kHost;
    } else {
      pr.outcome = raw ? protocol::PartOutcome::kLive : protocol::PartOutcome::kMiss;
      pr.tier = protocol::Tier::kNone;
    }
  }
  model::ComposeResult result;
  result.logits = std::move(run.logits);
  result.live_tokens = run.computed_tokens;
  result.cached_tokens = run.reused_tokens;
  return result;
}

}  // namespace hypic::server
