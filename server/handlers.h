// Handlers: what hypicd does with each decoded request. Sessions own the connection state;
// Handlers own the meaning of the operations:
//   HELLO (the server's part; protocol::ServerSession checks versions and tokens), PING;
//   HAS, GET, PUT, DEL -> the tiered store (storage::TierManager);
//   PREFILL, COMPOSE   -> the compute queue, then the model runtime;
//   STATS, EVICT, PIN, UNPIN, FLUSH, CONFIG, SHUTDOWN, LIST, VERIFY (admin only).
//
// Cheap operations answer inline on the calling (session) thread; compute operations are
// queued (BUSY at once when the queue is full) and answer from a compute worker. Either way
// `done` is called exactly once. Thread-safe: one Handlers serves every session concurrently.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include "core/status.h"
#include "protocol/decoder.h"
#include "protocol/messages.h"
#include "server/compute_queue.h"
#include "server/config.h"
#include "server/metrics.h"
#include "server/request.h"

namespace hypic::server {

// What the handlers need from the process around them.
struct ServerControl {
  std::function<void(const std::string& reason)> request_shutdown;
  std::function<size_t()> connection_count;
};

class Handlers {
 public:
  using Done = std::function<void(Reply)>;

  Handlers(const ServerConfig& config, Metrics& metrics, ComputeQueue& compute,
           ServerControl control);
  ~Handlers();

  // The server's part of every HELLO reply (version string, features, model, limits); the
  // connection's protocol::ServerSession adds the negotiated version and the admin grant.
  protocol::HelloReply HelloInfo() const;
  // The limits a connection's decoder gets once HELLO has succeeded.
  protocol::DecodeLimits ReadyLimits() const;

  // Answers `req` (any opcode but HELLO). REQUIRES: the session checked the admin grant.
  void Handle(Request req, Done done);

  // Flushes the store (drain, FLUSH).
  Status Flush();

 private:
  Reply Ping(const Request& req) const;
  Reply Stats(const Request& req) const;
  Reply Config(const Request& req) const;
  Reply Shutdown(const Request& req) const;
  void Compute(Request req, Done done);

  const ServerConfig& config_;
  Metrics& metrics_;
  ComputeQueue& compute_;
  ServerControl control_;
  const std::chrono::steady_clock::time_point started_;
};

}  // namespace hypic::server
