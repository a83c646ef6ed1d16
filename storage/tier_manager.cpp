#include "storage/tier_manager.h"

#include <fmt/format.h>

#include <algorithm>
#include <tuple>
#include <utility>

#include "core/logging.h"

namespace hypic::storage {

// ---- PinSet ----------------------------------------------------------------------------------

PinSet::~PinSet() { Release(); }

PinSet::PinSet(PinSet&& other) noexcept
    : manager_(std::exchange(other.manager_, nullptr)), pins_(std::move(other.pins_)) {
  other.pins_.clear();
}

PinSet& PinSet::operator=(PinSet&& other) noexcept {
  if (this != &other) {
    Release();
    manager_ = std::exchange(other.manager_, nullptr);
    pins_ = std::move(other.pins_);
    other.pins_.clear();
  }
  return *this;
}

void PinSet::Release() {
  if (manager_ != nullptr && !pins_.empty()) manager_->ReleasePins(pins_);
  pins_.clear();
}

// ---- TierManager -----------------------------------------------------------------------------

Result<std::unique_ptr<TierManager>> TierManager::Create(TierManagerOptions options,
                                                         std::unique_ptr<Tier> hbm,
                                                         std::unique_ptr<Tier> host,
                                                         std::unique_ptr<Tier> ssd,
                                                         std::unique_ptr<RemoteTier> remote) {
  std::array<std::unique_ptr<Tier>, kNumTierKinds> tiers{std::move(hbm), std::move(host),
                                                         std::move(ssd)};
  for (size_t i = 0; i < tiers.size(); ++i) {
    if (tiers[i] != nullptr && Index(tiers[i]->kind()) != i) {
      return BadRequest(fmt::format("tier of kind {} given in the {} position",
                                    TierKindName(tiers[i]->kind()),
                                    TierKindName(static_cast<TierKind>(i))));
    }
  }
  std::unique_ptr<TierManager> m(new TierManager(options, std::move(tiers), std::move(remote)));
  if (Tier* ssd_tier = m->TierAt(TierKind::kSsd)) {
    std::vector<EntryInfo> stored = ssd_tier->List();
    MutexLock lock(&m->mu_);
    for (EntryInfo& info : stored) {
      Item item;
      item.gen = m->next_gen_++;
      item.mask = Bit(TierKind::kSsd);
      item.last_access = std::chrono::system_clock::now();
      item.info = std::move(info);
      SegmentKey key = item.info.key;
      m->namespace_bytes_[item.info.name_space] += item.info.bytes;
      m->items_.emplace(key, std::move(item));
    }
    HYPIC_LOG_INFO("storage: index rebuilt from the ssd tier: {} entries, {} bytes",
                   m->items_.size(), ssd_tier->Usage());
  }
  if (m->HasTier(TierKind::kSsd) && options.max_writeback_bytes > 0) {
    m->writer_ = std::thread([raw = m.get()] { raw->WriterLoop(); });
  }
  return m;
}

TierManager::TierManager(TierManagerOptions options,
                         std::array<std::unique_ptr<Tier>, kNumTierKinds> tiers,
                         std::unique_ptr<RemoteTier> remote)
    : options_(options), tiers_(std::move(tiers)), remote_(std::move(remote)) {}

TierManager::~TierManager() {
  if (!writer_.joinable()) return;
  {
    MutexLock lock(&mu_);
    stopping_ = true;
  }
  writer_cv_.notify_one();
  writer_.join();  // the loop empties the queue first: no demotion is lost
}

void TierManager::WriterLoop() {
  for (;;) {
    WriteBack wb;
    {
      MutexLock lock(&mu_);
      // condition_variable_any unlocks and relocks mu_ itself, so the lock stays held here.
      while (queue_.empty() && !stopping_) writer_cv_.wait(mu_);
      if (queue_.empty()) return;  // stopping, and nothing left to write
      wb = std::move(queue_.front());
      queue_.pop_front();
      queued_bytes_ -= wb.entry->info.bytes;
    }
    const Status st = WriteToSsd(wb);
    if (!st.ok()) {
      HYPIC_LOG_DEBUG("storage: write-back of {} failed: {}", wb.key.ToHex(), st.ToString());
    }
  }
}

TierManager::WriteBack TierManager::NewWriteBackLocked(const SegmentKey& key, Item& item,
                                                       EntryHandle entry, bool demotion) {
  item.pending = entry;
  const uint64_t ticket = next_ticket_++;
  writes_in_flight_.insert(ticket);
  return {key, item.gen, std::move(entry), demotion, ticket};
}

void TierManager::WatchLocked(WriteWatch* watch) {
  watch->waiting = writes_in_flight_;
  watches_.push_back(watch);
}

Status TierManager::AwaitWatch(WriteWatch* watch) {
  MutexLock lock(&mu_);
  while (!watch->waiting.empty()) written_cv_.wait(mu_);
  watches_.erase(std::find(watches_.begin(), watches_.end(), watch));
  return watch->error;
}

void TierManager::WaitForWriteBacks() {
  WriteWatch watch;
  {
    MutexLock lock(&mu_);
    WatchLocked(&watch);
  }
  (void)AwaitWatch(&watch);
  if (remote_ != nullptr) remote_->WaitForWrites();
}

std::optional<TierKind> TierManager::Below(TierKind k) const {
  for (size_t i = Index(k) + 1; i < kNumTierKinds; ++i) {
    if (tiers_[i] != nullptr) return static_cast<TierKind>(i);
  }
  return std::nullopt;
}

bool TierManager::Expired(const Item& item, Clock::time_point now) const {
  return item.expires.has_value() && now >= *item.expires;
}

void TierManager::Touch(Item& item) {
  ++item.hits;
  item.last_tick = ++tick_;
  item.last_access = std::chrono::system_clock::now();
}

std::unordered_map<SegmentKey, TierManager::Item, SegmentKeyHasher>::iterator
TierManager::PickVictimLocked(TierKind t) {
  const Clock::time_point now = Clock::now();
  auto best = items_.end();
  // Smaller is evicted first: expired entries, then the policy's score, then least recent.
  std::tuple<int, double, uint64_t> best_rank{};
  for (auto it = items_.begin(); it != items_.end(); ++it) {
    const Item& item = it->second;
    if ((item.mask & Bit(t)) == 0 || Pinned(item)) continue;
    double score = 0;
    if (options_.policy == EvictionPolicy::kCostAware) {
      score = static_cast<double>(item.info.Cost()) * static_cast<double>(item.hits + 1) /
              static_cast<double>(std::max<uint64_t>(item.info.bytes, 1));
    }
    std::tuple<int, double, uint64_t> rank{Expired(item, now) ? 0 : 1, score, item.last_tick};
    if (best == items_.end() || rank < best_rank) {
      best = it;
      best_rank = rank;
    }
  }
  return best;
}

void TierManager::EraseIfEmptyLocked(
    std::unordered_map<SegmentKey, Item, SegmentKeyHasher>::iterator it) {
  if (it->second.mask == 0 && it->second.pending == nullptr) EraseItemLocked(it);
}

void TierManager::EraseItemLocked(
    std::unordered_map<SegmentKey, Item, SegmentKeyHasher>::iterator it) {
  auto ns = namespace_bytes_.find(it->second.info.name_space);
  if (ns != namespace_bytes_.end()) {
    ns->second -= std::min(ns->second, it->second.info.bytes);
    if (ns->second == 0) namespace_bytes_.erase(ns);
  }
  items_.erase(it);
}

void TierManager::EraseLocked(std::unordered_map<SegmentKey, Item, SegmentKeyHasher>::iterator it) {
  for (size_t i = 0; i < kNumTierKinds; ++i) {
    auto t = static_cast<TierKind>(i);
    if ((it->second.mask & Bit(t)) == 0) continue;
    (void)TierAt(t)->Remove(it->first);  // NotFound is fine: the copy is gone either way
    ++per_tier_[i].evictions;
  }
  // A write-back still in flight finds no item when it completes and removes its copy.
  EraseItemLocked(it);
}

void TierManager::EvictFromTierLocked(
    std::unordered_map<SegmentKey, Item, SegmentKeyHasher>::iterator it, TierKind t, bool demote,
    std::vector<WriteBack>* out) {
  Item& item = it->second;
  const SegmentKey key = it->first;
  std::optional<TierKind> below = Below(t);
  if (demote && options_.demote && below && item.hits >= options_.demote_min_hits &&
      (item.mask & Bit(*below)) == 0 && item.pending == nullptr) {
    Result<EntryHandle> h = TierAt(t)->Lookup(key);
    if (h.ok() && (*h)->host.empty()) {  // a device copy: bring it back, verified
      Result<std::shared_ptr<const HostBuffer>> copy = CopyToHost(**h);
      if (copy.ok()) {
        h = MakeHostHandle(std::move(copy).value());
      } else {
        h = copy.status();
        if (copy.status().code() == StatusCode::kBadChecksum)
          ++per_tier_[Index(t)].checksum_failures;
      }
    }
    if (h.ok() && *below == TierKind::kSsd) {
      out->push_back(NewWriteBackLocked(key, item, *h, /*demotion=*/true));
    } else if (h.ok()) {
      // Copied under the lock: the victim must leave tier t now to make room for the caller.
      Result<TierEntry> prepared = TierAt(*below)->Prepare(**h);
      if (prepared.ok() && CommitLocked(item, *below, *prepared, out).ok()) {
        ++per_tier_[Index(*below)].demotions;
      }
    }
  }
  (void)TierAt(t)->Remove(key);
  item.mask = static_cast<uint8_t>(item.mask & ~Bit(t));
  ++per_tier_[Index(t)].evictions;
  EraseIfEmptyLocked(it);
}

Status TierManager::MakeRoomLocked(TierKind t, uint64_t bytes, std::vector<WriteBack>* out) {
  Tier* tier = TierAt(t);
  const uint64_t cap = tier->Capacity();
  const uint64_t reserved = t == TierKind::kSsd ? ssd_reserved_ : 0;
  if (bytes > cap) {
    return NoSpace(fmt::format("an entry of {} bytes exceeds the {} tier's capacity of {}", bytes,
                               TierKindName(t), cap));
  }
  while (tier->Usage() + reserved + bytes > cap) {
    auto victim = PickVictimLocked(t);
    if (victim == items_.end()) {
      return NoSpace(fmt::format("{} tier full: the remaining entries are pinned or being read",
                                 TierKindName(t)));
    }
    EvictFromTierLocked(victim, t, /*demote=*/true, out);
  }
  return Status::Ok();
}

Result<TierEntry> TierManager::PrepareIn(TierKind t, const TierEntry& entry,
                                         std::vector<WriteBack>* out) {
  {
    MutexLock lock(&mu_);
    HYPIC_RETURN_IF_ERROR(MakeRoomLocked(t, entry.info.bytes, out));
  }
  return TierAt(t)->Prepare(entry);
}

Status TierManager::CommitLocked(Item& item, TierKind t, const TierEntry& prepared,
                                 std::vector<WriteBack>* out) {
  HYPIC_RETURN_IF_ERROR(MakeRoomLocked(t, prepared.info.bytes, out));
  HYPIC_RETURN_IF_ERROR(TierAt(t)->Commit(prepared));
  item.mask = static_cast<uint8_t>(item.mask | Bit(t));
  return Status::Ok();
}

bool TierManager::PresentLocked(const SegmentKey& key) {
  auto it = items_.find(key);
  if (it == items_.end()) return false;
  if (Expired(it->second, Clock::now())) {
    EraseLocked(it);
    return false;
  }
  return true;
}

TierManager::Item& TierManager::NewItemLocked(const EntryInfo& info,
                                              std::optional<Clock::time_point> expires, bool pin) {
  Item item;
  item.info = info;
  item.gen = next_gen_++;
  item.last_tick = ++tick_;
  item.last_access = std::chrono::system_clock::now();
  item.expires = expires;
  item.pinned = pin;
  namespace_bytes_[info.name_space] += info.bytes;
  return items_.emplace(info.key, std::move(item)).first->second;
}

Status TierManager::WriteToSsd(const WriteBack& wb) {
  Tier* ssd = TierAt(TierKind::kSsd);
  const uint64_t n = wb.entry->info.bytes;
  Status room;
  {
    MutexLock lock(&mu_);
    std::vector<WriteBack> none;  // SSD victims are dropped, never demoted
    room = MakeRoomLocked(TierKind::kSsd, n, &none);
    if (room.ok()) ssd_reserved_ += n;
  }
  Status st = room.ok() ? ssd->Insert(*wb.entry) : room;
  MutexLock lock(&mu_);
  if (room.ok()) ssd_reserved_ -= n;
  writes_in_flight_.erase(wb.ticket);
  bool watched = false;
  for (WriteWatch* w : watches_) {
    if (w->waiting.erase(wb.ticket) == 0) continue;
    watched = true;
    if (!st.ok() && w->error.ok()) {
      w->error = st.WithContext("ssd write of " + wb.key.ToHex());
    }
  }
  if (watched) written_cv_.notify_all();
  auto it = items_.find(wb.key);
  if (it != items_.end() && it->second.gen == wb.gen) {
    Item& item = it->second;
    item.pending.reset();
    if (st.ok()) {
      item.mask = static_cast<uint8_t>(item.mask | Bit(TierKind::kSsd));
      if (wb.demotion) ++per_tier_[Index(TierKind::kSsd)].demotions;
    } else {
      EraseIfEmptyLocked(it);
    }
  } else if (st.ok() && (it == items_.end() || ((it->second.mask & Bit(TierKind::kSsd)) == 0 &&
                                                it->second.pending == nullptr))) {
    // The item was erased while the write was in flight (and maybe put again since, not yet
    // on SSD): the copy is no one's, remove it. It is not adopted by a newer item of the key,
    // though the bytes would be the same: between this Insert and this lock another write's
    // cleanup or an eviction may have removed the key from the SSD, and the index would then
    // name a copy that is not there (hypic-stress found it: "pinned key missed ... ssd tier:
    // no entry"). The newer item gets its own write when it leaves memory. Where it is on SSD
    // already, or its own write is in flight, the copy is left: the bytes are the same.
    (void)ssd->Remove(wb.key);
  }
  return st;
}

Status TierManager::RunWriteBacks(std::vector<WriteBack> writes, const SegmentKey* watch) {
  Status result;
  for (WriteBack& wb : writes) {
    const bool watched = watch != nullptr && wb.key == *watch;
    if (!watched && writer_.joinable()) {
      MutexLock lock(&mu_);
      const uint64_t n = wb.entry->info.bytes;
      if (queued_bytes_ + n <= options_.max_writeback_bytes) {
        queued_bytes_ += n;
        queue_.push_back(std::move(wb));
        writer_cv_.notify_one();
        continue;
      }
    }
    Status st = WriteToSsd(wb);
    if (watched) {
      result = st;
    } else if (!st.ok()) {
      HYPIC_LOG_DEBUG("storage: write-back of {} failed: {}", wb.key.ToHex(), st.ToString());
    }
  }
  return result;
}

Status TierManager::Put(std::shared_ptr<const HostBuffer> bytes, const PutOptions& options) {
  return Store(std::move(bytes), options, /*share=*/true);
}

bool TierManager::FetchRemote(const SegmentKey& key, const std::string* only_namespace) {
  Result<std::shared_ptr<const HostBuffer>> bytes = remote_->Get(key);
  if (!bytes.ok()) return false;
  if (only_namespace != nullptr) {
    Result<EntryInfo> info = ReadEntryInfo((*bytes)->span());
    if (!info.ok() || info->name_space != *only_namespace) return false;
  }
  return Store(std::move(bytes).value(), {}, /*share=*/false).ok();
}

Status TierManager::Store(std::shared_ptr<const HostBuffer> bytes, const PutOptions& options,
                          bool share) {
  if (bytes == nullptr) return BadRequest("Put of a null buffer");
  HYPIC_RETURN_IF_ERROR(Verify(bytes->span()));
  HYPIC_ASSIGN_OR_RETURN(EntryHandle h, MakeHostHandle(std::move(bytes)));
  const SegmentKey key = h->info.key;
  const Clock::time_point now = Clock::now();
  const std::chrono::milliseconds ttl =
      options.ttl.count() > 0 ? options.ttl : options_.default_ttl;
  std::optional<Clock::time_point> expires;
  if (ttl.count() > 0) expires = now + ttl;

  {
    MutexLock lock(&mu_);
    if (PresentLocked(key)) return Status::Ok();
  }
  // The copy into a memory tier runs without the lock, so others may put or evict the key
  // meanwhile: the index learns of this entry only when its copy is committed.
  std::vector<WriteBack> writes;
  Status placed = NoSpace("no tier can take the entry");
  for (size_t i = Index(options_.placement); i < Index(TierKind::kSsd) && !placed.ok(); ++i) {
    if (tiers_[i] == nullptr) continue;
    const auto t = static_cast<TierKind>(i);
    Result<TierEntry> prepared = PrepareIn(t, *h, &writes);
    if (!prepared.ok()) {
      placed = prepared.status();
      continue;
    }
    MutexLock lock(&mu_);  // released before `prepared` is: an unused copy is freed unlocked
    if (PresentLocked(key)) {
      placed = Status::Ok();  // a concurrent Put of the key won; this copy is dropped
    } else {
      placed = CommitLocked(NewItemLocked(h->info, expires, options.pin), t, *prepared, &writes);
      if (!placed.ok()) EraseItemLocked(items_.find(key));
    }
  }
  bool to_ssd = false;
  if (!placed.ok() && HasTier(TierKind::kSsd)) {
    MutexLock lock(&mu_);
    if (!PresentLocked(key)) {
      Item& item = NewItemLocked(h->info, expires, options.pin);
      writes.push_back(NewWriteBackLocked(key, item, h, /*demotion=*/false));
      to_ssd = true;
    }
    placed = Status::Ok();
  }
  Status written = RunWriteBacks(std::move(writes), to_ssd ? &key : nullptr);
  if (!placed.ok()) return placed;
  if (share && remote_ != nullptr && written.ok() &&
      h->info.n_tokens >= options_.remote_min_tokens) {
    remote_->Write(h);
  }
  return written;
}

Result<EntryHandle> TierManager::Get(const SegmentKey& key, Access access) {
  Result<EntryHandle> local = GetLocal(key, access);
  if (!local.ok() && remote_ != nullptr && local.status().code() == StatusCode::kNotFound &&
      FetchRemote(key, nullptr)) {
    local = GetLocal(key, access);
  }
  if (local.ok() && access == Access::kDevice && (*local)->device == nullptr) {
    return PromoteToHbm(key, std::move(local).value());
  }
  return local;
}

EntryHandle TierManager::PromoteToHbm(const SegmentKey& key, EntryHandle host) {
  if (!HasTier(TierKind::kHbm)) return host;
  uint64_t gen = 0;
  {
    MutexLock lock(&mu_);
    auto it = items_.find(key);
    if (it == items_.end() || (it->second.mask & Bit(TierKind::kHbm)) != 0) return host;
    gen = it->second.gen;
  }
  std::vector<WriteBack> writes;
  std::optional<TierEntry> promoted = Promote(TierKind::kHbm, key, gen, *host, &writes);
  (void)RunWriteBacks(std::move(writes), nullptr);
  if (!promoted) return host;
  return std::make_shared<const TierEntry>(std::move(*promoted));
}

std::optional<TierEntry> TierManager::Promote(TierKind t, const SegmentKey& key, uint64_t gen,
                                              const TierEntry& entry,
                                              std::vector<WriteBack>* writes) {
  Result<TierEntry> prepared = PrepareIn(t, entry, writes);
  MutexLock lock(&mu_);
  auto it = items_.find(key);
  // During the copy the item may have been evicted or replaced, or promoted by another Get.
  if (!prepared.ok() || it == items_.end() || it->second.gen != gen ||
      (it->second.mask & Bit(t)) != 0 || !CommitLocked(it->second, t, *prepared, writes).ok()) {
    return std::nullopt;
  }
  ++per_tier_[Index(t)].promotions;
  return std::move(prepared).value();
}

Result<EntryHandle> TierManager::GetLocal(const SegmentKey& key, Access access) {
  std::vector<WriteBack> writes;
  EntryHandle found;
  uint64_t gen = 0;
  {
    MutexLock lock(&mu_);
    auto it = items_.find(key);
    if (it != items_.end() && Expired(it->second, Clock::now()) && !Pinned(it->second)) {
      EraseLocked(it);
      it = items_.end();
    }
    if (it == items_.end()) {
      for (size_t i = 0; i < kNumTierKinds; ++i) {
        if (tiers_[i] != nullptr) ++per_tier_[i].misses;
      }
      return NotFound("no entry for key " + key.ToHex());
    }
    Item& item = it->second;
    const std::array<TierKind, 2> order = access == Access::kHostBytes
                                              ? std::array{TierKind::kHost, TierKind::kHbm}
                                              : std::array{TierKind::kHbm, TierKind::kHost};
    for (TierKind t : order) {
      if (TierAt(t) == nullptr) continue;
      if ((item.mask & Bit(t)) == 0) {
        ++per_tier_[Index(t)].misses;
        continue;
      }
      Result<EntryHandle> h = TierAt(t)->Lookup(key);
      if (h.ok()) {
        ++per_tier_[Index(t)].hits;
        Touch(item);
        found = std::move(h).value();
        break;
      }
      item.mask = static_cast<uint8_t>(item.mask & ~Bit(t));
      ++per_tier_[Index(t)].misses;
    }
    if (found == nullptr && item.pending != nullptr) {
      ++per_tier_[Index(TierKind::kSsd)].hits;
      Touch(item);
      found = item.pending;
    }
    if (found == nullptr) {
      if ((item.mask & Bit(TierKind::kSsd)) == 0) {
        if (HasTier(TierKind::kSsd)) ++per_tier_[Index(TierKind::kSsd)].misses;
        EraseIfEmptyLocked(it);
        return NotFound("no entry for key " + key.ToHex());
      }
      ++item.inflight_pins;  // keeps the SSD copy from being evicted during the read
      gen = item.gen;
    }
  }
  if (found != nullptr) {
    if (access != Access::kHostBytes || !found->host.empty()) return found;
    Result<std::shared_ptr<const HostBuffer>> copy = CopyToHost(*found);
    if (!copy.ok()) {
      MutexLock lock(&mu_);
      if (copy.status().code() == StatusCode::kBadChecksum) {
        ++per_tier_[Index(TierKind::kHbm)].checksum_failures;
      }
      auto it = items_.find(key);
      if (it != items_.end()) EvictFromTierLocked(it, TierKind::kHbm, /*demote=*/false, &writes);
      return NotFound("hbm copy of " + key.ToHex() + " failed: " + copy.status().ToString());
    }
    return MakeHostHandle(std::move(copy).value());
  }

  Result<EntryHandle> r = TierAt(TierKind::kSsd)->Lookup(key);
  Status outcome;
  bool promote = false;
  {
    MutexLock lock(&mu_);
    auto it = items_.find(key);
    bool same = it != items_.end() && it->second.gen == gen;
    if (same) --it->second.inflight_pins;
    if (!r.ok()) {
      ++per_tier_[Index(TierKind::kSsd)].misses;
      // A bad or vanished copy is dropped from the index; an I/O error leaves it for later.
      if (same && r.status().code() != StatusCode::kIoError) {
        it->second.mask = static_cast<uint8_t>(it->second.mask & ~Bit(TierKind::kSsd));
        EraseIfEmptyLocked(it);
      }
      outcome = NotFound("ssd read of " + key.ToHex() + " failed: " + r.status().ToString());
    } else if (same) {
      ++per_tier_[Index(TierKind::kSsd)].hits;
      Touch(it->second);
      promote = HasTier(TierKind::kHost) && (it->second.mask & Bit(TierKind::kHost)) == 0;
    } else {
      ++per_tier_[Index(TierKind::kSsd)].hits;  // verified bytes, though the item moved on
    }
  }
  if (promote) (void)Promote(TierKind::kHost, key, gen, **r, &writes);
  (void)RunWriteBacks(std::move(writes), nullptr);
  if (!outcome.ok()) return outcome;
  return r;
}

ProbeResult TierManager::Probe(std::span<const SegmentKey> keys, bool pin_hits,
                               const std::string* only_namespace) {
  ProbeResult local = ProbeLocal(keys, pin_hits, only_namespace);
  if (remote_ == nullptr) return local;
  bool fetched = false;
  for (size_t i = 0; i < keys.size(); ++i) {
    if (!local.tiers[i] && FetchRemote(keys[i], only_namespace)) fetched = true;
  }
  // Probed again for the fetched keys' tiers and pins (the first pins go with `local`).
  return fetched ? ProbeLocal(keys, pin_hits, only_namespace) : std::move(local);
}

ProbeResult TierManager::ProbeLocal(std::span<const SegmentKey> keys, bool pin_hits,
                                    const std::string* only_namespace) {
  ProbeResult result;
  result.tiers.reserve(keys.size());
  result.pins.manager_ = this;
  const Clock::time_point now = Clock::now();
  MutexLock lock(&mu_);
  for (const SegmentKey& key : keys) {
    auto it = items_.find(key);
    if (it == items_.end() || (Expired(it->second, now) && !Pinned(it->second)) ||
        (only_namespace != nullptr && it->second.info.name_space != *only_namespace)) {
      result.tiers.push_back(std::nullopt);
      continue;
    }
    Item& item = it->second;
    std::optional<TierKind> top;
    for (size_t i = 0; i < kNumTierKinds && !top; ++i) {
      if (item.mask & Bit(static_cast<TierKind>(i))) top = static_cast<TierKind>(i);
    }
    if (!top && item.pending != nullptr) top = TierKind::kHost;  // served from RAM meanwhile
    result.tiers.push_back(top);
    if (top && pin_hits) {
      ++item.inflight_pins;
      result.pins.pins_.emplace_back(key, item.gen);
    }
  }
  return result;
}

void TierManager::ReleasePins(const std::vector<std::pair<SegmentKey, uint64_t>>& pins) {
  MutexLock lock(&mu_);
  for (const auto& [key, gen] : pins) {
    auto it = items_.find(key);
    if (it != items_.end() && it->second.gen == gen && it->second.inflight_pins > 0) {
      --it->second.inflight_pins;
    }
  }
}

Status TierManager::Pin(const SegmentKey& key) {
  MutexLock lock(&mu_);
  auto it = items_.find(key);
  if (it == items_.end()) return NotFound("no entry for key " + key.ToHex());
  it->second.pinned = true;
  return Status::Ok();
}

Status TierManager::Unpin(const SegmentKey& key) {
  MutexLock lock(&mu_);
  auto it = items_.find(key);
  if (it == items_.end()) return NotFound("no entry for key " + key.ToHex());
  it->second.pinned = false;
  return Status::Ok();
}

EvictResult TierManager::Evict(const EvictRequest& request) {
  EvictResult result;
  const Clock::time_point now = Clock::now();
  MutexLock lock(&mu_);
  std::vector<std::unordered_map<SegmentKey, Item, SegmentKeyHasher>::iterator> candidates;
  for (auto it = items_.begin(); it != items_.end(); ++it) {
    const Item& item = it->second;
    if (request.key && it->first != *request.key) continue;
    if (request.name_space && item.info.name_space != *request.name_space) continue;
    if (request.expired_only && !Expired(item, now)) continue;
    if (request.tier && (item.mask & Bit(*request.tier)) == 0) continue;
    candidates.push_back(it);
  }
  if (request.max_bytes > 0) {  // drop the entries the policy would drop first
    auto rank = [&](const Item& item) {
      double score = options_.policy == EvictionPolicy::kCostAware
                         ? static_cast<double>(item.info.Cost()) *
                               static_cast<double>(item.hits + 1) /
                               static_cast<double>(std::max<uint64_t>(item.info.bytes, 1))
                         : 0.0;
      return std::tuple<int, double, uint64_t>{Expired(item, now) ? 0 : 1, score, item.last_tick};
    };
    std::sort(candidates.begin(), candidates.end(),
              [&](auto a, auto b) { return rank(a->second) < rank(b->second); });
  }
  for (auto it : candidates) {
    if (request.max_bytes > 0 && result.bytes >= request.max_bytes) break;
    Item& item = it->second;
    if (Pinned(item)) {
      ++result.skipped_pinned;
      continue;
    }
    uint8_t drop = request.tier ? Bit(*request.tier) : item.mask;
    for (size_t i = 0; i < kNumTierKinds; ++i) {
      auto t = static_cast<TierKind>(i);
      if ((drop & item.mask & Bit(t)) == 0) continue;
      (void)TierAt(t)->Remove(it->first);
      item.mask = static_cast<uint8_t>(item.mask & ~Bit(t));
      ++per_tier_[i].evictions;
      ++result.entries;
      result.bytes += item.info.bytes;
    }
    if (!request.tier) {
      EraseItemLocked(it);  // an in-flight write-back finds no item and removes its copy
    } else {
      EraseIfEmptyLocked(it);
    }
  }
  return result;
}

Status TierManager::Flush() {
  Tier* ssd = TierAt(TierKind::kSsd);
  if (ssd == nullptr) return Status::Ok();
  std::vector<WriteBack> writes;
  WriteWatch watch;
  {
    // One pass under the lock: every item is then on SSD, on its way there (a write in flight,
    // which the watch covers), or memory-only and written below (its pending bytes keep an
    // eviction meanwhile from queueing a second write).
    MutexLock lock(&mu_);
    for (auto& [key, item] : items_) {
      if ((item.mask & Bit(TierKind::kSsd)) != 0 || item.pending != nullptr) continue;
      for (TierKind t : {TierKind::kHost, TierKind::kHbm}) {
        if ((item.mask & Bit(t)) == 0) continue;
        Result<EntryHandle> h = TierAt(t)->Lookup(key);
        if (h.ok() && (*h)->host.empty()) {
          Result<std::shared_ptr<const HostBuffer>> copy = CopyToHost(**h);
          h = copy.ok() ? MakeHostHandle(std::move(copy).value())
                        : Result<EntryHandle>(copy.status());
        }
        if (!h.ok()) continue;
        writes.push_back(NewWriteBackLocked(key, item, *h, /*demotion=*/true));
        break;
      }
    }
    WatchLocked(&watch);
  }
  for (const WriteBack& wb : writes) (void)WriteToSsd(wb);  // a failure reaches the watch
  const Status written = AwaitWatch(&watch);
  if (remote_ != nullptr) remote_->WaitForWrites();
  const Status flushed = ssd->Flush();
  return written.ok() ? flushed : written;
}

uint64_t TierManager::NamespaceBytes(const std::string& name_space) const {
  MutexLock lock(&mu_);
  auto it = namespace_bytes_.find(name_space);
  return it == namespace_bytes_.end() ? 0 : it->second;
}

std::vector<TierStats> TierManager::Stats() const {
  std::vector<TierStats> out;
  MutexLock lock(&mu_);
  for (size_t i = 0; i < kNumTierKinds; ++i) {
    if (tiers_[i] == nullptr) continue;
    TierStats s;
    s.kind = static_cast<TierKind>(i);
    s.counters = tiers_[i]->Counters();
    const PerTier& p = per_tier_[i];
    s.counters.hits = p.hits;
    s.counters.misses = p.misses;
    s.counters.evictions = p.evictions;
    s.counters.promotions = p.promotions;
    s.counters.demotions = p.demotions;
    s.counters.checksum_failures += p.checksum_failures;
    out.push_back(s);
  }
  if (remote_ != nullptr) out.push_back({TierKind::kRemote, remote_->Counters()});
  return out;
}

std::vector<EntryListing> TierManager::List(const std::optional<std::string>& name_space,
                                            size_t limit) const {
  std::vector<EntryListing> out;
  const Clock::time_point now = Clock::now();
  {
    MutexLock lock(&mu_);
    for (const auto& [key, item] : items_) {
      if (name_space && item.info.name_space != *name_space) continue;
      EntryListing l;
      l.info = item.info;
      l.tier_mask = item.mask;
      l.tier = TierKind::kHost;
      for (size_t i = kNumTierKinds; i-- > 0;) {
        if (item.mask & Bit(static_cast<TierKind>(i))) l.tier = static_cast<TierKind>(i);
      }
      l.hits = item.hits;
      l.last_access = item.last_access;
      l.inflight_pins = item.inflight_pins;
      l.pinned = item.pinned;
      if (item.expires) {
        l.ttl_left = std::chrono::duration_cast<std::chrono::milliseconds>(
            std::max(*item.expires - now, Clock::duration::zero()));
      }
      out.push_back(std::move(l));
    }
  }
  std::sort(out.begin(), out.end(),
            [](const EntryListing& a, const EntryListing& b) { return a.info.key < b.info.key; });
  if (limit > 0 && out.size() > limit) out.resize(limit);
  return out;
}

}  // namespace hypic::storage
