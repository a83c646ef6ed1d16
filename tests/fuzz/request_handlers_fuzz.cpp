// Fuzz target: a request sequence against a real Handlers instance (server/handlers.h) with a
// model of "none" over a small host RAM tier, the way a Session drives it: each frame is
// decoded by the connection's protocol::ServerSession, HELLO goes to OnHello, every other
// admitted frame becomes a Request (its tenant, admin grant, body) and is handled. The first
// input byte picks the tenants (bit 0: none configured, the default tenant; or a writer, a
// namespace-bound tenant and an admin token), the trusted unix-socket peer (bit 1) and whether
// the frames' checksums are resealed first (bit 2), so mutations reach the handlers.
// Invariants: every request is answered exactly once and at once (without a model nothing is
// queued), with its own opcode and request id; no reply is INTERNAL (a broken invariant); a
// PUT succeeds only for a tenant with `write`; compute answers UNSUPPORTED.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <optional>

#include "server/compute_queue.h"
#include "server/config.h"
#include "server/handlers.h"
#include "server/metrics.h"
#include "server/tenants.h"
#include "storage/host_tier.h"
#include "storage/tier_manager.h"
#include "tests/fuzz/protocol_fuzz_bodies.h"

namespace {

using namespace hypic;

constexpr char kTenants[] = R"(admin_token = "adm"

[[tenant]]
name = "writer"
token = "tw"
ops = ["read", "compute", "write"]

[[tenant]]
name = "beta"
token = "tb"
namespace = "beta"
ops = ["read", "write", "admin"]
max_bytes = "1MiB"
)";

const server::ServerConfig& Config(bool tenants) {
  auto load = [](std::string_view toml) {
    auto c = server::LoadConfigWithToml(
        toml, "fuzz.toml", {"--model", "none", "--ram-capacity", "4MiB", "--ssd-capacity", "0"},
        [](const std::string&) { return std::optional<std::string>(); });
    if (!c.ok()) std::abort();  // the fixed configs are valid
    return std::move(c).value();
  };
  static const server::ServerConfig plain = load(""), with_tenants = load(kTenants);
  return tenants ? with_tenants : plain;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace hypic::protocol;
  if (size == 0) return 0;
  static server::Metrics metrics;
  static server::ComputeQueue compute(1, 4);
  const server::ServerConfig& config = Config((data[0] & 1) != 0);
  server::Tenants tenants(config);
  auto store = storage::TierManager::Create(
      {}, nullptr, std::make_unique<storage::HostTier>(*config.ram_capacity), nullptr);
  if (!store.ok()) std::abort();
  server::Handlers handlers(
      config, metrics, compute,
      server::ServerControl{[](const std::string&) {}, [] { return size_t{1}; }, /*peer_stats=*/{}},
      **store, nullptr, nullptr, nullptr);
  ServerSession session(tenants.Policy((data[0] & 2) != 0), handlers.ReadyLimits());

  Bytes frames(reinterpret_cast<const std::byte*>(data + 1),
               reinterpret_cast<const std::byte*>(data + size));
  if (data[0] & 4) fuzz::ResealFrames(frames);
  ByteSpan in(frames);
  while (!in.empty()) {
    Frame frame;
    size_t consumed = 0;
    DecodeStatus st = session.Decode(in, &consumed, &frame);
    if (st != DecodeStatus::kOk) return 0;  // the session answers and closes, or waits
    in = in.subspan(consumed);
    if (!session.Admit(frame.header).ok()) {
      if (session.phase() != ServerSession::Phase::kReady) return 0;  // fatal before HELLO
      continue;
    }
    if (frame.header.opcode == Opcode::kHello) {
      auto hello = Decode<HelloRequest>(frame.body);
      HelloReply info = handlers.HelloInfo();
      if (!hello.ok() || !session.OnHello(*hello, &info).ok()) return 0;
      continue;
    }
    if (frame.header.has_more()) continue;  // refused by the session before any handler
    server::Request req;
    req.header = frame.header;
    req.ext.assign(frame.ext.begin(), frame.ext.end());
    if (!frame.body.empty()) {
      auto body = HostBuffer::CopyOf(frame.body);
      if (!body.ok()) return 0;
      req.body = std::make_shared<const HostBuffer>(std::move(body).value());
    }
    req.received = server::Clock::now();
    req.deadline = req.received + std::chrono::seconds(5);
    req.admin = session.admin();
    req.admin_daemon_wide = session.admin_daemon_wide();
    req.tenant = tenants.Get(session.tenant());
    int answers = 0;
    std::optional<server::Reply> reply;
    handlers.Handle(req, [&](server::Reply r) {
      ++answers;
      reply = std::move(r);
    });
    if (answers != 1) std::abort();  // nothing is queued without a model
    if (reply->request_id != frame.header.request_id || reply->opcode != frame.header.opcode) {
      std::abort();
    }
    if (reply->status == StatusCode::kInternal) std::abort();
    if (frame.header.opcode == Opcode::kPut && reply->status == StatusCode::kOk &&
        (req.tenant == nullptr || (req.tenant->config.permissions & kPermWrite) == 0)) {
      std::abort();
    }
    if ((frame.header.opcode == Opcode::kPrefill || frame.header.opcode == Opcode::kCompose) &&
        reply->status != StatusCode::kUnsupported) {
      std::abort();
    }
  }
  return 0;
}
