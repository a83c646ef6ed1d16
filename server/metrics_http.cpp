#include "server/metrics_http.h"

#include <fmt/format.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <string_view>

#include "protocol/session.h"

namespace hypic::server {

namespace {

constexpr size_t kMaxRequestBytes = 8192;
constexpr int kReadDeadlineMs = 1000;
constexpr int kWriteDeadlineMs = 5000;
constexpr int kPollIntervalMs = 100;

// Writes all of `data` unless the client stops reading: non-blocking sends, waiting for the
// socket in slices of kPollIntervalMs, gives up after kWriteDeadlineMs or on Stop. So a client
// that never reads its response holds the (one-at-a-time) endpoint for at most 5 s.
void SendAll(int fd, std::string_view data, const std::atomic<bool>& stop) {
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::milliseconds(kWriteDeadlineMs);
  while (!data.empty() && !stop) {
    ssize_t n = ::send(fd, data.data(), data.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      data.remove_prefix(static_cast<size_t>(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK)) return;
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                          deadline - std::chrono::steady_clock::now())
                          .count();
    if (left <= 0) return;
    pollfd p{fd, POLLOUT, 0};
    ::poll(&p, 1, static_cast<int>(std::min<int64_t>(left, kPollIntervalMs)));
  }
}

std::string Response(int code, std::string_view reason, std::string_view content_type,
                     std::string_view body) {
  return fmt::format(
      "HTTP/1.1 {} {}\r\nContent-Type: {}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{}",
      code, reason, content_type, body.size(), body);
}

// The value of header `name` (case-insensitive) in `request`, trimmed; "" when absent.
std::string_view HeaderValue(std::string_view request, std::string_view name) {
  size_t at = request.find('\n');
  while (at != std::string_view::npos && at + 1 < request.size()) {
    std::string_view line = request.substr(at + 1);
    at = request.find('\n', at + 1);
    line = line.substr(0, line.find('\n'));
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    const size_t colon = line.find(':');
    if (colon != name.size()) continue;
    bool same = true;
    for (size_t i = 0; i < colon && same; ++i) {
      same = std::tolower(static_cast<unsigned char>(line[i])) ==
             std::tolower(static_cast<unsigned char>(name[i]));
    }
    if (!same) continue;
    std::string_view value = line.substr(colon + 1);
    while (!value.empty() && (value.front() == ' ' || value.front() == '\t'))
      value.remove_prefix(1);
    while (!value.empty() && (value.back() == ' ' || value.back() == '\t')) value.remove_suffix(1);
    return value;
  }
  return {};
}

}  // namespace

MetricsHttpEndpoint::~MetricsHttpEndpoint() { Stop(); }

Result<uint16_t> MetricsHttpEndpoint::Start(const std::string& host, uint16_t port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* res = nullptr;
  std::string port_text = std::to_string(port);
  int rc = ::getaddrinfo(host.empty() ? nullptr : host.c_str(), port_text.c_str(), &hints, &res);
  if (rc != 0) {
    return IoError(fmt::format("metrics endpoint {}:{}: {}", host, port, gai_strerror(rc)));
  }
  std::string last_error = "no address";
  for (addrinfo* ai = res; ai != nullptr; ai = ai->ai_next) {
    int fd = ::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
    if (fd < 0) continue;
    int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (::bind(fd, ai->ai_addr, ai->ai_addrlen) == 0 && ::listen(fd, 64) == 0) {
      listen_fd_ = fd;
      break;
    }
    last_error = std::strerror(errno);
    ::close(fd);
  }
  ::freeaddrinfo(res);
  if (listen_fd_ < 0) {
    return IoError(fmt::format("metrics endpoint {}:{}: {}", host, port, last_error));
  }
  sockaddr_storage bound{};
  socklen_t len = sizeof(bound);
  ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&bound), &len);
  uint16_t bound_port = bound.ss_family == AF_INET6
                            ? ntohs(reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port)
                            : ntohs(reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
  stop_ = false;
  thread_ = std::thread([this] { Loop(); });
  return bound_port;
}

void MetricsHttpEndpoint::Stop() {
  stop_ = true;
  if (thread_.joinable()) thread_.join();
  if (listen_fd_ >= 0) {
    ::close(listen_fd_);
    listen_fd_ = -1;
  }
}

void MetricsHttpEndpoint::Loop() {
  while (!stop_) {
    pollfd p{listen_fd_, POLLIN, 0};
    if (::poll(&p, 1, kPollIntervalMs) <= 0) continue;
    int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) continue;
    ServeOne(fd);
    ::close(fd);
  }
}

void MetricsHttpEndpoint::ServeOne(int fd) {
  std::string request;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(kReadDeadlineMs);
  char buf[1024];
  while (request.find("\r\n\r\n") == std::string::npos &&
         request.find("\n\n") == std::string::npos) {
    if (request.size() > kMaxRequestBytes) {
      SendAll(fd, Response(431, "Request Header Fields Too Large", "text/plain", "too large\n"),
              stop_);
      return;
    }
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0 || stop_) return;
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) return;
    ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
    if (n <= 0) return;
    request.append(buf, static_cast<size_t>(n));
  }
  std::string_view line(request);
  line = line.substr(0, line.find_first_of("\r\n"));
  if (line.rfind("GET ", 0) != 0 && line.rfind("HEAD ", 0) != 0) {
    SendAll(fd, Response(405, "Method Not Allowed", "text/plain", "only GET\n"), stop_);
    return;
  }
  std::string_view target = line.substr(line.find(' ') + 1);
  target = target.substr(0, target.find(' '));
  target = target.substr(0, target.find('?'));
  const bool head_only = line.rfind("HEAD ", 0) == 0;
  auto send = [&](int code, std::string_view reason, std::string_view type,
                  const std::string& body) {
    std::string r = Response(code, reason, type, body);
    if (head_only) r.resize(r.size() - body.size());
    SendAll(fd, r, stop_);
  };
  if (target == "/healthz" || target == "/readyz") {
    Health h = health_ ? health_() : Health{};
    bool ok = target == "/healthz" ? h.live : h.ready;
    std::string body = (ok ? "ok" : "not ok") + (h.detail.empty() ? "" : ": " + h.detail) + "\n";
    if (ok) {
      send(200, "OK", "text/plain", body);
    } else {
      send(503, "Service Unavailable", "text/plain", body);
    }
    return;
  }
  if (target != "/metrics") {
    SendAll(fd, Response(404, "Not Found", "text/plain", "try /metrics, /healthz or /readyz\n"),
            stop_);
    return;
  }
  if (!bearer_token_.empty()) {
    std::string_view auth = HeaderValue(request, "Authorization");
    constexpr std::string_view kBearer = "Bearer ";
    const bool ok = auth.size() > kBearer.size() && auth.substr(0, kBearer.size()) == kBearer &&
                    protocol::TokensEqual(auth.substr(kBearer.size()), bearer_token_);
    if (!ok) {
      SendAll(fd,
              Response(401, "Unauthorized", "text/plain",
                       "/metrics needs the header Authorization: Bearer <metrics_token>\n"),
              stop_);
      return;
    }
  }
  send(200, "OK", "text/plain; version=0.0.4", render_());
}

}  // namespace hypic::server
