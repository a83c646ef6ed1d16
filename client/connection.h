// Connection: a connected stream socket (TCP or unix) with deadline-bounded, non-blocking I/O
// through poll(2). It is the only place in client/ that touches POSIX sockets. TCP connections
// turn Nagle off and, to a loopback address, use reno congestion control (no pacing, which under
// a bbr system default caps one loopback flow well below memory bandwidth).
// Owns its file descriptor (closed by the destructor). Not thread-safe.
#pragma once

#include <sys/uio.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "core/status.h"

namespace hypic::client {

class Connection {
 public:
  // `address` is "host:port", "[v6addr]:port", or "unix:/path" (a bare path with a '/' and
  // no ':' is also a unix socket). kIoError when it cannot connect; kDeadlineExceeded after
  // timeout_ms; kBadRequest for an address that does not parse.
  static Result<std::unique_ptr<Connection>> Open(std::string_view address, int timeout_ms);

  ~Connection();
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  // Writes every byte of `iov` before the deadline. While the socket is not writable, calls
  // `on_readable` when it is readable, so a peer that stops reading until we read cannot
  // deadlock us. on_readable returns a non-OK Status to abort.
  Status WriteAll(std::span<iovec> iov, int timeout_ms, const std::function<Status()>& on_readable);

  // Reads at least 1 and at most `out.size()` bytes. kIoError on EOF or error,
  // kDeadlineExceeded when nothing arrives within timeout_ms.
  Result<size_t> ReadSome(std::span<std::byte> out, int timeout_ms);

  // Reads exactly out.size() bytes.
  Status ReadExact(std::span<std::byte> out, int timeout_ms);

  int fd() const { return fd_; }

 private:
  explicit Connection(int fd) : fd_(fd) {}
  // Waits for `events` (POLLIN/POLLOUT); returns the revents, 0 on timeout.
  Result<short> Poll(short events, int timeout_ms);
  // One sendmsg; returns bytes written (0 when it would block).
  Result<size_t> WriteSome(std::span<iovec> iov);

  int fd_;
};

}  // namespace hypic::client
