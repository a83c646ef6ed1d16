// hypic-bench store: put/get throughput and latency of the tiered store (docs/benchmarks.md,
// "Tiered store"). For each entry size and thread count it fills a fresh tier with distinct
// synthetic entries, then reads them all back in a shuffled order:
//   host:    HostTier Insert / Lookup (pageable memory: the insert keeps a reference)
//   hbm:     HbmTier Insert (host-to-device copy) / CopyToHost (device-to-host + Verify); only
//            with a CUDA device
//   ssd:     RocksTier Insert (WriteBatch, WAL async) / Lookup (read + Verify + key check)
//   manager: TierManager Put (Verify + placement) / Get, with host RAM sized for half the
//            entries over the SSD tier, so reads mix RAM hits with SSD hits and promotions
//   remote:  RedisTier (--remote-store) Write + WaitForWrites (the tier's one writer thread,
//            whatever --threads) / Get (manifest, chunks, every check); each case writes under
//            its own key prefix, so run it against a scratch Redis
// and reports the checksum's share of an SSD read (1 thread): the time of Verify on the bytes a
// Lookup returned over the Lookup's time (which includes its own Verify).
#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <memory>
#include <numeric>
#include <random>
#include <thread>
#include <vector>

#include "core/logging.h"
#include "gpu/backend.h"
#include "storage/entry_format.h"
#include "storage/hbm_tier.h"
#include "storage/host_tier.h"
#include "storage/redis_tier.h"
#include "storage/rocks_tier.h"
#include "storage/synthetic_entry.h"
#include "storage/tier_manager.h"
#include "tools/common/subcommand.h"

// A namespace of its own: hypic-* tools compile as unity batches (cmake/HypicTargets.cmake).
namespace hypic::bench::bench_store {
namespace {

using Clock = std::chrono::steady_clock;
using storage::EntryHandle;

struct Opts {
  std::string dir = "/tmp/hypic-bench-store";
  std::vector<double> sizes_mib{1, 4, 16};
  std::vector<int> threads{1, 8};
  std::vector<std::string> tiers{"host", "hbm", "ssd", "manager"};
  double total_mib = 256;    // bytes written per case
  std::string remote_store;  // the remote tier's URL (tier "remote")
};

struct Sample {
  double wall_s = 0;
  std::vector<double> ms;  // one latency per operation
};

// Runs fn(i) for i in [0, n) on `threads` threads (i % threads), timing each call.
template <typename Fn>
Result<Sample> Timed(size_t n, int threads, Fn fn) {
  Sample s;
  s.ms.resize(n);
  std::atomic<bool> failed{false};
  Status first;
  std::mutex mu;
  auto t0 = Clock::now();
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      for (size_t i = static_cast<size_t>(t); i < n && !failed.load();
           i += static_cast<size_t>(threads)) {
        auto a = Clock::now();
        Status st = fn(i);
        s.ms[i] = std::chrono::duration<double, std::milli>(Clock::now() - a).count();
        if (!st.ok()) {
          std::lock_guard<std::mutex> lock(mu);
          if (first.ok()) first = st;
          failed = true;
        }
      }
    });
  }
  for (auto& th : pool) th.join();
  s.wall_s = std::chrono::duration<double>(Clock::now() - t0).count();
  if (!first.ok()) return first;
  return s;
}

double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  size_t i = static_cast<size_t>(p * static_cast<double>(v.size() - 1) + 0.5);
  return v[std::min(i, v.size() - 1)];
}

void Row(const std::string& tier, double mib, int threads, const char* op, const Sample& s) {
  double n = static_cast<double>(s.ms.size());
  fmt::print("| {} | {} | {} | {} | {:.0f} | {:.0f} | {:.3f} | {:.3f} |\n", tier, mib, threads, op,
             n / s.wall_s, n * mib / s.wall_s, Percentile(s.ms, 0.5), Percentile(s.ms, 0.99));
}

Result<std::unique_ptr<storage::Tier>> MakeTier(const std::string& tier, const Opts& o,
                                                uint64_t capacity, const std::string& sub) {
  if (tier == "host") return std::unique_ptr<storage::Tier>(new storage::HostTier(capacity));
  if (tier == "hbm") {
    gpu::Backend* cuda = gpu::FindBackend(gpu::BackendKind::kCuda);
    if (cuda == nullptr) return Unsupported("no CUDA device");
    HYPIC_ASSIGN_OR_RETURN(auto t, storage::HbmTier::Create(*cuda, 0, capacity));
    return std::unique_ptr<storage::Tier>(std::move(t));
  }
  storage::RocksTierOptions ro;
  ro.path = o.dir + "/" + sub;
  ro.capacity = capacity;
  std::filesystem::remove_all(ro.path);
  HYPIC_ASSIGN_OR_RETURN(auto t, storage::RocksTier::Open(ro));
  return std::unique_ptr<storage::Tier>(std::move(t));
}

Status RunCase(const Opts& o, const std::string& tier, double mib, int threads,
               const std::vector<std::shared_ptr<const HostBuffer>>& bytes,
               const std::vector<EntryHandle>& handles) {
  const size_t n = bytes.size();
  uint64_t total = 0;
  for (const auto& b : bytes) total += b->size();
  std::vector<size_t> order(n);
  std::iota(order.begin(), order.end(), size_t{0});
  std::shuffle(order.begin(), order.end(), std::mt19937_64(42));
  std::string sub = fmt::format("{}-{}-{}", tier, mib, threads);

  if (tier == "manager" || tier == "manager-sync") {
    HYPIC_ASSIGN_OR_RETURN(auto ssd, MakeTier("ssd", o, 2 * total, sub));
    storage::TierManagerOptions mo;
    mo.demote_min_hits = 0;
    if (tier == "manager-sync") mo.max_writeback_bytes = 0;  // demotions on the caller
    HYPIC_ASSIGN_OR_RETURN(
        auto m, storage::TierManager::Create(
                    mo, nullptr, std::make_unique<storage::HostTier>(total / 2), std::move(ssd)));
    HYPIC_ASSIGN_OR_RETURN(Sample put,
                           Timed(n, threads, [&](size_t i) { return m->Put(bytes[i]); }));
    m->WaitForWriteBacks();  // both variants start the reads from the same stored state
    HYPIC_ASSIGN_OR_RETURN(Sample get, Timed(n, threads, [&](size_t i) {
                             return m->Get(handles[order[i]]->info.key).status();
                           }));
    Row(tier, mib, threads, "put", put);
    Row(tier, mib, threads, "get", get);
    return Status::Ok();
  }
  if (tier == "remote") {
    if (o.remote_store.empty()) return Unsupported("no --remote-store");
    storage::RedisTierOptions ro;
    HYPIC_ASSIGN_OR_RETURN(ro.address, storage::ParseRedisUrl(o.remote_store));
    ro.prefix = fmt::format("hypic-bench-{}-{}", sub, std::random_device{}());
    ro.max_idle_connections = static_cast<size_t>(threads);
    ro.max_queued_bytes = 2 * total;
    HYPIC_ASSIGN_OR_RETURN(auto r, storage::RedisTier::Create(ro));
    HYPIC_ASSIGN_OR_RETURN(Sample put, Timed(n, threads, [&](size_t i) {
                             r->Write(handles[i]);
                             r->WaitForWrites();
                             return Status::Ok();
                           }));
    if (r->Counters().inserts != n) return IoError("remote writes were dropped (Redis down?)");
    HYPIC_ASSIGN_OR_RETURN(Sample get, Timed(n, threads, [&](size_t i) {
                             return r->Get(handles[order[i]]->info.key).status();
                           }));
    Row(tier, mib, threads, "put", put);
    Row(tier, mib, threads, "get", get);
    return Status::Ok();
  }
  HYPIC_ASSIGN_OR_RETURN(auto t, MakeTier(tier, o, 2 * total, sub));
  HYPIC_ASSIGN_OR_RETURN(Sample put,
                         Timed(n, threads, [&](size_t i) { return t->Insert(*handles[i]); }));
  // The checksum's share of an SSD read: Verify of the bytes a Lookup just returned (warm in
  // cache, as inside Lookup) against the Lookup's own time, which includes that Verify.
  std::vector<double> verify_ms(n);
  HYPIC_ASSIGN_OR_RETURN(
      Sample get, Timed(n, threads, [&](size_t i) -> Status {
        HYPIC_ASSIGN_OR_RETURN(EntryHandle h, t->Lookup(handles[order[i]]->info.key));
        if (tier == "hbm") return storage::CopyToHost(*h).status();
        if (tier == "ssd" && threads == 1) {
          auto a = Clock::now();
          HYPIC_RETURN_IF_ERROR(storage::Verify(h->host));
          verify_ms[i] = std::chrono::duration<double, std::milli>(Clock::now() - a).count();
        }
        return Status::Ok();
      }));
  if (tier == "ssd" && threads == 1) {  // the get's time without the extra Verify
    for (size_t i = 0; i < n; ++i) get.ms[i] -= verify_ms[i];
  }
  Row(tier, mib, threads, "put", put);
  Row(tier, mib, threads, "get", get);
  if (tier == "ssd" && threads == 1) {
    double v = std::accumulate(verify_ms.begin(), verify_ms.end(), 0.0);
    double g = std::accumulate(get.ms.begin(), get.ms.end(), 0.0);
    fmt::print("| ssd | {} | 1 | checksum share of get | {:.1f}% | | {:.3f} | |\n", mib,
               100.0 * v / g, Percentile(verify_ms, 0.5));
  }
  return Status::Ok();
}

int Run(const Opts& o) {
  (void)InitLogging("warn");
  fmt::print("| tier | entry MiB | threads | op | ops/s | MiB/s | p50 ms | p99 ms |\n");
  fmt::print("|---|---|---|---|---|---|---|---|\n");
  for (double mib : o.sizes_mib) {
    size_t n = std::max<size_t>(8, static_cast<size_t>(o.total_mib / mib));
    std::vector<std::shared_ptr<const HostBuffer>> bytes;
    std::vector<EntryHandle> handles;
    for (size_t i = 0; i < n; ++i) {
      storage::SyntheticSpec spec;
      spec.seed = i + 1;
      spec.target_bytes = static_cast<uint64_t>(mib * 1024 * 1024);
      spec.n_tokens = 512;
      auto e = storage::MakeSyntheticEntry(spec);
      if (!e.ok()) return tools::kExitFailure;
      auto b = storage::Serialize(**e);
      if (!b.ok()) return tools::kExitFailure;
      auto h = storage::MakeHostHandle(*b);
      if (!h.ok()) return tools::kExitFailure;
      bytes.push_back(*b);
      handles.push_back(*h);
    }
    for (const std::string& tier : o.tiers) {
      for (int threads : o.threads) {
        Status st = RunCase(o, tier, mib, threads, bytes, handles);
        if (st.code() == StatusCode::kUnsupported) {
          fmt::print("| {} | {} | {} | skipped: {} | | | | |\n", tier, mib, threads, st.message());
          break;
        }
        if (!st.ok()) {
          fmt::print(stderr, "bench store: {} {} MiB x{}: {}\n", tier, mib, threads, st.ToString());
          return tools::kExitFailure;
        }
      }
    }
  }
  std::filesystem::remove_all(o.dir);
  return tools::kExitOk;
}

const bool kRegistered = tools::RegisterSubcommand(
    "store", "Tiered store put/get throughput and latency per tier", [](CLI::App& sub) {
      auto o = std::make_shared<Opts>();
      sub.add_option("--dir", o->dir, "Scratch directory for the SSD tier (removed afterwards)");
      sub.add_option("--sizes-mib", o->sizes_mib, "Entry sizes in MiB");
      sub.add_option("--threads", o->threads, "Thread counts");
      sub.add_option("--tiers", o->tiers,
                     "Tiers: host, hbm, ssd, manager (TierManager over host + ssd), "
                     "manager-sync (the same with demotions written on the caller), remote "
                     "(RedisTier at --remote-store)");
      sub.add_option("--remote-store", o->remote_store,
                     "URL of a scratch Redis for the remote tier: redis://host:port or "
                     "redis-cluster://host:port,...");
      sub.add_option("--total-mib", o->total_mib, "Bytes written per case, in MiB");
      return [o] { return Run(*o); };
    });

}  // namespace
}  // namespace hypic::bench::bench_store
