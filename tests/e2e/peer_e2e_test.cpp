// End to end: hypicd daemons on loopback ports as peers (server/peer.h). A router daemon lists
// peers; its COMPOSE misses are scattered over its own worker and the peers, whose entries
// stream back, are verified and stored on the router. Checked against a reference daemon that
// computes everything itself:
//   - with two peers, the logits (the whole row), the composed state and every stored entry are
//     bitwise the same, and the peers did compute some of the segments;
//   - a peer killed (kill -9) once it has taken its PREFILL (seen in its STATS) and before it
//     answers: the job is re-run locally, the request completes bitwise the same, and the
//     router stores only the prompt's entries;
//   - a peer serving another model (another fingerprint) is refused, logged, and not used;
//   - peers that answer garbage (an entry of other tokens, random bytes) are rejected: the
//     request is right and the router stores only the entries it asked for.
#include <doctest/doctest.h>
#include <signal.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "tests/client/fake_server.h"
#include "tests/e2e/daemon.h"
#include "tests/support/check_ok.h"
#include "tests/support/seeded_rng.h"

namespace hypic::e2e {
namespace {

using protocol::Opcode;
using testing::SeededRng;

// Every daemon of a test has the same compute budget (one prefill worker on the same cores), so
// an entry is bitwise the same whichever daemon computed it. A request's budget covers the kill
// case's large segment twice (on the peer, then again on the router) in a sanitizer build on a
// loaded machine: the default 30 s did not, under ThreadSanitizer in CI.
DaemonOptions Options(std::vector<std::string> extra = {}) {
  DaemonOptions o;
  o.args = {"--prefill-workers", "1", "--compute-workers", "2", "--request-timeout-ms", "110s"};
  o.args.insert(o.args.end(), extra.begin(), extra.end());
  return o;
}

std::string Address(const Daemon& d) { return "127.0.0.1:" + std::to_string(d.port()); }

RawConn Admin(const Daemon& d) {
  auto c = RawConn::UnixHello(d.unix_path());
  REQUIRE_OK(c);
  return std::move(c).value();
}

// COMPOSE with the whole logit row and the state; any failure as a Status (usable off the test
// thread).
Result<protocol::ComposeReply> TryCompose(RawConn& conn,
                                          const std::vector<protocol::ComposePart>& parts) {
  protocol::ComposeRequest req;
  req.mode = protocol::ComposeMode::kHypic;
  req.top_k = 4;
  req.return_state = true;
  req.parts = parts;
  protocol::ComposeOptions options;
  options.logits = protocol::LogitsMode::kFull;
  HYPIC_ASSIGN_OR_RETURN(ReplyFrame r, conn.Call(Opcode::kCompose, protocol::Encode(req),
                                                 protocol::Encode(options), {}, 120s));
  if (r.status() != StatusCode::kOk) return Status(r.status(), r.text());
  return protocol::Decode<protocol::ComposeReply>(r.body);
}

protocol::ComposeReply Compose(RawConn& conn, const std::vector<protocol::ComposePart>& parts) {
  auto reply = TryCompose(conn, parts);
  REQUIRE_OK(reply);
  return std::move(reply).value();
}

nlohmann::json Stats(RawConn& conn) {
  auto r = conn.Call(Opcode::kStats);
  REQUIRE_OK(r);
  REQUIRE(r->status() == StatusCode::kOk);
  return nlohmann::json::parse(r->text());
}

nlohmann::json PeerRow(const nlohmann::json& stats, const std::string& address) {
  REQUIRE_MESSAGE(stats.contains("peers"), stats.dump());
  for (const auto& p : stats["peers"]) {
    if (p["name"] == address) return p;
  }
  FAIL("no peer " << address << " in " << stats.dump());
  return {};
}

protocol::Bytes Get(RawConn& conn, const Hash128& key) {
  auto r = conn.Call(Opcode::kGet, {}, {}, key);
  REQUIRE_OK(r);
  REQUIRE_MESSAGE(r->status() == StatusCode::kOk, r->text());
  return r->body;
}

std::vector<Hash128> Listed(RawConn& conn) {
  protocol::ListRequest req;
  req.limit = 1000;
  auto r = conn.Call(Opcode::kList, protocol::Encode(req));
  REQUIRE_OK(r);
  REQUIRE(r->status() == StatusCode::kOk);
  auto list = protocol::Decode<protocol::ListReply>(r->body);
  REQUIRE_OK(list);
  std::vector<Hash128> keys;
  for (const auto& e : list->entries) keys.push_back(e.key);
  std::sort(keys.begin(), keys.end());
  return keys;
}

// The router's answer against the reference's: the whole logit row, the composed state and
// every segment's stored entry, bitwise; and the router stores exactly the prompt's segments.
void CheckSame(RawConn& router, RawConn& reference, const protocol::ComposeReply& got,
               const protocol::ComposeReply& want) {
  REQUIRE(got.logits.size() == want.logits.size());
  CHECK(std::memcmp(got.logits.data(), want.logits.data(), want.logits.size() * 4) == 0);
  CHECK(got.top == want.top);
  REQUIRE(got.has_state);
  REQUIRE(want.has_state);
  CHECK(got.state == want.state);
  std::vector<Hash128> keys;
  for (size_t i = 0; i + 1 < got.parts.size(); ++i) {
    CAPTURE(i);
    CHECK(got.parts[i].outcome == protocol::PartOutcome::kMiss);
    CHECK(got.parts[i].key == want.parts[i].key);
    CHECK(Get(router, got.parts[i].key) == Get(reference, want.parts[i].key));
    keys.push_back(got.parts[i].key);
  }
  std::sort(keys.begin(), keys.end());
  CHECK(Listed(router) == keys);
}

TEST_CASE("router + two peers: bitwise the result of one daemon computing everything") {
  auto reference = Daemon::Start(Options());
  REQUIRE_OK(reference);
  auto p1 = Daemon::Start(Options());
  REQUIRE_OK(p1);
  auto p2 = Daemon::Start(Options());
  REQUIRE_OK(p2);
  const std::string peers = Address(**p1) + "," + Address(**p2);
  auto router = Daemon::Start(Options({"--peers", peers, "--peer-timeout-ms", "20s"}));
  REQUIRE_OK(router);
  RawConn ref = Admin(**reference);
  RawConn r = Admin(**router);

  const auto prompt = SegmentsPrompt(18, 9, 160);
  const auto want = Compose(ref, prompt);
  const auto got = Compose(r, prompt);
  CheckSame(r, ref, got, want);
  const nlohmann::json stats = Stats(r);
  uint64_t remote_jobs = 0;
  for (const std::string& address : {Address(**p1), Address(**p2)}) {
    const nlohmann::json row = PeerRow(stats, address);
    CHECK(row["up"] == true);
    CHECK(row["failures"] == 0);
    remote_jobs += row["jobs"].get<uint64_t>();
  }
  CHECK(remote_jobs > 0);  // the peers computed some of the segments
  CHECK(remote_jobs < 9);  // and the router's own worker the rest
  // The peers keep their copies: a peer's entry is the reference's.
  RawConn c1 = Admin(**p1);
  for (const Hash128& key : Listed(c1)) CHECK(Get(c1, key) == Get(ref, key));
  // The metrics show each peer.
  const std::string metrics = HttpGet((*router)->metrics_port(), "/metrics");
  CHECK(metrics.find("hypic_peer_up{peer=\"" + Address(**p1) + "\"} 1") != std::string::npos);
  CHECK(metrics.find("hypic_peer_jobs_total{peer=\"" + Address(**p2) + "\"}") != std::string::npos);
  // And the router's own worker, healthy, with no device errors; the peers are not workers here.
  CHECK(metrics.find("hypic_worker_healthy{worker=\"cpu:0\"} 1") != std::string::npos);
  CHECK(metrics.find("hypic_worker_device_errors_total{worker=\"cpu:0\"} 0") != std::string::npos);
  CHECK(metrics.find("hypic_worker_healthy{worker=\"peer:") == std::string::npos);
}

// The peer's compute queue depth (PREFILLs waiting or running there), or nullopt when STATS
// fails. No REQUIRE: called while another thread runs a request.
std::optional<int64_t> ComputeQueueDepth(RawConn& conn) {
  auto r = conn.Call(Opcode::kStats);
  if (!r.ok() || r->status() != StatusCode::kOk) return std::nullopt;
  const nlohmann::json stats =
      nlohmann::json::parse(r->text(), nullptr, /*allow_exceptions=*/false);
  if (!stats.contains("server") || !stats["server"].contains("compute_queue_depth")) {
    return std::nullopt;
  }
  return stats["server"]["compute_queue_depth"].get<int64_t>();
}

TEST_CASE("a peer killed with -9 while it holds a job: the request completes, bitwise right") {
  auto reference = Daemon::Start(Options());
  REQUIRE_OK(reference);
  auto peer = Daemon::Start(Options());
  REQUIRE_OK(peer);
  // Uncalibrated (no reply yet), the peer counts as 8 of the router's workers, so the large
  // segment goes to it; a long backoff keeps it down (in STATS) after the kill.
  auto router = Daemon::Start(Options({"--peers", Address(**peer) + ";weight=8",
                                       "--peer-timeout-ms", "60s", "--peer-backoff-ms", "60s"}));
  REQUIRE_OK(router);
  RawConn ref = Admin(**reference);
  RawConn r = Admin(**router);
  RawConn p = Admin(**peer);

  // One large segment, the peer's job, long enough to kill the peer while it computes it, and
  // three small ones for the router's worker.
  auto prompt = SegmentsPrompt(2, 3, 128);
  prompt.insert(prompt.begin(), SegmentsPrompt(7, 1, 8192).front());
  const auto want = Compose(ref, prompt);
  Result<protocol::ComposeReply> got = Internal("not run");
  std::thread request([&] {
    auto c = RawConn::UnixHello((*router)->unix_path());
    got = c.ok() ? TryCompose(*c, prompt) : Result<protocol::ComposeReply>(c.status());
  });
  // Killed once the PREFILL is in the peer's compute queue: the peer has taken the job.
  bool holding = false;
  for (auto until = std::chrono::steady_clock::now() + 60s;
       !holding && std::chrono::steady_clock::now() < until;) {
    const std::optional<int64_t> depth = ComputeQueueDepth(p);
    holding = depth && *depth > 0;
    if (!holding) std::this_thread::sleep_for(1ms);
  }
  (*peer)->Stop(SIGKILL);
  request.join();
  REQUIRE_MESSAGE(holding, "the peer never took a PREFILL");
  REQUIRE_OK(got);
  CheckSame(r, ref, *got, want);  // bitwise, and only the prompt's entries stored
  const nlohmann::json stats = Stats(r);
  const nlohmann::json row = PeerRow(stats, Address(**peer));
  CAPTURE(row.dump());
  CHECK(row["jobs"] == 0);      // the peer never answered: it held its job when killed
  CHECK(row["failures"] == 1);  // that one job, lost with the connection
  CHECK(row["errors"] == 1);
  CHECK(row["up"] == false);
  CHECK(stats["scheduler"]["failovers"] == 1);  // re-run once, on the router's worker
  CHECK((*router)->Log().find("down") != std::string::npos);
}

TEST_CASE("a peer serving another model fingerprint is refused and logged") {
  auto reference = Daemon::Start(Options());
  REQUIRE_OK(reference);
  // The same checkpoint with f32 GEMM weights: another fingerprint.
  auto other = Daemon::Start(Options({"--weights-dtype", "f32"}));
  REQUIRE_OK(other);
  auto router = Daemon::Start(Options({"--peers", Address(**other) + ";weight=8"}));
  REQUIRE_OK(router);
  RawConn ref = Admin(**reference);
  RawConn r = Admin(**router);
  RawConn o = Admin(**other);
  const auto prompt = SegmentsPrompt(3, 4, 64);
  CheckSame(r, ref, Compose(r, prompt), Compose(ref, prompt));
  const nlohmann::json row = PeerRow(Stats(r), Address(**other));
  CHECK(row["refused"] == true);
  CHECK(row["refusals"].get<uint64_t>() >= 1);
  CHECK(row["jobs"] == 0);
  CHECK(row["up"] == false);
  CHECK(row["last_error"].get<std::string>().find("fingerprint") != std::string::npos);
  CHECK((*router)->Log().find("refused") != std::string::npos);
  CHECK(Listed(o).empty());  // nothing was computed there
}

// A fake peer: the HELLO of a real one (the right fingerprint, PREFILL_ENTRIES), and to every
// PREFILL one "entry" of the right size fields but the wrong contents.
std::unique_ptr<client::fake::FakeServer> GarbagePeer(const protocol::HelloReply& hello,
                                                      protocol::Bytes entry) {
  return std::make_unique<client::fake::FakeServer>(
      /*tcp=*/true, hello,
      [entry = std::move(entry)](const protocol::Frame* frame,
                                 const client::fake::FakeServer::Send& send) {
        if (frame == nullptr || frame->header.opcode != Opcode::kPrefill) return;
        protocol::PrefillReply reply;
        reply.results.push_back(
            protocol::PrefillResult{{}, false, protocol::Tier::kHost, 1, entry.size()});
        protocol::Bytes body = protocol::Encode(reply);
        body.insert(body.end(), entry.begin(), entry.end());
        send(protocol::ByteSpan(client::fake::ReplyTo(frame->header, protocol::ByteSpan(body))));
      });
}

TEST_CASE("peers answering garbage are rejected: nothing of theirs is stored or served") {
  auto reference = Daemon::Start(Options());
  REQUIRE_OK(reference);
  RawConn ref = Admin(**reference);
  auto tcp = RawConn::Tcp((*reference)->port());
  REQUIRE_OK(tcp);
  auto hello = tcp->Hello();
  REQUIRE_OK(hello);
  // A real, well-formed entry, but of other tokens: it passes its checksums, not the key check.
  const auto decoy = SegmentsPrompt(99, 1, 64);
  const auto decoy_reply = Compose(ref, decoy);
  protocol::Bytes wrong_entry = Get(ref, decoy_reply.parts[0].key);
  SeededRng rng(5);
  protocol::Bytes noise(4096);
  for (auto& b : noise) b = std::byte{static_cast<uint8_t>(rng.UniformInt(0, 255))};
  auto wrong = GarbagePeer(*hello, wrong_entry);
  auto random = GarbagePeer(*hello, noise);
  // Each fake serves one connection: a long backoff keeps the router from coming back.
  auto router = Daemon::Start(
      Options({"--peers", wrong->address() + ";weight=8," + random->address() + ";weight=8",
               "--peer-backoff-ms", "60s", "--peer-timeout-ms", "5s"}));
  REQUIRE_OK(router);
  RawConn r = Admin(**router);
  const auto prompt = SegmentsPrompt(4, 6, 64);
  const auto want = Compose(ref, prompt);
  CheckSame(r, ref, Compose(r, prompt), want);  // the router stored only the prompt's entries
  const nlohmann::json stats = Stats(r);
  for (const auto* fake : {wrong.get(), random.get()}) {
    const nlohmann::json row = PeerRow(stats, fake->address());
    CAPTURE(row.dump());
    CHECK(row["bad_entries"] == 1);
    CHECK(row["jobs"] == 0);
    CHECK(row["up"] == false);
  }
  CHECK(stats["scheduler"]["failovers"].get<uint64_t>() >= 2);
}

}  // namespace
}  // namespace hypic::e2e
