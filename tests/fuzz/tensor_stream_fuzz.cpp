// Fuzzes the incremental tensor-stream parser against the one-shot decoder. The first input
// byte picks the piece size the stream is fed in (1..32, or whole), the rest is the stream.
// The parser must accept exactly what DecodeTensorStream accepts and yield the same tensors,
// whatever the split; a tensor limit below a tensor's size must fail, never allocate it. The same
// bytes are also read as a COMPOSE reply: ComposeReplyHeadSize must agree with Decode (a reply
// that decodes has its head exactly where the state begins) and never claim more bytes than it
// was given. And as a state-first COMPOSE reply (the stream, then the head): one that decodes has
// a stream that decodes alone, and its stream and re-encoded head are the input bytes.
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "protocol/messages.h"
#include "protocol/tensor_stream_parser.h"

namespace {

void CheckComposeHead(hypic::protocol::ByteSpan bytes) {
  auto head = hypic::protocol::ComposeReplyHeadSize(bytes);
  if (head.ok() && head->has_value() && **head > bytes.size()) std::abort();
  auto reply = hypic::protocol::Decode<hypic::protocol::ComposeReply>(bytes);
  if (!reply.ok()) return;
  if (!head.ok() || !head->has_value()) std::abort();
  const size_t state = reply->has_state ? reply->state.size() : 0;
  if (**head != bytes.size() - state) std::abort();
}

void CheckStateFirst(hypic::protocol::ByteSpan bytes) {
  using namespace hypic::protocol;
  auto reply = DecodeComposeReply(bytes, StateLayout::kStateFirst);
  if (!reply.ok()) return;
  if (!DecodeTensorStream(ByteSpan(reply->state)).ok()) std::abort();
  ComposeReply head = *reply;
  head.state.clear();
  Bytes again = reply->state;
  const Bytes h = Encode(head);
  again.insert(again.end(), h.begin(), h.end());
  if (again.size() != bytes.size() ||
      (!again.empty() && std::memcmp(again.data(), bytes.data(), again.size()) != 0)) {
    std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const size_t piece = data[0] % 33 == 0 ? size : data[0] % 33;
  hypic::protocol::ByteSpan stream(reinterpret_cast<const std::byte*>(data + 1), size - 1);
  CheckComposeHead(stream);
  CheckStateFirst(stream);
  auto whole = hypic::protocol::DecodeTensorStream(stream);
  std::vector<hypic::protocol::OwnedStreamTensor> got;
  hypic::protocol::TensorStreamParser parser(
      [&](hypic::protocol::OwnedStreamTensor&& t) {
        got.push_back(std::move(t));
        return hypic::Status::Ok();
      },
      uint64_t{1} << 24);
  hypic::Status st;
  for (size_t at = 0; at < stream.size() && st.ok(); at += piece) {
    st = parser.Feed(stream.subspan(at, std::min(piece, stream.size() - at)));
  }
  if (st.ok()) st = parser.Finish();
  bool too_big = false;
  if (whole.ok()) {
    for (const auto& t : *whole) too_big = too_big || t.data.size() > (uint64_t{1} << 24);
  }
  if (too_big) {
    if (st.ok()) std::abort();  // over the limit yet accepted
    return 0;
  }
  if (st.ok() != whole.ok()) std::abort();
  if (!st.ok()) return 0;
  if (got.size() != whole->size()) std::abort();
  for (size_t i = 0; i < got.size(); ++i) {
    const auto& a = got[i];
    const auto& b = (*whole)[i];
    if (a.layer != b.layer || a.kind != b.kind || a.dtype != b.dtype || !(a.shape == b.shape) ||
        a.data.size() != b.data.size() ||
        (!a.data.empty() && std::memcmp(a.data.data(), b.data.data(), a.data.size()) != 0)) {
      std::abort();
    }
  }
  return 0;
}
