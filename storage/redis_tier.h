// RedisTier: the remote tier on one Redis server, through hiredis (synchronous API, a small
// pool of connections). Entries are stored in bounded chunks under one manifest key
// (storage/redis_manifest.h); writes put every chunk first, pipelined, and the manifest last,
// so a reader sees either a complete entry or none.
//
// Reads (Get): the manifest, then the chunks pipelined into one aligned buffer, each checked
// against the manifest's checksum, then Verify and the key of the entry header. A manifest
// without all its chunks (evicted by maxmemory, or a write cut short) is a miss counted in
// `evictions`; a chunk or manifest that fails its check is a miss counted in
// `checksum_failures`, and its manifest is deleted so that the next writer replaces it.
//
// Writes (Write) are queued and run on the tier's own writer thread, never on a request: the
// queue is bounded (max_queued_bytes) and a write that does not fit, or comes while the tier is
// degraded, is dropped. The writer skips an entry whose manifest exists already (another
// daemon wrote it).
//
// Faults: connects and commands run under timeouts. A connection error or timeout marks the
// tier degraded and opens a circuit breaker: for the backoff (doubling from backoff_min to
// backoff_max) every Get is an immediate kIoError and writes are dropped; after it one call
// tries Redis again, and a success closes the breaker. An error reply (OOM under a noeviction
// maxmemory, say) fails that one command and is counted in io_errors without degrading.
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
#include "storage/remote_tier.h"

struct redisContext;

namespace hypic::storage {

struct RedisAddress {
  std::string host;
  uint16_t port = 6379;
  std::string user;      // empty: AUTH with the password alone
  std::string password;  // empty: no AUTH
};

// Parses "redis://[[user]:password@]host[:port]" (port 6379 by default). kBadRequest naming
// what is wrong otherwise.
Result<RedisAddress> ParseRedisUrl(std::string_view url);

struct RedisTierOptions {
  RedisAddress address;
  std::string prefix = "hypic";  // the deployment's part of every key
  uint64_t chunk_bytes = uint64_t{2} << 20;
  std::chrono::milliseconds connect_timeout{250};
  std::chrono::milliseconds command_timeout{1000};  // one command or one pipelined reply
  std::chrono::milliseconds backoff_min{250};
  std::chrono::milliseconds backoff_max{10000};
  size_t max_idle_connections = 4;
  uint64_t max_queued_bytes = uint64_t{256} << 20;
};

class RedisTier : public RemoteTier {
 public:
  // Checks the options and starts the writer; Redis need not be up (the tier starts degraded
  // and recovers when it comes). kBadRequest for a chunk size outside the manifest's bounds.
  static Result<std::unique_ptr<RedisTier>> Create(const RedisTierOptions& options);
  ~RedisTier() override;
  RedisTier(const RedisTier&) = delete;
  RedisTier& operator=(const RedisTier&) = delete;

  Result<std::shared_ptr<const HostBuffer>> Get(const SegmentKey& key) override;
  void Write(EntryHandle entry) override;
  void WaitForWrites() override EXCLUDES(mu_);
  TierCounters Counters() const override;

 private:
  struct ContextDeleter {
    void operator()(redisContext* c) const;
  };
  using Context = std::unique_ptr<redisContext, ContextDeleter>;

  explicit RedisTier(const RedisTierOptions& options);

  // A pooled or new connection; kIoError while the breaker is open or when Redis is not there.
  Result<Context> Acquire() EXCLUDES(mu_);
  // Returns a healthy connection to the pool (a broken one is closed) and closes the breaker.
  void Release(Context c) EXCLUDES(mu_);
  // A connection error or timeout: counts it, opens the breaker, closes the pool.
  Status Fail(const Status& why) EXCLUDES(mu_);
  // A miss that found bad or incomplete data: drops the manifest so it can be rewritten.
  void DropManifest(redisContext* c, const std::string& manifest_key);
  Status WriteEntry(const TierEntry& entry);
  void WriterLoop() EXCLUDES(mu_);

  const RedisTierOptions options_;

  mutable Mutex mu_;
  std::vector<Context> idle_ GUARDED_BY(mu_);
  bool degraded_ GUARDED_BY(mu_) = false;
  std::chrono::milliseconds backoff_ GUARDED_BY(mu_){0};
  std::chrono::steady_clock::time_point retry_at_ GUARDED_BY(mu_);
  std::deque<EntryHandle> queue_ GUARDED_BY(mu_);
  uint64_t queued_bytes_ GUARDED_BY(mu_) = 0;
  bool writer_busy_ GUARDED_BY(mu_) = false;
  bool stopping_ GUARDED_BY(mu_) = false;
  std::condition_variable_any writer_cv_;
  std::condition_variable_any drained_cv_;
  std::mt19937_64 write_ids_;  // the writer thread's alone
  std::thread writer_;

  std::atomic<uint64_t> hits_{0}, misses_{0}, inserts_{0}, incomplete_{0};
  std::atomic<uint64_t> checksum_failures_{0}, io_errors_{0};
  std::atomic<uint64_t> bytes_read_{0}, bytes_written_{0};
};

}  // namespace hypic::storage
