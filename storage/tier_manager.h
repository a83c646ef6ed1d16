// TierManager: the store's policy layer over up to three tiers (HBM -> host RAM -> SSD).
//
// - Placement: Put stores a new entry in the configured tier (host by default), falling back to
//   the next slower tier when every entry there is pinned.
// - Promotion on read: an SSD hit is copied into host RAM (and counted as a promotion); a read
//   for the composing device (Access::kDevice) copies a host or SSD hit into HBM.
// - Demotion: an entry evicted from a memory tier is written back to the next slower tier when
//   the admission policy allows (by default: only entries read at least once). Write-backs to
//   SSD run on a background writer thread, so the Get or Put that caused the eviction does not
//   wait for the disk; until written, the bytes are served from memory. The queue is bounded
//   (max_writeback_bytes): past the bound the evicting caller writes itself (backpressure).
// - Eviction per tier, LRU or cost-aware (lowest (tokens x layers) x (hits+1) / bytes first);
//   expired entries go first. Pinned entries are never evicted: explicit pins (Pin/Unpin) and
//   in-flight pins (the PinSet that Probe returns).
// - TTL per entry; namespaces are part of the key, and Probe/Evict/List can filter by
//   namespace. The bytes of each namespace are counted (NamespaceBytes, for tenant quotas).
// - Capacity is a hard bound per tier: a tier's usage never exceeds its capacity.
// - A remote tier (optional, storage/remote_tier.h), shared with other daemons and kept out of
//   the index: a key that misses locally in Get or Probe is read from it (verified) and put
//   locally, so it is then a local hit; a Put of a new entry of at least remote_min_tokens
//   tokens is offered to it (written asynchronously by the remote's own writer). Entries that
//   came from the remote are not written back to it.
//
// Ownership: the manager owns its tiers. Get returns an EntryHandle that keeps the bytes alive
// while the caller reads or sends them. Thread-safe, with many concurrent readers: one mutex
// guards the index and the memory tiers' bookkeeping (placement decisions, eviction, usage,
// pins, TTL, committing a copy into a tier). The slow work runs outside it, so hits never wait
// for it: SSD reads and writes, and the copy of a Put or a promotion into a memory tier
// (Tier::Prepare: pinned-host or device allocation and copy), committed afterwards under the
// lock only if the key's item is still the one it was made for (a Put's key still absent, a
// promotion's item generation unchanged); otherwise the copy is dropped. Demotion from HBM into
// host RAM still copies under the lock, as it frees room the evicting caller is waiting for.
// Nothing throws. The destructor finishes the queued write-backs before it returns.
//
// Durability: Flush returns once every SSD write that was queued or running when it was called
// (on the writer thread or on any caller) has finished, together with its own writes of the
// entries that lived only in memory, and the SSD tier has made them durable (RocksTier::Flush);
// it reports the first of those writes that failed.
#pragma once

#include <array>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "core/thread_annotations.h"
#include "storage/remote_tier.h"
#include "storage/tier.h"

namespace hypic::storage {

enum class EvictionPolicy : uint8_t { kLru = 0, kCostAware = 1 };

struct TierManagerOptions {
  EvictionPolicy policy = EvictionPolicy::kLru;
  // Where Put places new entries. A missing tier falls through to the next slower one.
  TierKind placement = TierKind::kHost;
  // Admission for write-back demotion: an entry evicted from a memory tier is written to the
  // tier below only when it was read at least this many times (0: always). Disabled entirely
  // when `demote` is false.
  bool demote = true;
  uint32_t demote_min_hits = 1;
  // TTL for entries put without one; zero: no expiry.
  std::chrono::milliseconds default_ttl{0};
  // Bytes of demotions that may wait for the background writer (held in memory meanwhile, on
  // top of the memory tiers' capacity). Zero: every write-back runs on the evicting caller.
  uint64_t max_writeback_bytes = uint64_t{256} << 20;
  // Admission to the remote tier: a new entry is written there when it has at least this many
  // tokens (the cost of recomputing it grows with them; a short one is cheaper to recompute
  // than to fetch).
  uint32_t remote_min_tokens = 256;
};

struct PutOptions {
  std::chrono::milliseconds ttl{0};  // zero: the manager's default
  bool pin = false;                  // explicit pin (Unpin releases it)
};

// What Get returns: host bytes (copied back and verified from a device tier when needed);
// whatever the fastest tier holds (a device handle from HBM); or for the device that composes
// (kDevice) the HBM tier's copy, made there from host RAM or SSD when absent (counted as a
// promotion into HBM), so the next read of the entry needs no upload. Without an HBM tier, or
// when it cannot take the entry (full of pinned entries, a failed copy), kDevice gives the host
// bytes instead.
enum class Access : uint8_t { kHostBytes = 0, kAny = 1, kDevice = 2 };

struct TierStats {
  TierKind kind = TierKind::kHost;
  TierCounters counters;
};

struct EntryListing {
  EntryInfo info;
  TierKind tier = TierKind::kHost;  // the fastest tier that holds it
  uint8_t tier_mask = 0;            // bit (1 << TierKind) per tier holding it
  uint64_t hits = 0;
  std::chrono::system_clock::time_point last_access;
  uint32_t inflight_pins = 0;
  bool pinned = false;
  std::optional<std::chrono::milliseconds> ttl_left;  // nullopt: no expiry
};

// What Evict drops. Empty fields match everything; `max_bytes` = 0 means no limit. Pinned
// entries are skipped and counted.
struct EvictRequest {
  std::optional<SegmentKey> key;
  std::optional<std::string> name_space;
  std::optional<TierKind> tier;  // drop only this tier's copies (no demotion)
  uint64_t max_bytes = 0;
  bool expired_only = false;
};

struct EvictResult {
  uint64_t entries = 0;  // tier copies dropped
  uint64_t bytes = 0;
  uint64_t skipped_pinned = 0;
};

class TierManager;

// In-flight pins taken by Probe: released when the PinSet is destroyed. Move-only.
// REQUIRES: the manager outlives the PinSet.
class PinSet {
 public:
  PinSet() = default;
  ~PinSet();
  PinSet(PinSet&& other) noexcept;
  PinSet& operator=(PinSet&& other) noexcept;
  PinSet(const PinSet&) = delete;
  PinSet& operator=(const PinSet&) = delete;

  size_t size() const { return pins_.size(); }
  void Release();

 private:
  friend class TierManager;
  TierManager* manager_ = nullptr;
  std::vector<std::pair<SegmentKey, uint64_t>> pins_;  // key, item generation
};

struct ProbeResult {
  std::vector<std::optional<TierKind>> tiers;  // per key: the fastest tier, or nullopt (miss)
  PinSet pins;                                 // the hits, pinned until released
};

class TierManager {
 public:
  // Any tier may be null. The index is rebuilt from the SSD tier's stored headers.
  // REQUIRES: each tier's kind() matches its position.
  static Result<std::unique_ptr<TierManager>> Create(TierManagerOptions options,
                                                     std::unique_ptr<Tier> hbm,
                                                     std::unique_ptr<Tier> host,
                                                     std::unique_ptr<Tier> ssd,
                                                     std::unique_ptr<RemoteTier> remote = nullptr);
  ~TierManager();
  TierManager(const TierManager&) = delete;
  TierManager& operator=(const TierManager&) = delete;

  // Stores a serialized entry. Verifies the bytes first (kBadChecksum / kCorruption /
  // kVersionMismatch). An entry already present is left exactly as it is: not written again,
  // its TTL and pin unchanged (the first writer wins; `options` apply to a new entry only), and
  // OK is returned. kNoSpace when no tier can take it.
  Status Put(std::shared_ptr<const HostBuffer> bytes, const PutOptions& options = {});

  // kNotFound on a miss (including an expired entry or a stored copy that failed its checksum:
  // those are counted and dropped, never returned).
  Result<EntryHandle> Get(const SegmentKey& key, Access access = Access::kHostBytes);

  // The fastest tier of each key, in one call; hits are pinned until `pins` is released. With
  // `only_namespace`, a key stored under another namespace is a miss.
  ProbeResult Probe(std::span<const SegmentKey> keys, bool pin_hits = true,
                    const std::string* only_namespace = nullptr);

  // Explicit pins. kNotFound when the key is not stored.
  Status Pin(const SegmentKey& key);
  Status Unpin(const SegmentKey& key);

  EvictResult Evict(const EvictRequest& request);

  // Writes every entry that lives only in memory to the SSD tier, waits for every SSD write
  // already queued or running (write-backs on the writer thread or on a caller, Puts placed on
  // SSD), and makes them all durable (Tier::Flush); the remote tier's queued writes are waited
  // for too. Used by shutdown and the admin FLUSH. Returns the first error of those writes
  // (kIoError, kNoSpace), else the SSD tier's Flush status. No-op without an SSD tier.
  // Entries put or evicted while it runs may or may not be covered.
  Status Flush() EXCLUDES(mu_);

  // Blocks until every SSD write queued or running when it was called, and the remote tier's
  // queued writes, have been written (or have failed).
  void WaitForWriteBacks() EXCLUDES(mu_);

  // Per present tier, fastest first; the remote tier last.
  std::vector<TierStats> Stats() const;
  // The remote tier's nodes (RemoteTier::Nodes); empty without a remote tier.
  std::vector<RemoteNodeCounters> RemoteNodes() const {
    return remote_ != nullptr ? remote_->Nodes() : std::vector<RemoteNodeCounters>{};
  }

  // ls-style enumeration, ordered by key; at most `limit` entries (0: all).
  std::vector<EntryListing> List(const std::optional<std::string>& name_space = std::nullopt,
                                 size_t limit = 0) const;

  // Bytes of the entries of `name_space` in the store (each entry once, whatever tiers hold it).
  uint64_t NamespaceBytes(const std::string& name_space) const;

  bool HasTier(TierKind kind) const { return tiers_[Index(kind)] != nullptr; }

 private:
  using Clock = std::chrono::steady_clock;

  struct Item {
    EntryInfo info;
    uint64_t gen = 0;
    uint8_t mask = 0;  // tiers holding a copy
    uint64_t hits = 0;
    uint64_t last_tick = 0;
    std::chrono::system_clock::time_point last_access;
    std::optional<Clock::time_point> expires;
    uint32_t inflight_pins = 0;
    bool pinned = false;
    // Bytes on their way to the SSD tier (write-back or SSD placement); served by Get meanwhile.
    EntryHandle pending;
  };

  // An SSD write decided under the lock and performed outside it. Its ticket is in
  // writes_in_flight_ from the decision until WriteToSsd has finished it.
  struct WriteBack {
    SegmentKey key;
    uint64_t gen = 0;
    EntryHandle entry;
    bool demotion = true;
    uint64_t ticket = 0;
  };

  // A Flush or WaitForWriteBacks waiting for the SSD writes that were in flight when it began.
  struct WriteWatch {
    std::unordered_set<uint64_t> waiting;  // tickets not yet finished
    Status error;                          // the first of them that failed
  };

  struct PerTier {
    uint64_t hits = 0, misses = 0, evictions = 0, promotions = 0, demotions = 0;
    uint64_t checksum_failures = 0;  // device copies that failed Verify
  };

  TierManager(TierManagerOptions options, std::array<std::unique_ptr<Tier>, kNumTierKinds> tiers,
              std::unique_ptr<RemoteTier> remote);

  // Put, and with `share` the remote write of a new entry the admission takes.
  Status Store(std::shared_ptr<const HostBuffer> bytes, const PutOptions& options, bool share);
  Result<EntryHandle> GetLocal(const SegmentKey& key, Access access);
  // Access::kDevice's promotion: `host` (a host-memory handle of `key`) copied into the HBM
  // tier and committed there if the key's item is still the one it was read from; the HBM
  // handle, or `host` when the copy was not made.
  EntryHandle PromoteToHbm(const SegmentKey& key, EntryHandle host) EXCLUDES(mu_);
  // A copy of `entry` placed in tier t and committed there, if the key's item is still the one
  // of generation `gen` and t does not hold it yet (counted as a promotion into t): the copy, or
  // nullopt when it was not made or not committed. Takes the lock itself.
  std::optional<TierEntry> Promote(TierKind t, const SegmentKey& key, uint64_t gen,
                                   const TierEntry& entry, std::vector<WriteBack>* writes)
      EXCLUDES(mu_);
  ProbeResult ProbeLocal(std::span<const SegmentKey> keys, bool pin_hits,
                         const std::string* only_namespace);
  // A local miss: reads `key` from the remote tier and stores it locally. True when it is now
  // stored (a miss, another namespace than `only_namespace`, or no room locally: false).
  bool FetchRemote(const SegmentKey& key, const std::string* only_namespace) EXCLUDES(mu_);

  static constexpr size_t Index(TierKind k) { return static_cast<size_t>(k); }
  static constexpr uint8_t Bit(TierKind k) { return static_cast<uint8_t>(1u << Index(k)); }
  Tier* TierAt(TierKind k) const { return tiers_[Index(k)].get(); }
  // The next slower present tier, or nullopt.
  std::optional<TierKind> Below(TierKind k) const;

  bool Expired(const Item& item, Clock::time_point now) const;
  bool Pinned(const Item& item) const { return item.pinned || item.inflight_pins > 0; }
  void Touch(Item& item) REQUIRES(mu_);

  // Frees space in memory tier `t` until `bytes` more fit, evicting (and demoting) victims.
  // kNoSpace when the remaining entries are pinned or the entry is bigger than the tier.
  Status MakeRoomLocked(TierKind t, uint64_t bytes, std::vector<WriteBack>* out) REQUIRES(mu_);
  // Picks the eviction victim of tier `t` by policy, skipping pinned entries; end() if none.
  std::unordered_map<SegmentKey, Item, SegmentKeyHasher>::iterator PickVictimLocked(TierKind t)
      REQUIRES(mu_);
  // Drops item's copy in tier `t`, demoting it first when `demote` and the admission allows.
  // May erase the item (invalidating `it`).
  void EvictFromTierLocked(std::unordered_map<SegmentKey, Item, SegmentKeyHasher>::iterator it,
                           TierKind t, bool demote, std::vector<WriteBack>* out) REQUIRES(mu_);
  // A placement into memory tier `t`, in two steps around the copy. PrepareIn makes room under
  // the lock (no copy is made that could not be placed), then copies outside it (Tier::Prepare).
  // The caller re-takes the lock, checks that the item is still the one it copied for (absent
  // for a Put, the same `gen` for a promotion), and calls CommitLocked, which makes room again
  // (others may have taken it meanwhile), commits the copy and sets the item's bit.
  Result<TierEntry> PrepareIn(TierKind t, const TierEntry& entry, std::vector<WriteBack>* out)
      EXCLUDES(mu_);
  Status CommitLocked(Item& item, TierKind t, const TierEntry& prepared,
                      std::vector<WriteBack>* out) REQUIRES(mu_);
  // Put's check for a stored entry of its key: an unexpired item is left as it is (true: nothing
  // to place); an expired one is erased (false, like an absent one).
  bool PresentLocked(const SegmentKey& key) REQUIRES(mu_);
  // REQUIRES: no item of info.key.
  Item& NewItemLocked(const EntryInfo& info, std::optional<Clock::time_point> expires, bool pin)
      REQUIRES(mu_);
  // Removes an item from the index (and its bytes from its namespace's count); the caller
  // removed or never made its tier copies.
  void EraseItemLocked(std::unordered_map<SegmentKey, Item, SegmentKeyHasher>::iterator it)
      REQUIRES(mu_);
  // Drops an item from every tier.
  void EraseLocked(std::unordered_map<SegmentKey, Item, SegmentKeyHasher>::iterator it)
      REQUIRES(mu_);
  void EraseIfEmptyLocked(std::unordered_map<SegmentKey, Item, SegmentKeyHasher>::iterator it)
      REQUIRES(mu_);

  // Decides an SSD write of `entry` for `item`: marks the bytes pending (served from memory
  // until written) and issues its ticket. REQUIRES: the write reaches WriteToSsd.
  WriteBack NewWriteBackLocked(const SegmentKey& key, Item& item, EntryHandle entry, bool demotion)
      REQUIRES(mu_);
  // Starts `watch` on every SSD write in flight now; AwaitWatch blocks until they have all
  // finished and returns the first error among them.
  void WatchLocked(WriteWatch* watch) REQUIRES(mu_);
  Status AwaitWatch(WriteWatch* watch) EXCLUDES(mu_);

  // Performs SSD writes outside the lock: the write of `watch` (the Put's own entry when it
  // was placed on SSD) on the caller, whose status it returns (OK otherwise); the demotions on
  // the writer thread while its queue has room, else on the caller.
  Status RunWriteBacks(std::vector<WriteBack> writes, const SegmentKey* watch) EXCLUDES(mu_);
  Status WriteToSsd(const WriteBack& wb) EXCLUDES(mu_);
  void WriterLoop() EXCLUDES(mu_);

  void ReleasePins(const std::vector<std::pair<SegmentKey, uint64_t>>& pins) EXCLUDES(mu_);
  friend class PinSet;

  const TierManagerOptions options_;
  const std::array<std::unique_ptr<Tier>, kNumTierKinds> tiers_;
  const std::unique_ptr<RemoteTier> remote_;  // may be null

  mutable Mutex mu_;
  std::unordered_map<SegmentKey, Item, SegmentKeyHasher> items_ GUARDED_BY(mu_);
  std::unordered_map<std::string, uint64_t> namespace_bytes_ GUARDED_BY(mu_);
  std::array<PerTier, kNumTierKinds> per_tier_ GUARDED_BY(mu_);
  uint64_t next_gen_ GUARDED_BY(mu_) = 1;
  uint64_t tick_ GUARDED_BY(mu_) = 0;
  uint64_t ssd_reserved_ GUARDED_BY(mu_) = 0;  // bytes of SSD writes in flight

  // Every SSD write decided and not yet finished (queued, on the writer thread, or on a
  // caller), by ticket; the watches of the Flushes and WaitForWriteBacks waiting for some.
  uint64_t next_ticket_ GUARDED_BY(mu_) = 1;
  std::unordered_set<uint64_t> writes_in_flight_ GUARDED_BY(mu_);
  std::vector<WriteWatch*> watches_ GUARDED_BY(mu_);
  std::condition_variable_any written_cv_;  // a write some watch waits for has finished

  // The background writer (present with an SSD tier): queue_ holds demotions not yet started.
  // writer_cv_ wakes it.
  std::deque<WriteBack> queue_ GUARDED_BY(mu_);
  uint64_t queued_bytes_ GUARDED_BY(mu_) = 0;
  bool stopping_ GUARDED_BY(mu_) = false;
  std::condition_variable_any writer_cv_;
  std::thread writer_;
};

}  // namespace hypic::storage
