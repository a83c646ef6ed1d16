// The hypic wire frame: a fixed 64-byte little-endian header, then `ext` (<= 4 KiB of
// per-opcode options or metadata), then `body` (body_len bytes). protocol/README.md is the
// normative spec; this header mirrors it field by field, and the constants here are the spec's.
//
// Everything here is pure (no I/O, no allocation except in the convenience EncodeFrame) and
// thread-safe: functions only read their arguments.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "core/hash.h"
#include "core/status.h"

namespace hypic::protocol {

using Bytes = std::vector<std::byte>;
using ByteSpan = std::span<const std::byte>;

inline constexpr size_t kHeaderSize = 64;
// 0x89 'H' 'Y' 'P': the first byte has its high bit set, so an HTTP request, a RESP command,
// a TLS ClientHello (0x16) or any ASCII text fails at byte 0.
inline constexpr std::array<uint8_t, 4> kMagic = {0x89, 'H', 'Y', 'P'};
inline constexpr uint8_t kMinVersion = 1;
inline constexpr uint8_t kMaxVersion = 1;
inline constexpr uint16_t kMaxExtLen = 4096;

// Numeric values are part of the wire format: never renumber. Values must stay below 64 (the
// decoder's allowed-opcode mask is a u64).
enum class Opcode : uint8_t {
  kHello = 1,
  kPing = 2,
  kHas = 3,
  kGet = 4,
  kPut = 5,
  kDel = 6,
  kPrefill = 7,
  kCompose = 8,
  // Admin operations (need the admin grant, see README "Auth").
  kStats = 16,
  kEvict = 17,
  kPin = 18,
  kUnpin = 19,
  kFlush = 20,
  kConfig = 21,
  kShutdown = 22,
  kList = 23,
  kVerify = 24,
  // Reply-only: the server's last frame before it closes a connection (request_id 0).
  kGoAway = 63,
};

// The stable upper-case name ("HELLO", ...); "UNKNOWN" for a value that is not an opcode.
std::string_view OpcodeName(Opcode op);
bool IsKnownOpcode(uint8_t value);
bool IsAdminOpcode(Opcode op);
inline constexpr uint64_t OpcodeBit(Opcode op) { return uint64_t{1} << static_cast<uint8_t>(op); }

// Header flags (u8). Bits not listed must be zero.
inline constexpr uint8_t kFlagReply = 0x01;  // set on every server-to-client frame
inline constexpr uint8_t kFlagMore = 0x02;   // a chunk of a streamed message; more chunks follow
inline constexpr uint8_t kKnownFlags = kFlagReply | kFlagMore;

// What `body_checksum` holds. A reply uses the kind of the request it answers.
enum class ChecksumKind : uint8_t {
  kCrc32 = 1,   // CRC-32/IEEE (zlib.crc32), zero-extended to 64 bits
  kXxh3_64 = 2  // XXH3_64bits, seed 0
};
inline constexpr uint8_t kMaxChecksumKind = 2;

struct FrameHeader {
  uint8_t version = kMaxVersion;
  Opcode opcode = Opcode::kPing;
  uint8_t flags = 0;
  ChecksumKind checksum_kind = ChecksumKind::kXxh3_64;
  uint64_t request_id = 0;
  Hash128 key;  // the SegmentKey for single-key ops, zero otherwise
  uint64_t body_len = 0;
  uint64_t body_checksum = 0;  // over ext bytes then body bytes
  uint16_t ext_len = 0;
  uint16_t status = 0;       // hypic::StatusCode; 0 in requests
  uint32_t deadline_ms = 0;  // requests: budget from receipt, 0 = the server's default
  // reserved (u32, must be zero) and header_crc (u32) are not fields: they are written and
  // checked by EncodeHeader / ParseHeader.

  bool is_reply() const { return (flags & kFlagReply) != 0; }
  bool has_more() const { return (flags & kFlagMore) != 0; }
  friend bool operator==(const FrameHeader&, const FrameHeader&) = default;
};

// CRC-32/IEEE, reflected, poly 0xEDB88320, init and xorout 0xFFFFFFFF (the zlib crc32).
// `crc` chains: Crc32(b, Crc32(a)) == Crc32(a || b).
uint32_t Crc32(ByteSpan bytes, uint32_t crc = 0);

// The body checksum of `kind` over ext then body.
uint64_t BodyChecksum(ChecksumKind kind, ByteSpan ext, ByteSpan body);

// BodyChecksum computed piece by piece: Update with the ext bytes, then the body bytes, split
// anywhere; Digest() then equals BodyChecksum(kind, ext, body). A receiver feeds each piece as
// it arrives, so verifying a MiB-sized body costs no second pass over memory after the last
// byte (the bytes are hashed while still in cache, overlapped with the rest of the transfer).
// No allocation; a value type (the xxh3 state lives inline). Not thread-safe.
class BodyHasher {
 public:
  explicit BodyHasher(ChecksumKind kind);
  void Update(ByteSpan bytes);
  uint64_t Digest() const;

 private:
  ChecksumKind kind_;
  uint32_t crc_ = 0;
  Xxh3_64Stream xxh3_;
};

// Writes the 64 header bytes, including the reserved zeros and the header CRC.
// REQUIRES: header.ext_len <= kMaxExtLen (checked by the encoders that build headers).
void EncodeHeader(const FrameHeader& header, std::byte out[kHeaderSize]);

// Builds the header of a frame carrying `ext` and `body` (lengths and checksum filled in) and
// returns it; the caller may then write header, ext and body with scatter-gather I/O without
// copying the body. Fails with kTooLarge when ext exceeds kMaxExtLen.
Result<std::array<std::byte, kHeaderSize>> MakeHeader(FrameHeader header, ByteSpan ext,
                                                      ByteSpan body);

// Header + ext + body in one buffer (small frames, tests, the client).
Result<Bytes> EncodeFrame(FrameHeader header, ByteSpan ext, ByteSpan body);

// The header of the reply to `request`: same version, opcode, request_id, key and checksum
// kind, kFlagReply set, `status` filled in.
FrameHeader ReplyHeader(const FrameHeader& request, StatusCode status);

// An error reply to `request`: status = error.code(), body = the message (UTF-8, cut to
// kMaxErrorMessage bytes), no ext. REQUIRES: !error.ok().
Bytes EncodeErrorReply(const FrameHeader& request, const Status& error);

// The GOAWAY frame a server sends before it closes a connection on its own (connection
// limit, deadline, shutdown, unrecoverable framing error): request_id 0, CRC-32 body checksum
// (every client accepts it), status = why, body = the message.
Bytes EncodeGoAway(const Status& why);
inline constexpr size_t kMaxErrorMessage = 1024;

}  // namespace hypic::protocol
