#include "protocol/frame.h"

#include <bit>
#include <cstring>

namespace hypic::protocol {

static_assert(std::endian::native == std::endian::little, "the wire format is little-endian");

namespace {

// Slicing-by-8 tables, built once at compile time. CRC-32 is the header checksum everywhere
// and the body checksum of clients without xxh3 (the stdlib-only Python client).
struct Crc32Tables {
  uint32_t t[8][256];
  constexpr Crc32Tables() : t{} {
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1u) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
      t[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; ++i) {
      for (int s = 1; s < 8; ++s) t[s][i] = (t[s - 1][i] >> 8) ^ t[0][t[s - 1][i] & 0xffu];
    }
  }
};
constexpr Crc32Tables kCrc;

void Put16(std::byte* p, uint16_t v) { std::memcpy(p, &v, 2); }
void Put32(std::byte* p, uint32_t v) { std::memcpy(p, &v, 4); }
void Put64(std::byte* p, uint64_t v) { std::memcpy(p, &v, 8); }

}  // namespace

uint32_t Crc32(ByteSpan bytes, uint32_t crc) {
  const auto* p = reinterpret_cast<const uint8_t*>(bytes.data());
  size_t n = bytes.size();
  uint32_t c = ~crc;
  while (n >= 8) {
    uint32_t lo;
    uint32_t hi;
    std::memcpy(&lo, p, 4);
    std::memcpy(&hi, p + 4, 4);
    lo ^= c;
    c = kCrc.t[7][lo & 0xffu] ^ kCrc.t[6][(lo >> 8) & 0xffu] ^ kCrc.t[5][(lo >> 16) & 0xffu] ^
        kCrc.t[4][lo >> 24] ^ kCrc.t[3][hi & 0xffu] ^ kCrc.t[2][(hi >> 8) & 0xffu] ^
        kCrc.t[1][(hi >> 16) & 0xffu] ^ kCrc.t[0][hi >> 24];
    p += 8;
    n -= 8;
  }
  while (n-- > 0) c = kCrc.t[0][(c ^ *p++) & 0xffu] ^ (c >> 8);
  return ~c;
}

uint64_t BodyChecksum(ChecksumKind kind, ByteSpan ext, ByteSpan body) {
  // One-shot xxh3 is faster than the streaming state for small bodies.
  if (kind == ChecksumKind::kXxh3_64 && ext.empty()) return Xxh3_64(body);
  BodyHasher h(kind);
  h.Update(ext);
  h.Update(body);
  return h.Digest();
}

BodyHasher::BodyHasher(ChecksumKind kind) : kind_(kind) {}

void BodyHasher::Update(ByteSpan bytes) {
  if (kind_ == ChecksumKind::kCrc32) {
    crc_ = Crc32(bytes, crc_);
  } else {
    xxh3_.Update(bytes.data(), bytes.size());
  }
}

uint64_t BodyHasher::Digest() const {
  return kind_ == ChecksumKind::kCrc32 ? crc_ : xxh3_.Digest();
}

std::string_view OpcodeName(Opcode op) {
  switch (op) {
    case Opcode::kHello: return "HELLO";
    case Opcode::kPing: return "PING";
    case Opcode::kHas: return "HAS";
    case Opcode::kGet: return "GET";
    case Opcode::kPut: return "PUT";
    case Opcode::kDel: return "DEL";
    case Opcode::kPrefill: return "PREFILL";
    case Opcode::kCompose: return "COMPOSE";
    case Opcode::kStats: return "STATS";
    case Opcode::kEvict: return "EVICT";
    case Opcode::kPin: return "PIN";
    case Opcode::kUnpin: return "UNPIN";
    case Opcode::kFlush: return "FLUSH";
    case Opcode::kConfig: return "CONFIG";
    case Opcode::kShutdown: return "SHUTDOWN";
    case Opcode::kList: return "LIST";
    case Opcode::kVerify: return "VERIFY";
    case Opcode::kGoAway: return "GOAWAY";
  }
  return "UNKNOWN";
}

bool IsKnownOpcode(uint8_t value) { return OpcodeName(static_cast<Opcode>(value)) != "UNKNOWN"; }

bool IsAdminOpcode(Opcode op) {
  auto v = static_cast<uint8_t>(op);
  return v >= static_cast<uint8_t>(Opcode::kStats) && v <= static_cast<uint8_t>(Opcode::kVerify);
}

void EncodeHeader(const FrameHeader& h, std::byte out[kHeaderSize]) {
  std::memcpy(out, kMagic.data(), 4);
  out[4] = std::byte{h.version};
  out[5] = std::byte{static_cast<uint8_t>(h.opcode)};
  out[6] = std::byte{h.flags};
  out[7] = std::byte{static_cast<uint8_t>(h.checksum_kind)};
  Put64(out + 8, h.request_id);
  h.key.ToBytes(out + 16);
  Put64(out + 32, h.body_len);
  Put64(out + 40, h.body_checksum);
  Put16(out + 48, h.ext_len);
  Put16(out + 50, h.status);
  Put32(out + 52, h.deadline_ms);
  Put32(out + 56, 0);  // reserved
  Put32(out + 60, Crc32(ByteSpan(out, 60)));
}

Result<std::array<std::byte, kHeaderSize>> MakeHeader(FrameHeader header, ByteSpan ext,
                                                      ByteSpan body) {
  if (ext.size() > kMaxExtLen) {
    return TooLarge("frame ext of " + std::to_string(ext.size()) + " bytes exceeds " +
                    std::to_string(kMaxExtLen));
  }
  header.ext_len = static_cast<uint16_t>(ext.size());
  header.body_len = body.size();
  header.body_checksum = BodyChecksum(header.checksum_kind, ext, body);
  std::array<std::byte, kHeaderSize> out;
  EncodeHeader(header, out.data());
  return out;
}

Result<Bytes> EncodeFrame(FrameHeader header, ByteSpan ext, ByteSpan body) {
  HYPIC_ASSIGN_OR_RETURN(auto head, MakeHeader(header, ext, body));
  Bytes out;
  out.reserve(kHeaderSize + ext.size() + body.size());
  out.insert(out.end(), head.begin(), head.end());
  out.insert(out.end(), ext.begin(), ext.end());
  out.insert(out.end(), body.begin(), body.end());
  return out;
}

FrameHeader ReplyHeader(const FrameHeader& request, StatusCode status) {
  FrameHeader h = request;
  h.flags = kFlagReply;
  h.status = static_cast<uint16_t>(status);
  h.deadline_ms = 0;
  h.ext_len = 0;
  h.body_len = 0;
  h.body_checksum = 0;
  return h;
}

namespace {

Bytes EncodeMessageFrame(const FrameHeader& h, const Status& s) {
  std::string_view msg = s.message();
  if (msg.size() > kMaxErrorMessage) msg = msg.substr(0, kMaxErrorMessage);
  // The message is under kMaxErrorMessage and there is no ext: encoding cannot fail.
  return EncodeFrame(h, {}, ByteSpan(reinterpret_cast<const std::byte*>(msg.data()), msg.size()))
      .value();
}

}  // namespace

Bytes EncodeErrorReply(const FrameHeader& request, const Status& error) {
  return EncodeMessageFrame(ReplyHeader(request, error.code()), error);
}

Bytes EncodeGoAway(const Status& why) {
  FrameHeader h;
  h.opcode = Opcode::kGoAway;
  h.flags = kFlagReply;
  h.checksum_kind = ChecksumKind::kCrc32;
  h.status = static_cast<uint16_t>(why.code());
  return EncodeMessageFrame(h, why);
}

}  // namespace hypic::protocol
