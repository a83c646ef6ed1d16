#include "client/client.h"

#include <cstring>

namespace hypic::client {

using protocol::DecodeStatus;
using protocol::Frame;
using protocol::FrameHeader;
using protocol::kHeaderSize;
using protocol::Opcode;

namespace {

// Frames whose unread remainder exceeds this are read straight into their reply buffers.
constexpr uint64_t kDirectReadThreshold = 256 << 10;
constexpr size_t kReadChunk = 64 << 10;
// The most a large body's read takes before its bytes are hashed (well within L2).
constexpr size_t kHashChunk = 256 << 10;

Bytes Copy(ByteSpan s) { return Bytes(s.begin(), s.end()); }

Status ReplyStatus(const Reply& r) {
  if (r.header.status == 0) return Status::Ok();
  return Status(static_cast<StatusCode>(r.header.status),
                std::string(reinterpret_cast<const char*>(r.body.data()), r.body.size()));
}

// Message decode failures on replies mean the server sent something malformed.
template <typename T>
Result<T> AsCorruption(Result<T> r) {
  if (r.ok() || r.status().code() == StatusCode::kCorruption) return r;
  return Corruption("malformed reply from the server: " + r.status().message());
}

Result<Done> ParseDone(Reply&&) { return Done{}; }
Result<Bytes> ParseBody(Reply&& r) { return std::move(r.body); }
Result<std::string> ParseText(Reply&& r) {
  return std::string(reinterpret_cast<const char*>(r.body.data()), r.body.size());
}
Result<std::vector<protocol::Tier>> ParseHas(Reply&& r) {
  HYPIC_ASSIGN_OR_RETURN(auto m,
                         AsCorruption(protocol::Decode<protocol::HasReply>(ByteSpan(r.body))));
  return std::move(m.tiers);
}
Result<GetResult> ParseGet(Reply&& r) {
  GetResult g;
  if (!r.ext.empty()) {
    HYPIC_ASSIGN_OR_RETURN(auto info,
                           AsCorruption(protocol::Decode<protocol::GetInfo>(ByteSpan(r.ext))));
    g.tier = info.tier;
  }
  g.entry = std::move(r.body);
  return g;
}
template <typename T>
Result<T> ParseMessage(Reply&& r) {
  return AsCorruption(protocol::Decode<T>(ByteSpan(r.body)));
}
template <protocol::StateLayout kLayout>
Result<protocol::ComposeReply> ParseCompose(Reply&& r) {
  return AsCorruption(protocol::DecodeComposeReply(ByteSpan(r.body), kLayout));
}

}  // namespace

Result<std::vector<protocol::StreamTensor>> DecodeState(const protocol::ComposeReply& reply) {
  if (!reply.has_state) return std::vector<protocol::StreamTensor>();
  return AsCorruption(protocol::DecodeTensorStream(ByteSpan(reply.state)));
}

Status Client::CheckStateContract() const {
  if (hello_ && hello_->state_contract != protocol::kStateContractVersion) {
    return VersionMismatch("the server's state contract is version " +
                           std::to_string(hello_->state_contract) + "; this client knows " +
                           std::to_string(protocol::kStateContractVersion));
  }
  return Status::Ok();
}

Status Client::CheckComposeOptions(const protocol::ComposeRequest& request,
                                   const protocol::ComposeOptions& options) const {
  if (request.return_state) HYPIC_RETURN_IF_ERROR(CheckStateContract());
  if (options.state_layout == protocol::StateLayout::kStateFirst && hello_ &&
      (hello_->features & protocol::kFeatureStateFirst) == 0) {
    return Unsupported("the server does not announce STATE_FIRST: ask for the head-first layout");
  }
  return Status::Ok();
}

void Client::StartLayerParser(StateSink& sink) {
  sink.parser = std::make_unique<protocol::TensorStreamParser>(
      [&sink](protocol::OwnedStreamTensor&& t) -> Status {
        if (!sink.tensors.empty() && t.layer != sink.layer) {
          HYPIC_RETURN_IF_ERROR(DeliverLayer(sink));
        }
        sink.layer = t.layer;
        sink.tensors.push_back(std::move(t));
        return Status::Ok();
      });
}

Status Client::DeliverLayer(StateSink& sink) {
  if (sink.tensors.empty()) return Status::Ok();
  Status st = sink.on_layer(sink.layer, sink.tensors);
  sink.tensors.clear();
  return st;
}

void Client::FeedSink(StateSink& sink, ByteSpan bytes, bool last) {
  sink.fed = true;
  if (!sink.error.ok()) return;
  auto fail = [&](Status st) { sink.error = st; };
  if (sink.layout == protocol::StateLayout::kStateFirst) {
    // The stream, each layer delivered as soon as it is whole, then the head.
    if (!sink.parser) StartLayerParser(sink);
    if (!sink.parser->complete()) {
      size_t used = 0;
      Status st = sink.parser->FeedPrefix(bytes, &used);
      if (st.ok() && sink.parser->complete()) st = DeliverLayer(sink);
      if (!st.ok()) return fail(st);
      bytes = bytes.subspan(used);
    }
    sink.head.insert(sink.head.end(), bytes.begin(), bytes.end());
    if (!last) return;
    if (Status st = sink.parser->Finish(); !st.ok()) {
      return fail(
          Corruption("the state-first COMPOSE reply ended inside its state: " + st.message()));
    }
    auto head = protocol::Decode<protocol::ComposeReply>(ByteSpan(sink.head));
    if (!head.ok()) return fail(Corruption("malformed COMPOSE reply: " + head.status().message()));
    if (!head->has_state || !head->state.empty()) {
      fail(Corruption("the head of a state-first COMPOSE reply must end at has_state = 1"));
    }
    return;
  }
  if (!sink.head_done) {
    sink.head.insert(sink.head.end(), bytes.begin(), bytes.end());
    auto size = protocol::ComposeReplyHeadSize(ByteSpan(sink.head));
    if (!size.ok()) return fail(Corruption("malformed COMPOSE reply: " + size.status().message()));
    if (!size->has_value()) {
      if (last) fail(Corruption("the COMPOSE reply ended inside its head"));
      return;
    }
    sink.head_done = true;
    Bytes rest(sink.head.begin() + static_cast<ptrdiff_t>(**size), sink.head.end());
    sink.head.resize(**size);
    auto head = protocol::Decode<protocol::ComposeReply>(ByteSpan(sink.head));
    if (!head.ok()) return fail(Corruption("malformed COMPOSE reply: " + head.status().message()));
    if (!head->has_state) {
      if (!rest.empty()) fail(Corruption("COMPOSE reply: bytes after a head without state"));
      return;
    }
    StartLayerParser(sink);
    bytes = ByteSpan(rest);
    Status st = sink.parser->Feed(bytes);
    if (!st.ok()) return fail(st);
  } else if (sink.parser) {
    Status st = sink.parser->Feed(bytes);
    if (!st.ok()) return fail(st);
  } else if (!bytes.empty()) {
    return fail(Corruption("COMPOSE reply: bytes after a head without state"));
  }
  if (!last || !sink.parser) return;
  Status st = sink.parser->Finish();
  if (st.ok()) st = DeliverLayer(sink);
  if (!st.ok()) fail(st);
}

Client::Client(std::unique_ptr<Connection> conn, const ClientOptions& options)
    : conn_(std::move(conn)),
      options_(options),
      decoder_(
          protocol::Decoder::Role::kClient,
          protocol::DecodeLimits{protocol::kMaxExtLen, options.max_reply_frame, ~uint64_t{0}}) {}

Result<std::unique_ptr<Client>> Client::Connect(const ClientOptions& options) {
  HYPIC_ASSIGN_OR_RETURN(auto conn, Connection::Open(options.address, options.connect_timeout_ms));
  std::unique_ptr<Client> c(new Client(std::move(conn), options));
  if (options.hello) {
    HYPIC_RETURN_IF_ERROR(c->Hello(options.token, options.admin_token).status());
  }
  return c;
}

Status Client::Fail(Status s) {
  if (broken_.ok()) broken_ = s;
  return s;
}

Result<protocol::HelloReply> Client::Hello(const std::string& token,
                                           const std::string& admin_token) {
  protocol::HelloRequest req;
  req.features = protocol::kFeatureXxh3 | protocol::kFeatureChunked | protocol::kFeatureStateInline;
  req.client_name = options_.client_name;
  req.token = token;
  req.admin_token = admin_token;
  Bytes body = protocol::Encode(req);
  HYPIC_ASSIGN_OR_RETURN(uint64_t id, Send(Opcode::kHello, {}, {}, ByteSpan(body)));
  HYPIC_ASSIGN_OR_RETURN(Reply r, Wait(id));
  HYPIC_ASSIGN_OR_RETURN(auto hello,
                         AsCorruption(protocol::Decode<protocol::HelloReply>(ByteSpan(r.body))));
  // The state contract is checked when a state is asked for (CheckStateContract): a client
  // that never asks for one works with any.
  if (hello.version < protocol::kMinVersion || hello.version > protocol::kMaxVersion) {
    return Fail(VersionMismatch("the server chose version " + std::to_string(hello.version)));
  }
  version_ = static_cast<uint8_t>(hello.version);
  hello_ = hello;
  return hello;
}

Result<uint64_t> Client::Send(Opcode op, const Hash128& key, ByteSpan ext, ByteSpan body,
                              uint32_t deadline_ms) {
  if (!broken_.ok()) return broken_;
  // Respect the server's in-flight limit by collecting replies first: beyond it the server
  // stops reading, and a client that only writes would wait forever.
  uint32_t max_inflight = hello_ ? hello_->limits.max_inflight_requests : 0;
  while (max_inflight > 0 && outstanding_.size() >= max_inflight) {
    HYPIC_RETURN_IF_ERROR(ReadFrame());
  }
  FrameHeader h;
  h.version = version_;
  h.opcode = op;
  h.checksum_kind = options_.checksum;
  h.request_id = next_id_++;
  h.key = key;
  h.deadline_ms = deadline_ms;
  HYPIC_ASSIGN_OR_RETURN(auto head, protocol::MakeHeader(h, ext, body));
  iovec iov[3] = {{head.data(), head.size()},
                  {const_cast<std::byte*>(ext.data()), ext.size()},
                  {const_cast<std::byte*>(body.data()), body.size()}};
  outstanding_.insert(h.request_id);
  Status st = conn_->WriteAll(std::span<iovec>(iov), options_.io_timeout_ms,
                              [this] { return DrainReadable(); });
  if (!st.ok()) return Fail(st);
  return h.request_id;
}

Result<Reply> Client::Wait(uint64_t request_id) {
  for (;;) {
    auto it = done_.find(request_id);
    if (it != done_.end()) {
      Reply r = std::move(it->second);
      done_.erase(it);
      HYPIC_RETURN_IF_ERROR(ReplyStatus(r));
      return r;
    }
    if (!broken_.ok()) return broken_;
    if (outstanding_.count(request_id) == 0) {
      return Internal("request " + std::to_string(request_id) + " is not in flight");
    }
    HYPIC_RETURN_IF_ERROR(ReadFrame());
  }
}

Status Client::ReadIntoBuffer(int timeout_ms) {
  if (rpos_ == rbuf_.size()) {
    rbuf_.clear();
    rpos_ = 0;
  } else if (rpos_ > (1u << 20)) {
    rbuf_.erase(rbuf_.begin(), rbuf_.begin() + static_cast<ptrdiff_t>(rpos_));
    rpos_ = 0;
  }
  size_t old = rbuf_.size();
  rbuf_.resize(old + kReadChunk);
  auto n = conn_->ReadSome(std::span<std::byte>(rbuf_.data() + old, kReadChunk), timeout_ms);
  rbuf_.resize(old + (n.ok() ? *n : 0));
  if (!n.ok()) return Fail(n.status());
  return Status::Ok();
}

Status Client::DecodeBuffered(bool* filed_any, FrameHeader* pending_header, uint64_t* needed) {
  *filed_any = false;
  *needed = kHeaderSize;
  for (;;) {
    ByteSpan avail(rbuf_.data() + rpos_, rbuf_.size() - rpos_);
    if (avail.empty()) return Status::Ok();
    Frame f;
    size_t consumed = 0;
    DecodeStatus st = decoder_.Decode(avail, &consumed, &f);
    if (st == DecodeStatus::kNeedMore) {
      *needed = decoder_.needed();
      *pending_header = f.header;
      return Status::Ok();
    }
    if (st != DecodeStatus::kOk) {
      return Fail(Corruption("malformed frame from the server: " +
                             std::string(protocol::DecodeStatusName(st))));
    }
    Reply r{f.header, Copy(f.ext), Copy(f.body)};
    rpos_ += consumed;
    HYPIC_RETURN_IF_ERROR(FileFrame(std::move(r)));
    *filed_any = true;
  }
}

Status Client::ReadLargeFrame(const FrameHeader& header) {
  ByteSpan avail(rbuf_.data() + rpos_, rbuf_.size() - rpos_);
  Reply r;
  r.header = header;
  r.ext.resize(header.ext_len);
  r.body.resize(static_cast<size_t>(header.body_len));
  avail = avail.subspan(kHeaderSize);
  size_t from_buf = std::min(avail.size(), r.ext.size());
  if (from_buf > 0) std::memcpy(r.ext.data(), avail.data(), from_buf);
  size_t ext_done = from_buf;
  avail = avail.subspan(from_buf);
  size_t body_done = std::min(avail.size(), r.body.size());
  if (body_done > 0) std::memcpy(r.body.data(), avail.data(), body_done);
  rpos_ = rbuf_.size();  // everything buffered belonged to this frame
  Status st =
      conn_->ReadExact(std::span<std::byte>(r.ext).subspan(ext_done), options_.io_timeout_ms);
  if (!st.ok()) return Fail(st);
  // The checksum follows the bytes as they arrive, each read at most kHashChunk so what it
  // hashes is still in cache; verifying then costs nothing after the last byte.
  protocol::BodyHasher hasher(header.checksum_kind);
  hasher.Update(ByteSpan(r.ext));
  hasher.Update(ByteSpan(r.body).first(body_done));
  std::span<std::byte> rest = std::span<std::byte>(r.body).subspan(body_done);
  while (!rest.empty()) {
    auto n = conn_->ReadSome(rest.first(std::min(rest.size(), kHashChunk)), options_.io_timeout_ms);
    if (!n.ok()) return Fail(n.status());
    hasher.Update(rest.first(*n));
    rest = rest.subspan(*n);
  }
  if (hasher.Digest() != header.body_checksum) {
    return Fail(BadChecksum("reply body checksum mismatch"));
  }
  return FileFrame(std::move(r));
}

Status Client::ReadFrame() {
  for (;;) {
    if (!broken_.ok()) return broken_;
    bool filed = false;
    FrameHeader header;
    uint64_t needed = kHeaderSize;
    HYPIC_RETURN_IF_ERROR(DecodeBuffered(&filed, &header, &needed));
    if (filed) return Status::Ok();
    uint64_t have = rbuf_.size() - rpos_;
    if (needed > kHeaderSize && needed - have > kDirectReadThreshold) {
      return ReadLargeFrame(header);
    }
    HYPIC_RETURN_IF_ERROR(ReadIntoBuffer(options_.io_timeout_ms));
  }
}

Status Client::DrainReadable() {
  HYPIC_RETURN_IF_ERROR(ReadIntoBuffer(options_.io_timeout_ms));
  bool filed = false;
  FrameHeader header;
  uint64_t needed = 0;
  return DecodeBuffered(&filed, &header, &needed);
}

Status Client::FileFrame(Reply frame) {
  const FrameHeader& h = frame.header;
  if (h.opcode == Opcode::kGoAway) {
    Status why(
        static_cast<StatusCode>(h.status),
        "server closed the connection: " +
            std::string(reinterpret_cast<const char*>(frame.body.data()), frame.body.size()));
    if (why.ok()) why = ShuttingDown("server closed the connection");
    return Fail(why);
  }
  uint64_t id = h.request_id;
  if (outstanding_.count(id) == 0) {
    return Fail(Corruption("reply to request " + std::to_string(id) + ", which is not in flight"));
  }
  if (auto sink = sinks_.find(id); sink != sinks_.end()) {
    // A streamed state: each chunk goes to its parser as it arrives, nothing is assembled.
    if (h.status == 0) FeedSink(*sink->second, ByteSpan(frame.body), !h.has_more());
    if (h.has_more() && h.status == 0) return Status::Ok();
    if (h.status == 0) frame.body = std::move(sink->second->head);
    outstanding_.erase(id);
    done_[id] = std::move(frame);
    return Status::Ok();
  }
  auto part = partial_.find(id);
  if (h.has_more() && h.status == 0) {
    if (part == partial_.end()) {
      partial_.emplace(id, std::move(frame));
      return Status::Ok();
    }
    part->second.body.insert(part->second.body.end(), frame.body.begin(), frame.body.end());
    if (part->second.body.size() > options_.max_reply_message) {
      return Fail(TooLarge("chunked reply exceeds " + std::to_string(options_.max_reply_message)));
    }
    return Status::Ok();
  }
  if (part != partial_.end()) {
    if (h.status == 0) {
      Reply whole = std::move(part->second);
      whole.body.insert(whole.body.end(), frame.body.begin(), frame.body.end());
      whole.header.flags = h.flags;
      frame = std::move(whole);
    }
    partial_.erase(part);  // a failed stream drops what it had sent
  }
  outstanding_.erase(id);
  done_[id] = std::move(frame);
  return Status::Ok();
}

template <typename T>
Result<Pending<T>> Client::Submit(Opcode op, const Hash128& key, ByteSpan ext, ByteSpan body,
                                  typename Pending<T>::Parser parse, uint32_t deadline_ms) {
  HYPIC_ASSIGN_OR_RETURN(uint64_t id, Send(op, key, ext, body, deadline_ms));
  return Pending<T>(this, id, parse);
}

// ---- operations ----

Result<Pending<Bytes>> Client::SubmitPing(ByteSpan payload) {
  return Submit<Bytes>(Opcode::kPing, {}, {}, payload, &ParseBody);
}
Result<Bytes> Client::Ping(ByteSpan payload) {
  HYPIC_ASSIGN_OR_RETURN(auto p, SubmitPing(payload));
  return p.Wait();
}

Result<Pending<std::vector<protocol::Tier>>> Client::SubmitHas(std::span<const Hash128> keys) {
  Bytes body = protocol::Encode(protocol::HasRequest{{keys.begin(), keys.end()}});
  return Submit<std::vector<protocol::Tier>>(Opcode::kHas, {}, {}, ByteSpan(body), &ParseHas);
}
Result<std::vector<protocol::Tier>> Client::Has(std::span<const Hash128> keys) {
  HYPIC_ASSIGN_OR_RETURN(auto p, SubmitHas(keys));
  return p.Wait();
}

Result<Pending<GetResult>> Client::SubmitGet(const Hash128& key) {
  return Submit<GetResult>(Opcode::kGet, key, {}, {}, &ParseGet);
}
Result<GetResult> Client::Get(const Hash128& key) {
  HYPIC_ASSIGN_OR_RETURN(auto p, SubmitGet(key));
  return p.Wait();
}

Result<Pending<Done>> Client::SubmitPut(const Hash128& key, ByteSpan entry,
                                        const protocol::PutOptions& options) {
  Bytes ext;
  if (!(options == protocol::PutOptions{})) ext = protocol::Encode(options);
  return Submit<Done>(Opcode::kPut, key, ByteSpan(ext), entry, &ParseDone);
}
Status Client::Put(const Hash128& key, ByteSpan entry, const protocol::PutOptions& options) {
  HYPIC_ASSIGN_OR_RETURN(auto p, SubmitPut(key, entry, options));
  return p.Wait().status();
}

Result<Pending<Done>> Client::SubmitDel(const Hash128& key) {
  return Submit<Done>(Opcode::kDel, key, {}, {}, &ParseDone);
}
Status Client::Del(const Hash128& key) {
  HYPIC_ASSIGN_OR_RETURN(auto p, SubmitDel(key));
  return p.Wait().status();
}

Result<Pending<protocol::PrefillReply>> Client::SubmitPrefill(
    const protocol::PrefillRequest& request, uint32_t deadline_ms) {
  Bytes body = protocol::Encode(request);
  return Submit<protocol::PrefillReply>(Opcode::kPrefill, {}, {}, ByteSpan(body),
                                        &ParseMessage<protocol::PrefillReply>, deadline_ms);
}
Result<protocol::PrefillReply> Client::Prefill(const protocol::PrefillRequest& request,
                                               uint32_t deadline_ms) {
  HYPIC_ASSIGN_OR_RETURN(auto p, SubmitPrefill(request, deadline_ms));
  return p.Wait();
}

Result<Pending<protocol::ComposeReply>> Client::SubmitCompose(
    const protocol::ComposeRequest& request, uint32_t deadline_ms) {
  return SubmitCompose(request, protocol::ComposeOptions{}, deadline_ms);
}
Result<protocol::ComposeReply> Client::Compose(const protocol::ComposeRequest& request,
                                               uint32_t deadline_ms) {
  HYPIC_ASSIGN_OR_RETURN(auto p, SubmitCompose(request, deadline_ms));
  return p.Wait();
}

Result<Pending<protocol::ComposeReply>> Client::SubmitCompose(
    const protocol::ComposeRequest& request, const protocol::ComposeOptions& options,
    uint32_t deadline_ms) {
  HYPIC_RETURN_IF_ERROR(CheckComposeOptions(request, options));
  Bytes body = protocol::Encode(request);
  Bytes ext;
  if (!(options == protocol::ComposeOptions{})) ext = protocol::Encode(options);
  const bool state_first = options.state_layout == protocol::StateLayout::kStateFirst;
  return Submit<protocol::ComposeReply>(Opcode::kCompose, {}, ByteSpan(ext), ByteSpan(body),
                                        state_first
                                            ? &ParseCompose<protocol::StateLayout::kStateFirst>
                                            : &ParseCompose<protocol::StateLayout::kHeadFirst>,
                                        deadline_ms);
}

Result<protocol::ComposeReply> Client::Compose(const protocol::ComposeRequest& request,
                                               const protocol::ComposeOptions& options,
                                               uint32_t deadline_ms) {
  HYPIC_ASSIGN_OR_RETURN(auto p, SubmitCompose(request, options, deadline_ms));
  return p.Wait();
}

Result<protocol::ComposeReply> Client::ComposeStreaming(const protocol::ComposeRequest& request,
                                                        const protocol::ComposeOptions& options,
                                                        const LayerCallback& on_layer,
                                                        uint32_t deadline_ms) {
  HYPIC_RETURN_IF_ERROR(CheckComposeOptions(request, options));
  Bytes body = protocol::Encode(request);
  Bytes ext;
  if (!(options == protocol::ComposeOptions{})) ext = protocol::Encode(options);
  HYPIC_ASSIGN_OR_RETURN(uint64_t id,
                         Send(Opcode::kCompose, {}, ByteSpan(ext), ByteSpan(body), deadline_ms));
  auto sink = std::make_unique<StateSink>();
  sink->on_layer = on_layer;
  sink->layout = options.state_layout;
  StateSink* s = sink.get();
  sinks_[id] = std::move(sink);
  Result<Reply> r = Wait(id);
  // Send reads while a write blocks, so the reply may have been filed whole before the sink
  // existed: then it is parsed here, in one piece.
  if (r.ok() && !s->fed) {
    FeedSink(*s, ByteSpan(r->body), /*last=*/true);
    r->body = s->head;
  }
  Status sink_error = s->error;
  sinks_.erase(id);
  if (!r.ok()) return r.status();
  HYPIC_RETURN_IF_ERROR(sink_error);
  return AsCorruption(protocol::Decode<protocol::ComposeReply>(ByteSpan(r->body)));
}

Result<std::string> Client::Stats() {
  HYPIC_ASSIGN_OR_RETURN(auto p, Submit<std::string>(Opcode::kStats, {}, {}, {}, &ParseText));
  return p.Wait();
}

Result<std::string> Client::Config() {
  HYPIC_ASSIGN_OR_RETURN(auto p, Submit<std::string>(Opcode::kConfig, {}, {}, {}, &ParseText));
  return p.Wait();
}

Result<protocol::EvictReply> Client::Evict(const protocol::EvictRequest& request) {
  Bytes body = protocol::Encode(request);
  HYPIC_ASSIGN_OR_RETURN(auto p,
                         Submit<protocol::EvictReply>(Opcode::kEvict, {}, {}, ByteSpan(body),
                                                      &ParseMessage<protocol::EvictReply>));
  return p.Wait();
}

Status Client::Pin(const Hash128& key) {
  HYPIC_ASSIGN_OR_RETURN(auto p, Submit<Done>(Opcode::kPin, key, {}, {}, &ParseDone));
  return p.Wait().status();
}

Status Client::Unpin(const Hash128& key) {
  HYPIC_ASSIGN_OR_RETURN(auto p, Submit<Done>(Opcode::kUnpin, key, {}, {}, &ParseDone));
  return p.Wait().status();
}

Status Client::Flush() {
  HYPIC_ASSIGN_OR_RETURN(auto p, Submit<Done>(Opcode::kFlush, {}, {}, {}, &ParseDone));
  return p.Wait().status();
}

Status Client::Shutdown() {
  HYPIC_ASSIGN_OR_RETURN(auto p, Submit<Done>(Opcode::kShutdown, {}, {}, {}, &ParseDone));
  Status st = p.Wait().status();
  // The drain may close the connection (GOAWAY SHUTTING_DOWN) before the reply is written:
  // either way the daemon is doing what was asked.
  if (st.code() == StatusCode::kShuttingDown) return Status::Ok();
  return st;
}

Result<protocol::ListReply> Client::List(const protocol::ListRequest& request) {
  Bytes body = protocol::Encode(request);
  HYPIC_ASSIGN_OR_RETURN(auto p, Submit<protocol::ListReply>(Opcode::kList, {}, {}, ByteSpan(body),
                                                             &ParseMessage<protocol::ListReply>));
  return p.Wait();
}

Result<protocol::VerifyReply> Client::Verify(const Hash128& key) {
  HYPIC_ASSIGN_OR_RETURN(auto p,
                         Submit<protocol::VerifyReply>(Opcode::kVerify, key, {}, {},
                                                       &ParseMessage<protocol::VerifyReply>));
  return p.Wait();
}

}  // namespace hypic::client
