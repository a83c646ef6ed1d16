// FakeServer: a scripted, single-connection protocol peer for the client tests. It listens on
// a unix socket (or loopback TCP), decodes requests with protocol::ServerSession and answers
// through a test-provided handler, so tests control exactly what comes back: replies out of
// order, chunked streams, error statuses, GOAWAY, corrupt frames. Lives in tests/client only.
// The handler runs on the server thread; the public methods are for the test thread.
#pragma once

#include <atomic>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "protocol/session.h"

namespace hypic::client::fake {

class FakeServer {
 public:
  // Sends raw bytes to the client (from the handler).
  using Send = std::function<void(protocol::ByteSpan)>;
  // Called for every request after HELLO. `idle` is true when called with no frame because
  // no request arrived for a while (then `frame` is null) - used to release held replies.
  using Handler = std::function<void(const protocol::Frame* frame, const Send& send)>;

  FakeServer(bool tcp, protocol::HelloReply hello, Handler handler);
  ~FakeServer();

  std::string address() const { return address_; }

 private:
  void Serve();

  protocol::HelloReply hello_;
  Handler handler_;
  int listen_fd_ = -1;
  std::string dir_;
  std::string address_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

// Encodes a reply to `request` with `body`/`ext` and status OK (or `status`).
protocol::Bytes ReplyTo(const protocol::FrameHeader& request, protocol::ByteSpan body,
                        protocol::ByteSpan ext = {}, uint8_t flags = protocol::kFlagReply,
                        StatusCode status = StatusCode::kOk);

}  // namespace hypic::client::fake
