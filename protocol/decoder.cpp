#include "protocol/decoder.h"

#include <cstring>

#include "protocol/wire_codec.h"

namespace hypic::protocol {

std::string_view DecodeStatusName(DecodeStatus s) {
  switch (s) {
    case DecodeStatus::kOk: return "ok";
    case DecodeStatus::kNeedMore: return "need more";
    case DecodeStatus::kBadMagic: return "bad magic";
    case DecodeStatus::kBadHeaderChecksum: return "bad header checksum";
    case DecodeStatus::kBadReserved: return "reserved bits not zero";
    case DecodeStatus::kBadVersion: return "unsupported version";
    case DecodeStatus::kBadChecksumKind: return "unknown body checksum kind";
    case DecodeStatus::kBadDirection: return "wrong direction (reply flag)";
    case DecodeStatus::kBadStatus: return "bad status field";
    case DecodeStatus::kUnknownOpcode: return "unknown opcode";
    case DecodeStatus::kNotAllowed: return "opcode not allowed in this state";
    case DecodeStatus::kExtTooLarge: return "ext too large";
    case DecodeStatus::kBodyTooLarge: return "body too large";
    case DecodeStatus::kBadBodyChecksum: return "bad body checksum";
  }
  return "unknown decode status";
}

bool HeaderTrusted(DecodeStatus s) {
  return s != DecodeStatus::kNeedMore && s != DecodeStatus::kBadMagic &&
         s != DecodeStatus::kBadHeaderChecksum;
}

StatusCode DecodeStatusCode(DecodeStatus s) {
  switch (s) {
    case DecodeStatus::kOk:
    case DecodeStatus::kNeedMore: return StatusCode::kOk;
    case DecodeStatus::kBadMagic:
    case DecodeStatus::kBadReserved:
    case DecodeStatus::kBadDirection:
    case DecodeStatus::kBadStatus:
    case DecodeStatus::kUnknownOpcode:
    case DecodeStatus::kBadChecksumKind: return StatusCode::kBadRequest;
    case DecodeStatus::kBadHeaderChecksum:
    case DecodeStatus::kBadBodyChecksum: return StatusCode::kBadChecksum;
    case DecodeStatus::kBadVersion: return StatusCode::kVersionMismatch;
    case DecodeStatus::kNotAllowed: return StatusCode::kUnauthorized;
    case DecodeStatus::kExtTooLarge:
    case DecodeStatus::kBodyTooLarge: return StatusCode::kTooLarge;
  }
  return StatusCode::kInternal;
}

DecodeLimits DecodeLimits::PreAuth() {
  DecodeLimits l;
  l.max_ext = 0;
  l.max_body = 4096;
  l.allowed_opcodes = OpcodeBit(Opcode::kHello) | OpcodeBit(Opcode::kPing);
  return l;
}

DecodeStatus Decoder::CheckHeader(ByteSpan head, FrameHeader* out) const {
  const std::byte* p = head.data();
  if (std::memcmp(p, kMagic.data(), 4) != 0) return DecodeStatus::kBadMagic;
  if (LoadWire<uint32_t>(p + 60) != Crc32(head.first(60))) return DecodeStatus::kBadHeaderChecksum;

  FrameHeader& h = *out;
  h.version = static_cast<uint8_t>(p[4]);
  h.opcode = static_cast<Opcode>(p[5]);
  h.flags = static_cast<uint8_t>(p[6]);
  h.checksum_kind = static_cast<ChecksumKind>(p[7]);
  h.request_id = LoadWire<uint64_t>(p + 8);
  h.key = Hash128::FromBytes(p + 16);
  h.body_len = LoadWire<uint64_t>(p + 32);
  h.body_checksum = LoadWire<uint64_t>(p + 40);
  h.ext_len = LoadWire<uint16_t>(p + 48);
  h.status = LoadWire<uint16_t>(p + 50);
  h.deadline_ms = LoadWire<uint32_t>(p + 52);

  if (LoadWire<uint32_t>(p + 56) != 0 || (h.flags & ~kKnownFlags) != 0) {
    return DecodeStatus::kBadReserved;
  }
  if (h.version < kMinVersion || h.version > kMaxVersion) return DecodeStatus::kBadVersion;
  auto kind = static_cast<uint8_t>(h.checksum_kind);
  if (kind == 0 || kind > kMaxChecksumKind) return DecodeStatus::kBadChecksumKind;
  bool want_reply = role_ == Role::kClient;
  if (h.is_reply() != want_reply) return DecodeStatus::kBadDirection;
  if (want_reply ? h.status > kMaxStatusCode : h.status != 0) return DecodeStatus::kBadStatus;
  auto op = static_cast<uint8_t>(h.opcode);
  if (!IsKnownOpcode(op) || (h.opcode == Opcode::kGoAway && !want_reply)) {
    return DecodeStatus::kUnknownOpcode;
  }
  if (h.opcode != Opcode::kGoAway && (limits_.allowed_opcodes & OpcodeBit(h.opcode)) == 0) {
    return DecodeStatus::kNotAllowed;
  }
  if (h.ext_len > limits_.max_ext || h.ext_len > kMaxExtLen) return DecodeStatus::kExtTooLarge;
  // The second test keeps kHeaderSize + ext + body from overflowing whatever the limits.
  if (h.body_len > limits_.max_body || h.body_len > (uint64_t{1} << 62)) {
    return DecodeStatus::kBodyTooLarge;
  }
  return DecodeStatus::kOk;
}

DecodeStatus Decoder::Decode(ByteSpan bytes, size_t* consumed, Frame* frame) {
  *consumed = 0;
  needed_ = kHeaderSize;
  if (bytes.empty()) return DecodeStatus::kNeedMore;
  // Fail at the first wrong magic byte, so HTTP or TLS bytes are rejected before a whole
  // header arrives.
  size_t magic_seen = bytes.size() < 4 ? bytes.size() : 4;
  if (std::memcmp(bytes.data(), kMagic.data(), magic_seen) != 0) return DecodeStatus::kBadMagic;
  if (bytes.size() < kHeaderSize) return DecodeStatus::kNeedMore;

  DecodeStatus st = CheckHeader(bytes.first(kHeaderSize), &frame->header);
  if (st != DecodeStatus::kOk) return st;
  const FrameHeader& h = frame->header;
  // Both lengths are within the limits, so this cannot overflow.
  needed_ = kHeaderSize + h.ext_len + h.body_len;
  if (bytes.size() < needed_) return DecodeStatus::kNeedMore;

  frame->ext = bytes.subspan(kHeaderSize, h.ext_len);
  frame->body = bytes.subspan(kHeaderSize + h.ext_len, static_cast<size_t>(h.body_len));
  *consumed = static_cast<size_t>(needed_);
  needed_ = kHeaderSize;
  if (BodyChecksum(h.checksum_kind, frame->ext, frame->body) != h.body_checksum) {
    return DecodeStatus::kBadBodyChecksum;
  }
  return DecodeStatus::kOk;
}

}  // namespace hypic::protocol
