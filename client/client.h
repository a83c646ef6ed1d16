// hypic::client::Client: the C++ client of hypicd (protocol/README.md). One Client is one
// connection, TCP or unix socket, with HELLO done at Connect.
//
// Every operation comes in two forms:
//   - blocking: `Get(key)` sends the request and waits for its reply;
//   - pipelined: `SubmitGet(key)` sends and returns a Pending<T> at once; many requests can be
//     in flight, and `pending.Wait()` reads replies (keeping the others, which may arrive in
//     any order) until its own arrives. Replies are matched by request_id.
// Submitting never deadlocks against a server that applies backpressure: while a write is
// blocked the client reads and stores replies, and it keeps at most the server's
// max_inflight_requests outstanding (waiting for replies before sending more).
//
// The composed state (COMPOSE with return_state; its meaning is docs/state-format.md) comes
// either whole, in ComposeReply::state (DecodeState gives its tensors), or streamed: with
// ComposeStreaming each layer's tensors are handed to a callback as soon as they are in, and
// the client never holds more than one layer of them; with the state-first layout (a daemon
// that announces STATE_FIRST) each layer leaves the daemon as soon as the compose has it, before
// the logits. Both refuse a server whose HELLO announces a state contract version other than
// protocol::kStateContractVersion (kVersionMismatch, before the request is sent).
//
// Errors: a non-OK reply status comes back as that Status with the server's message; a
// GOAWAY fails every outstanding and later request with its status; a malformed frame from
// the server is kCorruption and the connection is then unusable.
// Not thread-safe: use one Client per thread (or guard it). A Pending must not outlive its
// Client.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "client/connection.h"
#include "core/status.h"
#include "protocol/decoder.h"
#include "protocol/messages.h"
#include "protocol/tensor_stream_parser.h"

namespace hypic::client {

using protocol::Bytes;
using protocol::ByteSpan;

struct ClientOptions {
  std::string address = "127.0.0.1:7411";  // host:port or unix:/path
  std::string token;
  std::string admin_token;
  std::string client_name = "hypic-client";
  int connect_timeout_ms = 5000;
  int io_timeout_ms = 60000;  // per blocking read or write step
  uint64_t max_reply_frame = uint64_t{1} << 30;
  uint64_t max_reply_message = uint64_t{16} << 30;  // a whole chunked reply held in memory
  // xxh3-64 is the fast choice; kCrc32 is what a stdlib-only client would use.
  protocol::ChecksumKind checksum = protocol::ChecksumKind::kXxh3_64;
  bool hello = true;  // send HELLO in Connect
};

// One reply frame (or a reassembled chunked reply): the header and its own copy of ext/body.
struct Reply {
  protocol::FrameHeader header;
  Bytes ext;
  Bytes body;
};

struct GetResult {
  protocol::Tier tier = protocol::Tier::kNone;
  Bytes entry;  // the entry's serialized bytes (storage format)
};

struct Done {};  // the value of operations that return nothing but a status

// The tensors of a state that arrived whole, as views into reply.state (valid while it lives).
// kCorruption for a malformed stream; an empty vector without a state.
Result<std::vector<protocol::StreamTensor>> DecodeState(const protocol::ComposeReply& reply);

// One layer of a streamed state: its tensors in stream order (linear: state, conv tail;
// attention: key, value). Returning an error stops the delivery: the rest of the stream is
// read and discarded and ComposeStreaming returns that error.
using LayerCallback =
    std::function<Status(uint32_t layer, std::vector<protocol::OwnedStreamTensor>& tensors)>;

class Client;

template <typename T>
class Pending {
 public:
  using Parser = Result<T> (*)(Reply&&);
  Pending(Client* client, uint64_t request_id, Parser parse)
      : client_(client), request_id_(request_id), parse_(parse) {}
  uint64_t request_id() const { return request_id_; }
  // Waits for the reply. Call at most once.
  Result<T> Wait();

 private:
  Client* client_;
  uint64_t request_id_;
  Parser parse_;
};

class Client {
 public:
  // Connects and (unless options.hello is false) sends HELLO. Errors: those of
  // Connection::Open, and HELLO's: kUnauthorized, kVersionMismatch, kBusy (connection limit).
  static Result<std::unique_ptr<Client>> Connect(const ClientOptions& options);

  Result<protocol::HelloReply> Hello(const std::string& token, const std::string& admin_token);
  // The HELLO reply (model, settings, limits), once Hello succeeded.
  const std::optional<protocol::HelloReply>& hello_reply() const { return hello_; }

  // ---- the pipelined core ----
  // Sends one request and returns its request_id. `ext` and `body` are written straight from
  // the caller's memory (no copy).
  Result<uint64_t> Send(protocol::Opcode op, const Hash128& key, ByteSpan ext, ByteSpan body,
                        uint32_t deadline_ms = 0);
  // Waits for the reply to `request_id` (kInternal for an id that is not in flight). A
  // non-OK reply status is returned as that Status.
  Result<Reply> Wait(uint64_t request_id);
  size_t outstanding() const { return outstanding_.size(); }

  // ---- operations: Submit* (pipelined) and blocking ----
  Result<Pending<Bytes>> SubmitPing(ByteSpan payload);
  Result<Bytes> Ping(ByteSpan payload = {});

  Result<Pending<std::vector<protocol::Tier>>> SubmitHas(std::span<const Hash128> keys);
  Result<std::vector<protocol::Tier>> Has(std::span<const Hash128> keys);

  Result<Pending<GetResult>> SubmitGet(const Hash128& key);
  Result<GetResult> Get(const Hash128& key);  // kNotFound on a miss

  Result<Pending<Done>> SubmitPut(const Hash128& key, ByteSpan entry,
                                  const protocol::PutOptions& options = {});
  Status Put(const Hash128& key, ByteSpan entry, const protocol::PutOptions& options = {});

  Result<Pending<Done>> SubmitDel(const Hash128& key);
  Status Del(const Hash128& key);

  Result<Pending<protocol::PrefillReply>> SubmitPrefill(const protocol::PrefillRequest& request,
                                                        uint32_t deadline_ms = 0);
  Result<protocol::PrefillReply> Prefill(const protocol::PrefillRequest& request,
                                         uint32_t deadline_ms = 0);

  Result<Pending<protocol::ComposeReply>> SubmitCompose(const protocol::ComposeRequest& request,
                                                        uint32_t deadline_ms = 0);
  Result<protocol::ComposeReply> Compose(const protocol::ComposeRequest& request,
                                         uint32_t deadline_ms = 0);
  // With reply options (state dtype, full logits, state layout): the COMPOSE ext. A state-first
  // layout to a server whose HELLO lacks STATE_FIRST is kUnsupported, before sending.
  Result<Pending<protocol::ComposeReply>> SubmitCompose(const protocol::ComposeRequest& request,
                                                        const protocol::ComposeOptions& options,
                                                        uint32_t deadline_ms = 0);
  Result<protocol::ComposeReply> Compose(const protocol::ComposeRequest& request,
                                         const protocol::ComposeOptions& options,
                                         uint32_t deadline_ms = 0);
  // COMPOSE with the state delivered layer by layer to `on_layer` as it streams in (the reply's
  // `state` stays empty, has_state true). With options.state_layout = kStateFirst the daemon
  // sends each layer as soon as its compose has it, so layer 0 arrives while the later layers
  // still compute, and the head (parts, timings, logits) comes after the last layer: the
  // callback then runs before the reply's head is known. Blocking. Errors: those of Compose,
  // kCorruption for a malformed stream, or the callback's error.
  Result<protocol::ComposeReply> ComposeStreaming(const protocol::ComposeRequest& request,
                                                  const protocol::ComposeOptions& options,
                                                  const LayerCallback& on_layer,
                                                  uint32_t deadline_ms = 0);

  // Admin operations (need the admin grant: kUnauthorized otherwise).
  Result<std::string> Stats();   // JSON
  Result<std::string> Config();  // JSON
  Result<protocol::EvictReply> Evict(const protocol::EvictRequest& request);
  Status Pin(const Hash128& key);
  Status Unpin(const Hash128& key);
  Status Flush();
  Status Shutdown();  // OK once the daemon acknowledged it or started draining
  Result<protocol::ListReply> List(const protocol::ListRequest& request);
  // A zero key verifies every entry.
  Result<protocol::VerifyReply> Verify(const Hash128& key = {});

 private:
  Client(std::unique_ptr<Connection> conn, const ClientOptions& options);

  template <typename T>
  Result<Pending<T>> Submit(protocol::Opcode op, const Hash128& key, ByteSpan ext, ByteSpan body,
                            typename Pending<T>::Parser parse, uint32_t deadline_ms = 0);
  // Blocks until at least one more frame has been received and filed.
  Status ReadFrame();
  // Files every complete frame in rbuf_; *header_known/needed describe an incomplete one.
  Status DecodeBuffered(bool* filed_any, protocol::FrameHeader* pending_header, uint64_t* needed);
  // Reads the rest of a large frame whose header is already checked straight into its reply
  // buffers (no staging copy of the body).
  Status ReadLargeFrame(const protocol::FrameHeader& header);
  Status FileFrame(Reply frame);
  // Reads whatever is available without blocking (used while a write is blocked).
  Status DrainReadable();
  Status ReadIntoBuffer(int timeout_ms);
  Status Fail(Status s);
  // kVersionMismatch unless the server's state contract is the one this client knows.
  Status CheckStateContract() const;
  // CheckStateContract when the state is asked for; kUnsupported for a state-first layout the
  // server does not announce.
  Status CheckComposeOptions(const protocol::ComposeRequest& request,
                             const protocol::ComposeOptions& options) const;

  // A streamed state being received for ComposeStreaming.
  struct StateSink {
    LayerCallback on_layer;
    protocol::StateLayout layout = protocol::StateLayout::kHeadFirst;
    // The reply head (then only it), gathered until complete: before the stream head first,
    // after it state first.
    Bytes head;
    bool head_done = false;  // head first: the head is complete and the stream has begun
    bool fed = false;        // a chunk arrived
    std::unique_ptr<protocol::TensorStreamParser> parser;
    uint32_t layer = 0;
    std::vector<protocol::OwnedStreamTensor> tensors;  // of `layer`, not yet delivered
    Status error;
  };
  void FeedSink(StateSink& sink, ByteSpan bytes, bool last);
  // The parser of a sink's stream, which delivers a layer once a tensor of the next arrives.
  static void StartLayerParser(StateSink& sink);
  // Hands the sink's gathered layer to its callback (nothing when none is gathered).
  static Status DeliverLayer(StateSink& sink);

  std::unique_ptr<Connection> conn_;
  ClientOptions options_;
  protocol::Decoder decoder_;
  std::optional<protocol::HelloReply> hello_;
  uint8_t version_ = protocol::kMaxVersion;
  uint64_t next_id_ = 1;
  Bytes rbuf_;  // bytes received and not yet decoded: [rpos_, rbuf_.size())
  size_t rpos_ = 0;
  std::unordered_set<uint64_t> outstanding_;     // request ids sent and not yet completed
  std::unordered_map<uint64_t, Reply> done_;     // completed, not yet collected
  std::unordered_map<uint64_t, Reply> partial_;  // chunked replies being assembled
  std::unordered_map<uint64_t, std::unique_ptr<StateSink>> sinks_;  // streamed states
  Status broken_;  // set once the connection is unusable (GOAWAY, I/O, malformed frame)
};

template <typename T>
Result<T> Pending<T>::Wait() {
  HYPIC_ASSIGN_OR_RETURN(Reply r, client_->Wait(request_id_));
  return parse_(std::move(r));
}

}  // namespace hypic::client
