#include "client/connection.h"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>

namespace hypic::client {

namespace {

Status Errno(std::string_view what) {
  return IoError(std::string(what) + ": " + std::strerror(errno));
}

Status SetNonBlocking(int fd) {
  int flags = fcntl(fd, F_GETFL, 0);
  if (flags < 0 || fcntl(fd, F_SETFL, flags | O_NONBLOCK) < 0) return Errno("fcntl");
  return Status::Ok();
}

// Connects a non-blocking socket within timeout_ms.
Status ConnectWithin(int fd, const sockaddr* addr, socklen_t len, int timeout_ms,
                     std::string_view address) {
  if (connect(fd, addr, len) == 0) return Status::Ok();
  if (errno != EINPROGRESS && errno != EAGAIN) {
    return Errno("connect to " + std::string(address));
  }
  pollfd p{fd, POLLOUT, 0};
  int r = poll(&p, 1, timeout_ms);
  if (r == 0) return DeadlineExceeded("connect to " + std::string(address) + " timed out");
  if (r < 0) return Errno("poll");
  int err = 0;
  socklen_t err_len = sizeof(err);
  if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &err_len) < 0) return Errno("getsockopt");
  if (err != 0) {
    return IoError("connect to " + std::string(address) + ": " + std::strerror(err));
  }
  return Status::Ok();
}

bool IsLoopback(const sockaddr* addr) {
  if (addr->sa_family == AF_INET) {
    const auto* in = reinterpret_cast<const sockaddr_in*>(addr);
    return (ntohl(in->sin_addr.s_addr) >> 24) == 127;
  }
  if (addr->sa_family == AF_INET6) {
    const auto* in6 = reinterpret_cast<const sockaddr_in6*>(addr);
    return IN6_IS_ADDR_LOOPBACK(&in6->sin6_addr);
  }
  return false;
}

}  // namespace

Result<std::unique_ptr<Connection>> Connection::Open(std::string_view address, int timeout_ms) {
  bool is_unix = address.starts_with("unix:") || (address.find('/') != std::string_view::npos &&
                                                  address.find(':') == std::string_view::npos);
  if (is_unix) {
    std::string path(address.starts_with("unix:") ? address.substr(5) : address);
    sockaddr_un sa{};
    if (path.empty() || path.size() >= sizeof(sa.sun_path)) {
      return BadRequest("unix socket path '" + path + "' is empty or too long");
    }
    sa.sun_family = AF_UNIX;
    std::memcpy(sa.sun_path, path.data(), path.size());
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return Errno("socket");
    std::unique_ptr<Connection> c(new Connection(fd));
    HYPIC_RETURN_IF_ERROR(SetNonBlocking(fd));
    HYPIC_RETURN_IF_ERROR(
        ConnectWithin(fd, reinterpret_cast<const sockaddr*>(&sa), sizeof(sa), timeout_ms, address));
    return c;
  }

  size_t colon = address.rfind(':');
  if (colon == std::string_view::npos || colon + 1 == address.size()) {
    return BadRequest("address '" + std::string(address) + "' is neither host:port nor unix:/path");
  }
  std::string host(address.substr(0, colon));
  std::string port(address.substr(colon + 1));
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  if (host.empty()) host = "127.0.0.1";
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  int gai = getaddrinfo(host.c_str(), port.c_str(), &hints, &res);
  if (gai != 0) {
    return BadRequest("cannot resolve '" + std::string(address) + "': " + gai_strerror(gai));
  }
  std::unique_ptr<addrinfo, decltype(&freeaddrinfo)> guard(res, &freeaddrinfo);
  Status last = IoError("no address for " + std::string(address));
  for (addrinfo* ai = res; ai != nullptr; ai = ai->ai_next) {
    int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
    if (fd < 0) {
      last = Errno("socket");
      continue;
    }
    std::unique_ptr<Connection> c(new Connection(fd));
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    last = SetNonBlocking(fd);
    if (last.ok()) last = ConnectWithin(fd, ai->ai_addr, ai->ai_addrlen, timeout_ms, address);
    if (!last.ok()) continue;
    if (IsLoopback(ai->ai_addr)) {
      // Requests (PUT bodies) flow this way: no pacing on a path without congestion, as hypicd
      // does for its replies (loopback_tcp_congestion). Best effort: reno is allowed by default.
      static constexpr char kReno[] = "reno";
      setsockopt(fd, IPPROTO_TCP, TCP_CONGESTION, kReno, sizeof(kReno) - 1);
    }
    return c;
  }
  return last;
}

Connection::~Connection() { close(fd_); }

Result<short> Connection::Poll(short events, int timeout_ms) {
  pollfd p{fd_, events, 0};
  for (;;) {
    int r = poll(&p, 1, timeout_ms);
    if (r >= 0) break;
    if (errno != EINTR) return Errno("poll");
  }
  // Errors and hang-ups surface as readable/writable so the next read or write reports them.
  if ((p.revents & (POLLERR | POLLHUP | POLLNVAL)) != 0) return static_cast<short>(events);
  return static_cast<short>(p.revents & events);
}

Result<size_t> Connection::WriteSome(std::span<iovec> iov) {
  msghdr msg{};
  msg.msg_iov = iov.data();
  msg.msg_iovlen = iov.size() < IOV_MAX ? iov.size() : IOV_MAX;
  for (;;) {
    ssize_t n = sendmsg(fd_, &msg, MSG_NOSIGNAL);
    if (n >= 0) return static_cast<size_t>(n);
    if (errno == EAGAIN || errno == EWOULDBLOCK) return size_t{0};
    if (errno != EINTR) return Errno("send");
  }
}

Status Connection::WriteAll(std::span<iovec> iov, int timeout_ms,
                            const std::function<Status()>& on_readable) {
  while (!iov.empty()) {
    if (iov.front().iov_len == 0) {
      iov = iov.subspan(1);
      continue;
    }
    HYPIC_ASSIGN_OR_RETURN(size_t n, WriteSome(iov));
    while (n > 0) {
      size_t take = n < iov.front().iov_len ? n : iov.front().iov_len;
      iov.front().iov_base = static_cast<std::byte*>(iov.front().iov_base) + take;
      iov.front().iov_len -= take;
      n -= take;
      if (iov.front().iov_len == 0) iov = iov.subspan(1);
    }
    while (!iov.empty() && iov.front().iov_len == 0) iov = iov.subspan(1);
    if (iov.empty()) break;
    HYPIC_ASSIGN_OR_RETURN(short ev, Poll(POLLOUT | POLLIN, timeout_ms));
    if (ev == 0) return DeadlineExceeded("timed out writing to the server");
    if ((ev & POLLOUT) == 0 && (ev & POLLIN) != 0) HYPIC_RETURN_IF_ERROR(on_readable());
  }
  return Status::Ok();
}

Result<size_t> Connection::ReadSome(std::span<std::byte> out, int timeout_ms) {
  for (;;) {
    ssize_t n = recv(fd_, out.data(), out.size(), 0);
    if (n > 0) return static_cast<size_t>(n);
    if (n == 0) return IoError("the server closed the connection");
    if (errno == EINTR) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK) return Errno("recv");
    HYPIC_ASSIGN_OR_RETURN(short ev, Poll(POLLIN, timeout_ms));
    if (ev == 0) return DeadlineExceeded("timed out waiting for the server");
  }
}

Status Connection::ReadExact(std::span<std::byte> out, int timeout_ms) {
  while (!out.empty()) {
    HYPIC_ASSIGN_OR_RETURN(size_t n, ReadSome(out, timeout_ms));
    out = out.subspan(n);
  }
  return Status::Ok();
}

}  // namespace hypic::client
