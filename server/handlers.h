// Handlers: what hypicd does with each decoded request. Sessions own the connection state;
// Handlers own the meaning of the operations:
//   HELLO (the server's part; protocol::ServerSession checks versions and tokens), PING;
//   HAS, GET, PUT, DEL -> the tiered store (storage::TierManager);
//   PREFILL, COMPOSE   -> the compute queue, then the model; misses go to runtime::MissScheduler
//                         (single flight per key, LPT over the prefill workers, each entry
//                         stored as it completes) and COMPOSE combines them (ColdCompose);
//   STATS, EVICT, PIN, UNPIN, FLUSH, CONFIG, SHUTDOWN, LIST, VERIFY (admin only).
//
// Tenants (tenants.h): a request of a namespace-bound tenant addresses only keys of its
// namespace. A key of another namespace is answered as if absent (NOT_FOUND, a miss in HAS,
// nothing listed or evicted), so nobody can probe another tenant's entries; a PREFILL or
// COMPOSE that names another namespace is UNAUTHORIZED. Admin operations granted by the admin
// token or a trusted peer span every namespace. Quotas (max_bytes, max_compute_inflight) are
// answered QUOTA_EXCEEDED and counted (hypic_quota_refusals_total).
//
// A COMPOSE that returns the state streams it to a CHUNKED client (server/state_stream.h):
// after the compose (head first), or layer by layer from the compose's per-layer hook while the
// later layers still compute (state first), the compute worker waiting for a slow reader.
//
// Cheap operations answer inline on the calling (session) thread; compute operations are
// queued (BUSY at once when the queue is full) and answer from a compute worker. Either way
// `done` is called exactly once. Without a model (model = "none") PREFILL and COMPOSE answer
// UNSUPPORTED. COMPOSE mode `prefix` runs the daemon-wide model::PrefixCache (exact reuse
// behind identical leading parts); without one (prefix_cache_capacity = 0) it is UNSUPPORTED.
// Thread-safe: one Handlers serves every session concurrently.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/segment_entry.h"
#include "core/status.h"
#include "core/thread_annotations.h"
#include "gpu/model/model.h"
#include "gpu/model/prefix_cache.h"
#include "gpu/runtime/miss_scheduler.h"
#include "protocol/decoder.h"
#include "protocol/messages.h"
#include "server/compute_queue.h"
#include "server/config.h"
#include "server/metrics.h"
#include "server/peer.h"
#include "server/request.h"
#include "storage/tier_manager.h"

namespace hypic::server {

// What the handlers need from the process around them.
struct ServerControl {
  std::function<void(const std::string& reason)> request_shutdown;
  std::function<size_t()> connection_count;
  std::function<std::vector<PeerStats>()> peer_stats;  // the peers (server/peer.h)
};

class Handlers {
 public:
  using Done = std::function<void(Reply)>;

  // `model` and `scheduler` are null together (no compute); `prefix_cache` is null without a
  // model or when the prefix mode is disabled. The store, the scheduler and the prefix cache
  // must outlive the handlers. `combine_device`: where the request threads' own passes run
  // (COMPOSE's combine, PREFILL): the first CUDA worker's device when the daemon computes on
  // GPUs, else the CPU.
  Handlers(const ServerConfig& config, Metrics& metrics, ComputeQueue& compute,
           ServerControl control, storage::TierManager& store,
           std::shared_ptr<const model::Model> model, runtime::MissScheduler* scheduler,
           model::PrefixCache* prefix_cache, model::ComputeDevice combine_device = {});
  ~Handlers();

  // The server's part of every HELLO reply (version string, features, model, limits); the
  // connection's protocol::ServerSession adds the negotiated version and the admin grant.
  protocol::HelloReply HelloInfo() const;
  // The limits a connection's decoder gets once HELLO has succeeded.
  protocol::DecodeLimits ReadyLimits() const;

  // Answers `req` (any opcode but HELLO). REQUIRES: the session admitted it (admin grant).
  void Handle(Request req, Done done);

  // Flushes the store (drain, FLUSH).
  Status Flush();

 private:
  using EntryPtr = std::shared_ptr<const SegmentEntry>;
  using Clock = std::chrono::steady_clock;
  // The largest chunk of a streamed state.
  static constexpr uint64_t kStreamChunk = 4ull << 20;

  Reply Ping(const Request& req) const;
  Reply Has(const Request& req);
  Reply Get(const Request& req);
  Reply Put(const Request& req);
  Reply Del(const Request& req);
  Reply PinOp(const Request& req, bool pin);
  // The namespace `req`'s keys must be in, or nullptr when any will do (an unbound tenant, or
  // an admin operation with the daemon-wide grant).
  static const std::string* BoundNamespace(const Request& req);
  // The namespace a PREFILL or COMPOSE computes in: the bound one (`requested` must be empty or
  // equal to it: kUnauthorized otherwise), else `requested`.
  static Result<std::string> ComputeNamespace(const Request& req, const std::string& requested);
  // kQuotaExceeded (and the metric) when the tenant's namespace holds max_bytes or more, or
  // would with `adding` more bytes.
  Status CheckBytesQuota(const Request& req, uint64_t adding);
  // Whether `key` is stored, as the tenant of `req` may see it.
  bool Visible(const Request& req, const SegmentKey& key);
  Reply Evict(const Request& req);
  Reply FlushOp(const Request& req);
  Reply List(const Request& req) const;
  Reply Verify(const Request& req);
  Reply Stats(const Request& req) const;
  Reply Config(const Request& req) const;
  Reply Shutdown(const Request& req) const;
  void Compute(Request req, Done done);
  Result<protocol::Bytes> Prefill(const Request& req);
  // The body of a PREFILL reply with return_entries (`out` gets each entry's size): one frame,
  // or streamed through req.chunks (then the final chunk's empty body).
  Result<protocol::Bytes> PrefillEntriesBody(const Request& req, protocol::PrefillReply& out,
                                             std::span<const EntryPtr> entries);
  Result<protocol::Bytes> Compose(const Request& req);
  // A streamed state's chunk size (kStreamChunk or the frame limit: a frontend can start on a
  // layer while the next is in flight, and a chunk's write is short against the write deadline)
  // and how long its streamer waits for a layer to be written.
  uint64_t StreamChunkBytes() const;
  std::chrono::milliseconds StreamFlushTimeout() const;
  // Queues `bytes` (kept alive by `owner`) through req.chunks in chunks of StreamChunkBytes().
  Status QueueChunks(const Request& req, std::shared_ptr<const void> owner,
                     protocol::ByteSpan bytes);
  // COMPOSE mode prefix once the parts are resolved to tokens: runs the prefix cache and
  // marks the reused leading parts as host hits, the rest as misses (segments) or live (raw).
  Result<model::ComposeResult> ComposePrefix(const std::string& name_space,
                                             std::span<const model::ComposePart> parts,
                                             std::chrono::steady_clock::time_point deadline,
                                             protocol::ComposeReply& out);

  uint32_t SeamOf(uint32_t requested) const;
  // The options of this daemon's segment prefills (seam, namespace, entry dtypes); KeyOf
  // computes keys over the same settings, so a prefilled entry is found under its key.
  model::SegmentOptions SegmentOptionsOf(const std::string& name_space, uint32_t seam_w) const;
  SegmentKey KeyOf(const std::string& name_space, uint32_t seam_w,
                   std::span<const uint32_t> tokens) const;
  // The serialized bytes of `entry`: Serialize, or for an entry viewed in device memory, the
  // store's copy (the entry was read from it).
  Result<std::shared_ptr<const HostBuffer>> HostBytesOf(const SegmentEntry& entry);
  // Who reads a looked-up entry: host code (its bytes, verified), or a pass on the combine
  // device (on a CUDA combine device: the HBM tier's copy in place, tier.h's ParseHandle).
  enum class Reader : uint8_t { kHost, kCombinePass };
  // The stored entry of `key` (parsed and verified), or nullptr on a miss (a key of another
  // namespace than `only_namespace`, when given, is one); `tier` gets where.
  Result<EntryPtr> Lookup(const SegmentKey& key, protocol::Tier* tier,
                          const std::string* only_namespace = nullptr,
                          Reader reader = Reader::kHost);
  // Where `key` is stored now (kNone when it is not).
  protocol::Tier StoredTier(const SegmentKey& key);

  const ServerConfig& config_;
  Metrics& metrics_;
  ComputeQueue& compute_;
  ServerControl control_;
  storage::TierManager& store_;
  const std::shared_ptr<const model::Model> model_;
  runtime::MissScheduler* const scheduler_;
  model::PrefixCache* const prefix_cache_;
  const model::ComputeDevice combine_device_;
  const Clock::time_point started_;

  // GET replies' body checksums: entries are immutable, so the checksum of (bytes, tier byte,
  // kind) is computed once per stored copy, not once per GET. Keyed by the copy's address and
  // validated by a weak reference, so a freed and reused address never matches.
  struct SumKey {
    const void* entry;
    uint8_t tier;
    uint8_t kind;
    friend bool operator==(const SumKey&, const SumKey&) = default;
  };
  struct SumKeyHash {
    size_t operator()(const SumKey& k) const {
      return std::hash<const void*>()(k.entry) ^ (size_t{k.tier} << 3) ^ (size_t{k.kind} << 7);
    }
  };
  struct SumValue {
    std::weak_ptr<const void> owner;
    uint64_t sum = 0;
  };
  static constexpr size_t kMaxCachedSums = 4096;
  uint64_t GetChecksum(const std::shared_ptr<const void>& owner, protocol::ByteSpan ext,
                       protocol::ByteSpan body, protocol::ChecksumKind kind, uint8_t tier);
  Mutex sums_mu_;
  std::unordered_map<SumKey, SumValue, SumKeyHash> sums_ GUARDED_BY(sums_mu_);
};

}  // namespace hypic::server
