// Peer daemons as remote scatter workers (docs/operations-server.md, "Peers").
//
// A Peer is one other hypicd serving the same model (the same model fingerprint, checked at
// HELLO: a peer with another one is refused and logged). The router daemon's MissScheduler sees
// each peer as `concurrency` remote Workers (MakeWorkers), each with its own connection. A job
// on such a worker is a PREFILL of its segment with PrefillOptions::return_entries: the peer
// computes it on its own workers (never forwarding it to its own peers) and streams the entry
// back in chunks; the worker verifies it in full (entry checksums and key through
// storage::Parse, then the key, tokens, seam, shapes and dtypes against the request and the
// local model through Model::CheckEntry) before the scheduler stores and delivers it. Any
// failure (connect, HELLO, timeout, an error status, an entry that does not verify) fails the
// job, which the scheduler re-runs elsewhere, and marks the peer down for a backoff that
// doubles with each consecutive failure (backoff_min .. backoff_max); while down its workers
// estimate +infinity and take no job, and the first job after the backoff probes it again.
//
// Cost estimate of a job on a peer: n_tokens / speed + entry bytes / bandwidth, where speed is
// an exponential average of tokens/s over the peer's PREFILL replies (their prefill_us: the
// peer's compute, queueing there included, so it is a per-connection throughput) and bandwidth
// one of entry bytes/s over the rest of each call's wall time. Before the first reply the speed
// is `weight` times a local worker's, and the bandwidth kPriorBytesPerSecond.
//
// Ownership: the Server owns the Peers (shared with their workers). Thread-safety: a Peer is
// safe from any thread; each worker is driven by its scheduler thread only.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/thread_annotations.h"
#include "gpu/model/model.h"
#include "gpu/runtime/worker.h"

namespace hypic::server {

struct PeerOptions {
  std::string address;  // host:port
  std::string token;    // sent in HELLO (the peer's tenant with `compute`)
  double weight = 1.0;  // speed relative to a local worker until a reply calibrates it
  uint32_t concurrency = 1;
  std::chrono::milliseconds timeout{10000};  // connect + one PREFILL at most (and the deadline)
  std::chrono::milliseconds backoff_min{500};
  std::chrono::milliseconds backoff_max{30000};
};

// One peer's health and counters (STATS, hypicctl stats, metrics).
struct PeerStats {
  std::string address;
  bool up = true;            // false while backing off after a failure
  bool refused = false;      // the last HELLO was refused (fingerprint, features, auth)
  uint64_t jobs_ok = 0;      // entries received and verified
  uint64_t jobs_failed = 0;  // every failure below
  uint64_t timeouts = 0;
  uint64_t errors = 0;       // connect, I/O, error replies
  uint64_t bad_entries = 0;  // answers that did not verify (nothing stored)
  uint64_t refusals = 0;
  uint64_t tokens = 0;          // tokens of the entries received
  uint64_t bytes_received = 0;  // entry bytes received
  double tokens_per_s = 0.0;    // the speed estimate (EMA)
  double bytes_per_s = 0.0;     // the bandwidth estimate (EMA)
  std::string last_error;
};

class Peer : public std::enable_shared_from_this<Peer> {
 public:
  enum class Failure : uint8_t { kTimeout, kError, kBadEntry, kRefused };
  static constexpr double kPriorBytesPerSecond = 500e6;
  static constexpr double kAlpha = 0.3;  // weight of a new sample in the averages

  // `entry_dtypes`: the precision this daemon's entries use (for the entry-size estimate).
  Peer(PeerOptions options, std::shared_ptr<const model::Model> model, EntryDTypes entry_dtypes);

  // `concurrency` workers over this peer, each with its own connection.
  std::vector<std::unique_ptr<runtime::Worker>> MakeWorkers();

  PeerStats Stats() const EXCLUDES(mu_);
  const PeerOptions& options() const { return options_; }
  const model::Model& model() const { return *model_; }

  // The estimated seconds of `job` here; +infinity while down, or for a job without a segment
  // or marked local-only.
  double Estimate(const runtime::PrefillJob& job, double local_seconds) const EXCLUDES(mu_);
  // Whether a job may be sent now (not down).
  bool Available() const EXCLUDES(mu_);
  // A verified entry arrived: `prefill_s` as the peer reported it, `wall_s` the whole call.
  void Succeeded(uint32_t n_tokens, uint64_t bytes, double prefill_s, double wall_s) EXCLUDES(mu_);
  // Marks the peer down (backoff) and counts `why`; logs once per outage.
  void Failed(Failure why, const Status& status) EXCLUDES(mu_);

 private:
  using Clock = std::chrono::steady_clock;
  // The serialized size of an entry of `n_tokens` tokens at seam `seam_w`.
  double EntryBytes(uint32_t n_tokens, uint32_t seam_w) const;

  const PeerOptions options_;
  const std::shared_ptr<const model::Model> model_;
  const EntryDTypes entry_dtypes_;
  mutable Mutex mu_;
  PeerStats stats_ GUARDED_BY(mu_);
  Clock::time_point down_until_ GUARDED_BY(mu_){};
  uint32_t consecutive_failures_ GUARDED_BY(mu_) = 0;
  bool calibrated_ GUARDED_BY(mu_) = false;
};

// Builds the Peers of `options`.
std::vector<std::shared_ptr<Peer>> MakePeers(const std::vector<PeerOptions>& options,
                                             const std::shared_ptr<const model::Model>& model,
                                             EntryDTypes entry_dtypes);

}  // namespace hypic::server
