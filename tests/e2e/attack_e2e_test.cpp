// Hostile clients against the real hypicd, each with the latency of a well-behaved client
// measured under the attack against a control (RELIABILITY rows 4 and 5, issue 17 items 3
// and 7):
//   - 200 connections that each declare a 256 MiB body and trickle it: the daemon's RSS stays
//     within max_pending_request_bytes plus a stated overhead, the bodies past the budget are
//     answered BUSY, and the good client's p99 PING stays <= 1.5x its baseline;
//   - slowloris: 200 connections trickling HELLOs and frame headers; at most
//     max_preauth_connections_per_peer of them without HELLO, the excess refused; the same p99
//     bound; the deadlines close every one of them.
//
// On latency: the baseline is a control daemon with the same flags that no one attacks,
// started beside the attacked one. The good client pings the two alternately, one PING each
// in turn, so both see the same moments of a shared machine's load: a burst from another
// process lands in both samples, and the ratio is what the attack costs, not when it ran.
// (Measuring the baseline before the attack, as this test first did, compared different
// moments: on a loaded CI machine a quiet baseline second against a busy attack second read
// as 1.67x with the daemon doing nothing different.) The pings come in kRounds rounds spread
// over about a second, each bounded in time; the figure asserted is the median over rounds of
// a round's p99 ratio (attacked / control), so one round that a burst hit on one side only
// does not decide it. The same pairing before the attack is printed as a reference (two idle
// twins: about 1.0x, 0.8-1.3x on a loaded 2-core machine). The attackers' sends are spread
// evenly over time (one connection per slot), so the attack costs the machine little CPU and
// never a burst.
#include <doctest/doctest.h>
#include <sys/socket.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <thread>

#include "tests/e2e/daemon.h"
#include "tests/support/check_ok.h"

namespace hypic::e2e {
namespace {

// A ThreadSanitizer daemon instruments every memory access (several times slower, with the
// attackers' bodies taking most of the CPU): its latency says nothing about production's, so
// the p99 bounds hold in the other builds, and the TSan run (.ci/run stage 3) is for races.
#if defined(__SANITIZE_THREAD__)
constexpr bool kCheckLatency = false;
#else
constexpr bool kCheckLatency = true;
#endif

using protocol::Opcode;
using Clock = std::chrono::steady_clock;

constexpr int kAttackers = 200;
constexpr int kRounds = 9;
constexpr auto kRoundGap = 100ms;     // rounds sample different moments of the machine's load
constexpr int kPingsPerRound = 2000;  // per daemon: a round spans many of the attack's sends
constexpr auto kRoundTime = 300ms;    // a round ends early on a slow machine (the slowloris
                                      // attackers' deadlines bound the whole phase)
constexpr int kMinPingsPerRound = 200;

// p99 PING round trips of a control daemon and of the one under test, measured together.
struct PairedP99 {
  double control_us;  // the lowest p99 of a round, in microseconds
  double subject_us;
  double ratio;  // the median over rounds of the round's subject p99 / control p99
};

// Pings `control` and `subject` alternately with a 64-byte body, in kRounds rounds.
PairedP99 PingP99Us(RawConn& control, RawConn& subject) {
  protocol::Bytes body(64, std::byte{7});
  auto ping_us = [&](RawConn& conn) {
    auto t0 = Clock::now();
    auto r = conn.Call(Opcode::kPing, body, {}, {}, 5s);
    REQUIRE_OK(r);
    REQUIRE(r->status() == StatusCode::kOk);
    return std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
  };
  auto p99 = [](std::vector<double>& us) {
    std::sort(us.begin(), us.end());
    return us[us.size() * 99 / 100];
  };
  PairedP99 best{1e18, 1e18, 0};
  std::vector<double> ratios;
  for (int round = 0; round < kRounds; ++round) {
    std::vector<double> control_us, subject_us;
    control_us.reserve(kPingsPerRound);
    subject_us.reserve(kPingsPerRound);
    const auto end = Clock::now() + kRoundTime;
    for (int i = 0; i < kPingsPerRound && (i < kMinPingsPerRound || Clock::now() < end); ++i) {
      // Which of the two goes first alternates too, so neither always follows the other.
      if (i % 2 == 0) {
        control_us.push_back(ping_us(control));
        subject_us.push_back(ping_us(subject));
      } else {
        subject_us.push_back(ping_us(subject));
        control_us.push_back(ping_us(control));
      }
    }
    const double control_p99 = p99(control_us), subject_p99 = p99(subject_us);
    best.control_us = std::min(best.control_us, control_p99);
    best.subject_us = std::min(best.subject_us, subject_p99);
    ratios.push_back(subject_p99 / control_p99);
    std::this_thread::sleep_for(kRoundGap);
  }
  std::sort(ratios.begin(), ratios.end());
  best.ratio = ratios[ratios.size() / 2];
  return best;
}

// A daemon with `options` and a HELLOed, warmed-up client connection to it.
struct Served {
  std::unique_ptr<Daemon> daemon;
  RawConn conn;
};
Served StartServed(const DaemonOptions& options) {
  auto d = Daemon::Start(options);
  REQUIRE_OK(d);
  auto conn = RawConn::TcpHello((*d)->port());
  REQUIRE_OK(conn);
  for (int i = 0; i < 200; ++i) REQUIRE_OK(conn->Call(Opcode::kPing, AsBytes("warm")));
  return {std::move(d).value(), std::move(conn).value()};
}

// The value of an unlabelled (or first labelled) series `name` in /metrics; -1 when absent.
// (A plain scan, not std::regex: GCC 12 reports a false maybe-uninitialized inside <regex>
// under ASan, and CI builds that with -Werror.)
double MetricValue(const std::string& text, const std::string& name) {
  for (size_t at = text.find("\n" + name); at != std::string::npos;
       at = text.find("\n" + name, at + 1)) {
    size_t i = at + 1 + name.size();
    if (i < text.size() && text[i] == '{') {
      i = text.find('}', i);
      if (i == std::string::npos) return -1;
      ++i;
    }
    if (i >= text.size() || text[i] != ' ') continue;  // a longer name with this prefix
    return std::stod(text.substr(i + 1, text.find('\n', i + 1) - i - 1));
  }
  return -1;
}

// Sends one connection's share of the trickle at a time, evenly spaced: `each` is called
// for connection i in turn, one slot of `period` / conns.size() apart, until `stop`.
template <typename Fn>
void TrickleEvenly(size_t conns, std::chrono::microseconds period, std::atomic<bool>& stop,
                   Fn each) {
  const auto slot = period / conns;
  auto next = Clock::now();
  for (size_t i = 0; !stop; i = (i + 1) % conns) {
    each(i);
    next += slot;
    std::this_thread::sleep_until(next);
  }
}

TEST_CASE("200 connections declaring 256 MiB bodies: RSS within the budget, p99 kept") {
  constexpr uint64_t kBudget = uint64_t{256} << 20;  // = max_body_bytes, the least allowed
  DaemonOptions o;
  o.args = {
      "--max-pending-request-bytes", "256MiB", "--min-body-rate", "1KiB", "--io-threads", "2"};
  Served control = StartServed(o);
  Served attacked = StartServed(o);
  auto& d = attacked.daemon;
  RawConn& good = attacked.conn;
  const uint64_t rss_before = d->RssKiB();
  const PairedP99 idle = PingP99Us(control.conn, good);

  // Every attacker declares a 256 MiB PING body and sends its first 2 MiB at once: 400 MiB in
  // all, more than the budget, so some get BUSY; then all trickle 256 bytes every 2 s.
  std::vector<RawConn> attackers;
  protocol::FrameHeader h;
  h.opcode = Opcode::kPing;
  h.body_len = uint64_t{256} << 20;
  h.checksum_kind = protocol::ChecksumKind::kXxh3_64;
  std::array<std::byte, protocol::kHeaderSize> header;
  protocol::EncodeHeader(h, header.data());
  protocol::Bytes first(2 << 20, std::byte{9});
  uint64_t rss_peak = 0;
  for (int i = 0; i < kAttackers; ++i) {
    auto c = RawConn::TcpHello(d->port());
    REQUIRE_OK(c);
    int small = 64 << 10;  // keep the BUSY replies it never reads from bloating our side
    ::setsockopt(c->fd(), SOL_SOCKET, SO_RCVBUF, &small, sizeof(small));
    REQUIRE_OK(c->Send(header));
    REQUIRE_OK(c->Send(first));
    attackers.push_back(std::move(c).value());
    if (i % 20 == 19) rss_peak = std::max(rss_peak, d->RssKiB());
  }
  std::atomic<bool> stop{false};
  std::atomic<int> send_failures{0};
  std::thread trickle([&] {
    protocol::Bytes bit(256, std::byte{5});
    TrickleEvenly(attackers.size(), 2s, stop, [&](size_t i) {
      if (!attackers[i].Send(bit).ok()) ++send_failures;
    });
  });
  std::this_thread::sleep_for(500ms);
  rss_peak = std::max(rss_peak, d->RssKiB());
  const PairedP99 attack = PingP99Us(control.conn, good);
  rss_peak = std::max(rss_peak, d->RssKiB());
  const std::string metrics = HttpGet(d->metrics_port(), "/metrics");
  stop = true;
  trickle.join();

  // The overhead beyond the budget: 201 connections' receive buffers and session state (about
  // 32 KiB each: 6.3 MiB), one growth copy per io thread (a 16 -> 32 MiB doubling briefly holds
  // both: 2 x 48 MiB at most), and the allocator's slack around the freed bodies. 128 MiB.
  [[maybe_unused]] constexpr uint64_t kOverheadKiB = 128 << 10;
  const uint64_t grown_kib = rss_peak > rss_before ? rss_peak - rss_before : 0;
  MESSAGE("RSS before " << rss_before / 1024 << " MiB, peak " << rss_peak / 1024 << " MiB (+"
                        << grown_kib / 1024 << " MiB; budget " << (kBudget >> 20) << " MiB)");
  MESSAGE("PING p99, control -> attacked: idle "
          << idle.control_us << " -> " << idle.subject_us << " us (" << idle.ratio << "x), attack "
          << attack.control_us << " -> " << attack.subject_us << " us (" << attack.ratio << "x)");
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  // An ASan daemon keeps freed bodies in its quarantine and adds shadow pages, a TSan daemon
  // shadows every byte it touches: its RSS says nothing about the production allocator's, so
  // only the unsanitised build holds the bound.
  MESSAGE("sanitizer build: the RSS bound is checked only without sanitizers");
#else
  CHECK(grown_kib <= (kBudget >> 10) + kOverheadKiB);
#endif
  const double pending = MetricValue(metrics, "hypic_pending_request_bytes");
  const double refusals = MetricValue(metrics, "hypic_pending_request_refusals_total");
  MESSAGE("pending " << pending / 1048576 << " MiB, refusals " << refusals);
  CHECK(pending >= 0);
  CHECK(pending <= static_cast<double>(kBudget));
  CHECK(refusals > 0);        // the budget was reached: the attack pressed on the bound
  CHECK(send_failures == 0);  // the attackers were throttled, not cut off
  if (kCheckLatency) CHECK(attack.ratio <= 1.5);
  CHECK(d->Alive());
  CHECK(control.daemon->Alive());
}

TEST_CASE("slowloris: 200 trickling connections, p99 kept, pre-auth limited per peer") {
  constexpr int kPreAuth = 16;
  DaemonOptions o;
  o.args = {"--hello-timeout-ms",
            "8s",
            "--header-timeout-ms",
            "8s",
            "--io-threads",
            "2",
            "--max-preauth-connections-per-peer",
            std::to_string(kPreAuth)};
  Served control = StartServed(o);
  Served attacked = StartServed(o);
  auto& d = attacked.daemon;
  RawConn& good = attacked.conn;
  const PairedP99 idle = PingP99Us(control.conn, good);

  // kPreAuth connections that trickle a HELLO (never finished), the rest after HELLO trickle
  // a frame header: one byte per connection every 2 s. The ones with HELLO connect first:
  // every new connection of this address needs a pre-auth slot until its HELLO.
  protocol::FrameHeader h;
  h.opcode = Opcode::kPing;
  h.body_len = 16;
  std::array<std::byte, protocol::kHeaderSize> header;
  protocol::EncodeHeader(h, header.data());
  std::vector<RawConn> attackers;
  const auto start = Clock::now();  // the first attacker's deadline runs from about here
  for (int i = 0; i < kAttackers; ++i) {
    auto c = i < kAttackers - kPreAuth ? RawConn::TcpHello(d->port()) : RawConn::Tcp(d->port());
    REQUIRE_OK(c);
    REQUIRE_OK(c->Send(protocol::ByteSpan(header.data(), 1)));  // its deadline runs from here
    attackers.push_back(std::move(c).value());
  }
  // The pre-auth slots of this address are taken: one more is refused BUSY at once.
  {
    auto excess = RawConn::Tcp(d->port());
    REQUIRE_OK(excess);
    auto r = excess->Read(2s);
    REQUIRE_OK(r);
    CHECK(r->header.opcode == Opcode::kGoAway);
    CHECK(r->status() == StatusCode::kBusy);
    CHECK(r->text().find("max_preauth_connections_per_peer") != std::string::npos);
  }
  std::atomic<bool> stop{false};
  std::atomic<int> sent{0};
  std::vector<size_t> offset(attackers.size(), 1);
  std::thread trickle([&] {
    TrickleEvenly(attackers.size(), 2s, stop, [&](size_t i) {
      if (offset[i] + 1 >= header.size()) return;  // never completes the header
      if (attackers[i].Send(protocol::ByteSpan(header.data() + offset[i], 1)).ok()) {
        ++offset[i];
        ++sent;
      }
    });
  });
  std::this_thread::sleep_for(300ms);
  const PairedP99 attack = PingP99Us(control.conn, good);
  const auto measured = Clock::now() - start;
  stop = true;
  trickle.join();
  MESSAGE("PING p99, control -> attacked: idle "
          << idle.control_us << " -> " << idle.subject_us << " us (" << idle.ratio << "x), under "
          << kAttackers << " trickling connections " << attack.control_us << " -> "
          << attack.subject_us << " us (" << attack.ratio << "x), " << sent.load()
          << " bytes trickled");
  CHECK(measured < 8s);  // the attackers were all alive while it was measured
  if (kCheckLatency) CHECK(attack.ratio <= 1.5);

  // The deadlines close them all: 8 s after their first byte (HELLO: after accept).
  int closed = 0;
  for (auto& c : attackers) closed += c.WaitClosed(10s) ? 1 : 0;
  CHECK(closed == kAttackers);
  const std::string metrics = HttpGet(d->metrics_port(), "/metrics");
  CHECK(metrics.find("reason=\"deadline_HELLO\"") != std::string::npos);
  CHECK(metrics.find("reason=\"deadline_header\"") != std::string::npos);
  CHECK(metrics.find("reason=\"preauth_per_peer\"") != std::string::npos);
  // The slots are free again.
  attackers.clear();
  auto later = RawConn::TcpHello(d->port());
  REQUIRE_OK(later);
  REQUIRE_OK(later->Call(Opcode::kPing, AsBytes("alive")));
}

}  // namespace
}  // namespace hypic::e2e
