// MemoryTier: the shared body of the tiers that hold entries in memory (host RAM, HBM). It keeps
// the key -> handle map and the usage accounting; subclasses only decide where the bytes go
// (Store). Usage() is the exact byte count of the entries the tier holds; an entry is counted
// when it is committed (Commit, or the end of Insert), which refuses what does not fit, so
// usage never exceeds Capacity(). A removed entry leaves the usage at once; its memory is freed
// when the last handle on it (a reader, a write-back in flight) is dropped.
// Thread-safe: one mutex guards the map and the usage; the copy into tier memory (Prepare,
// Store) runs outside it.
#pragma once

#include <atomic>
#include <memory>
#include <unordered_map>

#include "core/thread_annotations.h"
#include "storage/tier.h"

namespace hypic::storage {

class MemoryTier : public Tier {
 public:
  MemoryTier(TierKind kind, uint64_t capacity);
  ~MemoryTier() override;
  MemoryTier(const MemoryTier&) = delete;
  MemoryTier& operator=(const MemoryTier&) = delete;

  TierKind kind() const override { return kind_; }
  Status Insert(const TierEntry& entry) override;
  // Store, after refusing (kNoSpace) an entry bigger than the whole tier.
  Result<TierEntry> Prepare(const TierEntry& entry) override;
  // REQUIRES: `prepared` came from this tier's Prepare.
  Status Commit(const TierEntry& prepared) override;
  Result<EntryHandle> Lookup(const SegmentKey& key) override;
  Status Remove(const SegmentKey& key) override;
  bool Contains(const SegmentKey& key) const override;
  uint64_t Usage() const override;
  uint64_t Capacity() const override { return capacity_; }
  TierCounters Counters() const override;
  std::vector<EntryInfo> List() const override;
  Status Flush() override { return Status::Ok(); }

 protected:
  // Places a copy of `entry`'s bytes (or a reference to them) in this tier's memory and returns
  // the stored form. Called without the tier's lock held; may be called concurrently.
  virtual Result<TierEntry> Store(const TierEntry& entry) = 0;

 private:
  const TierKind kind_;
  const uint64_t capacity_;
  std::atomic<uint64_t> inserts_{0};
  mutable Mutex mu_;
  std::unordered_map<SegmentKey, EntryHandle, SegmentKeyHasher> map_ GUARDED_BY(mu_);
  uint64_t usage_ GUARDED_BY(mu_) = 0;
};

}  // namespace hypic::storage
