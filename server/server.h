// Server: hypicd's process-level object. It owns the io_contexts and their threads, the TCP
// and unix-socket listeners, the sessions, the compute queue, the handlers, the store and the
// metrics endpoint, and it runs the drain on SIGTERM/SIGINT or an admin SHUTDOWN:
//   1. stop accepting (listeners closed, the unix socket file removed);
//   2. every session finishes its pending requests, answers new ones SHUTTING_DOWN, and
//      closes with GOAWAY(SHUTTING_DOWN); queued compute requests get SHUTTING_DOWN;
//   3. after drain_timeout_ms the remaining connections are closed;
//   4. the store is flushed and closed; Run() returns 0.
//
// Connections over max_connections are accepted, sent a GOAWAY(BUSY) and closed, so the
// client learns why; existing connections are unaffected (RELIABILITY row 7). So are TCP
// connections from an address that already has max_preauth_connections_per_peer connections
// that have not completed HELLO. The ByteBudget (max_pending_request_bytes) is shared by
// every session's partially received bodies.
// Thread-safe: RequestShutdown may be called from any thread; the rest from main.
#pragma once

#include <atomic>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/local/stream_protocol.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>
#include <memory>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "core/byte_budget.h"
#include "core/thread_annotations.h"
#include "gpu/model/compute_device.h"
#include "gpu/model/prefix_cache.h"
#include "gpu/runtime/cost_model.h"
#include "gpu/runtime/miss_scheduler.h"
#include "gpu/runtime/transport.h"
#include "gpu/runtime/worker.h"
#include "server/compute_queue.h"
#include "server/config.h"
#include "server/handlers.h"
#include "server/metrics.h"
#include "server/peer.h"
#include "server/tenants.h"
#include "storage/tier_manager.h"

namespace hypic::server {

class Session;

class Server {
 public:
  // Opens the store (RAM tier, SSD tier under <data_dir>/ssd, HBM tier with CUDA) and loads
  // the model named by `config` (already resolved by ResolveMachineDefaults).
  static Result<std::unique_ptr<Server>> Create(ServerConfig config);
  ~Server();

  // Binds the listeners and the metrics endpoint and writes the ready file.
  Status Start();
  // Serves until drained; returns the process exit code (0 after a clean drain).
  int Run();
  // Thread-safe: begins the drain (idempotent).
  void RequestShutdown(const std::string& reason);

  const ServerConfig& config() const { return config_; }
  Metrics& metrics() { return *metrics_; }
  Handlers& handlers() { return *handlers_; }
  const Tenants& tenants() const { return *tenants_; }
  ByteBudget& pending_budget() { return *pending_; }
  uint16_t tcp_port() const { return tcp_port_; }

  // Session bookkeeping (called by Session on its strand).
  void Unregister(uint64_t id);
  size_t connection_count() const;
  // A connection from TCP address `address`, counted since its admission as not authenticated,
  // completed HELLO or closed.
  void EndPreAuth(const std::string& address);

 private:
  explicit Server(ServerConfig config);
  void AcceptTcp();
  void AcceptUnix();
  // The io_context for the next connection (round robin); called on io_.
  boost::asio::io_context& NextContext();
  template <typename ProtoSocket>
  void Admit(boost::asio::io_context& context, ProtoSocket socket, bool trusted, std::string peer,
             std::string address);
  // Stops every io_context (the end of the drain).
  void StopContexts();
  void BeginDrain(const std::string& reason);
  void OnDrainTick();
  Status WriteReadyFile(uint16_t metrics_port) const;

  // Declaration order matters: the io_context (and the sessions its handlers keep alive) is
  // destroyed before the objects sessions call into.
  ServerConfig config_;
  std::unique_ptr<Metrics> metrics_;
  std::unique_ptr<Tenants> tenants_;
  std::unique_ptr<ByteBudget> pending_;
  std::unique_ptr<storage::TierManager> store_;
  std::shared_ptr<const model::Model> model_;
  // The miss path (with a model): the workers, the transport (host copies, or the HBM tier's
  // copies on a CUDA combine device: hbm_transport.h), the cost models and the scheduler that
  // owns the worker threads (destroyed, and joined, before the store).
  std::vector<std::shared_ptr<Peer>> peers_;  // their workers are in pool_
  std::unique_ptr<runtime::WorkerPool> pool_;
  std::unique_ptr<runtime::Transport> transport_;
  std::unique_ptr<runtime::CostModels> cost_;
  model::ComputeDevice combine_device_;  // where the request threads' passes run
  std::unique_ptr<runtime::MissScheduler> scheduler_;
  // COMPOSE mode `prefix` (with a model and prefix_cache_capacity > 0).
  std::unique_ptr<model::PrefixCache> prefix_cache_;
  std::unique_ptr<ComputeQueue> compute_;
  std::unique_ptr<Handlers> handlers_;
  // One io_context per io thread, each run by that thread alone (concurrency hint 1). A
  // connection is placed on one of them (round robin) for its whole life, so its handlers
  // never hop threads and no scheduler wakes a second thread for work the first could run:
  // with one shared io_context on N threads, those wake-ups (about ten futex calls per
  // request) doubled the server CPU of a GET at one connection. contexts_[0] (io_) also runs
  // the listeners, the signals and the drain.
  std::vector<std::unique_ptr<boost::asio::io_context>> contexts_;
  std::vector<boost::asio::executor_work_guard<boost::asio::io_context::executor_type>> guards_;
  boost::asio::io_context& io_;
  size_t next_context_ = 0;  // on io_: where the next accepted connection goes
  boost::asio::ip::tcp::acceptor tcp_acceptor_;
  boost::asio::local::stream_protocol::acceptor unix_acceptor_;
  boost::asio::signal_set signals_;
  boost::asio::steady_timer drain_timer_;
  uint16_t tcp_port_ = 0;
  std::string unix_path_;

  std::atomic<bool> draining_{false};
  std::atomic<bool> serving_{false};  // the listeners accept (readiness, /readyz)
  std::chrono::steady_clock::time_point drain_started_;
  std::atomic<uint64_t> next_session_id_{1};
  mutable Mutex mu_;
  std::unordered_map<uint64_t, std::weak_ptr<Session>> sessions_ GUARDED_BY(mu_);
  // Per TCP source address: its connections that have not completed HELLO (absent: none).
  std::unordered_map<std::string, uint32_t> preauth_ GUARDED_BY(mu_);
};

}  // namespace hypic::server
