// Shared by the protocol fuzz targets: decodes a frame's ext and body as the typed message its
// opcode and direction call for, so the fuzzers reach every message decoder. The result is
// ignored; what is checked is that no input crashes, hangs or trips a sanitizer, and that a
// successful decode re-encodes to the same bytes.
#pragma once

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "protocol/decoder.h"
#include "protocol/messages.h"

namespace hypic::protocol::fuzz {

template <typename T>
void RoundTrip(ByteSpan bytes) {
  auto m = Decode<T>(bytes);
  if (!m.ok()) return;
  Bytes again = Encode(*m);
  if (again.size() != bytes.size() || !std::equal(again.begin(), again.end(), bytes.begin())) {
    std::abort();  // a decoded message must re-encode byte-identically
  }
}

// Rewrites the header CRC and body checksum of every frame that starts where the previous one
// ended, so mutated lengths, opcodes and bodies get past the checksums and reach the checks
// and decoders behind them (a CRC is hard for a mutator to fix up by itself).
inline void ResealFrames(Bytes& b) {
  size_t pos = 0;
  while (b.size() - pos >= kHeaderSize) {
    std::byte* h = b.data() + pos;
    uint64_t body_len = 0;
    uint16_t ext_len = 0;
    std::memcpy(&body_len, h + 32, 8);
    std::memcpy(&ext_len, h + 48, 2);
    uint64_t left = b.size() - pos - kHeaderSize;
    if (ext_len <= left && body_len <= left - ext_len) {
      ByteSpan ext(h + kHeaderSize, ext_len);
      ByteSpan body(h + kHeaderSize + ext_len, static_cast<size_t>(body_len));
      auto kind = static_cast<uint8_t>(h[7]) == 1 ? ChecksumKind::kCrc32 : ChecksumKind::kXxh3_64;
      uint64_t sum = BodyChecksum(kind, ext, body);
      std::memcpy(h + 40, &sum, 8);
    }
    uint32_t crc = Crc32(ByteSpan(h, 60));
    std::memcpy(h + 60, &crc, 4);
    if (ext_len > left || body_len > left - ext_len) return;
    pos += kHeaderSize + ext_len + static_cast<size_t>(body_len);
  }
}

inline void DecodeBodies(const Frame& f) {
  bool reply = f.header.is_reply();
  if (reply && f.header.status != 0) return;  // error bodies are plain text
  switch (f.header.opcode) {
    case Opcode::kHello:
      reply ? RoundTrip<HelloReply>(f.body) : RoundTrip<HelloRequest>(f.body);
      break;
    case Opcode::kHas: reply ? RoundTrip<HasReply>(f.body) : RoundTrip<HasRequest>(f.body); break;
    case Opcode::kGet:
      if (reply) RoundTrip<GetInfo>(f.ext);
      break;
    case Opcode::kPut:
      if (!reply) (void)DecodePutOptions(f.ext);
      break;
    case Opcode::kPrefill:
      if (reply) {
        RoundTrip<PrefillReply>(f.body);
        (void)DecodePrefillEntriesReply(f.body);
      } else {
        RoundTrip<PrefillRequest>(f.body);
        (void)DecodePrefillOptions(f.ext);
      }
      break;
    case Opcode::kCompose:
      if (reply) {
        RoundTrip<ComposeReply>(f.body);
        auto m = Decode<ComposeReply>(f.body);
        if (m.ok() && m->has_state) (void)DecodeTensorStream(ByteSpan(m->state));
      } else {
        RoundTrip<ComposeRequest>(f.body);
      }
      break;
    case Opcode::kEvict:
      reply ? RoundTrip<EvictReply>(f.body) : RoundTrip<EvictRequest>(f.body);
      break;
    case Opcode::kList:
      reply ? RoundTrip<ListReply>(f.body) : RoundTrip<ListRequest>(f.body);
      break;
    case Opcode::kVerify:
      if (reply) RoundTrip<VerifyReply>(f.body);
      break;
    default: break;
  }
}

}  // namespace hypic::protocol::fuzz
