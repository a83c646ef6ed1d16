#include "tools/hypic-stress/stress.h"

#include <fmt/format.h>

#include <atomic>
#include <chrono>
#include <random>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "core/hash.h"
#include "core/thread_annotations.h"
#include "gpu/backend.h"
#include "storage/hbm_tier.h"
#include "storage/host_tier.h"
#include "storage/redis_client.h"
#include "storage/redis_tier.h"
#include "storage/synthetic_entry.h"
#include "tools/hypic-stress/ack_log.h"

namespace hypic::stress {
namespace {

using storage::TierKind;

uint64_t Mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

uint64_t ChecksumFailures(const storage::TierManager& m) {
  uint64_t n = 0;
  for (const auto& s : m.Stats()) n += s.counters.checksum_failures;
  return n;
}

}  // namespace

storage::SyntheticSpec SpecOf(const StoreConfig& c, uint64_t seed) {
  storage::SyntheticSpec s;
  s.seed = seed;
  s.name_space = fmt::format("stress-{}", seed % 3);
  uint64_t span = c.max_entry_bytes - c.min_entry_bytes + 1;
  s.target_bytes = c.min_entry_bytes + Mix(seed) % span;
  s.n_tokens = 16 + static_cast<uint32_t>(Mix(seed ^ 0x55) % 512);
  return s;
}

Result<std::shared_ptr<const HostBuffer>> BytesOf(const StoreConfig& c, uint64_t seed) {
  HYPIC_ASSIGN_OR_RETURN(auto entry, storage::MakeSyntheticEntry(SpecOf(c, seed)));
  return storage::Serialize(*entry);
}

Expected::Expected(const StoreConfig& c) : config_(c) {
  for (uint64_t s = 0; s < c.keys; ++s) {
    SegmentKey k = storage::SyntheticKey(SpecOf(c, s));
    keys_.push_back(k);
    seed_of_[k] = s;
  }
}

std::optional<uint64_t> Expected::SeedOf(const SegmentKey& k) const {
  auto it = seed_of_.find(k);
  if (it == seed_of_.end()) return std::nullopt;
  return it->second;
}

void Expected::Remember(uint64_t seed, const HostBuffer& bytes) {
  uint64_t h = Xxh3_64(bytes.span());
  MutexLock lock(&mu_);
  hash_[seed] = h;
}

bool Expected::Matches(uint64_t seed, std::span<const std::byte> bytes) {
  if (!storage::Verify(bytes).ok()) return false;
  std::optional<uint64_t> want;
  {
    MutexLock lock(&mu_);
    auto it = hash_.find(seed);
    if (it != hash_.end()) want = it->second;
  }
  if (!want) {
    auto b = BytesOf(config_, seed);
    if (!b.ok()) return false;
    Remember(seed, **b);
    want = Xxh3_64((*b)->span());
  }
  return Xxh3_64(bytes) == *want;
}

std::string RunReport::ToString() const {
  return fmt::format(
      "ops={} puts={} acked={} gets={} hits={} misses={} probes={} pinned_misses={} bad={} "
      "over_capacity={} checksum_failures={}",
      ops, puts, acked, gets, hits, misses, probes, pinned_misses, bad, over_capacity,
      checksum_failures);
}

std::string VerifyReport::ToString() const {
  return fmt::format(
      "acked_puts={} acked={} surviving={} stored={} hits={} bad={} unknown={} "
      "checksum_failures={} open_ms={:.1f}",
      acked_puts, acked, surviving, stored, hits, bad, unknown, checksum_failures, open_ms);
}

Result<std::unique_ptr<storage::TierManager>> OpenStore(const StoreConfig& config) {
  std::unique_ptr<storage::Tier> hbm, host, ssd;
  if (config.hbm_bytes > 0) {
    // The CPU backend stands in for a GPU: the same copies, verified on the way back.
    HYPIC_ASSIGN_OR_RETURN(hbm, storage::HbmTier::Create(gpu::CpuBackend(), 0, config.hbm_bytes));
  }
  if (config.host_bytes > 0) host = std::make_unique<storage::HostTier>(config.host_bytes);
  if (config.ssd_bytes > 0) {
    storage::RocksTierOptions ro;
    ro.path = config.dir + "/db";
    ro.capacity = config.ssd_bytes;
    ro.wal = config.wal;
    HYPIC_ASSIGN_OR_RETURN(ssd, storage::RocksTier::Open(ro));
  }
  storage::TierManagerOptions mo;
  mo.placement = config.placement;
  mo.policy = config.policy;
  mo.demote_min_hits = 0;  // the stress wants traffic through every tier
  std::unique_ptr<storage::RemoteTier> remote;
  if (!config.remote_store.empty()) {
    storage::RedisTierOptions ro;
    HYPIC_ASSIGN_OR_RETURN(ro.address, storage::ParseRedisUrl(config.remote_store));
    ro.prefix = "hypic-stress:" + config.dir;
    HYPIC_ASSIGN_OR_RETURN(remote, storage::RedisTier::Create(ro));
    mo.remote_min_tokens = 0;  // the synthetic entries are short
  }
  return storage::TierManager::Create(mo, std::move(hbm), std::move(host), std::move(ssd),
                                      std::move(remote));
}

Result<RunReport> Run(const StoreConfig& store, const RunConfig& run) {
  if (store.keys == 0 || store.min_entry_bytes > store.max_entry_bytes) {
    return BadRequest("stress: need keys > 0 and min entry size <= max entry size");
  }
  if (store.hbm_bytes == 0 && store.host_bytes == 0 && store.ssd_bytes == 0) {
    return BadRequest("stress: no tier (every capacity is 0)");
  }
  HYPIC_ASSIGN_OR_RETURN(std::unique_ptr<storage::TierManager> m, OpenStore(store));
  Expected expected(store);
  AckLog ack;
  Mutex ack_mu;
  if (!run.ack_log.empty()) HYPIC_RETURN_IF_ERROR(ack.Open(run.ack_log));

  std::atomic<uint64_t> ops{0}, puts{0}, acked{0}, gets{0}, hits{0}, misses{0}, probes{0},
      pinned_misses{0}, bad{0}, over{0};
  std::atomic<bool> failed{false};
  Status first_error;
  Mutex error_mu;
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                            std::chrono::duration<double>(run.seconds));

  auto check_hit = [&](uint64_t seed, const storage::EntryHandle& h) {
    ++hits;
    if (!expected.Matches(seed, h->host)) {
      ++bad;
      fmt::print(stderr, "stress: WRONG BYTES for seed {} (key {})\n", seed,
                 expected.Key(seed).ToHex());
    }
  };

  auto worker = [&](uint32_t t) {
    std::mt19937_64 rng(run.seed * 1000003 + t);
    for (uint64_t i = 0; !failed.load(); ++i) {
      if (run.ops > 0 && i >= run.ops) break;
      if (run.seconds > 0 && std::chrono::steady_clock::now() >= deadline) break;
      ++ops;
      uint64_t seed = rng() % store.keys;
      const SegmentKey& key = expected.Key(seed);
      uint32_t dice = static_cast<uint32_t>(rng() % 100);
      if (dice < 40) {
        ++puts;
        auto bytes = BytesOf(store, seed);
        if (!bytes.ok()) {
          MutexLock lock(&error_mu);
          first_error = bytes.status();
          failed = true;
          break;
        }
        expected.Remember(seed, **bytes);
        storage::PutOptions po;
        po.pin = dice == 0;
        if (m->Put(*bytes, po).ok()) {
          ++acked;
          if (po.pin) (void)m->Unpin(key);
          if (!run.ack_log.empty()) {
            MutexLock lock(&ack_mu);
            Status st = ack.Append(seed);
            if (!st.ok()) {
              MutexLock elock(&error_mu);
              first_error = st;
              failed = true;
            }
          }
        }
      } else if (dice < 75) {
        ++gets;
        auto got = m->Get(key);
        if (got.ok()) {
          check_hit(seed, *got);
        } else {
          ++misses;
        }
      } else if (dice < 85) {
        ++probes;
        std::vector<SegmentKey> keys;
        std::vector<uint64_t> seeds;
        for (int k = 0; k < 4; ++k) {
          seeds.push_back(rng() % store.keys);
          keys.push_back(expected.Key(seeds.back()));
        }
        storage::ProbeResult p = m->Probe(keys);
        for (size_t k = 0; k < keys.size(); ++k) {
          if (!p.tiers[k]) continue;
          auto got = m->Get(keys[k]);  // pinned by the probe: must hit
          if (got.ok()) {
            check_hit(seeds[k], *got);
          } else {
            ++pinned_misses;
            fmt::print(stderr, "stress: pinned key of seed {} missed: {}\n", seeds[k],
                       got.status().ToString());
          }
        }
      } else if (dice < 92) {
        storage::EvictRequest r;
        r.key = key;
        (void)m->Evict(r);
      } else if (dice < 99) {
        if (m->Pin(key).ok()) (void)m->Unpin(key);
      } else {
        (void)m->Flush();
      }
      if (i % 16 == 0) {
        for (const auto& s : m->Stats()) {
          if (s.counters.bytes > s.counters.capacity) ++over;
        }
      }
    }
  };
  std::vector<std::thread> threads;
  for (uint32_t t = 0; t < run.threads; ++t) threads.emplace_back(worker, t);
  for (auto& th : threads) th.join();
  if (!first_error.ok()) return first_error;

  // A final sweep: every key, through whichever tier holds it.
  for (uint64_t s = 0; s < store.keys; ++s) {
    auto got = m->Get(expected.Key(s));
    if (got.ok()) check_hit(s, *got);
  }
  RunReport r;
  r.ops = ops;
  r.puts = puts;
  r.acked = acked;
  r.gets = gets;
  r.hits = hits;
  r.misses = misses;
  r.probes = probes;
  r.pinned_misses = pinned_misses;
  r.bad = bad;
  r.over_capacity = over;
  r.checksum_failures = ChecksumFailures(*m);
  return r;
}

Result<VerifyReport> Verify(const StoreConfig& store, const std::string& ack_log) {
  if (store.ssd_bytes == 0) return BadRequest("stress verify: needs an SSD tier (--ssd-mib > 0)");
  VerifyReport r;
  auto t0 = std::chrono::steady_clock::now();
  HYPIC_ASSIGN_OR_RETURN(std::unique_ptr<storage::TierManager> m, OpenStore(store));
  r.open_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  Expected expected(store);
  HYPIC_ASSIGN_OR_RETURN(std::vector<uint64_t> log, AckLog::Read(ack_log));
  std::unordered_set<uint64_t> acked(log.begin(), log.end());
  r.acked_puts = log.size();
  r.acked = acked.size();
  std::vector<storage::EntryListing> listing = m->List();
  r.stored = listing.size();
  for (const auto& l : listing) {
    std::optional<uint64_t> seed = expected.SeedOf(l.info.key);
    if (!seed) {
      ++r.unknown;
      continue;
    }
    auto got = m->Get(l.info.key);
    if (!got.ok()) continue;  // a corrupt copy: caught, counted, dropped
    ++r.hits;
    if (!expected.Matches(*seed, (*got)->host)) ++r.bad;
  }
  for (uint64_t seed : acked) {
    if (seed >= store.keys) {
      ++r.unknown;
      continue;
    }
    auto got = m->Get(expected.Key(seed));
    if (!got.ok()) continue;
    ++r.surviving;
    if (!expected.Matches(seed, (*got)->host)) ++r.bad;
  }
  r.checksum_failures = ChecksumFailures(*m);
  return r;
}

}  // namespace hypic::stress
