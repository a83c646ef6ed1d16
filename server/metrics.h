// Metrics: hypicd's Prometheus metrics (prometheus-cpp) and the HTTP endpoint that serves them
// on `metrics` (default 127.0.0.1:9411, path /metrics).
//
//   hypic_requests_total{opcode,status}            counter
//   hypic_request_duration_seconds{opcode}          histogram (receipt -> reply queued)
//   hypic_ttft_seconds                              histogram (COMPOSE receipt -> logits ready)
//   hypic_compute_queue_depth                       gauge (queued + running compute requests)
//   hypic_connections / hypic_connections_dropped_total{reason}  (refused or closed by us)
//   hypic_frames_rejected_total{reason}             malformed input by decoder verdict
//   hypic_network_bytes_total{direction}
//   hypic_pending_request_bytes                     gauge (partially received bodies, all
//                                                   connections: max_pending_request_bytes)
//   hypic_pending_request_refusals_total            counter (bodies answered BUSY at that cap)
//   hypic_pass_bytes                                gauge (working memory the running forward
//                                                   passes reserved: max_pass_bytes)
//   hypic_quota_refusals_total{tenant,quota}        requests refused QUOTA_EXCEEDED (quota:
//                                                   bytes, compute_inflight)
//   hypic_tier_{hits,misses,evictions}_total{tier},
//   hypic_tier_{bytes,capacity_bytes,entries}{tier}, hypic_tier_checksum_failures_total{tier},
//   hypic_tier_io_errors_total{tier}, hypic_tier_degraded{tier} (0 or 1) and, for the remote
//   tier, hypic_tier_{read,written}_bytes_total{tier}, hypic_tier_redirects_total{tier} and
//   hypic_tier_nodes{tier}, hypic_tier_nodes_degraded{tier}: read from the store at scrape time
//   hypic_peer_up{peer} (0 or 1), hypic_peer_jobs_total{peer} (entries received and verified),
//   hypic_peer_failures_total{peer} and, by kind, hypic_peer_{timeouts,errors,bad_entries,
//   refusals}_total{peer}, hypic_peer_received_bytes_total{peer},
//   hypic_peer_tokens_per_second{peer} (the speed estimate): read from the peers at scrape time
//   hypic_worker_healthy{worker} (0 once its device is lost), hypic_worker_device_errors_total
//   {worker} (jobs that ended in a CUDA error): the local prefill workers, e.g. "cuda:0"
//
// The hot-path methods are lock-free after the first use of a label set (each series is
// created once and cached). Thread-safe. The HTTP endpoint (metrics_http.h) is owned here and
// stopped before the registry it renders is destroyed.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"
#include "protocol/frame.h"

namespace prometheus {
class Registry;
class Counter;
class Gauge;
class Histogram;
template <typename T>
class Family;
}  // namespace prometheus

namespace hypic::server {

struct Endpoint;
class MetricsHttpEndpoint;

// What the probes report (MetricsHttpEndpoint::Health).
struct MetricsHttpHealth {
  bool live = true;
  bool ready = true;
  std::string detail;
};

// One tier's counters as the store reports them (cumulative since start).
struct TierSample {
  std::string tier;  // "hbm", "host", "ssd", "remote"
  uint64_t hits = 0;
  uint64_t misses = 0;
  uint64_t evictions = 0;
  uint64_t checksum_failures = 0;
  uint64_t bytes = 0;
  uint64_t capacity_bytes = 0;
  uint64_t entries = 0;
  uint64_t io_errors = 0;
  uint64_t degraded = 0;  // 1 while the tier is degraded
  uint64_t bytes_read = 0;
  uint64_t bytes_written = 0;
  uint64_t nodes = 0;           // remote: nodes serving slots
  uint64_t nodes_degraded = 0;  // remote: of those, the ones with an open breaker
  uint64_t redirects = 0;       // remote: cluster MOVED/ASK redirections followed
};
using TierSampler = std::function<std::vector<TierSample>()>;

// One peer's counters (server/peer.h PeerStats), cumulative since start.
struct PeerSample {
  std::string peer;  // host:port
  uint64_t up = 0;   // 1 unless backing off after a failure
  uint64_t jobs = 0;
  uint64_t failures = 0;
  uint64_t timeouts = 0;
  uint64_t errors = 0;
  uint64_t bad_entries = 0;
  uint64_t refusals = 0;
  uint64_t bytes_received = 0;
  uint64_t tokens_per_s = 0;
};
using PeerSampler = std::function<std::vector<PeerSample>()>;

// One local prefill worker's health (runtime::Worker).
struct WorkerSample {
  std::string worker;  // "cpu:0", "cuda:1"
  uint64_t healthy = 1;
  uint64_t device_errors = 0;
};
using WorkerSampler = std::function<std::vector<WorkerSample>()>;

class Metrics {
 public:
  Metrics();
  ~Metrics();
  Metrics(const Metrics&) = delete;
  Metrics& operator=(const Metrics&) = delete;

  // Starts the HTTP endpoint (/metrics, and the probes /healthz and /readyz answered from
  // `health`); a non-empty `bearer_token` is what /metrics requires (the probes stay open).
  // Returns the bound port (useful with port 0) or kIoError.
  Result<uint16_t> Serve(const Endpoint& endpoint, std::function<MetricsHttpHealth()> health = {},
                         std::string bearer_token = "");

  // Stops the HTTP endpoint (idempotent): no scrape or probe runs after it returns, so an
  // owner can tear down what the samplers and the health function read.
  void StopServing();

  // The store's counters, read at every scrape. Call before Serve; not thread-safe with scrapes.
  void SetTierSampler(TierSampler sampler);
  // The peers' counters, read at every scrape. Same rules as SetTierSampler.
  void SetPeerSampler(PeerSampler sampler);
  // The local workers' health, read at every scrape. Same rules as SetTierSampler.
  void SetWorkerSampler(WorkerSampler sampler);

  void ObserveRequest(protocol::Opcode op, StatusCode status, double seconds);
  void ObserveTtft(double seconds);
  void SetComputeQueueDepth(int64_t depth);
  void ConnectionOpened();
  void ConnectionClosed();
  void ConnectionDropped(std::string_view reason);
  void FrameRejected(std::string_view reason);
  void AddNetworkBytes(uint64_t in, uint64_t out);
  void QuotaRefused(std::string_view tenant, std::string_view quota);
  void AddPendingRequestBytes(int64_t delta);
  void PendingRequestRefused();
  void AddPassBytes(int64_t delta);

  // The text exposition of every metric (the same bytes /metrics returns); for tests and STATS.
  std::string Render() const;

 private:
  template <typename Row>
  class RowCollector;
  static constexpr size_t kOpcodes = 64;
  static constexpr size_t kStatuses = kMaxStatusCode + 1;

  std::shared_ptr<prometheus::Registry> registry_;
  std::shared_ptr<RowCollector<TierSample>> tiers_;
  std::shared_ptr<RowCollector<PeerSample>> peers_;
  std::shared_ptr<RowCollector<WorkerSample>> workers_;
  std::unique_ptr<MetricsHttpEndpoint> http_;  // declared last among owners: stops first

  prometheus::Family<prometheus::Counter>* requests_ = nullptr;
  prometheus::Family<prometheus::Histogram>* durations_ = nullptr;
  prometheus::Family<prometheus::Counter>* dropped_ = nullptr;
  prometheus::Family<prometheus::Counter>* rejected_ = nullptr;
  prometheus::Family<prometheus::Counter>* quota_refusals_ = nullptr;
  prometheus::Histogram* ttft_ = nullptr;
  prometheus::Gauge* queue_depth_ = nullptr;
  prometheus::Gauge* connections_ = nullptr;
  prometheus::Counter* bytes_in_ = nullptr;
  prometheus::Counter* bytes_out_ = nullptr;
  prometheus::Gauge* pending_bytes_ = nullptr;
  prometheus::Gauge* pass_bytes_ = nullptr;
  prometheus::Counter* pending_refusals_ = nullptr;
  // Series cached per (opcode, status) and per opcode; created on first use.
  std::array<std::atomic<prometheus::Counter*>, kOpcodes * kStatuses> request_series_{};
  std::array<std::atomic<prometheus::Histogram*>, kOpcodes> duration_series_{};
};

}  // namespace hypic::server
