// Session: one client connection (TCP or unix socket). Everything a Session does runs on its
// own strand, so its state needs no lock; handlers may finish on other threads and hand their
// Reply back through Deliver, which posts onto the strand.
//
// Reading: frames are decoded incrementally (protocol::ServerSession, which also owns the HELLO
// and admission rules: tokens, admin grant, negotiated version). Frames up to
// kSmallFrameMax are decoded in the receive buffer, which grows (to kSmallFrameMax at most)
// only when a frame's bytes fill it. A larger body is read straight into its own BodyBuffer,
// which grows with the bytes received, never from the declared length, and reserves what it
// holds from the daemon-wide ByteBudget (max_pending_request_bytes). A body the budget
// cannot cover is answered BUSY at once, its bytes so far are freed, and the rest of it is read
// and discarded, so the stream stays in sync and the connection goes on. A large frame that
// ServerSession::Admit refuses (an op the tenant may not run, e.g. PUT without `write`) is
// answered as soon as its header is in, and its body is discarded the same way, never
// buffered: a client without `write` cannot make the daemon hold a 256 MiB body. Before HELLO
// succeeds only HELLO and PING with tiny bodies are accepted, and a TCP connection counts
// towards its address's max_preauth_connections_per_peer (Server).
//
// Backpressure: the socket is not read while the connection holds max_inflight_requests
// requests (unanswered or with an unwritten reply) or max_inflight_bytes of request and reply
// bytes, so a client that pipelines and never reads stops being read (RELIABILITY row 6).
//
// Deadlines, on one timer: HELLO (accept -> HELLO done), header (first byte of a frame ->
// header complete), body (header + body_len / min_body_rate), idle (nothing pending and no
// progress either way). A deadline closes the connection with a GOAWAY frame.
//
// Streaming: to a client that announced CHUNKED, each request carries a ChunkWriter through
// which a handler queues the chunks of a streamed reply (frames with MORE) onto this strand and
// waits until they are written. A client that stops reading stalls the write: the write
// deadline (idle_timeout_ms without write progress) closes the connection, which drops the
// queued chunks and wakes the handler with kCancelled, so it frees its buffers.
//
// Closing: a bad frame whose header can be trusted gets an error reply carrying its
// request_id; otherwise a GOAWAY frame with the status. Either way the socket is closed after
// the pending replies are written (at most kCloseGrace later). Drain (SIGTERM) lets pending
// requests finish, answers new ones SHUTTING_DOWN, and closes once nothing is pending.
#pragma once

#include <boost/asio/generic/stream_protocol.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "core/host_buffer.h"
#include "protocol/session.h"
#include "server/body_buffer.h"
#include "server/request.h"

namespace hypic::server {

class Server;
struct ChunkGuard;  // session.cpp

class Session : public std::enable_shared_from_this<Session> {
 public:
  using Socket = boost::asio::generic::stream_protocol::socket;
  using Strand = boost::asio::strand<boost::asio::io_context::executor_type>;

  // Frames up to this size are decoded in the receive buffer; larger bodies get their own.
  static constexpr size_t kSmallFrameMax = 256 << 10;
  static constexpr size_t kRecvInitial = 16 << 10;
  static constexpr std::chrono::milliseconds kCloseGrace{1000};

  // `trusted`: a unix-socket peer running as the daemon's uid or root, which gets the admin
  // grant when no admin token is configured.
  // `address`: the TCP peer's address, whose pre-auth count (Server) this session holds from
  // Start until HELLO succeeds or it closes; "" for a unix-socket peer (not counted).
  Session(Server& server, Strand strand, Socket socket, uint64_t id, bool trusted, std::string peer,
          std::string address);
  ~Session();

  class StreamWriter;  // the ChunkWriter of this session's requests (session.cpp)

  void Start();
  // Thread-safe: queues a handler's reply for this connection.
  void Deliver(Reply reply, uint64_t request_bytes, Clock::time_point received);
  // Thread-safe: finish pending requests, then close with GOAWAY(SHUTTING_DOWN).
  void Drain();
  // Thread-safe: close the socket now.
  void Abort();
  // Thread-safe: answer nothing, send GOAWAY(code) and close (a refused connection).
  void Refuse(StatusCode code, std::string why);

  uint64_t id() const { return id_; }

 private:
  struct Outgoing {
    // A streamed chunk: told when it is written; dropping it unwritten tells its writer that
    // the connection is gone. Declared before `reply` so that it is destroyed after it: a
    // writer woken by the guard finds the chunk's memory (view_owner) released already.
    std::shared_ptr<ChunkGuard> chunk;
    std::array<std::byte, protocol::kHeaderSize> header;
    Reply reply;
    uint64_t accounted = 0;  // bytes released from inflight_bytes_ once written
    bool counts_request = false;
  };
  // A frame larger than kSmallFrameMax whose body is being read into its own buffer, at most
  // kHashChunk per read, and checksummed piece by piece as it arrives (while in cache).
  struct LargeFrame {
    protocol::FrameHeader header;
    protocol::Bytes ext;
    BodyBuffer body;
    std::span<std::byte> room;  // the target of the read in flight
    protocol::BodyHasher hasher{protocol::ChecksumKind::kXxh3_64};
  };
  static constexpr size_t kHashChunk = 256 << 10;

  void MaybeRead();
  void OnRead(const boost::system::error_code& ec, size_t n);
  void ProcessBuffer();
  bool CanDispatch() const;
  void FinishLargeFrame();
  // Answers the large frame `header` with `why` (BUSY: the pending budget is spent) and
  // discards the `left` bytes of its body that are still to come.
  void RefuseBody(const protocol::FrameHeader& header, const Status& why, uint64_t left);
  void RefuseLargeFrame(const Status& why);
  void EndPreAuth();
  void Dispatch(Request req);
  void HandleHello(Request req);
  void QueueReply(Reply reply, uint64_t request_bytes, bool counts_request,
                  std::shared_ptr<ChunkGuard> chunk = nullptr);
  void OnReply(Reply reply, uint64_t request_bytes, Clock::time_point received);
  void DoWrite();
  void OnWrite(const boost::system::error_code& ec, size_t n, size_t count);
  void RejectFrame(protocol::DecodeStatus st, const protocol::Frame& frame);
  void CloseAfterWrites(StatusCode code, const std::string& why);
  void CloseNow();
  void MaybeFinishDrain();
  Clock::time_point NextDeadline() const;
  void ArmTimer();
  void OnTimer(const boost::system::error_code& ec);

  Server& server_;
  Strand strand_;
  Socket socket_;
  boost::asio::steady_timer timer_;
  const uint64_t id_;
  const std::string peer_;
  const std::string address_;
  bool preauth_counted_ = false;   // holds one of address_'s pre-auth slots (Server)
  protocol::ServerSession proto_;  // decoder, HELLO and admission state

  std::vector<std::byte> recv_;
  size_t recv_begin_ = 0;
  size_t recv_end_ = 0;
  std::optional<LargeFrame> large_;
  uint64_t discard_left_ = 0;  // bytes of a refused body still to be read and dropped

  bool reading_ = false;
  bool writing_ = false;
  bool closing_ = false;   // no more reads; close once the write queue is empty
  bool fin_sent_ = false;  // closing: our side is shut down, discarding input until EOF
  bool closed_ = false;
  bool draining_ = false;

  uint32_t pending_handlers_ = 0;  // dispatched, reply not yet produced
  uint64_t inflight_bytes_ = 0;
  std::deque<Outgoing> out_;

  Clock::time_point accepted_;
  Clock::time_point last_progress_;
  Clock::time_point last_write_progress_;  // a write started or completed
  std::optional<Clock::time_point> frame_started_;
  std::optional<Clock::time_point> header_done_;
  uint64_t frame_body_len_ = 0;
  std::optional<Clock::time_point> close_deadline_;
  Clock::time_point armed_ = Clock::time_point::max();
};

}  // namespace hypic::server
