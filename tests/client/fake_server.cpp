#include "tests/client/fake_server.h"

#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>

namespace hypic::client::fake {

using protocol::Bytes;
using protocol::ByteSpan;

Bytes ReplyTo(const protocol::FrameHeader& request, ByteSpan body, ByteSpan ext, uint8_t flags,
              StatusCode status) {
  protocol::FrameHeader h = protocol::ReplyHeader(request, status);
  h.flags = flags;
  return protocol::EncodeFrame(h, ext, body).value();
}

FakeServer::FakeServer(bool tcp, protocol::HelloReply hello, Handler handler)
    : hello_(std::move(hello)), handler_(std::move(handler)) {
  if (tcp) {
    listen_fd_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    bind(listen_fd_, reinterpret_cast<sockaddr*>(&sa), sizeof(sa));
    socklen_t len = sizeof(sa);
    getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&sa), &len);
    address_ = "127.0.0.1:" + std::to_string(ntohs(sa.sin_port));
  } else {
    char tmpl[] = "/tmp/hypic-client-test-XXXXXX";
    dir_ = mkdtemp(tmpl);
    std::string path = dir_ + "/s.sock";
    listen_fd_ = socket(AF_UNIX, SOCK_STREAM, 0);
    sockaddr_un sa{};
    sa.sun_family = AF_UNIX;
    std::memcpy(sa.sun_path, path.data(), path.size());
    bind(listen_fd_, reinterpret_cast<sockaddr*>(&sa), sizeof(sa));
    address_ = "unix:" + path;
  }
  listen(listen_fd_, 4);
  thread_ = std::thread([this] { Serve(); });
}

FakeServer::~FakeServer() {
  stop_ = true;
  thread_.join();
  close(listen_fd_);
  if (!dir_.empty()) std::filesystem::remove_all(dir_);
}

void FakeServer::Serve() {
  pollfd lp{listen_fd_, POLLIN, 0};
  while (!stop_ && poll(&lp, 1, 20) == 0) {
  }
  if (stop_) return;
  int fd = accept(listen_fd_, nullptr, nullptr);
  if (fd < 0) return;
  protocol::AuthPolicy trusted;
  trusted.trusted_peer = true;
  protocol::ServerSession session(trusted, protocol::DecodeLimits{});
  Send send = [fd](ByteSpan b) {
    size_t off = 0;
    while (off < b.size()) {
      ssize_t n = ::send(fd, b.data() + off, b.size() - off, MSG_NOSIGNAL);
      if (n <= 0) return;
      off += static_cast<size_t>(n);
    }
  };
  Bytes buf;
  while (!stop_) {
    pollfd p{fd, POLLIN, 0};
    int r = poll(&p, 1, 20);
    if (r == 0) {
      if (session.phase() == protocol::ServerSession::Phase::kReady) handler_(nullptr, send);
      continue;
    }
    std::byte chunk[65536];
    ssize_t n = recv(fd, chunk, sizeof(chunk), 0);
    if (n <= 0) break;
    buf.insert(buf.end(), chunk, chunk + n);
    size_t pos = 0;
    for (;;) {
      protocol::Frame frame;
      size_t consumed = 0;
      auto st = session.Decode(ByteSpan(buf).subspan(pos), &consumed, &frame);
      if (st != protocol::DecodeStatus::kOk) break;
      pos += consumed;
      if (frame.header.opcode == protocol::Opcode::kHello) {
        auto req = protocol::Decode<protocol::HelloRequest>(frame.body);
        protocol::HelloReply reply = hello_;
        Status s = req.ok() ? session.OnHello(*req, &reply) : req.status();
        Bytes out = s.ok() ? ReplyTo(frame.header, ByteSpan(protocol::Encode(reply)))
                           : protocol::EncodeErrorReply(frame.header, s);
        send(ByteSpan(out));
        continue;
      }
      handler_(&frame, send);
    }
    buf.erase(buf.begin(), buf.begin() + static_cast<ptrdiff_t>(pos));
  }
  close(fd);
}

}  // namespace hypic::client::fake
