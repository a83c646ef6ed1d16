// End to end against the real hypicd: HELLO and version negotiation, PING, the unix socket,
// auth and the admin token, pipelining, CONFIG/STATS, admin SHUTDOWN, metrics, startup errors
// (bad config, non-loopback bind without a token), and the loopback congestion control.
#include <doctest/doctest.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>

#include "tests/e2e/daemon.h"
#include "tests/support/check_ok.h"

namespace hypic::e2e {
namespace {

using protocol::Opcode;

nlohmann::json ParseJson(const ReplyFrame& r) { return nlohmann::json::parse(r.text()); }

TEST_CASE("HELLO, PING, pipelining and CONFIG over TCP and the unix socket") {
  auto d = Daemon::Start();
  REQUIRE_OK(d);
  Daemon& daemon = **d;

  for (bool unix_socket : {false, true}) {
    CAPTURE(unix_socket);
    auto conn = unix_socket ? RawConn::Unix(daemon.unix_path()) : RawConn::Tcp(daemon.port());
    REQUIRE_OK(conn);
    // PING is allowed before HELLO.
    auto pong = conn->Call(Opcode::kPing, AsBytes("early"));
    REQUIRE_OK(pong);
    CHECK(pong->status() == StatusCode::kOk);
    CHECK(pong->text() == "early");

    auto hello = conn->Hello();
    REQUIRE_OK(hello);
    CHECK(hello->version == protocol::kMaxVersion);
    CHECK(hello->server_version.find("hypicd") == 0);
    // Without an admin token, admin goes to unix-socket peers of the daemon's own uid (this
    // process), never over TCP.
    CHECK(hello->admin == unix_socket);
    CHECK(hello->limits.max_frame_body > 0);
    // Streamed replies may be larger than a frame: the default holds a 128k-token state of a
    // 35B-class model (docs/state-format.md).
    CHECK(hello->limits.max_message_bytes >= (uint64_t{6} << 30));
    CHECK(hello->limits.max_message_bytes > hello->limits.max_frame_body);
    CHECK(hello->state_contract == protocol::kStateContractVersion);

    // Pipelining: 200 PINGs sent before reading anything; every id answered once, bodies echoed.
    std::set<uint64_t> ids;
    for (int i = 0; i < 200; ++i) {
      protocol::FrameHeader h;
      h.opcode = Opcode::kPing;
      h.request_id = 1000 + i;
      h.checksum_kind = i % 2 ? protocol::ChecksumKind::kCrc32 : protocol::ChecksumKind::kXxh3_64;
      auto body = AsBytes("p" + std::to_string(i));
      REQUIRE_OK(conn->SendFrame(h, {}, body));
      ids.insert(h.request_id);
    }
    for (int i = 0; i < 200; ++i) {
      auto r = conn->Read();
      REQUIRE_OK(r);
      CHECK(r->status() == StatusCode::kOk);
      CHECK(r->header.checksum_kind == (r->header.request_id % 2
                                            ? protocol::ChecksumKind::kCrc32
                                            : protocol::ChecksumKind::kXxh3_64));
      CHECK(r->text() == "p" + std::to_string(r->header.request_id - 1000));
      CHECK(ids.erase(r->header.request_id) == 1);
    }
    CHECK(ids.empty());

    auto config = conn->Call(Opcode::kConfig);
    REQUIRE_OK(config);
    if (unix_socket) {
      REQUIRE(config->status() == StatusCode::kOk);
      auto j = ParseJson(*config);
      CHECK(j["model"] == "builtin:tiny");
      CHECK(j["data_dir"] == daemon.data_dir());
      CHECK(j["token"] == "");
      CHECK(j["tenant"][0]["name"] == "default");
    } else {
      CHECK(config->status() == StatusCode::kUnauthorized);
    }

    // A second HELLO is a protocol error that closes the connection.
    auto again = conn->Call(Opcode::kHello, protocol::Encode(protocol::HelloRequest{}));
    REQUIRE_OK(again);
    CHECK(again->status() == StatusCode::kBadRequest);
    CHECK(conn->WaitClosed(2s));
  }

  // Metrics: the requests above are counted by opcode and status.
  std::string metrics = HttpGet(daemon.metrics_port(), "/metrics");
  // The probes of the sidecar deployment (deploy/kubernetes): live and ready once serving.
  CHECK(HttpGet(daemon.metrics_port(), "/healthz").rfind("HTTP/1.1 200", 0) == 0);
  std::string ready = HttpGet(daemon.metrics_port(), "/readyz");
  CHECK_MESSAGE(ready.rfind("HTTP/1.1 200", 0) == 0, ready);
  CHECK(HttpGet(daemon.metrics_port(), "/nope").rfind("HTTP/1.1 404", 0) == 0);
  CHECK(metrics.find("hypic_requests_total{opcode=\"PING\",status=\"OK\"}") != std::string::npos);
  CHECK(metrics.find("hypic_request_duration_seconds_bucket{opcode=\"HELLO\"") !=
        std::string::npos);
  CHECK(metrics.find("hypic_compute_queue_depth") != std::string::npos);
  CHECK(daemon.Stop(SIGTERM) == 0);
}

TEST_CASE("tokens: data token, admin token, version mismatch") {
  DaemonOptions opts;
  opts.env = {{"HYPIC_TOKEN", "data-secret"}, {"HYPIC_ADMIN_TOKEN", "admin-secret"}};
  auto d = Daemon::Start(opts);
  REQUIRE_OK(d);
  Daemon& daemon = **d;

  {  // No token: refused, then closed.
    auto conn = RawConn::Tcp(daemon.port());
    REQUIRE_OK(conn);
    auto hello = conn->Hello();
    CHECK(hello.status().code() == StatusCode::kUnauthorized);
    CHECK(conn->WaitClosed(2s));
  }
  {  // Wrong token.
    auto conn = RawConn::Tcp(daemon.port());
    REQUIRE_OK(conn);
    CHECK(conn->Hello("nope").status().code() == StatusCode::kUnauthorized);
    CHECK(conn->WaitClosed(2s));
  }
  {  // Requests before HELLO other than PING: refused and closed.
    auto conn = RawConn::Tcp(daemon.port());
    REQUIRE_OK(conn);
    auto r = conn->Call(Opcode::kHas, protocol::Encode(protocol::HasRequest{}));
    REQUIRE_OK(r);
    CHECK(r->status() == StatusCode::kUnauthorized);
    CHECK(conn->WaitClosed(2s));
  }
  {  // Data token: data ops work, admin ops are refused but the connection stays open.
    auto conn = RawConn::Tcp(daemon.port());
    REQUIRE_OK(conn);
    auto hello = conn->Hello("data-secret");
    REQUIRE_OK(hello);
    CHECK_FALSE(hello->admin);
    auto stats = conn->Call(Opcode::kStats);
    REQUIRE_OK(stats);
    CHECK(stats->status() == StatusCode::kUnauthorized);
    auto ping = conn->Call(Opcode::kPing, AsBytes("still here"));
    REQUIRE_OK(ping);
    CHECK(ping->text() == "still here");
  }
  {  // Wrong admin token with a right data token: refused.
    auto conn = RawConn::Unix(daemon.unix_path());
    REQUIRE_OK(conn);
    CHECK(conn->Hello("data-secret", "wrong").status().code() == StatusCode::kUnauthorized);
  }
  {  // The unix socket is local, but with an admin token configured it still needs it.
    auto conn = RawConn::Unix(daemon.unix_path());
    REQUIRE_OK(conn);
    auto hello = conn->Hello("data-secret");
    REQUIRE_OK(hello);
    CHECK_FALSE(hello->admin);
  }
  {  // Version mismatch.
    auto conn = RawConn::Tcp(daemon.port());
    REQUIRE_OK(conn);
    protocol::HelloRequest req;
    req.min_version = protocol::kMaxVersion + 1;
    req.max_version = protocol::kMaxVersion + 3;
    req.token = "data-secret";
    auto r = conn->Call(Opcode::kHello, protocol::Encode(req));
    REQUIRE_OK(r);
    CHECK(r->status() == StatusCode::kVersionMismatch);
    CHECK(conn->WaitClosed(2s));
  }
  {  // Admin token: STATS and CONFIG; CONFIG masks the secrets.
    auto conn = RawConn::Tcp(daemon.port());
    REQUIRE_OK(conn);
    auto hello = conn->Hello("data-secret", "admin-secret");
    REQUIRE_OK(hello);
    CHECK(hello->admin);
    auto stats = conn->Call(Opcode::kStats);
    REQUIRE_OK(stats);
    REQUIRE(stats->status() == StatusCode::kOk);
    auto j = ParseJson(*stats);
    CHECK(j["server"]["connections"].get<int>() >= 1);
    auto config = conn->Call(Opcode::kConfig);
    REQUIRE_OK(config);
    CHECK(config->text().find("admin-secret") == std::string::npos);
    CHECK(config->text().find("data-secret") == std::string::npos);
    CHECK(ParseJson(*config)["token"] == "<set>");

    // Admin SHUTDOWN: answered, then the daemon drains and exits 0.
    auto bye = conn->Call(Opcode::kShutdown);
    REQUIRE_OK(bye);
    CHECK(bye->status() == StatusCode::kOk);
    auto goaway = conn->Read(5s);
    REQUIRE_OK(goaway);
    CHECK(goaway->header.opcode == Opcode::kGoAway);
    CHECK(goaway->status() == StatusCode::kShuttingDown);
  }
  CHECK(daemon.WaitExit(15s) == 0);
}

TEST_CASE("startup never removes a non-socket at the unix path; a new data dir is owner-only") {
  const std::string dir = "/tmp/hypicd-e2e-paths-" + std::to_string(::getpid());
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const std::string file = dir + "/not-a-socket";
  { std::ofstream(file) << "precious"; }
  const std::string data = dir + "/data";
  auto r = RunDaemonToExit({"--unix-socket", file, "--data-dir", data, "--model", "none",
                            "--listen", "127.0.0.1:0", "--metrics", "off"});
  CHECK(r.exit_code != 0);
  CHECK(r.output.find("unix_socket") != std::string::npos);
  CHECK(r.output.find("not a socket") != std::string::npos);
  std::ifstream kept(file);
  std::string content;
  kept >> content;
  CHECK(content == "precious");  // the file is still there, untouched
  REQUIRE(std::filesystem::is_directory(data));
  CHECK(std::filesystem::status(data).permissions() == std::filesystem::perms::owner_all);
  std::filesystem::remove_all(dir);
}

TEST_CASE("startup refuses bad configuration, naming the key") {
  auto bad = RunDaemonToExit({"--max-connections", "many"});
  CHECK(bad.exit_code == 2);
  CHECK(bad.output.find("max_connections") != std::string::npos);

  auto open = RunDaemonToExit({"--listen", "0.0.0.0:0", "--data-dir", "/tmp/unused"});
  CHECK(open.exit_code == 2);
  CHECK(open.output.find("token") != std::string::npos);
  // A metrics endpoint off loopback needs a bearer token, or saying that it is public.
  auto metrics = RunDaemonToExit({"--check-config", "--metrics", "0.0.0.0:9411"});
  CHECK(metrics.exit_code == 2);
  CHECK(metrics.output.find("metrics_token") != std::string::npos);
  CHECK(RunDaemonToExit({"--check-config", "--metrics", "0.0.0.0:9411", "--metrics-public", "true"})
            .exit_code == 0);

  auto env = RunDaemonToExit({"--check-config"}, {{"HYPIC_IDLE_TIMEOUT_MS", "forever"}});
  CHECK(env.exit_code == 2);
  CHECK(env.output.find("HYPIC_IDLE_TIMEOUT_MS") != std::string::npos);

  auto check = RunDaemonToExit({"--check-config", "--max-connections", "9"},
                               {{"HYPIC_MAX_CONNECTIONS", "8"}});
  CHECK(check.exit_code == 0);
  CHECK(check.output.find("max_connections = 9") != std::string::npos);

  // A well-formed name the kernel does not know is refused when the server starts.
  auto cc = RunDaemonToExit({"--loopback-tcp-congestion", "nosuchcc", "--data-dir",
                             "/tmp/hypicd-e2e-unused", "--model", "none"});
  CHECK(cc.exit_code == 2);
  CHECK(cc.output.find("loopback_tcp_congestion") != std::string::npos);
  auto cc_name = RunDaemonToExit({"--check-config", "--loopback-tcp-congestion", "Reno!"});
  CHECK(cc_name.exit_code == 2);
  CHECK(cc_name.output.find("loopback_tcp_congestion") != std::string::npos);

  auto help = RunDaemonToExit({"--help"});
  CHECK(help.exit_code == 0);
  CHECK(help.output.find("--max-inflight-bytes") != std::string::npos);
}

// The congestion control of the daemon's end of the connection whose client end is `client_fd`,
// read from a duplicate of the daemon's socket (pidfd_getfd). nullopt when the kernel does not
// let this process take the daemon's descriptors.
std::optional<std::string> DaemonSideCongestion(pid_t daemon, int client_fd) {
  sockaddr_in mine{};
  socklen_t len = sizeof(mine);
  if (::getsockname(client_fd, reinterpret_cast<sockaddr*>(&mine), &len) != 0) return std::nullopt;
  int pidfd = static_cast<int>(::syscall(SYS_pidfd_open, daemon, 0));
  if (pidfd < 0) return std::nullopt;
  std::optional<std::string> found;
  for (const auto& entry :
       std::filesystem::directory_iterator("/proc/" + std::to_string(daemon) + "/fd")) {
    int target = std::atoi(entry.path().filename().c_str());
    int fd = static_cast<int>(::syscall(SYS_pidfd_getfd, pidfd, target, 0));
    if (fd < 0) continue;
    sockaddr_in peer{};
    socklen_t plen = sizeof(peer);
    if (::getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &plen) == 0 &&
        peer.sin_family == AF_INET && peer.sin_port == mine.sin_port) {
      char name[16] = {};
      socklen_t nlen = sizeof(name);
      if (::getsockopt(fd, IPPROTO_TCP, TCP_CONGESTION, name, &nlen) == 0) {
        found = std::string(name, ::strnlen(name, nlen));
      }
    }
    ::close(fd);
    if (found) break;
  }
  ::close(pidfd);
  return found;
}

std::string SystemCongestion() {
  std::ifstream f("/proc/sys/net/ipv4/tcp_congestion_control");
  std::string name;
  f >> name;
  return name;
}

TEST_CASE("loopback connections get the configured congestion control") {
  for (std::string configured : {std::string("reno"), std::string()}) {
    CAPTURE(configured);
    DaemonOptions opts;
    opts.args = {"--loopback-tcp-congestion", configured};
    auto d = Daemon::Start(opts);
    REQUIRE_OK(d);
    auto conn = RawConn::TcpHello((*d)->port());
    REQUIRE_OK(conn);  // the daemon has accepted and configured the socket
    auto cc = DaemonSideCongestion((*d)->pid(), conn->fd());
    if (!cc) {
      MESSAGE("skipped: cannot read the daemon's sockets (pidfd_getfd not permitted)");
      return;
    }
    CHECK(*cc == (configured.empty() ? SystemCongestion() : configured));
  }
}

}  // namespace
}  // namespace hypic::e2e
