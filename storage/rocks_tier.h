// RocksTier: the SSD tier, on RocksDB with integrated BlobDB (entries are MiB-sized values, so
// they go to blob files and the LSM holds only small records).
//
// Records, written together in one WriteBatch: "m" + key -> the entry's header and namespace
// (what ReadEntryInfo needs), "d" + key -> the whole serialized entry (a blob). At open the
// in-memory index is rebuilt by scanning the "m" records only, so no blob is read.
//
// Safety: every Lookup reads with RocksDB checksums on and then runs Verify on the bytes and
// compares the key; a mismatch is counted, the record deleted and kBadChecksum returned, so a
// corrupt entry is a miss, never served. A DB that will not open (corruption, a bad MANIFEST)
// is moved aside into a quarantine directory and the tier starts empty, with a CRITICAL log
// line. A failed write marks the tier degraded: writes are refused for `retry_interval`, then
// RocksDB's Resume is tried, and when the error is one Resume cannot clear, the DB is closed
// and reopened (which also rebuilds the index). Reads keep working meanwhile.
//
// The size cap is ours: Usage() is the sum of stored entry sizes and Insert refuses (kNoSpace)
// beyond Capacity(); TierManager evicts to make room. Disk use can run ahead of Usage() by
// blob garbage until blob GC reclaims it. Every option is set explicitly and logged at open.
// Thread-safe (RocksDB is; the index has its own mutex).
#pragma once

#include <rocksdb/db.h>
#include <rocksdb/env.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <shared_mutex>
#include <string>
#include <unordered_map>

#include "core/thread_annotations.h"
#include "storage/tier.h"

namespace hypic::storage {

enum class WalMode : uint8_t {
  kOff = 0,    // no WAL: a crash loses unflushed entries (allowed for a cache)
  kAsync = 1,  // WAL written, not fsynced: survives a process kill, not a power loss
  kSync = 2,   // WAL fsynced on every write
};

struct RocksTierOptions {
  std::string path;                                  // the DB directory (created when missing)
  uint64_t capacity = 0;                             // bytes of entries, our cap
  WalMode wal = WalMode::kAsync;                     // see WalMode
  uint64_t rate_limit_bytes_per_sec = 512ull << 20;  // flush/compaction I/O; 0: unlimited
  uint64_t min_blob_size = 4096;                     // values at least this big go to blob files
  uint64_t write_buffer_size = 64ull << 20;
  std::chrono::milliseconds retry_interval{1000};  // degraded: how long before Resume is tried
  // A custom Env (fault injection, encrypted or remote storage); null: the default Env.
  // REQUIRES: outlives the tier.
  rocksdb::Env* env = nullptr;
};

class RocksTier : public Tier {
 public:
  // Opens (or creates) the DB, quarantining it when it cannot be opened, and rebuilds the
  // index. Fails only when even a fresh DB cannot be created (kIoError).
  static Result<std::unique_ptr<RocksTier>> Open(const RocksTierOptions& options);
  ~RocksTier() override;
  RocksTier(const RocksTier&) = delete;
  RocksTier& operator=(const RocksTier&) = delete;

  TierKind kind() const override { return TierKind::kSsd; }
  Status Insert(const TierEntry& entry) override;
  Result<EntryHandle> Lookup(const SegmentKey& key) override;
  Status Remove(const SegmentKey& key) override;
  bool Contains(const SegmentKey& key) const override;
  uint64_t Usage() const override;
  uint64_t Capacity() const override { return options_.capacity; }
  TierCounters Counters() const override;
  std::vector<EntryInfo> List() const override;
  Status Flush() override;

  bool Degraded() const { return degraded_.load(); }
  // The directory a broken DB was moved to at open; empty when none was.
  const std::string& quarantined_to() const { return quarantined_to_; }

 private:
  explicit RocksTier(const RocksTierOptions& options);
  // REQUIRES: db_mu_ held exclusively (or no other thread yet).
  Status OpenDb();
  Status RebuildIndex();
  // Closes and reopens the DB after an error Resume could not clear.
  Status Reopen();
  // Records a failed write: counts it and enters the degraded state.
  Status OnWriteError(const rocksdb::Status& s, std::string_view what);
  // In the degraded state: refuses until retry_interval has passed, then tries Resume.
  Status CheckWritable();
  // Drops a record that failed verification (counted as a checksum failure).
  void DropCorrupt(const SegmentKey& key, const Status& why);

  const RocksTierOptions options_;
  // Shared by every DB call, exclusive only to close and reopen it (recovery). Not annotated:
  // the thread-safety analysis does not model std::shared_mutex.
  mutable std::shared_mutex db_mu_;
  std::unique_ptr<rocksdb::DB> db_;  // null after a failed reopen: every call is an I/O error
  std::shared_ptr<rocksdb::RateLimiter> rate_limiter_;
  std::string quarantined_to_;

  mutable Mutex mu_;
  std::unordered_map<SegmentKey, EntryInfo, SegmentKeyHasher> index_ GUARDED_BY(mu_);
  uint64_t usage_ GUARDED_BY(mu_) = 0;
  std::chrono::steady_clock::time_point last_error_ GUARDED_BY(mu_);

  std::atomic<bool> degraded_{false};
  std::atomic<uint64_t> inserts_{0};
  std::atomic<uint64_t> checksum_failures_{0};
  std::atomic<uint64_t> io_errors_{0};
};

}  // namespace hypic::storage
