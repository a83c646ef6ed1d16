#include "gpu/runtime/transport.h"

#include <fmt/format.h>

#include <cstring>

namespace hypic::runtime {

Result<EntryPtr> CopyEntryToHost(const SegmentEntry& entry) {
  auto copy = std::make_shared<SegmentEntry>(entry.meta());
  for (const EntryTensor& t : entry.tensors()) {
    if (t.view.memory() == MemoryKind::kDevice) {
      return BadRequest(fmt::format("entry {}: layer {} {} is in device memory",
                                    entry.key().ToHex(), t.layer, TensorKindName(t.kind)));
    }
    if (!t.view.IsContiguous()) {
      return BadRequest(fmt::format("entry {}: layer {} {} is not contiguous", entry.key().ToHex(),
                                    t.layer, TensorKindName(t.kind)));
    }
    HYPIC_ASSIGN_OR_RETURN(TensorView dst,
                           copy->AddTensor(t.layer, t.kind, t.view.dtype(), t.view.shape(),
                                           HostBuffer::Init::kUninitialized));
    if (t.view.NumBytes() > 0) std::memcpy(dst.data(), t.view.data(), t.view.NumBytes());
  }
  return EntryPtr(std::move(copy));
}

Result<EntryPtr> HostTransport::Deliver(const EntryPtr& entry, int /*from*/) {
  if (entry == nullptr) return Internal("transport: null entry");
  return CopyEntryToHost(*entry);
}

}  // namespace hypic::runtime
