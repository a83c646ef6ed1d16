// Shutdown under write load, then a restart on the same data dir (issue 17; RELIABILITY.md):
// while clients PUT entries and PREFILL segments, the daemon gets SIGTERM. It must drain and
// exit 0; restarted, every write it acknowledged must be there, byte for byte (PUT) or whole
// (PREFILL: the entry passes its checksums), and nothing in the store may be half-written:
// every listed entry reads back and passes its checksums, and VERIFY finds nothing bad.
#include <doctest/doctest.h>
#include <signal.h>
#include <stdlib.h>

#include <atomic>
#include <filesystem>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

#include "core/hash.h"
#include "storage/entry_format.h"
#include "tests/e2e/daemon.h"
#include "tests/e2e/synthetic_wire_entry.h"
#include "tests/support/check_ok.h"

namespace hypic::e2e {
namespace {

namespace fs = std::filesystem;
using protocol::Opcode;
using Clock = std::chrono::steady_clock;

struct Acked {
  Hash128 key;
  uint64_t xxh3 = 0;  // of the PUT's bytes; 0 for a PREFILL's entry (computed by the daemon)
};

// Appends what the daemon acknowledged; thread-safe.
class AckList {
 public:
  void Add(Acked a) {
    std::lock_guard lock(mu_);
    acked_.push_back(a);
  }
  std::vector<Acked> Take() {
    std::lock_guard lock(mu_);
    return acked_;
  }

 private:
  std::mutex mu_;
  std::vector<Acked> acked_;
};

// PUTs of 256 KiB .. 1.25 MiB synthetic entries until the connection ends (GOAWAY, close) or
// the daemon refuses (SHUTTING_DOWN); at most `max_puts`, so the store never evicts.
void PutLoop(const Daemon& d, int thread, int max_puts, AckList& acks, std::atomic<int>& count) {
  auto conn = RawConn::TcpHello(d.port());
  if (!conn.ok()) return;
  std::mt19937_64 rng(thread);
  for (int i = 0; i < max_puts; ++i) {
    Entry e = MakeEntry(uint64_t(thread) * 1000 + uint64_t(i), (256 << 10) + rng() % (1 << 20));
    auto r = conn->Call(Opcode::kPut, e.bytes->span(), {}, e.key, 30s);
    if (!r.ok() || r->status() != StatusCode::kOk) return;
    acks.Add({e.key, Xxh3_64(e.bytes->span())});
    ++count;
  }
}

// PREFILLs of two fresh 64-token segments each, until the connection ends or is refused.
void PrefillLoop(const Daemon& d, AckList& acks, std::atomic<int>& count) {
  auto conn = RawConn::TcpHello(d.port());
  if (!conn.ok()) return;
  std::mt19937_64 rng(7);
  for (int i = 0; i < 200; ++i) {
    protocol::PrefillRequest req;
    req.name_space = "shutdown";
    for (int s = 0; s < 2; ++s) {
      std::vector<uint32_t> tokens(64);
      for (auto& t : tokens) t = static_cast<uint32_t>(rng() % 500);
      req.segments.push_back(std::move(tokens));
    }
    auto r = conn->Call(Opcode::kPrefill, protocol::Encode(req), {}, {}, 60s);
    if (!r.ok() || r->status() != StatusCode::kOk) return;
    auto reply = protocol::Decode<protocol::PrefillReply>(r->body);
    if (!reply.ok()) return;
    for (const auto& res : reply->results) acks.Add({res.key, 0});
    ++count;
  }
}

TEST_CASE(
    "SIGTERM under PUT and PREFILL load, then a restart: every acknowledged write is "
    "there and nothing is half-written") {
  std::string tmpl = (fs::temp_directory_path() / "hypicd-shutdown-XXXXXX").string();
  REQUIRE(::mkdtemp(tmpl.data()) != nullptr);
  const std::string dir = tmpl;
  struct Cleanup {
    std::string dir;
    ~Cleanup() {
      std::error_code ec;
      fs::remove_all(dir, ec);
    }
  } cleanup{dir};
  DaemonOptions options;
  options.config_toml = kLocalWriterTenant;
  options.data_dir = dir;

  AckList acks;
  std::atomic<int> puts{0}, prefills{0};
  {
    auto d = Daemon::Start(options);
    REQUIRE_OK(d);
    // Two writers of at most 80 entries each: under 200 MiB, so the 256 MiB tiers never evict.
    std::vector<std::thread> load;
    for (int t = 1; t <= 2; ++t) {
      load.emplace_back([&, t] { PutLoop(**d, t, 80, acks, puts); });
    }
    load.emplace_back([&] { PrefillLoop(**d, acks, prefills); });
    // SIGTERM once both kinds of write were acknowledged, while the load goes on.
    const auto give_up = Clock::now() + 60s;
    while ((puts < 6 || prefills < 2) && Clock::now() < give_up) {
      std::this_thread::sleep_for(20ms);
    }
    CHECK(puts >= 6);
    CHECK(prefills >= 2);
    const int code = (*d)->Stop(SIGTERM, 30s);
    for (auto& t : load) t.join();
    CHECK(code == 0);
    CHECK((*d)->Log().find("stopped cleanly") != std::string::npos);
  }
  const std::vector<Acked> acked = acks.Take();
  MESSAGE("acknowledged before the shutdown: " << puts.load() << " PUTs, " << prefills.load()
                                               << " PREFILLs (" << acked.size() << " entries)");

  auto d = Daemon::Start(options);
  REQUIRE_OK(d);
  auto conn = RawConn::UnixHello((*d)->unix_path());  // admin: LIST and VERIFY
  REQUIRE_OK(conn);
  int missing = 0, wrong = 0;
  for (const Acked& a : acked) {
    auto r = conn->Call(Opcode::kGet, {}, {}, a.key, 30s);
    REQUIRE_OK(r);
    if (r->status() != StatusCode::kOk) {
      ++missing;
      MESSAGE("lost: " << a.key.ToHex() << " (" << StatusCodeName(r->status()) << ")");
      continue;
    }
    const bool whole = storage::Verify(r->body).ok();
    if (!whole || (a.xxh3 != 0 && Xxh3_64(r->body) != a.xxh3)) ++wrong;
  }
  CHECK(missing == 0);
  CHECK(wrong == 0);

  // Nothing half-written: every entry in the store reads back whole.
  protocol::ListRequest list;
  list.limit = 1000;
  size_t listed = 0;
  int corrupt = 0;
  do {
    auto r = conn->Call(Opcode::kList, protocol::Encode(list));
    REQUIRE_OK(r);
    REQUIRE(r->status() == StatusCode::kOk);
    auto page = protocol::Decode<protocol::ListReply>(r->body);
    REQUIRE_OK(page);
    for (const auto& e : page->entries) {
      ++listed;
      auto got = conn->Call(Opcode::kGet, {}, {}, e.key, 30s);
      REQUIRE_OK(got);
      if (got->status() != StatusCode::kOk || !storage::Verify(got->body).ok()) ++corrupt;
    }
    list.cursor = page->next_cursor;
  } while (list.cursor != 0);
  CHECK(corrupt == 0);
  CHECK(listed >= acked.size());
  auto v = conn->Call(Opcode::kVerify, {}, {}, Hash128{}, 60s);
  REQUIRE_OK(v);
  REQUIRE(v->status() == StatusCode::kOk);
  auto verify = protocol::Decode<protocol::VerifyReply>(v->body);
  REQUIRE_OK(verify);
  CHECK(verify->bad == 0);
  CHECK(verify->checked >= acked.size());
  CHECK((*d)->Stop(SIGTERM) == 0);
}

}  // namespace
}  // namespace hypic::e2e
