#include "storage/memory_tier.h"

#include <fmt/format.h>

namespace hypic::storage {

MemoryTier::MemoryTier(TierKind kind, uint64_t capacity) : kind_(kind), capacity_(capacity) {}

MemoryTier::~MemoryTier() = default;

Status MemoryTier::Insert(const TierEntry& entry) {
  const uint64_t n = entry.info.bytes;
  EntryHandle replaced;  // released after the lock
  {
    MutexLock lock(&mu_);
    auto it = map_.find(entry.info.key);
    if (it != map_.end()) {
      usage_ -= it->second->info.bytes;
      replaced = std::move(it->second);
      map_.erase(it);
    }
    uint64_t used = usage_ + reserved_;
    if (n > capacity_ || used > capacity_ - n) {
      return NoSpace(fmt::format("{} tier: {} bytes do not fit ({} of {} used)",
                                 TierKindName(kind_), n, used, capacity_));
    }
    reserved_ += n;
  }
  Result<TierEntry> stored = Store(entry);
  EntryHandle lost_race;
  MutexLock lock(&mu_);
  reserved_ -= n;
  if (!stored.ok()) return stored.status();
  EntryHandle& slot = map_[entry.info.key];
  if (slot != nullptr) {  // a concurrent insert of the same key got there first
    usage_ -= slot->info.bytes;
    lost_race = std::move(slot);
  }
  slot = std::make_shared<const TierEntry>(std::move(stored).value());
  usage_ += n;
  inserts_.fetch_add(1);
  return Status::Ok();
}

Result<EntryHandle> MemoryTier::Lookup(const SegmentKey& key) {
  MutexLock lock(&mu_);
  auto it = map_.find(key);
  if (it == map_.end()) return NotFound(std::string(TierKindName(kind_)) + " tier: no entry");
  return it->second;
}

Status MemoryTier::Remove(const SegmentKey& key) {
  EntryHandle dropped;  // released after the lock: its deleter only touches an atomic
  MutexLock lock(&mu_);
  auto it = map_.find(key);
  if (it == map_.end()) return NotFound(std::string(TierKindName(kind_)) + " tier: no entry");
  usage_ -= it->second->info.bytes;
  dropped = std::move(it->second);
  map_.erase(it);
  return Status::Ok();
}

bool MemoryTier::Contains(const SegmentKey& key) const {
  MutexLock lock(&mu_);
  return map_.count(key) != 0;
}

uint64_t MemoryTier::Usage() const {
  MutexLock lock(&mu_);
  return usage_;
}

TierCounters MemoryTier::Counters() const {
  TierCounters c;
  {
    MutexLock lock(&mu_);
    c.entries = map_.size();
    c.bytes = usage_;
  }
  c.capacity = capacity_;
  c.inserts = inserts_.load();
  return c;
}

std::vector<EntryInfo> MemoryTier::List() const {
  MutexLock lock(&mu_);
  std::vector<EntryInfo> out;
  out.reserve(map_.size());
  for (const auto& [key, handle] : map_) out.push_back(handle->info);
  return out;
}

}  // namespace hypic::storage
