#include "server/peer.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "client/client.h"
#include "core/logging.h"
#include "protocol/messages.h"
#include "storage/entry_format.h"

namespace hypic::server {

namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

// One connection to a peer: a remote Worker of the MissScheduler.
class PeerWorker final : public runtime::Worker {
 public:
  PeerWorker(std::shared_ptr<Peer> peer, int slot)
      : peer_(std::move(peer)), name_(fmt::format("peer:{}/{}", peer_->options().address, slot)) {
    context_.compute_threads = 0;
  }

  const runtime::WorkerContext& context() const override { return context_; }
  const std::string& name() const override { return name_; }
  bool remote() const override { return true; }
  double Estimate(const runtime::PrefillJob& job, double local_seconds) const override {
    return peer_->Estimate(job, local_seconds);
  }

  Result<runtime::EntryPtr> Execute(const runtime::PrefillJob& job,
                                    Clock::time_point deadline) override {
    if (!job.segment || job.local_only) {
      return Unsupported(fmt::format("{}: a job without a segment runs locally only", name_));
    }
    if (!peer_->Available()) return IoError(fmt::format("{} is down", name_));
    const Clock::time_point t0 = Clock::now();
    const Clock::time_point until = std::min(deadline, t0 + peer_->options().timeout);
    if (until <= t0) return DeadlineExceeded(fmt::format("{}: no time left", name_));
    Result<runtime::EntryPtr> entry = Call(job, until);
    if (!entry.ok()) {
      conn_.reset();  // a late reply must never be read as the next one's
      const StatusCode code = entry.status().code();
      peer_->Failed(code == StatusCode::kDeadlineExceeded ? Peer::Failure::kTimeout
                    : code == StatusCode::kCorruption || code == StatusCode::kBadChecksum
                        ? Peer::Failure::kBadEntry
                    : code == StatusCode::kUnauthorized || code == StatusCode::kVersionMismatch
                        ? Peer::Failure::kRefused
                        : Peer::Failure::kError,
                    entry.status());
    }
    return entry;
  }

 private:
  static int MillisLeft(Clock::time_point until) {
    auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(until - Clock::now()).count();
    return static_cast<int>(std::clamp<int64_t>(ms, 1, std::numeric_limits<int32_t>::max()));
  }

  // Connects and checks the peer's HELLO: kVersionMismatch for another model or a daemon that
  // cannot return entries.
  Status Connect(Clock::time_point until) {
    client::ClientOptions o;
    o.address = peer_->options().address;
    o.token = peer_->options().token;
    o.client_name = "hypicd-router";
    o.connect_timeout_ms = MillisLeft(until);
    // Per blocking step; the whole call is bounded by the frame's deadline_ms at the peer.
    o.io_timeout_ms = static_cast<int>(peer_->options().timeout.count());
    HYPIC_ASSIGN_OR_RETURN(std::unique_ptr<client::Client> c, client::Client::Connect(o));
    const protocol::HelloReply& hello = *c->hello_reply();
    const ModelFingerprint& ours = peer_->model().fingerprint();
    if (hello.model_fingerprint != ours) {
      return VersionMismatch(fmt::format("model fingerprint {} ({}), this daemon's is {}",
                                         hello.model_fingerprint.ToHex(), hello.model_name,
                                         ours.ToHex()));
    }
    if ((hello.features & protocol::kFeaturePrefillEntries) == 0) {
      return VersionMismatch(fmt::format("{} cannot return entries (no PREFILL_ENTRIES feature)",
                                         hello.server_version));
    }
    conn_ = std::move(c);
    return Status::Ok();
  }

  Result<runtime::EntryPtr> Call(const runtime::PrefillJob& job, Clock::time_point until) {
    const Clock::time_point t0 = Clock::now();
    if (!conn_) HYPIC_RETURN_IF_ERROR(Connect(until));
    const runtime::SegmentSpec& spec = *job.segment;
    protocol::PrefillRequest request;
    request.name_space = spec.name_space;
    request.seam_w = spec.seam_w;
    request.segments.push_back(spec.tokens);
    const protocol::Bytes body = protocol::Encode(request);
    const protocol::Bytes ext = protocol::Encode(protocol::PrefillOptions{.return_entries = true});
    HYPIC_ASSIGN_OR_RETURN(uint64_t id, conn_->Send(protocol::Opcode::kPrefill, {}, ext, body,
                                                    static_cast<uint32_t>(MillisLeft(until))));
    HYPIC_ASSIGN_OR_RETURN(client::Reply reply, conn_->Wait(id));
    const double wall_s = Seconds(Clock::now() - t0);
    auto decoded = protocol::DecodePrefillEntriesReply(reply.body);
    if (!decoded.ok()) return Corruption(decoded.status().message());
    if (decoded->entries.size() != 1) {
      return Corruption(fmt::format("{} entries for one segment", decoded->entries.size()));
    }
    // Verified in full before anything is kept: layout and checksums, the key against the
    // entry's own metadata (Parse), then that it is the entry asked for, and usable here.
    HYPIC_ASSIGN_OR_RETURN(HostBuffer copy, HostBuffer::CopyOf(decoded->entries[0]));
    auto parsed = storage::Parse(std::make_shared<const HostBuffer>(std::move(copy)));
    if (!parsed.ok()) return Corruption("the returned entry: " + parsed.status().ToString());
    const runtime::EntryPtr& entry = *parsed;
    if (entry->key() != job.key) {
      return Corruption(
          fmt::format("returned entry {} for segment {}", entry->key().ToHex(), job.key.ToHex()));
    }
    if (Status fits = peer_->model().CheckEntry(*entry, spec.tokens, spec.seam_w); !fits.ok()) {
      return Corruption("the returned entry: " + fits.ToString());
    }
    peer_->Succeeded(job.n_tokens, decoded->entries[0].size(),
                     static_cast<double>(decoded->reply.timings.prefill_us) * 1e-6, wall_s);
    return entry;
  }

  std::shared_ptr<Peer> peer_;
  std::string name_;
  runtime::WorkerContext context_;
  std::unique_ptr<client::Client> conn_;
};

std::string_view FailureName(Peer::Failure why) {
  switch (why) {
    case Peer::Failure::kTimeout: return "timeout";
    case Peer::Failure::kError: return "error";
    case Peer::Failure::kBadEntry: return "bad entry";
    case Peer::Failure::kRefused: return "refused";
  }
  return "?";
}

}  // namespace

Peer::Peer(PeerOptions options, std::shared_ptr<const model::Model> model, EntryDTypes entry_dtypes)
    : options_(std::move(options)), model_(std::move(model)), entry_dtypes_(entry_dtypes) {
  MutexLock lock(&mu_);
  stats_.address = options_.address;
  stats_.bytes_per_s = kPriorBytesPerSecond;
}

std::vector<std::unique_ptr<runtime::Worker>> Peer::MakeWorkers() {
  std::vector<std::unique_ptr<runtime::Worker>> workers;
  for (uint32_t i = 0; i < std::max<uint32_t>(1, options_.concurrency); ++i) {
    workers.push_back(std::make_unique<PeerWorker>(shared_from_this(), static_cast<int>(i)));
  }
  return workers;
}

PeerStats Peer::Stats() const {
  MutexLock lock(&mu_);
  PeerStats s = stats_;
  s.up = Clock::now() >= down_until_;
  return s;
}

bool Peer::Available() const {
  MutexLock lock(&mu_);
  return Clock::now() >= down_until_;
}

double Peer::EntryBytes(uint32_t n_tokens, uint32_t seam_w) const {
  const model::ModelConfig& c = model_->config();
  const double cached = n_tokens > seam_w ? n_tokens - seam_w : 0;
  double bytes = static_cast<double>(storage::kEntryHeaderSize) + 4.0 * n_tokens;
  for (int64_t l = 0; l < c.num_layers; ++l) {
    if (c.layer_kinds[static_cast<size_t>(l)] == model::LayerKind::kLinear) {
      const auto hv = static_cast<double>(c.linear_value_heads);
      const auto dk = static_cast<double>(c.linear_key_dim);
      bytes += hv * dk * dk * static_cast<double>(DTypeSize(entry_dtypes_.transition));
      bytes += hv * dk * static_cast<double>(c.linear_value_dim * DTypeSize(entry_dtypes_.state));
      bytes += static_cast<double>((c.conv_kernel - 1) * c.conv_channels() *
                                   static_cast<int64_t>(DTypeSize(entry_dtypes_.conv)));
    } else {
      bytes += 2.0 * cached *
               static_cast<double>(c.num_kv_heads * c.head_dim *
                                   static_cast<int64_t>(DTypeSize(entry_dtypes_.kv)));
    }
  }
  return bytes;
}

double Peer::Estimate(const runtime::PrefillJob& job, double local_seconds) const {
  constexpr double kInf = std::numeric_limits<double>::infinity();
  if (!job.segment || job.local_only) return kInf;
  const double bytes = EntryBytes(job.n_tokens, job.segment->seam_w);
  MutexLock lock(&mu_);
  if (Clock::now() < down_until_) return kInf;
  const double compute = calibrated_ ? job.n_tokens / std::max(stats_.tokens_per_s, 1e-9)
                                     : local_seconds / std::max(options_.weight, 1e-9);
  return compute + bytes / std::max(stats_.bytes_per_s, 1.0);
}

void Peer::Succeeded(uint32_t n_tokens, uint64_t bytes, double prefill_s, double wall_s) {
  MutexLock lock(&mu_);
  const bool was_down = consecutive_failures_ > 0;
  consecutive_failures_ = 0;
  stats_.refused = false;
  ++stats_.jobs_ok;
  stats_.tokens += n_tokens;
  stats_.bytes_received += bytes;
  const double tps = n_tokens / std::max(prefill_s, 1e-6);
  const double bps = static_cast<double>(bytes) / std::max(wall_s - prefill_s, 1e-6);
  if (!calibrated_) {
    stats_.tokens_per_s = tps;
    stats_.bytes_per_s = bps;
    calibrated_ = true;
  } else {
    stats_.tokens_per_s += kAlpha * (tps - stats_.tokens_per_s);
    stats_.bytes_per_s += kAlpha * (bps - stats_.bytes_per_s);
  }
  if (was_down) HYPIC_LOG_INFO("peer {} is up again", options_.address);
}

void Peer::Failed(Failure why, const Status& status) {
  MutexLock lock(&mu_);
  ++stats_.jobs_failed;
  switch (why) {
    case Failure::kTimeout: ++stats_.timeouts; break;
    case Failure::kError: ++stats_.errors; break;
    case Failure::kBadEntry: ++stats_.bad_entries; break;
    case Failure::kRefused: ++stats_.refusals; break;
  }
  stats_.refused = why == Failure::kRefused;
  stats_.last_error = status.ToString();
  // A refusal does not heal by itself (another model, a wrong token): the longest backoff.
  const auto backoff =
      why == Failure::kRefused
          ? options_.backoff_max
          : std::min(options_.backoff_max, options_.backoff_min * (int64_t{1} << std::min<uint32_t>(
                                                                       consecutive_failures_, 16)));
  ++consecutive_failures_;
  down_until_ = Clock::now() + backoff;
  if (why == Failure::kRefused) {
    HYPIC_LOG_ERROR("peer {} refused: {}; retrying in {} ms", options_.address, status.ToString(),
                    backoff.count());
  } else if (consecutive_failures_ == 1) {
    HYPIC_LOG_WARN("peer {} down ({}: {}); its jobs run elsewhere, retrying in {} ms",
                   options_.address, FailureName(why), status.ToString(), backoff.count());
  }
}

std::vector<std::shared_ptr<Peer>> MakePeers(const std::vector<PeerOptions>& options,
                                             const std::shared_ptr<const model::Model>& model,
                                             EntryDTypes entry_dtypes) {
  std::vector<std::shared_ptr<Peer>> peers;
  for (const PeerOptions& o : options) {
    peers.push_back(std::make_shared<Peer>(o, model, entry_dtypes));
  }
  return peers;
}

}  // namespace hypic::server
