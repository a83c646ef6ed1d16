#include "tools/hypic-stress/daemon_load.h"

#include <fmt/format.h>

#include <atomic>
#include <chrono>
#include <nlohmann/json.hpp>
#include <random>
#include <thread>
#include <unordered_set>
#include <vector>

#include "client/client.h"
#include "core/thread_annotations.h"
#include "storage/entry_format.h"
#include "tools/hypic-stress/ack_log.h"

namespace hypic::stress {
namespace {

using Clock = std::chrono::steady_clock;

// Replies an op may get from a healthy daemon under this load; anything else (the socket
// closed, a malformed frame, SHUTTING_DOWN) means the daemon is gone and the worker stops.
bool Expectable(const Status& st) {
  switch (st.code()) {
    case StatusCode::kNotFound:  // evicted, or a COMPOSE key that is gone
    case StatusCode::kBusy:      // a full compute queue or pending budget
    case StatusCode::kNoSpace:   // a tier full of pinned or in-flight entries
    case StatusCode::kComputeFailed:
    case StatusCode::kDeadlineExceeded: return true;
    default: return false;
  }
}

Result<std::unique_ptr<client::Client>> Connect(const DaemonLoadConfig& c, uint32_t worker) {
  client::ClientOptions o;
  o.address = c.address;
  o.client_name = fmt::format("hypic-stress-daemon-{}", worker);
  o.io_timeout_ms = 30000;
  return client::Client::Connect(o);
}

// A random segment of the tiny model's vocabulary, from a small pool so that segments repeat
// (PREFILL hits) and COMPOSE finds them.
std::vector<uint32_t> Segment(std::mt19937_64& rng) {
  std::mt19937_64 seg(rng() % 32);
  std::vector<uint32_t> tokens(16 + seg() % 240);
  for (auto& t : tokens) t = static_cast<uint32_t>(seg() % 500);
  return tokens;
}

// The seeds whose entries LIST shows on the SSD tier.
Result<std::vector<uint64_t>> OnSsd(client::Client& cl, const Expected& expected) {
  std::vector<uint64_t> seeds;
  protocol::ListRequest list;
  list.limit = 1000;
  list.tier = protocol::Tier::kSsd;
  do {
    HYPIC_ASSIGN_OR_RETURN(protocol::ListReply page, cl.List(list));
    for (const auto& e : page.entries) {
      if (auto seed = expected.SeedOf(SegmentKey(e.key))) seeds.push_back(*seed);
    }
    list.cursor = page.next_cursor;
  } while (list.cursor != 0);
  return seeds;
}

}  // namespace

std::string DaemonLoadReport::ToString() const {
  return fmt::format(
      "ops={} puts={} acked={} gets={} hits={} prefills={} composes={} flushes={} bad={} "
      "ended=\"{}\"",
      ops, puts, acked, gets, hits, prefills, composes, flushes, bad, ended);
}

std::string DaemonVerifyReport::ToString() const {
  return fmt::format(
      "acked={} flushed={} surviving={} lost_flushed={} listed={} bad={} verify_bad={} "
      "checksum_failures={}",
      acked, flushed, surviving, lost_flushed, listed, bad, verify_bad, checksum_failures);
}

Result<DaemonLoadReport> DaemonLoad(const DaemonLoadConfig& c) {
  if (c.entries.keys == 0 || c.threads == 0) return BadRequest("daemon-load: need keys, threads");
  Expected expected(c.entries);
  HYPIC_ASSIGN_OR_RETURN(std::vector<uint64_t> earlier_flushed, AckLog::Read(c.flush_log));
  Mutex log_mu;
  AckLog acks, flushes;  // appended under log_mu
  std::unordered_set<uint64_t> logged_flushed(earlier_flushed.begin(), earlier_flushed.end());
  HYPIC_RETURN_IF_ERROR(acks.Open(c.ack_log));
  HYPIC_RETURN_IF_ERROR(flushes.Open(c.flush_log));

  std::atomic<uint64_t> ops{0}, puts{0}, acked{0}, gets{0}, hits{0}, prefills{0}, composes{0},
      flushed{0}, bad{0};
  Mutex end_mu;
  std::string ended = "time";
  Status log_error;
  const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                           std::chrono::duration<double>(c.seconds));

  auto worker = [&](uint32_t t) {
    auto conn = Connect(c, t);
    auto stop = [&](const Status& why) {
      MutexLock lock(&end_mu);
      ended = why.ToString();
    };
    if (!conn.ok()) return stop(conn.status());
    client::Client& cl = **conn;
    std::mt19937_64 rng(c.seed * 1000003 + t);
    std::vector<Hash128> prefilled;
    while (Clock::now() < deadline) {
      ++ops;
      const uint64_t seed = rng() % c.entries.keys;
      const Hash128 key = expected.Key(seed).hash();
      const uint32_t dice = static_cast<uint32_t>(rng() % 100);
      Status st;
      if (dice < 35) {
        ++puts;
        auto bytes = BytesOf(c.entries, seed);
        if (!bytes.ok()) return stop(bytes.status());
        expected.Remember(seed, **bytes);
        st = cl.Put(key, (*bytes)->span());
        if (st.ok()) {
          ++acked;
          MutexLock lock(&log_mu);
          if (Status a = acks.Append(seed); !a.ok()) return stop(a);
        }
      } else if (dice < 65) {
        ++gets;
        auto got = cl.Get(key);
        st = got.status();
        if (got.ok()) {
          ++hits;
          if (!expected.Matches(seed, got->entry)) {
            ++bad;
            fmt::print(stderr, "daemon-load: WRONG BYTES for seed {} (key {})\n", seed,
                       key.ToHex());
          }
        }
      } else if (dice < 80) {
        ++prefills;
        protocol::PrefillRequest req;
        req.name_space = "crash";
        req.segments = {Segment(rng), Segment(rng)};
        auto r = cl.Prefill(req);
        st = r.status();
        if (r.ok()) {
          for (const auto& res : r->results) prefilled.push_back(res.key);
          if (prefilled.size() > 64) prefilled.erase(prefilled.begin(), prefilled.begin() + 32);
        }
      } else if (dice < 97) {
        ++composes;
        protocol::ComposeRequest req;
        req.name_space = "crash";
        req.top_k = 4;
        for (int i = 0; i < 2 && !prefilled.empty(); ++i) {
          protocol::ComposePart part;
          part.kind = protocol::PartKind::kSegmentKey;
          part.key = prefilled[rng() % prefilled.size()];
          req.parts.push_back(part);
        }
        protocol::ComposePart tail;
        tail.kind = protocol::PartKind::kSegmentTokens;
        tail.tokens = Segment(rng);
        req.parts.push_back(tail);
        st = cl.Compose(req).status();
      } else {
        // What is on the SSD tier once FLUSH returned must survive the kill. (An entry acked
        // before the FLUSH may have been evicted from RAM before it, as a cache may.)
        st = cl.Flush();
        auto on_ssd = st.ok() ? OnSsd(cl, expected) : Result<std::vector<uint64_t>>(st);
        st = on_ssd.status();
        if (on_ssd.ok()) {
          ++flushed;
          MutexLock lock(&log_mu);
          for (uint64_t s : *on_ssd) {
            if (!logged_flushed.insert(s).second) continue;
            if (Status a = flushes.Append(s); !a.ok()) return stop(a);
          }
        }
      }
      if (!st.ok() && !Expectable(st)) return stop(st);
    }
  };
  std::vector<std::thread> threads;
  for (uint32_t t = 0; t < c.threads; ++t) threads.emplace_back(worker, t);
  for (auto& th : threads) th.join();

  DaemonLoadReport r;
  r.ops = ops;
  r.puts = puts;
  r.acked = acked;
  r.gets = gets;
  r.hits = hits;
  r.prefills = prefills;
  r.composes = composes;
  r.flushes = flushed;
  r.bad = bad;
  r.ended = ended;
  return r;
}

Result<DaemonVerifyReport> VerifyDaemon(const DaemonLoadConfig& c) {
  HYPIC_ASSIGN_OR_RETURN(std::vector<uint64_t> acks, AckLog::Read(c.ack_log));
  HYPIC_ASSIGN_OR_RETURN(std::vector<uint64_t> on_ssd, AckLog::Read(c.flush_log));
  std::unordered_set<uint64_t> flushed(on_ssd.begin(), on_ssd.end());
  std::unordered_set<uint64_t> seeds(acks.begin(), acks.end());

  HYPIC_ASSIGN_OR_RETURN(auto conn, Connect(c, 0));
  Expected expected(c.entries);
  DaemonVerifyReport r;
  r.acked = seeds.size();
  r.flushed = flushed.size();
  for (uint64_t seed : seeds) {
    if (seed >= c.entries.keys) return BadRequest("the ack log names a seed outside --keys");
    auto got = conn->Get(expected.Key(seed).hash());
    if (got.ok()) {
      ++r.surviving;
      if (!expected.Matches(seed, got->entry)) {
        ++r.bad;
        fmt::print(stderr, "daemon-verify: WRONG BYTES for seed {}\n", seed);
      }
    } else if (got.status().code() != StatusCode::kNotFound) {
      return got.status().WithContext("GET");
    } else if (flushed.count(seed) != 0) {
      ++r.lost_flushed;
      fmt::print(stderr, "daemon-verify: seed {} was flushed before the kill and is gone\n", seed);
    }
  }
  // Every entry in the store, PREFILL's included: a read must pass the entry's checksums.
  protocol::ListRequest list;
  list.limit = 1000;
  do {
    HYPIC_ASSIGN_OR_RETURN(protocol::ListReply page, conn->List(list));
    for (const auto& e : page.entries) {
      ++r.listed;
      auto got = conn->Get(e.key);
      if (!got.ok()) {
        if (got.status().code() == StatusCode::kNotFound) continue;  // caught and dropped
        return got.status().WithContext("GET of a listed entry");
      }
      if (Status v = storage::Verify(got->entry); !v.ok()) {
        ++r.bad;
        fmt::print(stderr, "daemon-verify: entry {} read back corrupt: {}\n", e.key.ToHex(),
                   v.ToString());
      }
    }
    list.cursor = page.next_cursor;
  } while (list.cursor != 0);
  HYPIC_ASSIGN_OR_RETURN(protocol::VerifyReply v, conn->Verify());
  r.verify_bad = v.bad;
  HYPIC_ASSIGN_OR_RETURN(std::string stats, conn->Stats());
  auto j = nlohmann::json::parse(stats, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.contains("tiers")) return Corruption("STATS is not the JSON expected");
  for (const auto& t : j["tiers"]) r.checksum_failures += t.value("checksum_failures", uint64_t{0});
  return r;
}

}  // namespace hypic::stress
