#include "server/session.h"

#include <boost/asio/bind_executor.hpp>
#include <boost/asio/buffer.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/write.hpp>
#include <condition_variable>
#include <cstring>
#include <mutex>

#include "core/logging.h"
#include "core/thread_annotations.h"
#include "server/server.h"

namespace hypic::server {

namespace asio = boost::asio;
using protocol::DecodeStatus;

namespace {

// Replies gathered into one write, so pipelined requests cost one syscall per batch.
constexpr size_t kMaxWriteBatch = 64;

protocol::Bytes TextBytes(std::string_view s) {
  protocol::Bytes out(s.size());
  if (!s.empty()) std::memcpy(out.data(), s.data(), s.size());
  return out;
}

}  // namespace

// What a StreamWriter and the chunks it queued share: how many were queued and written, and
// whether the connection went away.
struct StreamState {
  Mutex mu;
  std::condition_variable_any cv;
  uint64_t queued GUARDED_BY(mu) = 0;
  uint64_t written GUARDED_BY(mu) = 0;
  bool closed GUARDED_BY(mu) = false;
};

// One queued chunk's notice to its writer: written, or (destroyed unwritten: the session closed,
// or the strand's handler never ran) the connection is gone.
struct ChunkGuard {
  explicit ChunkGuard(std::shared_ptr<StreamState> s) : state(std::move(s)) {}
  ChunkGuard(const ChunkGuard&) = delete;
  ChunkGuard& operator=(const ChunkGuard&) = delete;
  ~ChunkGuard() {
    {
      MutexLock lock(&state->mu);
      if (written) {
        ++state->written;
      } else {
        state->closed = true;
      }
    }
    state->cv.notify_all();
  }
  std::shared_ptr<StreamState> state;
  bool written = false;
};

class Session::StreamWriter : public ChunkWriter {
 public:
  explicit StreamWriter(std::shared_ptr<Session> session)
      : session_(std::move(session)), state_(std::make_shared<StreamState>()) {}

  Status Queue(Reply chunk) override {
    {
      MutexLock lock(&state_->mu);
      if (state_->closed) return Cancelled("the connection closed during the streamed reply");
      ++state_->queued;
    }
    chunk.more = true;
    auto guard = std::make_shared<ChunkGuard>(state_);
    asio::post(session_->strand_,
               [self = session_, chunk = std::move(chunk), guard = std::move(guard)]() mutable {
                 if (self->closing_) return;  // dropped: the guard reports it
                 self->QueueReply(std::move(chunk), 0, /*counts_request=*/false, std::move(guard));
               });
    return Status::Ok();
  }

  Status Flush(std::chrono::milliseconds timeout) override {
    const auto until = Clock::now() + timeout;
    MutexLock lock(&state_->mu);
    // condition_variable_any unlocks and relocks mu itself, so the lock stays held here.
    while (!state_->closed && state_->written != state_->queued) {
      if (state_->cv.wait_until(state_->mu, until) == std::cv_status::timeout) break;
    }
    if (state_->closed) return Cancelled("the connection closed during the streamed reply");
    if (state_->written != state_->queued) {
      return DeadlineExceeded("the client did not read the streamed reply in time");
    }
    return Status::Ok();
  }

 private:
  std::shared_ptr<Session> session_;
  std::shared_ptr<StreamState> state_;
};

Session::Session(Server& server, Strand strand, Socket socket, uint64_t id, bool trusted,
                 std::string peer, std::string address)
    : server_(server),
      strand_(std::move(strand)),
      socket_(std::move(socket)),
      timer_(strand_),
      id_(id),
      peer_(std::move(peer)),
      address_(std::move(address)),
      proto_(server.tenants().Policy(trusted), server.handlers().ReadyLimits()) {
  accepted_ = Clock::now();
  last_progress_ = accepted_;
  last_write_progress_ = accepted_;
  server_.metrics().ConnectionOpened();
}

Session::~Session() { server_.metrics().ConnectionClosed(); }

void Session::Start() {
  preauth_counted_ = !address_.empty();  // Server::Admit counted it (before the strand runs)
  asio::post(strand_, [self = shared_from_this()] {
    HYPIC_LOG_DEBUG("session {}: open ({})", self->id_, self->peer_);
    self->recv_.resize(kRecvInitial);
    self->ArmTimer();
    self->MaybeRead();
  });
}

void Session::Deliver(Reply reply, uint64_t request_bytes, Clock::time_point received) {
  asio::post(strand_,
             [self = shared_from_this(), reply = std::move(reply), request_bytes,
              received]() mutable { self->OnReply(std::move(reply), request_bytes, received); });
}

void Session::Drain() {
  asio::post(strand_, [self = shared_from_this()] {
    self->draining_ = true;
    self->MaybeFinishDrain();
  });
}

void Session::Abort() {
  asio::post(strand_, [self = shared_from_this()] { self->CloseNow(); });
}

void Session::Refuse(StatusCode code, std::string why) {
  asio::post(strand_, [self = shared_from_this(), code, why = std::move(why)] {
    self->recv_.resize(kRecvInitial);
    self->CloseAfterWrites(code, why);
  });
}

bool Session::CanDispatch() const {
  const auto& c = server_.config();
  size_t inflight = pending_handlers_ + out_.size();
  return !closing_ && inflight < c.max_inflight_requests &&
         (inflight_bytes_ == 0 || inflight_bytes_ < c.max_inflight_bytes);
}

void Session::MaybeRead() {
  if (reading_ || closed_) return;
  if (closing_) {
    if (!fin_sent_) return;
    reading_ = true;
    socket_.async_read_some(
        asio::buffer(recv_),
        asio::bind_executor(
            strand_, [self = shared_from_this()](const boost::system::error_code& ec, size_t) {
              self->reading_ = false;
              if (ec) {
                self->CloseNow();
              } else {
                self->MaybeRead();
              }
            }));
    return;
  }
  if (large_) {
    // The body grows here, as its bytes arrive; the budget may refuse the growth.
    auto room = large_->body.Room(kHashChunk);
    if (!room.ok()) {
      RefuseLargeFrame(room.status());
    } else {
      large_->room = *room;
    }
  }
  // A large body keeps reading: its bytes are accounted for by the pending budget.
  if (!large_ && !CanDispatch()) return;
  reading_ = true;
  asio::mutable_buffer target;
  if (large_) {
    target = asio::buffer(large_->room.data(), large_->room.size());
  } else {
    if (recv_begin_ == recv_end_) recv_begin_ = recv_end_ = 0;
    if (recv_end_ == recv_.size()) {
      // Compact first; grow only when the pending frame itself needs it.
      std::memmove(recv_.data(), recv_.data() + recv_begin_, recv_end_ - recv_begin_);
      recv_end_ -= recv_begin_;
      recv_begin_ = 0;
      if (recv_end_ == recv_.size()) recv_.resize(std::min(recv_.size() * 2, kSmallFrameMax));
    }
    target = asio::buffer(recv_.data() + recv_end_, recv_.size() - recv_end_);
  }
  socket_.async_read_some(
      target,
      asio::bind_executor(strand_, [self = shared_from_this()](const boost::system::error_code& ec,
                                                               size_t n) { self->OnRead(ec, n); }));
}

void Session::OnRead(const boost::system::error_code& ec, size_t n) {
  reading_ = false;
  if (closed_) return;
  if (closing_) {
    // Bytes that arrived before the close decision are not answered.
    large_.reset();
    if (ec) {
      CloseNow();
    } else {
      MaybeRead();
    }
    return;
  }
  if (ec) {
    // EOF or reset: the peer is gone, so nothing more can be written either.
    if (ec != asio::error::eof) HYPIC_LOG_DEBUG("session {}: read: {}", id_, ec.message());
    CloseNow();
    return;
  }
  server_.metrics().AddNetworkBytes(n, 0);
  last_progress_ = Clock::now();
  if (large_) {
    large_->hasher.Update(large_->room.first(n));
    large_->body.Commit(n);
    if (large_->body.complete()) FinishLargeFrame();
  } else {
    recv_end_ += n;
    ProcessBuffer();
  }
  ArmTimer();
  MaybeRead();
}

void Session::ProcessBuffer() {
  while (!closing_ && !large_ && CanDispatch()) {
    if (discard_left_ > 0) {
      size_t drop = std::min<uint64_t>(recv_end_ - recv_begin_, discard_left_);
      recv_begin_ += drop;
      discard_left_ -= drop;
      if (discard_left_ > 0) return;
      frame_started_.reset();  // the refused frame is behind us
      header_done_.reset();
    }
    size_t avail = recv_end_ - recv_begin_;
    if (avail == 0) {
      frame_started_.reset();
      header_done_.reset();
      return;
    }
    if (!frame_started_) frame_started_ = Clock::now();
    protocol::ByteSpan bytes(recv_.data() + recv_begin_, avail);
    protocol::Frame frame;
    size_t consumed = 0;
    DecodeStatus st = proto_.Decode(bytes, &consumed, &frame);
    if (st == DecodeStatus::kNeedMore) {
      uint64_t needed = proto_.needed();
      if (needed <= protocol::kHeaderSize) return;  // header incomplete
      if (!header_done_) {
        header_done_ = Clock::now();
        frame_body_len_ = frame.header.body_len;
      }
      // A small frame waits in the receive buffer, which MaybeRead grows once its bytes fill
      // it: never from the declared length.
      if (needed <= kSmallFrameMax) return;
      // A large frame of an op this session may not run (a PUT without `write`) is answered
      // now, from its header, and its ext and body are discarded as they come: they are never
      // buffered, nor counted against the pending budget. (Before HELLO the decoder's limits
      // admit no large frame.)
      if (proto_.phase() == protocol::ServerSession::Phase::kReady) {
        if (Status admit = proto_.Admit(frame.header); !admit.ok()) {
          const uint64_t rest = uint64_t{frame.header.ext_len} + frame.header.body_len;
          const uint64_t have = std::min<uint64_t>(avail - protocol::kHeaderSize, rest);
          recv_begin_ += protocol::kHeaderSize + have;
          RefuseBody(frame.header, admit, rest - have);
          continue;
        }
      }
      // A large frame: wait for its ext, then read the body into its own buffer.
      size_t head = protocol::kHeaderSize + frame.header.ext_len;
      if (avail < head) return;
      LargeFrame lf{
          .header = frame.header,
          .ext = protocol::Bytes(bytes.begin() + protocol::kHeaderSize, bytes.begin() + head),
          .body = BodyBuffer(server_.pending_budget(), frame.header.body_len),
          .room = {},
          .hasher = protocol::BodyHasher(frame.header.checksum_kind)};
      auto first = bytes.subspan(head, std::min<uint64_t>(avail - head, frame.header.body_len));
      recv_begin_ += head + first.size();
      lf.hasher.Update(lf.ext);
      lf.hasher.Update(first);
      Status appended = lf.body.Append(first);
      if (!appended.ok()) {
        RefuseBody(lf.header, appended, frame.header.body_len - first.size());
        continue;
      }
      large_ = std::move(lf);
      if (large_->body.complete()) FinishLargeFrame();
      continue;
    }
    if (st != DecodeStatus::kOk && st != DecodeStatus::kBadBodyChecksum) {
      RejectFrame(st, frame);
      return;
    }
    recv_begin_ += consumed;
    frame_started_.reset();
    header_done_.reset();
    if (st == DecodeStatus::kBadBodyChecksum) {
      RejectFrame(st, frame);  // the stream is still in sync: answer and go on
      continue;
    }
    Request req;
    req.header = frame.header;
    req.ext.assign(frame.ext.begin(), frame.ext.end());
    if (!frame.body.empty()) {
      auto body = HostBuffer::CopyOf(frame.body);
      if (!body.ok()) {
        CloseAfterWrites(StatusCode::kNoSpace, "cannot allocate the request body");
        return;
      }
      req.body = std::make_shared<const HostBuffer>(std::move(body).value());
    }
    inflight_bytes_ += req.WireSize();
    Dispatch(std::move(req));
  }
}

void Session::FinishLargeFrame() {
  LargeFrame lf = std::move(*large_);
  large_.reset();
  frame_started_.reset();
  header_done_.reset();
  if (lf.hasher.Digest() != lf.header.body_checksum) {
    protocol::Frame frame;
    frame.header = lf.header;
    RejectFrame(DecodeStatus::kBadBodyChecksum, frame);
    return;
  }
  Request req;
  req.header = lf.header;
  req.ext = std::move(lf.ext);
  req.body = lf.body.Take();  // from the pending budget to this connection's in-flight bytes
  inflight_bytes_ += req.WireSize();
  Dispatch(std::move(req));
  ProcessBuffer();  // frames that arrived behind the body
}

void Session::RefuseBody(const protocol::FrameHeader& header, const Status& why, uint64_t left) {
  if (why.code() == StatusCode::kBusy) server_.metrics().PendingRequestRefused();
  HYPIC_LOG_DEBUG("session {} ({}): body of request {} ({} bytes) refused: {}", id_, peer_,
                  header.request_id, header.body_len, why.ToString());
  Request req;
  req.header = header;
  QueueReply(Reply::Error(req, why), 0, /*counts_request=*/false);
  discard_left_ = left;
  if (discard_left_ == 0) {
    frame_started_.reset();
    header_done_.reset();
  }
}

void Session::RefuseLargeFrame(const Status& why) {
  LargeFrame lf = std::move(*large_);
  large_.reset();  // its bytes go back to the budget now
  RefuseBody(lf.header, why, lf.body.length() - lf.body.received());
}

void Session::EndPreAuth() {
  if (!preauth_counted_) return;
  preauth_counted_ = false;
  server_.EndPreAuth(address_);
}

void Session::Dispatch(Request req) {
  const ServerConfig& c = server_.config();
  req.received = Clock::now();
  uint32_t budget_ms = c.request_timeout_ms;
  if (req.header.deadline_ms != 0) budget_ms = std::min(budget_ms, req.header.deadline_ms);
  req.deadline = req.received + std::chrono::milliseconds(budget_ms);
  req.admin = proto_.admin();
  req.admin_daemon_wide = proto_.admin_daemon_wide();
  req.tenant = server_.tenants().Get(proto_.tenant());
  ++pending_handlers_;
  uint64_t bytes = req.WireSize();
  Clock::time_point received = req.received;

  Status admit = proto_.Admit(req.header);
  if (!admit.ok()) {
    bool fatal = proto_.phase() != protocol::ServerSession::Phase::kReady;
    OnReply(Reply::Error(req, admit), bytes, received);
    if (fatal) CloseAfterWrites(admit.code(), admit.message());
    return;
  }
  if (draining_) {
    OnReply(Reply::Error(req, ShuttingDown("the daemon is shutting down")), bytes, received);
    return;
  }
  if (req.header.has_more()) {
    // Only replies stream (HELLO's max_message_bytes bounds them); every request fits a frame.
    OnReply(Reply::Error(req, BadRequest("chunked requests are not accepted; send the message "
                                         "in one frame (at most max_frame_body)")),
            bytes, received);
    return;
  }
  if (req.header.opcode == protocol::Opcode::kHello) {
    HandleHello(std::move(req));
    return;
  }
  if ((proto_.client_features() & protocol::kFeatureChunked) != 0) {
    req.chunks = std::make_shared<StreamWriter>(shared_from_this());
  }
  server_.handlers().Handle(std::move(req),
                            [self = shared_from_this(), bytes, received](Reply reply) {
                              // Inline handlers answer on this strand: no extra post.
                              if (self->strand_.running_in_this_thread()) {
                                self->OnReply(std::move(reply), bytes, received);
                              } else {
                                self->Deliver(std::move(reply), bytes, received);
                              }
                            });
}

void Session::HandleHello(Request req) {
  uint64_t bytes = req.WireSize();
  auto hello = protocol::Decode<protocol::HelloRequest>(req.Body());
  Status st = hello.status();
  protocol::HelloReply info = server_.handlers().HelloInfo();
  if (st.ok()) st = proto_.OnHello(*hello, &info);
  if (!st.ok()) {
    HYPIC_LOG_INFO("session {} ({}): HELLO refused: {}", id_, peer_, st.ToString());
    OnReply(Reply::Error(req, st), bytes, req.received);
    CloseAfterWrites(st.code(), st.message());
    return;
  }
  EndPreAuth();
  [[maybe_unused]] const Tenant* tenant = server_.tenants().Get(proto_.tenant());
  HYPIC_LOG_DEBUG("session {}: HELLO from '{}' (tenant {}, admin={})", id_, hello->client_name,
                  tenant != nullptr ? tenant->config.name : "none", proto_.admin());
  OnReply(Reply::Ok(req, protocol::Encode(info)), bytes, req.received);
}

void Session::OnReply(Reply reply, uint64_t request_bytes, Clock::time_point received) {
  --pending_handlers_;
  server_.metrics().ObserveRequest(reply.opcode, reply.status,
                                   std::chrono::duration<double>(Clock::now() - received).count());
  if (closed_) return;
  QueueReply(std::move(reply), request_bytes, /*counts_request=*/true);
  MaybeFinishDrain();
}

void Session::QueueReply(Reply reply, uint64_t request_bytes, bool counts_request,
                         std::shared_ptr<ChunkGuard> chunk) {
  Outgoing o;
  o.chunk = std::move(chunk);
  protocol::FrameHeader h;
  h.opcode = reply.opcode;
  h.flags = protocol::kFlagReply | (reply.more ? protocol::kFlagMore : 0);
  h.checksum_kind = reply.checksum_kind;
  h.request_id = reply.request_id;
  h.key = reply.key;
  h.status = static_cast<uint16_t>(reply.status);
  Result<std::array<std::byte, protocol::kHeaderSize>> header = Internal("unset");
  if (reply.body_checksum && reply.ext.size() <= protocol::kMaxExtLen) {
    h.ext_len = static_cast<uint16_t>(reply.ext.size());
    h.body_len = reply.Body().size();
    h.body_checksum = *reply.body_checksum;
    std::array<std::byte, protocol::kHeaderSize> bytes;
    protocol::EncodeHeader(h, bytes.data());
    header = bytes;
  } else {
    header = protocol::MakeHeader(h, reply.ext, reply.Body());
  }
  if (!header.ok()) {
    // Only an oversized ext can fail, which is a handler bug: answer INTERNAL instead.
    HYPIC_LOG_ERROR("session {}: cannot frame reply: {}", id_, header.status().ToString());
    reply.ext.clear();
    reply.view_owner.reset();
    reply.status = StatusCode::kInternal;
    reply.body = TextBytes("internal error: reply could not be framed");
    h.status = static_cast<uint16_t>(reply.status);
    header = protocol::MakeHeader(h, reply.ext, reply.Body());
  }
  o.header = header.value();
  o.accounted = reply.WireSize() + request_bytes;
  o.counts_request = counts_request;
  inflight_bytes_ += reply.WireSize();
  o.reply = std::move(reply);
  out_.push_back(std::move(o));
  DoWrite();
}

void Session::DoWrite() {
  if (writing_ || closed_ || out_.empty()) return;
  std::vector<asio::const_buffer> buffers;
  size_t count = std::min(out_.size(), kMaxWriteBatch);
  buffers.reserve(count * 3);
  for (size_t i = 0; i < count; ++i) {
    const Outgoing& o = out_[i];
    buffers.emplace_back(o.header.data(), o.header.size());
    if (!o.reply.ext.empty()) buffers.emplace_back(o.reply.ext.data(), o.reply.ext.size());
    auto body = o.reply.Body();
    if (!body.empty()) buffers.emplace_back(body.data(), body.size());
  }
  writing_ = true;
  last_write_progress_ = Clock::now();
  ArmTimer();
  size_t total = asio::buffer_size(buffers);
  // Asio's transfer_all() caps each writev at 64 KiB; a MiB-sized entry would then cost 16+
  // syscalls. Ask for everything that is left in each step instead.
  auto all_left = [total](const boost::system::error_code& ec, size_t done) -> size_t {
    return ec ? 0 : total - done;
  };
  asio::async_write(socket_, buffers, all_left,
                    asio::bind_executor(strand_, [self = shared_from_this(), count](
                                                     const boost::system::error_code& ec,
                                                     size_t n) { self->OnWrite(ec, n, count); }));
}

void Session::OnWrite(const boost::system::error_code& ec, size_t n, size_t count) {
  writing_ = false;
  if (closed_) return;
  if (ec) {
    HYPIC_LOG_DEBUG("session {}: write: {}", id_, ec.message());
    CloseNow();
    return;
  }
  server_.metrics().AddNetworkBytes(0, n);
  last_progress_ = Clock::now();
  last_write_progress_ = last_progress_;
  for (size_t i = 0; i < count; ++i) {
    inflight_bytes_ -= out_.front().accounted;
    if (out_.front().chunk) out_.front().chunk->written = true;
    out_.pop_front();
  }
  if (out_.empty() && closing_) {
    // Send FIN, then read and discard until the peer closes (or kCloseGrace passes): closing
    // with unread input would send RST, which can destroy the GOAWAY before the peer reads it.
    boost::system::error_code ignored;
    socket_.shutdown(Socket::shutdown_send, ignored);
    fin_sent_ = true;
    MaybeRead();
    return;
  }
  DoWrite();
  ProcessBuffer();  // frames held back by the in-flight limits
  ArmTimer();
  MaybeRead();
}

void Session::RejectFrame(DecodeStatus st, const protocol::Frame& frame) {
  server_.metrics().FrameRejected(protocol::DecodeStatusName(st));
  Status status(protocol::DecodeStatusCode(st), std::string(protocol::DecodeStatusName(st)));
  HYPIC_LOG_DEBUG("session {} ({}): rejected frame: {}", id_, peer_, status.ToString());
  // Echo the request_id when the header was checked far enough for the reply to be a valid
  // frame (a known opcode that is not GOAWAY, a known checksum kind); else only the GOAWAY.
  const protocol::FrameHeader& fh = frame.header;
  auto op = static_cast<uint8_t>(fh.opcode);
  if (protocol::HeaderTrusted(st) && protocol::IsKnownOpcode(op) &&
      fh.opcode != protocol::Opcode::kGoAway) {
    Request req;
    req.header = fh;
    if (static_cast<uint8_t>(fh.checksum_kind) == 0 ||
        static_cast<uint8_t>(fh.checksum_kind) > protocol::kMaxChecksumKind) {
      req.header.checksum_kind = protocol::ChecksumKind::kCrc32;
    }
    QueueReply(Reply::Error(req, status), 0, /*counts_request=*/false);
  }
  if (st != DecodeStatus::kBadBodyChecksum) CloseAfterWrites(status.code(), status.message());
}

void Session::CloseAfterWrites(StatusCode code, const std::string& why) {
  if (closing_ || closed_) return;
  Reply goaway;
  goaway.opcode = protocol::Opcode::kGoAway;
  goaway.status = code;
  goaway.checksum_kind = protocol::ChecksumKind::kCrc32;  // every client accepts CRC-32
  goaway.body = TextBytes(std::string_view(why).substr(0, protocol::kMaxErrorMessage));
  QueueReply(std::move(goaway), 0, /*counts_request=*/false);
  closing_ = true;
  // Nothing more is read into a large body: its bytes go back to the budget now, or when the
  // read in flight into it completes (OnRead).
  if (!reading_) large_.reset();
  discard_left_ = 0;
  EndPreAuth();  // a closing connection will not authenticate: its slot is free for another
  close_deadline_ = Clock::now() + kCloseGrace;
  ArmTimer();
}

void Session::CloseNow() {
  if (closed_) return;
  closed_ = true;
  closing_ = true;
  boost::system::error_code ignored;
  socket_.close(ignored);
  timer_.cancel();
  out_.clear();
  large_.reset();
  EndPreAuth();
  HYPIC_LOG_DEBUG("session {}: closed", id_);
  server_.Unregister(id_);
}

void Session::MaybeFinishDrain() {
  if (draining_ && pending_handlers_ == 0 && !closing_) {
    CloseAfterWrites(StatusCode::kShuttingDown, "the daemon is shutting down");
  }
}

Clock::time_point Session::NextDeadline() const {
  const ServerConfig& c = server_.config();
  using std::chrono::milliseconds;
  // Once closing, only the close grace matters (the other deadlines have done their job).
  if (close_deadline_) return *close_deadline_;
  Clock::time_point d = Clock::time_point::max();
  if (proto_.phase() != protocol::ServerSession::Phase::kReady) {
    d = std::min(d, accepted_ + milliseconds(c.hello_timeout_ms));
  }
  if (header_done_) {
    // A body may take its length at min_body_rate on top of the header budget.
    uint64_t body_ms = frame_body_len_ * 1000 / c.min_body_rate;
    d = std::min(d, *header_done_ + milliseconds(c.header_timeout_ms) + milliseconds(body_ms));
  } else if (frame_started_) {
    d = std::min(d, *frame_started_ + milliseconds(c.header_timeout_ms));
  } else if (pending_handlers_ == 0) {
    d = std::min(d, last_progress_ + milliseconds(c.idle_timeout_ms));
  }
  if (writing_) {
    // A reply the client does not read (a stalled stream) holds its buffers: bounded too.
    d = std::min(d, last_write_progress_ + milliseconds(c.idle_timeout_ms));
  }
  return d;
}

void Session::ArmTimer() {
  if (closed_) return;
  Clock::time_point d = NextDeadline();
  if (d >= armed_) return;  // the pending wait fires earlier and re-checks
  armed_ = d;
  timer_.expires_at(d);
  timer_.async_wait(asio::bind_executor(
      strand_,
      [self = shared_from_this()](const boost::system::error_code& ec) { self->OnTimer(ec); }));
}

void Session::OnTimer(const boost::system::error_code& ec) {
  if (ec == asio::error::operation_aborted || closed_) return;
  armed_ = Clock::time_point::max();
  Clock::time_point now = Clock::now();
  if (close_deadline_ && now >= *close_deadline_) {
    CloseNow();  // the peer did not take the final replies in time
    return;
  }
  Clock::time_point d = NextDeadline();
  if (now < d) {
    ArmTimer();
    return;
  }
  const bool write_stalled =
      writing_ &&
      now >= last_write_progress_ + std::chrono::milliseconds(server_.config().idle_timeout_ms);
  std::string which = proto_.phase() != protocol::ServerSession::Phase::kReady ? "HELLO"
                      : write_stalled                                          ? "write"
                      : header_done_                                           ? "body"
                      : frame_started_                                         ? "header"
                                                                               : "idle";
  HYPIC_LOG_INFO("session {} ({}): {} deadline passed, closing", id_, peer_, which);
  server_.metrics().ConnectionDropped("deadline_" + which);
  CloseAfterWrites(StatusCode::kDeadlineExceeded, which + " deadline passed");
}

}  // namespace hypic::server
