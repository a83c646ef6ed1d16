// Decoder: the incremental, allocation-free frame parser. The caller owns the receive buffer
// and calls Decode with every byte it holds that is not yet consumed:
//   kOk        a whole frame was parsed; *consumed = its size; frame->ext/body view `bytes`.
//   kNeedMore  the frame is incomplete; *consumed = 0; needed() says how many bytes the frame
//              needs in total. needed() is only above kHeaderSize once the header has been
//              checked against the limits, so the caller may size its buffer from it: caps
//              are checked BEFORE anything is allocated. When needed() > kHeaderSize,
//              frame->header already holds the checked header, so a caller may read the
//              ext and body of a large frame straight into their final buffers and verify
//              them with BodyChecksum instead of staging the whole frame.
//   kBad*      the bytes are not a frame we accept. HeaderTrusted(status) says whether
//              frame->header is valid (its request_id may be echoed in an error reply), and
//              only kBadBodyChecksum leaves the stream in sync (*consumed = the frame's size).
//              Every other kBad* means: answer (or not) and close the connection.
//
// The limits are per connection state: the server starts a connection with PreAuthLimits()
// (HELLO and PING with tiny bodies) and calls set_limits() once HELLO succeeds.
// Not thread-safe; one Decoder per connection. It allocates nothing.
#pragma once

#include <cstdint>
#include <string_view>

#include "core/status.h"
#include "protocol/frame.h"

namespace hypic::protocol {

enum class DecodeStatus : uint8_t {
  kOk,
  kNeedMore,
  kBadMagic,           // first 4 bytes are not the magic (HTTP, TLS, RESP, garbage)
  kBadHeaderChecksum,  // header CRC mismatch: nothing in the header can be trusted
  kBadReserved,        // reserved bytes or unknown flag bits are not zero
  kBadVersion,         // frame version outside [kMinVersion, kMaxVersion]
  kBadChecksumKind,    // body checksum kind unknown
  kBadDirection,       // a reply where a request was expected, or the reverse
  kBadStatus,          // a request with status != 0, or a reply status above kMaxStatusCode
  kUnknownOpcode,      // not an opcode of this version
  kNotAllowed,         // a known opcode that this connection state does not accept
  kExtTooLarge,        // ext_len over the limit
  kBodyTooLarge,       // body_len over the limit
  kBadBodyChecksum,    // ext+body do not match body_checksum
};

std::string_view DecodeStatusName(DecodeStatus s);
// True when frame->header holds a checked header (everything after kBadHeaderChecksum).
bool HeaderTrusted(DecodeStatus s);
// The StatusCode an error reply carries for a decode failure (kOk for kOk/kNeedMore).
StatusCode DecodeStatusCode(DecodeStatus s);

struct DecodeLimits {
  uint32_t max_ext = kMaxExtLen;
  uint64_t max_body = uint64_t{64} << 20;  // per frame
  uint64_t allowed_opcodes = ~uint64_t{0};

  // Before HELLO has succeeded: HELLO and PING only, bodies of at most 4 KiB, no ext.
  static DecodeLimits PreAuth();
};

struct Frame {
  FrameHeader header;
  ByteSpan ext;  // views into the bytes given to Decode
  ByteSpan body;
  size_t size() const { return kHeaderSize + ext.size() + body.size(); }
};

class Decoder {
 public:
  enum class Role : uint8_t {
    kServer,  // decodes requests (kFlagReply must be clear)
    kClient,  // decodes replies (kFlagReply must be set)
  };

  Decoder(Role role, DecodeLimits limits) : role_(role), limits_(limits) {}

  DecodeStatus Decode(ByteSpan bytes, size_t* consumed, Frame* frame);

  // Total bytes the frame at the front of the buffer needs (kHeaderSize until its header has
  // been seen and checked). Meaningful after kNeedMore.
  uint64_t needed() const { return needed_; }

  const DecodeLimits& limits() const { return limits_; }
  void set_limits(const DecodeLimits& limits) { limits_ = limits; }

 private:
  DecodeStatus CheckHeader(ByteSpan head, FrameHeader* out) const;

  Role role_;
  DecodeLimits limits_;
  uint64_t needed_ = kHeaderSize;
};

}  // namespace hypic::protocol
