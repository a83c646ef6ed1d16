// Fuzzes DecodePrefillEntriesReply, the parser of a peer's PREFILL reply with return_entries.
// Whatever decodes must be canonical: the head re-encodes to the input's first bytes, and the
// entries are consecutive views that tile the rest of the input exactly, each the size its
// result declares.
#include <algorithm>
#include <cstdint>
#include <cstdlib>

#include "protocol/messages.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace hypic::protocol;
  ByteSpan in(reinterpret_cast<const std::byte*>(data), size);
  auto m = DecodePrefillEntriesReply(in);
  if (!m.ok()) return 0;
  const Bytes head = Encode(m->reply);
  if (head.size() != PrefillReplyHeadSize(static_cast<uint32_t>(m->reply.results.size())) ||
      head.size() > in.size() || !std::equal(head.begin(), head.end(), in.begin())) {
    std::abort();
  }
  if (m->entries.size() != m->reply.results.size()) std::abort();
  const std::byte* at = in.data() + head.size();
  for (size_t i = 0; i < m->entries.size(); ++i) {
    if (m->entries[i].data() != at || m->entries[i].size() != m->reply.results[i].bytes) {
      std::abort();
    }
    at += m->entries[i].size();
  }
  if (at != in.data() + in.size()) std::abort();
  return 0;
}
