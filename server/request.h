// Request and Reply: one decoded frame on its way from a Session to a handler, and the answer
// on its way back. A Request owns its bytes (ext copied out of the receive buffer, the body in
// its own aligned HostBuffer), so a handler may keep it past the read that produced it and may
// hand the body to storage without copying (entries are parsed in place). A Reply either owns
// its body or views memory kept alive by `view_owner` (GET streams a tier's buffer as-is).
// Value types; thread-compatible.
//
// A streamed reply (protocol §4 chunks, to a client that announced CHUNKED) goes out through
// the request's ChunkWriter: the handler queues each chunk and waits until the chunks it queued
// were written, so it can free (or reuse) their memory; the final chunk (no MORE flag) is the
// handler's ordinary Reply through its Done.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "core/host_buffer.h"
#include "core/status.h"
#include "protocol/frame.h"

namespace hypic::server {

using Clock = std::chrono::steady_clock;

struct Reply;
struct Tenant;  // tenants.h

// The session's side of one streamed reply. Thread-safe: called from a compute worker.
class ChunkWriter {
 public:
  virtual ~ChunkWriter() = default;
  // Queues `chunk` (its `more` flag is set here) behind the replies already queued; it does not
  // wait. kCancelled when the connection is closed or closing.
  virtual Status Queue(Reply chunk) = 0;
  // Blocks until every chunk queued so far is written to the socket. kCancelled when the
  // connection closed first (a client that stopped reading is closed by the session's
  // deadlines, which drops the queued chunks and wakes this), kDeadlineExceeded after
  // `timeout` without that.
  virtual Status Flush(std::chrono::milliseconds timeout) = 0;
};

struct Request {
  protocol::FrameHeader header;
  protocol::Bytes ext;
  std::shared_ptr<const HostBuffer> body;  // null for an empty body
  Clock::time_point received;
  Clock::time_point deadline;  // min(request_timeout, header.deadline_ms) after `received`
  bool admin = false;          // the connection holds the admin grant
  // ... from the admin token or a trusted peer: its admin operations span every namespace.
  bool admin_daemon_wide = false;
  // The connection's tenant (namespace, permissions, quotas); null when it holds only the admin
  // token. Owned by the Server.
  Tenant* tenant = nullptr;
  // Set when the client announced CHUNKED: how a handler streams its reply. Null otherwise.
  std::shared_ptr<ChunkWriter> chunks;

  protocol::ByteSpan Body() const { return body ? body->span() : protocol::ByteSpan(); }
  uint64_t WireSize() const { return protocol::kHeaderSize + ext.size() + header.body_len; }
};

struct Reply {
  protocol::Opcode opcode = protocol::Opcode::kPing;
  uint64_t request_id = 0;
  StatusCode status = StatusCode::kOk;
  protocol::ChecksumKind checksum_kind = protocol::ChecksumKind::kXxh3_64;
  Hash128 key;
  protocol::Bytes ext;
  protocol::Bytes body;
  std::shared_ptr<const void> view_owner;  // when set, `view` is the body
  protocol::ByteSpan view;
  // The body checksum (over ext then body, of `checksum_kind`) when the handler already knows
  // it, so the session does not hash the body again.
  std::optional<uint64_t> body_checksum;
  bool more = false;  // a chunk of a streamed reply with more to follow (frame flag MORE)

  protocol::ByteSpan Body() const { return view_owner ? view : protocol::ByteSpan(body); }
  uint64_t WireSize() const { return protocol::kHeaderSize + ext.size() + Body().size(); }

  // An OK reply to `req` with an owned body.
  static Reply Ok(const Request& req, protocol::Bytes body = {}, protocol::Bytes ext = {});
  // An error reply to `req`: the status code, and its message (cut to kMaxErrorMessage bytes)
  // as the UTF-8 body.
  static Reply Error(const Request& req, const Status& status);
};

inline Reply Reply::Ok(const Request& req, protocol::Bytes body, protocol::Bytes ext) {
  Reply r;
  r.opcode = req.header.opcode;
  r.request_id = req.header.request_id;
  r.checksum_kind = req.header.checksum_kind;
  r.key = req.header.key;
  r.body = std::move(body);
  r.ext = std::move(ext);
  return r;
}

inline Reply Reply::Error(const Request& req, const Status& status) {
  Reply r;
  r.opcode = req.header.opcode;
  r.request_id = req.header.request_id;
  r.checksum_kind = req.header.checksum_kind;
  r.key = req.header.key;
  r.status = status.ok() ? StatusCode::kInternal : status.code();
  std::string_view m = status.message();
  m = m.substr(0, protocol::kMaxErrorMessage);
  r.body.resize(m.size());
  for (size_t i = 0; i < m.size(); ++i) r.body[i] = static_cast<std::byte>(m[i]);
  return r;
}

}  // namespace hypic::server
