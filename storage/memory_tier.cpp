#include "storage/memory_tier.h"

#include <fmt/format.h>

#include <utility>

namespace hypic::storage {

MemoryTier::MemoryTier(TierKind kind, uint64_t capacity) : kind_(kind), capacity_(capacity) {}

MemoryTier::~MemoryTier() = default;

Status MemoryTier::Insert(const TierEntry& entry) {
  HYPIC_ASSIGN_OR_RETURN(TierEntry prepared, Prepare(entry));
  return Commit(prepared);
}

Result<TierEntry> MemoryTier::Prepare(const TierEntry& entry) {
  if (entry.info.bytes > capacity_) {  // it could never be committed: spare the copy
    return NoSpace(fmt::format("{} tier: {} bytes exceed its capacity of {}", TierKindName(kind_),
                               entry.info.bytes, capacity_));
  }
  return Store(entry);
}

Status MemoryTier::Commit(const TierEntry& prepared) {
  const uint64_t n = prepared.info.bytes;
  auto stored = std::make_shared<const TierEntry>(prepared);
  EntryHandle replaced;  // released after the lock
  MutexLock lock(&mu_);
  auto it = map_.find(prepared.info.key);
  // A replaced entry's bytes are free for its successor.
  const uint64_t used = usage_ - (it != map_.end() ? it->second->info.bytes : 0);
  if (n > capacity_ || used > capacity_ - n) {
    return NoSpace(fmt::format("{} tier: {} bytes do not fit ({} of {} used)", TierKindName(kind_),
                               n, used, capacity_));
  }
  if (it != map_.end()) {
    replaced = std::exchange(it->second, std::move(stored));
  } else {
    map_.emplace(prepared.info.key, std::move(stored));
  }
  usage_ = used + n;
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
