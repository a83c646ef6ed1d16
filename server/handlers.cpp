#include "server/handlers.h"

#include <fmt/format.h>

#include <cstring>
#include <nlohmann/json.hpp>

#include "core/logging.h"

namespace hypic::server {

namespace {

using protocol::Opcode;

constexpr std::string_view kServerVersion = "hypicd 0.1.0";

protocol::Bytes JsonBytes(const nlohmann::json& j) {
  std::string s = j.dump(2);
  protocol::Bytes out(s.size());
  std::memcpy(out.data(), s.data(), s.size());
  return out;
}

}  // namespace

Handlers::Handlers(const ServerConfig& config, Metrics& metrics, ComputeQueue& compute,
                   ServerControl control)
    : config_(config),
      metrics_(metrics),
      compute_(compute),
      control_(std::move(control)),
      started_(std::chrono::steady_clock::now()) {}

Handlers::~Handlers() = default;

protocol::HelloReply Handlers::HelloInfo() const {
  protocol::HelloReply r;
  r.features = protocol::kFeatureXxh3 | protocol::kFeatureStateInline;
  r.server_version = std::string(kServerVersion);
  r.model_name = config_.model;
  CacheSettings settings;
  r.seam_w = settings.seam_w;
  r.format_version = settings.format_version;
  r.limits.max_frame_body = config_.max_body_bytes;
  r.limits.max_message_bytes = config_.max_body_bytes;
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
    case Opcode::kStats: return done(Stats(req));
    case Opcode::kConfig: return done(Config(req));
    case Opcode::kShutdown: return done(Shutdown(req));
    case Opcode::kPrefill:
    case Opcode::kCompose: return Compute(std::move(req), std::move(done));
    default:
      return done(
          Reply::Error(req, Unsupported(fmt::format("{} is not served by this build",
                                                    protocol::OpcodeName(req.header.opcode)))));
  }
}

Status Handlers::Flush() { return Status::Ok(); }

Reply Handlers::Ping(const Request& req) const {
  auto body = req.Body();
  return Reply::Ok(req, protocol::Bytes(body.begin(), body.end()));
}

Reply Handlers::Stats(const Request& req) const {
  nlohmann::json j;
  j["server"] = {
      {"version", kServerVersion},
      {"uptime_s",
       std::chrono::duration<double>(std::chrono::steady_clock::now() - started_).count()},
      {"connections", control_.connection_count ? control_.connection_count() : 0},
      {"compute_queue_depth", compute_.depth()},
      {"model", config_.model},
  };
  return Reply::Ok(req, JsonBytes(j));
}

Reply Handlers::Config(const Request& req) const {
  nlohmann::json j = nlohmann::json::object();
  for (const auto& k : ConfigKeys()) j[std::string(k.name)] = k.get(config_);
  return Reply::Ok(req, JsonBytes(j));
}

Reply Handlers::Shutdown(const Request& req) const {
  HYPIC_LOG_WARN("SHUTDOWN requested by an admin client");
  if (control_.request_shutdown) control_.request_shutdown("admin SHUTDOWN");
  return Reply::Ok(req);
}

void Handlers::Compute(Request req, Done done) {
  auto shared = std::make_shared<Request>(std::move(req));
  Status st = compute_.Submit(shared->deadline, [this, shared, done](Status ready) {
    if (!ready.ok()) return done(Reply::Error(*shared, ready));
    done(Reply::Error(*shared,
                      Unsupported(fmt::format("{}: the model runtime is not wired into this build",
                                              protocol::OpcodeName(shared->header.opcode)))));
  });
  if (!st.ok()) done(Reply::Error(*shared, st));
}

}  // namespace hypic::server
