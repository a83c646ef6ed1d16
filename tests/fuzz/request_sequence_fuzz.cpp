// Fuzz target: a sequence of request frames through the server's per-connection state machine
// (ServerSession: pre-auth limits, HELLO negotiation, tokens, admin gating), the way hypicd
// drives it. The first input byte picks the auth policy (bits 0-2) and whether the frames'
// checksums are resealed first (bit 3), so mutations reach the session logic. Invariants: nothing
// is admitted before HELLO except PING; admin opcodes are admitted only with the admin grant, data
// opcodes only with a tenant; after a fatal decode status the connection is done.
#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include "protocol/session.h"
#include "tests/fuzz/protocol_fuzz_bodies.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace hypic::protocol;
  if (size == 0) return 0;
  AuthPolicy policy;
  if (data[0] & 1) policy.tenants[0].token = "tok";
  if (data[0] & 2) policy.admin_token = "adm";
  policy.trusted_peer = (data[0] & 4) != 0;
  DecodeLimits ready;
  ready.max_body = 1 << 16;
  ServerSession session(policy, ready);

  Bytes frames(reinterpret_cast<const std::byte*>(data + 1),
               reinterpret_cast<const std::byte*>(data + size));
  if (data[0] & 8) fuzz::ResealFrames(frames);
  ByteSpan in(frames);
  while (!in.empty()) {
    Frame frame;
    size_t consumed = 0;
    DecodeStatus st = session.Decode(in, &consumed, &frame);
    if (st == DecodeStatus::kNeedMore) return 0;
    if (st != DecodeStatus::kOk && st != DecodeStatus::kBadBodyChecksum) return 0;
    in = in.subspan(consumed);
    if (st != DecodeStatus::kOk) continue;
    bool ready_before = session.phase() == ServerSession::Phase::kReady;
    if (!session.Admit(frame.header).ok()) continue;
    if (!ready_before && frame.header.opcode != Opcode::kHello &&
        frame.header.opcode != Opcode::kPing) {
      std::abort();  // only HELLO and PING may pass before HELLO
    }
    if (IsAdminOpcode(frame.header.opcode) && !session.admin()) std::abort();
    // A data opcode runs only for a tenant (the admin token alone has no data access).
    if (PermissionOf(frame.header.opcode) != 0 && session.tenant() < 0) std::abort();
    if (frame.header.opcode == Opcode::kHello) {
      auto hello = Decode<HelloRequest>(frame.body);
      if (!hello.ok()) return 0;  // the server answers and closes
      HelloReply reply;
      if (!session.OnHello(*hello, &reply).ok()) return 0;
      if (reply.admin && !policy.admin_token.empty() && hello->admin_token != "adm") {
        std::abort();
      }
      continue;
    }
    fuzz::DecodeBodies(frame);
  }
  return 0;
}
