// The hypic-stress workload and verifier. A run drives random put / get / probe+pin / evict /
// pin / flush operations from several threads against a TierManager (host RAM over RocksDB by
// default; a device tier on the CPU backend above it, or no SSD tier at all, a Redis remote tier
// below, as configured) and checks every hit against the expected state: the bytes a key must
// hold are a pure function of its seed (storage/synthetic_entry.h), and acknowledged puts are
// logged durably (AckLog).
// Verify reopens a store (after a clean exit or a kill -9), reads back every stored entry and
// every acknowledged key, and counts what survived and anything wrong. Thread-safe where noted.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/host_buffer.h"
#include "core/segment_key.h"
#include "core/status.h"
#include "core/thread_annotations.h"
#include "storage/rocks_tier.h"
#include "storage/synthetic_entry.h"
#include "storage/tier_manager.h"

namespace hypic::stress {

struct StoreConfig {
  std::string dir;                    // the SSD tier lives in dir/db
  uint64_t hbm_bytes = 0;             // a device tier on the CPU backend; 0: none
  uint64_t host_bytes = 64ull << 20;  // 0: no host tier
  uint64_t ssd_bytes = 1ull << 30;    // 0: no SSD tier (memory only; Verify needs one)
  storage::WalMode wal = storage::WalMode::kAsync;
  storage::TierKind placement = storage::TierKind::kHost;
  storage::EvictionPolicy policy = storage::EvictionPolicy::kLru;
  uint32_t keys = 256;  // seeds 0..keys-1
  uint64_t min_entry_bytes = 1ull << 20;
  uint64_t max_entry_bytes = 4ull << 20;
  // A Redis URL (redis://host:port) for a remote tier under the others (storage/redis_tier.h):
  // every put of the run is offered to it, and a local miss fetches from it. Its keys carry
  // the prefix "hypic-stress:" + dir. Empty: no remote tier.
  std::string remote_store;
};

struct RunConfig {
  uint32_t threads = 4;
  uint64_t ops = 2000;  // per thread; 0: until `seconds` pass
  double seconds = 0;   // 0: until `ops` are done
  uint64_t seed = 1;
  std::string ack_log;  // empty: no durable log
};

struct RunReport {
  uint64_t ops = 0, puts = 0, acked = 0, gets = 0, hits = 0, misses = 0, probes = 0;
  uint64_t pinned_misses = 0;  // a key pinned by Probe that Get then missed
  uint64_t bad = 0;            // hits whose bytes differ from the expected ones
  uint64_t over_capacity = 0;  // samples where a tier's usage exceeded its capacity
  uint64_t checksum_failures = 0;
  std::string ToString() const;
};

struct VerifyReport {
  uint64_t acked_puts = 0;  // records in the ack log (every acknowledged put)
  uint64_t acked = 0;       // distinct seeds in the ack log
  uint64_t surviving = 0;   // of those, still readable
  uint64_t stored = 0;      // entries in the reopened index
  uint64_t hits = 0;
  uint64_t bad = 0;      // reads that returned wrong bytes or bytes failing their checksum
  uint64_t unknown = 0;  // stored keys that no seed produces
  uint64_t checksum_failures = 0;  // corrupt copies caught (and dropped) by the store
  double open_ms = 0;
  std::string ToString() const;
};

// The one spec each seed stands for: keys are content addresses, so size and namespace are
// functions of the seed too. BytesOf is its serialized entry.
storage::SyntheticSpec SpecOf(const StoreConfig& c, uint64_t seed);
Result<std::shared_ptr<const HostBuffer>> BytesOf(const StoreConfig& c, uint64_t seed);

// Expected state: the xxh3-64 of the bytes each seed's key must hold, computed once per seed.
// Thread-safe.
class Expected {
 public:
  explicit Expected(const StoreConfig& c);
  const SegmentKey& Key(uint64_t seed) const { return keys_[seed]; }
  std::optional<uint64_t> SeedOf(const SegmentKey& k) const;
  void Remember(uint64_t seed, const HostBuffer& bytes);
  // True when `bytes` is exactly what `seed`'s key must hold (and passes the entry checksum).
  bool Matches(uint64_t seed, std::span<const std::byte> bytes);

 private:
  const StoreConfig config_;
  std::vector<SegmentKey> keys_;
  std::unordered_map<SegmentKey, uint64_t, SegmentKeyHasher> seed_of_;
  Mutex mu_;
  std::unordered_map<uint64_t, uint64_t> hash_ GUARDED_BY(mu_);
};

// Opens the tiers the config names (reopening an existing DB rebuilds the index).
Result<std::unique_ptr<storage::TierManager>> OpenStore(const StoreConfig& config);

Result<RunReport> Run(const StoreConfig& store, const RunConfig& run);
Result<VerifyReport> Verify(const StoreConfig& store, const std::string& ack_log);

}  // namespace hypic::stress
