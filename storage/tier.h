// The Tier interface: one level of the store (HBM, host RAM, SSD), in the style of RocksDB's
// SecondaryCache and CacheLib navy's Engine. A tier holds serialized entries (entry_format.h)
// keyed by SegmentKey and knows nothing about policy: placement, eviction, promotion and pins
// belong to TierManager. A tier enforces its own capacity as a hard bound: Insert refuses
// (kNoSpace) rather than exceed it.
//
// Ownership: Lookup returns an EntryHandle, a ref-counted handle on the stored bytes. The bytes
// stay valid while any handle lives, even after Remove or eviction. Usage() counts the entries
// the tier holds; the memory of a removed entry is freed when its last handle goes.
//
// TierWrapper forwards every call to a target tier, so a decorator (fault injection, tracing)
// overrides just the calls it changes (one that changes Insert changes Prepare and Commit too:
// TierManager places entries in memory tiers through those two). Implementations are thread-safe;
// nothing throws.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

#include "core/host_buffer.h"
#include "core/segment_key.h"
#include "core/status.h"
#include "gpu/backend.h"
#include "storage/entry_format.h"

namespace hypic::storage {

// Numeric values are shown by the admin CLI and carried in protocol replies: never renumber.
// Lower values are faster tiers. kRemote is the shared store below SSD (storage/remote_tier.h):
// it appears in statistics only, never in TierManager's index, so kNumTierKinds counts the
// local tiers.
enum class TierKind : uint8_t { kHbm = 0, kHost = 1, kSsd = 2, kRemote = 3 };
inline constexpr int kNumTierKinds = 3;
std::string_view TierKindName(TierKind kind);  // "hbm", "host", "ssd", "remote"

// A stored entry: its parsed header and where its bytes are. Immutable.
struct TierEntry {
  EntryInfo info;
  // Host-addressable bytes (pageable or pinned); empty when the bytes live on a device.
  std::span<const std::byte> host;
  // Device copy (HBM tier), or nullptr. `backend` copies it back (CopyToHost).
  const gpu::Buffer* device = nullptr;
  gpu::Backend* backend = nullptr;
  // With a device copy: a host copy of the entry's prefix (header through tensor table,
  // EntryDataOffset bytes), for ParseHandle.
  std::span<const std::byte> device_prefix;
  // Keeps the memory above alive; shared with every handle.
  std::shared_ptr<const void> owner;
};

// A pinned handle on a stored entry: the bytes stay valid while it lives.
using EntryHandle = std::shared_ptr<const TierEntry>;

// Wraps host bytes that `owner` keeps alive (for example a buffer from Serialize or a PUT body)
// into a handle that can be inserted into any tier. Verifies nothing: callers pass bytes that
// Parse or Verify accepted.
Result<EntryHandle> MakeHostHandle(std::shared_ptr<const HostBuffer> bytes);

// Copies a handle's bytes into fresh host memory and verifies them (Verify). For device
// handles this is the device-to-host copy; for host handles a plain copy.
Result<std::shared_ptr<const HostBuffer>> CopyToHost(const TierEntry& entry);

// The entry a handle holds: parsed and fully verified from its host bytes (ParseView), or for
// a device copy, its tensors viewed in the device's memory (ParseDeviceView; MemoryKind::kDevice
// on a CUDA device), from the host copy of its prefix. The entry keeps the handle alive.
Result<std::shared_ptr<const SegmentEntry>> ParseHandle(const EntryHandle& handle);

// Counters of one tier. The tier fills entries, bytes, capacity, inserts, checksum_failures,
// io_errors and degraded; TierManager adds hits, misses, evictions, promotions and demotions.
struct TierCounters {
  uint64_t entries = 0;
  uint64_t bytes = 0;
  uint64_t capacity = 0;
  uint64_t hits = 0;
  uint64_t misses = 0;
  uint64_t inserts = 0;
  uint64_t evictions = 0;
  uint64_t promotions = 0;  // entries copied into this tier from a slower one on read
  uint64_t demotions = 0;   // entries written back into this tier from a faster one
  uint64_t checksum_failures = 0;
  uint64_t io_errors = 0;
  bool degraded = false;  // the tier refuses writes after errors and is retrying
  // The remote tier's network traffic (hits read, entries written); 0 for the local tiers.
  uint64_t bytes_read = 0;
  uint64_t bytes_written = 0;
  // The remote tier's nodes: those serving slots (1 for one Redis server), those of them whose
  // circuit breaker is open, and the cluster redirections (MOVED, ASK) followed.
  uint64_t nodes = 0;
  uint64_t nodes_degraded = 0;
  uint64_t redirects = 0;
};

class Tier {
 public:
  virtual ~Tier() = default;

  virtual TierKind kind() const = 0;

  // Stores a copy of (or a reference to) the entry's bytes under entry.info.key. Replaces an
  // existing entry of the same key. Returns kNoSpace when it does not fit in the free capacity,
  // kIoError or kNoSpace on a failed write (the tier may then report itself degraded).
  // REQUIRES: entry.host holds verified bytes of entry.info.bytes length.
  virtual Status Insert(const TierEntry& entry) = 0;

  // Insert in two steps, so that a caller can run the expensive one without its own lock held.
  // Prepare places a copy of the bytes in the tier's memory (allocation and copy) and returns
  // its stored form without adding it to the tier or its usage; it may run concurrently with
  // anything. Commit adds a prepared entry (replacing one of the same key) when it fits, with
  // Insert's errors; dropping an uncommitted prepared entry frees its copy. Insert(e) behaves
  // as Commit(Prepare(e)). The defaults prepare nothing and commit by Insert (the SSD tier).
  virtual Result<TierEntry> Prepare(const TierEntry& entry) { return entry; }
  virtual Status Commit(const TierEntry& prepared) { return Insert(prepared); }

  // kNotFound on a miss. A stored copy that fails its checksum is removed and reported as
  // kBadChecksum (counted); an I/O failure as kIoError. A wrong entry is never returned.
  virtual Result<EntryHandle> Lookup(const SegmentKey& key) = 0;

  // kNotFound when absent. Handles already returned stay valid.
  virtual Status Remove(const SegmentKey& key) = 0;

  virtual bool Contains(const SegmentKey& key) const = 0;
  virtual uint64_t Usage() const = 0;
  virtual uint64_t Capacity() const = 0;
  virtual TierCounters Counters() const = 0;

  // The headers of every stored entry (TierManager rebuilds its index from the SSD tier's).
  virtual std::vector<EntryInfo> List() const = 0;

  // Makes stored entries durable (SSD: flushes memtables); a no-op for memory tiers.
  virtual Status Flush() = 0;
};

// Forwards every call to `target`, which it owns.
class TierWrapper : public Tier {
 public:
  explicit TierWrapper(std::unique_ptr<Tier> target) : target_(std::move(target)) {}

  TierKind kind() const override { return target_->kind(); }
  Status Insert(const TierEntry& entry) override { return target_->Insert(entry); }
  Result<TierEntry> Prepare(const TierEntry& entry) override { return target_->Prepare(entry); }
  Status Commit(const TierEntry& prepared) override { return target_->Commit(prepared); }
  Result<EntryHandle> Lookup(const SegmentKey& key) override { return target_->Lookup(key); }
  Status Remove(const SegmentKey& key) override { return target_->Remove(key); }
  bool Contains(const SegmentKey& key) const override { return target_->Contains(key); }
  uint64_t Usage() const override { return target_->Usage(); }
  uint64_t Capacity() const override { return target_->Capacity(); }
  TierCounters Counters() const override { return target_->Counters(); }
  std::vector<EntryInfo> List() const override { return target_->List(); }
  Status Flush() override { return target_->Flush(); }

  Tier& target() { return *target_; }

 private:
  std::unique_ptr<Tier> target_;
};

}  // namespace hypic::storage
