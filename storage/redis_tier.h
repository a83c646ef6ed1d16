// RedisTier: the remote tier on Redis, one server or a Redis Cluster, through RedisClient
// (storage/redis_client.h: connection pools, the slot routing, the circuit breakers). Entries
// are stored in bounded chunks under one manifest key (storage/redis_manifest.h); writes put
// every chunk first, pipelined, and the manifest last, so a reader sees either a complete entry
// or none. All the keys of one entry carry the entry's hash tag, so in a cluster an entry lives
// on one node: one pipeline per read or write, and a node lost takes whole entries with it.
//
// Reads (Get): the manifest, then the chunks pipelined into one aligned buffer, each checked
// against the manifest's checksum, then Verify and the key of the entry header. A manifest
// without all its chunks (evicted by maxmemory, or a write cut short) is a miss counted in
// `evictions`; a chunk or manifest that fails its check is a miss counted in
// `checksum_failures`, and its manifest is deleted so that the next writer replaces it.
//
// Writes (Write) are queued and run on the tier's own writer thread, never on a request: the
// queue is bounded (max_queued_bytes) and a write that does not fit is dropped, as is one whose
// node is degraded when the writer comes to it. The writer skips an entry whose manifest exists
// already (another daemon wrote it).
//
// Faults: connects and commands run under timeouts. A connection error or timeout marks the
// node degraded and opens its circuit breaker (RedisClient): for the backoff every Get of an
// entry on it is an immediate kIoError and its writes are dropped; after it one call tries
// again, and a success closes the breaker. The tier is degraded while any node is. An error
// reply (OOM under a noeviction maxmemory, say) fails that one command and is counted in
// io_errors without degrading.
//
// Thread-safe: any number of concurrent Gets, each on its own pooled connection. The
// destructor finishes the queued writes (or drops them while degraded) and closes the pool.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <random>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "core/thread_annotations.h"
#include "storage/redis_client.h"
#include "storage/remote_tier.h"

namespace hypic::storage {

struct RedisTierOptions {
  RedisStoreAddress address;
  std::string prefix = "hypic";  // the deployment's part of every key
  uint64_t chunk_bytes = uint64_t{2} << 20;
  std::chrono::milliseconds connect_timeout{250};
  // One reply; in a cluster also the budget within which a command's redirections and its retry
  // after a node failure are followed.
  std::chrono::milliseconds command_timeout{1000};
  std::chrono::milliseconds backoff_min{250};
  std::chrono::milliseconds backoff_max{10000};
  size_t max_idle_connections = 4;  // per node
  uint64_t max_queued_bytes = uint64_t{256} << 20;
};

class RedisTier : public RemoteTier {
 public:
  // Checks the options and starts the writer; Redis need not be up (the tier degrades at the
  // first call and recovers when it comes). kBadRequest for a chunk size outside the manifest's
  // bounds or an address without a node.
  static Result<std::unique_ptr<RedisTier>> Create(const RedisTierOptions& options);
  ~RedisTier() override;
  RedisTier(const RedisTier&) = delete;
  RedisTier& operator=(const RedisTier&) = delete;

  Result<std::shared_ptr<const HostBuffer>> Get(const SegmentKey& key) override;
  void Write(EntryHandle entry) override;
  void WaitForWrites() override EXCLUDES(mu_);
  TierCounters Counters() const override;
  std::vector<RemoteNodeCounters> Nodes() const override { return client_.NodeCounters(); }

 private:
  explicit RedisTier(const RedisTierOptions& options);

  // A miss that found bad or incomplete data: drops the manifest so it can be rewritten.
  void DropManifest(const std::string& manifest_key);
  Status WriteEntry(const TierEntry& entry);
  void WriterLoop() EXCLUDES(mu_);

  const RedisTierOptions options_;

  RedisClient client_;

  mutable Mutex mu_;
  std::deque<EntryHandle> queue_ GUARDED_BY(mu_);
  uint64_t queued_bytes_ GUARDED_BY(mu_) = 0;
  bool writer_busy_ GUARDED_BY(mu_) = false;
  bool stopping_ GUARDED_BY(mu_) = false;
  std::condition_variable_any writer_cv_;
  std::condition_variable_any drained_cv_;
  std::mt19937_64 write_ids_;  // the writer thread's alone
  std::thread writer_;

  std::atomic<uint64_t> hits_{0}, misses_{0}, inserts_{0}, incomplete_{0};
  std::atomic<uint64_t> checksum_failures_{0}, reply_errors_{0};
  std::atomic<uint64_t> bytes_read_{0}, bytes_written_{0};
};

}  // namespace hypic::storage
