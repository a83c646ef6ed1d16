// Fuzz target: the frame decoder in both directions, over a buffer that may hold several
// frames, plus the typed decoder of each frame's body. Invariants checked: *consumed never
// exceeds the input, NeedMore never consumes, needed() never exceeds the limits, and decoded
// messages re-encode byte-identically (protocol_fuzz_bodies.h). Each input runs as is and
// with its checksums resealed.
#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include "protocol/decoder.h"
#include "tests/fuzz/protocol_fuzz_bodies.h"

namespace {

using hypic::protocol::ByteSpan;
using hypic::protocol::DecodeLimits;
using hypic::protocol::Decoder;
using hypic::protocol::DecodeStatus;
using hypic::protocol::Frame;
using hypic::protocol::kHeaderSize;

void Run(Decoder::Role role, ByteSpan in) {
  DecodeLimits limits;
  limits.max_body = 1 << 16;
  limits.max_ext = 1024;
  Decoder d(role, limits);
  while (!in.empty()) {
    Frame frame;
    size_t consumed = 0;
    DecodeStatus st = d.Decode(in, &consumed, &frame);
    if (consumed > in.size()) std::abort();
    if (st == DecodeStatus::kNeedMore) {
      if (consumed != 0 || d.needed() > kHeaderSize + limits.max_ext + limits.max_body) {
        std::abort();
      }
      return;
    }
    if (st == DecodeStatus::kOk) {
      if (consumed != frame.size()) std::abort();
      hypic::protocol::fuzz::DecodeBodies(frame);
    } else if (st != DecodeStatus::kBadBodyChecksum) {
      return;  // fatal for the connection
    }
    in = in.subspan(consumed);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  ByteSpan in(reinterpret_cast<const std::byte*>(data), size);
  Run(Decoder::Role::kServer, in);
  Run(Decoder::Role::kClient, in);
  // Again with every checksum fixed up, to reach the checks behind them.
  hypic::protocol::Bytes sealed(in.begin(), in.end());
  hypic::protocol::fuzz::ResealFrames(sealed);
  Run(Decoder::Role::kServer, ByteSpan(sealed));
  Run(Decoder::Role::kClient, ByteSpan(sealed));
  return 0;
}
