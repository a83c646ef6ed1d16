#include "server/metrics.h"

#include <fmt/format.h>
#include <prometheus/collectable.h>
#include <prometheus/counter.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/metric_family.h>
#include <prometheus/registry.h>
#include <prometheus/text_serializer.h>

#include <exception>
#include <sstream>

#include "server/config.h"
#include "server/metrics_http.h"

namespace hypic::server {

namespace {

// 50 us .. ~26 s, x2 per bucket: covers a loopback PING up to a cold 32k-token COMPOSE.
prometheus::Histogram::BucketBoundaries LatencyBuckets() {
  prometheus::Histogram::BucketBoundaries b;
  for (double v = 50e-6; v < 30.0; v *= 2) b.push_back(v);
  return b;
}

prometheus::ClientMetric Sample(const std::string& label, const std::string& value_of_label,
                                double value, bool counter) {
  prometheus::ClientMetric m;
  m.label.push_back({label, value_of_label});
  if (counter) {
    m.counter.value = value;
  } else {
    m.gauge.value = value;
  }
  return m;
}

// One metric family of a RowCollector: a field of its rows.
template <typename Row>
struct RowSpec {
  const char* name;
  const char* help;
  bool counter;
  uint64_t Row::*field;
};

}  // namespace

// Reads counters owned elsewhere (the store, the peers) at scrape time, so their owner stays the
// single source of truth: one family per field, one series per row, labelled by the row's name.
template <typename Row>
class Metrics::RowCollector : public prometheus::Collectable {
 public:
  using Spec = RowSpec<Row>;
  RowCollector(std::string label, std::string Row::*name, std::vector<Spec> specs)
      : label_(std::move(label)), name_(name), specs_(std::move(specs)) {}

  void Set(std::function<std::vector<Row>()> sampler) { sampler_ = std::move(sampler); }

  std::vector<prometheus::MetricFamily> Collect() const override {
    if (!sampler_) return {};
    std::vector<Row> rows = sampler_();
    if (rows.empty()) return {};
    std::vector<prometheus::MetricFamily> families;
    for (const Spec& spec : specs_) {
      prometheus::MetricFamily f;
      f.name = spec.name;
      f.help = spec.help;
      f.type = spec.counter ? prometheus::MetricType::Counter : prometheus::MetricType::Gauge;
      for (const Row& r : rows) {
        f.metric.push_back(
            Sample(label_, r.*name_, static_cast<double>(r.*spec.field), spec.counter));
      }
      families.push_back(std::move(f));
    }
    return families;
  }

 private:
  const std::string label_;
  std::string Row::*const name_;
  const std::vector<Spec> specs_;
  std::function<std::vector<Row>()> sampler_;
};

namespace {

std::vector<RowSpec<TierSample>> TierSpecs() {
  return {
      {"hypic_tier_hits_total", "Lookups answered by this tier", true, &TierSample::hits},
      {"hypic_tier_misses_total", "Lookups this tier could not answer", true, &TierSample::misses},
      {"hypic_tier_evictions_total", "Entries evicted from this tier", true,
       &TierSample::evictions},
      {"hypic_tier_checksum_failures_total", "Reads that failed their checksum (served as misses)",
       true, &TierSample::checksum_failures},
      {"hypic_tier_bytes", "Bytes held by this tier", false, &TierSample::bytes},
      {"hypic_tier_capacity_bytes", "Configured capacity of this tier", false,
       &TierSample::capacity_bytes},
      {"hypic_tier_entries", "Entries held by this tier", false, &TierSample::entries},
      {"hypic_tier_io_errors_total", "Failed reads and writes of this tier", true,
       &TierSample::io_errors},
      {"hypic_tier_degraded", "1 while the tier is degraded (retrying after errors)", false,
       &TierSample::degraded},
      {"hypic_tier_read_bytes_total", "Bytes read from the remote tier on hits", true,
       &TierSample::bytes_read},
      {"hypic_tier_written_bytes_total", "Bytes of entries written to the remote tier", true,
       &TierSample::bytes_written},
      {"hypic_tier_nodes", "Remote tier: Redis nodes serving slots", false, &TierSample::nodes},
      {"hypic_tier_nodes_degraded", "Remote tier: Redis nodes retried after errors", false,
       &TierSample::nodes_degraded},
      {"hypic_tier_redirects_total", "Remote tier: Redis Cluster MOVED/ASK redirections followed",
       true, &TierSample::redirects},
  };
}

std::vector<RowSpec<PeerSample>> PeerSpecs() {
  return {
      {"hypic_peer_up", "1 unless the peer is backing off after a failure", false, &PeerSample::up},
      {"hypic_peer_jobs_total", "Segments the peer computed (entries received and verified)", true,
       &PeerSample::jobs},
      {"hypic_peer_failures_total", "Remote jobs that failed (re-run elsewhere)", true,
       &PeerSample::failures},
      {"hypic_peer_timeouts_total", "Remote jobs past the peer timeout or the deadline", true,
       &PeerSample::timeouts},
      {"hypic_peer_errors_total", "Remote jobs failed by connect, I/O or an error reply", true,
       &PeerSample::errors},
      {"hypic_peer_bad_entries_total", "Entries from the peer that did not verify (not stored)",
       true, &PeerSample::bad_entries},
      {"hypic_peer_refusals_total",
       "HELLOs refused (another model fingerprint, no PREFILL_ENTRIES, auth)", true,
       &PeerSample::refusals},
      {"hypic_peer_received_bytes_total", "Entry bytes received from the peer", true,
       &PeerSample::bytes_received},
      {"hypic_peer_tokens_per_second", "The peer's speed estimate (EMA over its replies)", false,
       &PeerSample::tokens_per_s},
  };
}

std::vector<RowSpec<WorkerSample>> WorkerSpecs() {
  return {
      {"hypic_worker_healthy", "0 once the worker's device is lost (its jobs run elsewhere)", false,
       &WorkerSample::healthy},
      {"hypic_worker_device_errors_total", "Jobs of the worker that ended in a device error", true,
       &WorkerSample::device_errors},
  };
}

}  // namespace

Metrics::Metrics()
    : registry_(std::make_shared<prometheus::Registry>()),
      tiers_(std::make_shared<RowCollector<TierSample>>("tier", &TierSample::tier, TierSpecs())),
      peers_(std::make_shared<RowCollector<PeerSample>>("peer", &PeerSample::peer, PeerSpecs())),
      workers_(std::make_shared<RowCollector<WorkerSample>>("worker", &WorkerSample::worker,
                                                            WorkerSpecs())) {
  requests_ = &prometheus::BuildCounter()
                   .Name("hypic_requests_total")
                   .Help("Requests answered, by opcode and status")
                   .Register(*registry_);
  durations_ = &prometheus::BuildHistogram()
                    .Name("hypic_request_duration_seconds")
                    .Help("Time from a request's last byte to its reply being queued")
                    .Register(*registry_);
  dropped_ = &prometheus::BuildCounter()
                  .Name("hypic_connections_dropped_total")
                  .Help(
                      "Connections closed by the daemon, by reason (max_connections, deadline_*, "
                      "bad_frame)")
                  .Register(*registry_);
  rejected_ = &prometheus::BuildCounter()
                   .Name("hypic_frames_rejected_total")
                   .Help("Malformed or disallowed frames, by decoder verdict")
                   .Register(*registry_);
  quota_refusals_ = &prometheus::BuildCounter()
                         .Name("hypic_quota_refusals_total")
                         .Help(
                             "Requests refused QUOTA_EXCEEDED, by tenant and quota (bytes, "
                             "compute_inflight)")
                         .Register(*registry_);
  ttft_ = &prometheus::BuildHistogram()
               .Name("hypic_ttft_seconds")
               .Help("COMPOSE: time from receipt to first-token logits")
               .Register(*registry_)
               .Add({}, LatencyBuckets());
  queue_depth_ = &prometheus::BuildGauge()
                      .Name("hypic_compute_queue_depth")
                      .Help("Compute requests queued or running")
                      .Register(*registry_)
                      .Add({});
  connections_ = &prometheus::BuildGauge()
                      .Name("hypic_connections")
                      .Help("Open client connections")
                      .Register(*registry_)
                      .Add({});
  pending_bytes_ = &prometheus::BuildGauge()
                        .Name("hypic_pending_request_bytes")
                        .Help("Bytes held by partially received request bodies (all connections)")
                        .Register(*registry_)
                        .Add({});
  pass_bytes_ = &prometheus::BuildGauge()
                     .Name("hypic_pass_bytes")
                     .Help("Working memory reserved by the running forward passes (max_pass_bytes)")
                     .Register(*registry_)
                     .Add({});
  pending_refusals_ = &prometheus::BuildCounter()
                           .Name("hypic_pending_request_refusals_total")
                           .Help("Request bodies answered BUSY at max_pending_request_bytes")
                           .Register(*registry_)
                           .Add({});
  auto& bytes = prometheus::BuildCounter()
                    .Name("hypic_network_bytes_total")
                    .Help("Bytes read from and written to client sockets")
                    .Register(*registry_);
  bytes_in_ = &bytes.Add({{"direction", "in"}});
  bytes_out_ = &bytes.Add({{"direction", "out"}});
}

Metrics::~Metrics() = default;

Result<uint16_t> Metrics::Serve(const Endpoint& endpoint, std::function<MetricsHttpHealth()> health,
                                std::string bearer_token) {
  MetricsHttpEndpoint::HealthFn probe;
  if (health) {
    probe = [health = std::move(health)] {
      MetricsHttpHealth h = health();
      return MetricsHttpEndpoint::Health{h.live, h.ready, std::move(h.detail)};
    };
  }
  http_ = std::make_unique<MetricsHttpEndpoint>([this] { return Render(); }, std::move(probe),
                                                std::move(bearer_token));
  auto port = http_->Start(endpoint.host, endpoint.port);
  if (!port.ok()) http_.reset();
  return port;
}

void Metrics::StopServing() {
  if (http_) http_->Stop();
}

void Metrics::SetTierSampler(TierSampler sampler) { tiers_->Set(std::move(sampler)); }
void Metrics::SetPeerSampler(PeerSampler sampler) { peers_->Set(std::move(sampler)); }
void Metrics::SetWorkerSampler(WorkerSampler sampler) { workers_->Set(std::move(sampler)); }

void Metrics::ObserveRequest(protocol::Opcode op, StatusCode status, double seconds) {
  auto op_index = static_cast<size_t>(op) % kOpcodes;
  auto st_index = static_cast<size_t>(status) % kStatuses;
  auto& slot = request_series_[op_index * kStatuses + st_index];
  prometheus::Counter* counter = slot.load(std::memory_order_acquire);
  if (counter == nullptr) {
    // Family::Add returns the existing series for equal labels, so a race stores the same one.
    counter = &requests_->Add({{"opcode", std::string(protocol::OpcodeName(op))},
                               {"status", std::string(StatusCodeName(status))}});
    slot.store(counter, std::memory_order_release);
  }
  counter->Increment();
  auto& hslot = duration_series_[op_index];
  prometheus::Histogram* hist = hslot.load(std::memory_order_acquire);
  if (hist == nullptr) {
    hist = &durations_->Add({{"opcode", std::string(protocol::OpcodeName(op))}}, LatencyBuckets());
    hslot.store(hist, std::memory_order_release);
  }
  hist->Observe(seconds);
}

void Metrics::ObserveTtft(double seconds) { ttft_->Observe(seconds); }
void Metrics::SetComputeQueueDepth(int64_t depth) { queue_depth_->Set(static_cast<double>(depth)); }
void Metrics::ConnectionOpened() { connections_->Increment(); }
void Metrics::ConnectionClosed() { connections_->Decrement(); }
void Metrics::ConnectionDropped(std::string_view reason) {
  dropped_->Add({{"reason", std::string(reason)}}).Increment();
}
void Metrics::FrameRejected(std::string_view reason) {
  rejected_->Add({{"reason", std::string(reason)}}).Increment();
}
void Metrics::QuotaRefused(std::string_view tenant, std::string_view quota) {
  quota_refusals_->Add({{"tenant", std::string(tenant)}, {"quota", std::string(quota)}})
      .Increment();
}
void Metrics::AddPassBytes(int64_t delta) { pass_bytes_->Increment(static_cast<double>(delta)); }

void Metrics::AddPendingRequestBytes(int64_t delta) {
  pending_bytes_->Increment(static_cast<double>(delta));
}
void Metrics::PendingRequestRefused() { pending_refusals_->Increment(); }
void Metrics::AddNetworkBytes(uint64_t in, uint64_t out) {
  if (in > 0) bytes_in_->Increment(static_cast<double>(in));
  if (out > 0) bytes_out_->Increment(static_cast<double>(out));
}

std::string Metrics::Render() const {
  auto families = registry_->Collect();
  for (auto&& more : {tiers_->Collect(), peers_->Collect(), workers_->Collect()}) {
    families.insert(families.end(), more.begin(), more.end());
  }
  std::ostringstream out;
  prometheus::TextSerializer().Serialize(out, families);
  return out.str();
}

}  // namespace hypic::server
