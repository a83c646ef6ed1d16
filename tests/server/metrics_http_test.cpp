// MetricsHttpEndpoint against raw sockets: the paths it serves, and a client that requests a
// large response and never reads it cannot hold the one-at-a-time endpoint past its write
// deadline (issue 17: the send had no timeout).
#include "server/metrics_http.h"

#include <doctest/doctest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <string>

#include "tests/support/check_ok.h"

namespace hypic::server {
namespace {

int Connect(uint16_t port, int rcvbuf = 0) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  REQUIRE(fd >= 0);
  if (rcvbuf > 0) ::setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof(rcvbuf));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0);
  return fd;
}

// Sends a GET and reads the whole response (the endpoint closes after one), within `wait`.
std::string Get(uint16_t port, const std::string& path, std::chrono::milliseconds wait) {
  int fd = Connect(port);
  const std::string req = "GET " + path + " HTTP/1.1\r\nHost: x\r\n\r\n";
  REQUIRE(::send(fd, req.data(), req.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(req.size()));
  std::string out;
  const auto deadline = std::chrono::steady_clock::now() + wait;
  char buf[4096];
  while (std::chrono::steady_clock::now() < deadline) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 50) <= 0) continue;
    ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
    if (n <= 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  return out;
}

TEST_CASE(
    "a client that never reads a large response holds the endpoint at most its write deadline") {
  const std::string big(size_t{32} << 20, 'x');  // far beyond any socket buffers
  MetricsHttpEndpoint endpoint([&] { return big; },
                               [] {
                                 return MetricsHttpEndpoint::Health{true, true, ""};
                               });
  auto port = endpoint.Start("127.0.0.1", 0);
  REQUIRE_OK(port);
  CHECK(Get(*port, "/healthz", std::chrono::seconds(3)).find("200 OK") != std::string::npos);
  CHECK(Get(*port, "/nope", std::chrono::seconds(3)).find("404") != std::string::npos);

  int stalled = Connect(*port, 4096);
  const std::string req = "GET /metrics HTTP/1.1\r\n\r\n";
  REQUIRE(::send(stalled, req.data(), req.size(), MSG_NOSIGNAL) > 0);
  // The endpoint is now stuck writing to `stalled`; the next client is served once the write
  // deadline (5 s) drops it, not never.
  const auto t0 = std::chrono::steady_clock::now();
  const std::string health = Get(*port, "/healthz", std::chrono::seconds(15));
  const auto waited = std::chrono::steady_clock::now() - t0;
  CHECK(health.find("200 OK") != std::string::npos);
  CHECK(waited < std::chrono::seconds(10));
  ::close(stalled);
  endpoint.Stop();
}

}  // namespace
}  // namespace hypic::server
